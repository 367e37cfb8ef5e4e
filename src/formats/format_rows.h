// Internal: one function per format file returning its table row. format_table.cpp lists them in FormatId
// order. Not for use outside src/formats.
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

FormatInfo row_f32();
FormatInfo row_f16();
FormatInfo row_bf16();
FormatInfo row_e4m3fn();
FormatInfo row_e5m2();
FormatInfo row_e4m3fnuz();
FormatInfo row_e5m2fnuz();
FormatInfo row_e2m3();
FormatInfo row_e3m2();
FormatInfo row_e2m1();
FormatInfo row_e8m0();
FormatInfo row_int8();
FormatInfo row_int4();
FormatInfo row_int3();
FormatInfo row_int2();
// Copy of an element row built without touching format_table() (used while the table itself is built).
FormatInfo format_info_elem_copy(FormatId elem);
FormatInfo row_nf4();
FormatInfo row_mxfp8_e4m3();
FormatInfo row_mxfp8_e5m2();
FormatInfo row_mxfp6_e2m3();
FormatInfo row_mxfp6_e3m2();
FormatInfo row_mxfp4();
FormatInfo row_mxint8();
FormatInfo row_nvfp4();
FormatInfo row_q4_0();
FormatInfo row_q4_1();
FormatInfo row_q5_0();
FormatInfo row_q5_1();
FormatInfo row_q8_0();
FormatInfo row_q2_k();
FormatInfo row_q3_k();
FormatInfo row_q4_k();
FormatInfo row_q5_k();
FormatInfo row_q6_k();
FormatInfo row_iq4_nl();
FormatInfo row_ggml_mxfp4();

}  // namespace lowbit::formats_detail
