// Internal: one function per format file returning its table row (declared from the format list,
// formats/format_list.h). Not for use outside src/formats.
#pragma once
#include <cfloat>
#include <cmath>

#include "formats/format.h"
#include "formats/minifloat.h"

namespace lowbit::formats_detail {

// Fills the common fields of a minifloat row (range, NaN/Inf flags) from its spec.
FormatInfo make_minifloat_row(FormatId id, const char* name, const MinifloatSpec& s, int routes,
                              const char* description, float (*decode)(uint32_t),
                              uint32_t (*encode)(float, bool));
// Fills a GGUF block row from ggml_types.h geometry.
FormatInfo make_gguf_row(FormatId id, const char* name, int ggml_type, int bits, const char* description,
                         void (*deq)(const void*, float*, int64_t), void (*q)(const float*, void*, int64_t));

// The row functions of the format list, one per format file.
#define LOWBIT_FORMAT_ROW_DECL(id, row) FormatInfo row();
LOWBIT_FORMAT_LIST(LOWBIT_FORMAT_ROW_DECL)
#undef LOWBIT_FORMAT_ROW_DECL

// The reference quantizers of llama.cpp's 32-element blocks (Q4_0/Q5_0 and Q4_1/Q5_1) start from one of
// these; both keep llama.cpp's order of comparisons so that the bytes match its quantizer. The element of
// largest magnitude, with its sign (the first one on ties); 0 for an all-zero block.
inline float signed_absmax(const float* x, int n) {
  float amax = 0.0f, m = 0.0f;
  for (int j = 0; j < n; ++j)
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      m = x[j];
    }
  return m;
}
inline void min_max(const float* x, int n, float* mn, float* mx) {
  *mn = FLT_MAX;
  *mx = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    if (x[j] < *mn) *mn = x[j];
    if (x[j] > *mx) *mx = x[j];
  }
}

// Copy of an element row built without touching format_table() (used while the table itself is built).
FormatInfo format_info_elem_copy(FormatId elem);

}  // namespace lowbit::formats_detail
