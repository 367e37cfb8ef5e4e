// Internal: one function per format file returning its table row (declared from the format list,
// formats/format_list.h). Not for use outside src/formats.
#pragma once
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

// Copy of an element row built without touching format_table() (used while the table itself is built).
FormatInfo format_info_elem_copy(FormatId elem);

}  // namespace lowbit::formats_detail
