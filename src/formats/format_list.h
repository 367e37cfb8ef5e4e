// The list of number formats: one line per format, X(FormatId name, function returning its table row). It
// defines the FormatId enum (format.h), the row declarations (format_rows.h) and the table
// (format_table.cpp), so adding a format is its file (encode / decode / row codecs and its row function) plus
// one line here. The order is FormatId's order; ids are not stored in files (names are), so inserting a line
// is safe.
#pragma once

// clang-format off
#define LOWBIT_FORMAT_LIST(X)                                                                        \
  X(F32, row_f32)               X(F16, row_f16)               X(BF16, row_bf16)                     \
  /* FP8 */                                                                                          \
  X(E4M3FN, row_e4m3fn)         X(E5M2, row_e5m2)             X(E4M3FNUZ, row_e4m3fnuz)             \
  X(E5M2FNUZ, row_e5m2fnuz)                                                                          \
  /* FP6, FP4, the E8M0 scale format (2^(E-127)) */                                                  \
  X(E2M3, row_e2m3)             X(E3M2, row_e3m2)             X(E2M1, row_e2m1)                     \
  X(E8M0, row_e8m0)                                                                                  \
  /* integers, NF4 */                                                                                \
  X(INT8, row_int8)             X(INT4, row_int4)             X(INT3, row_int3)                     \
  X(INT2, row_int2)             X(NF4, row_nf4)                                                      \
  /* per-row k-means codebooks (SqueezeLLM-style) */                                                 \
  X(LUT4, row_lut4)             X(LUT3, row_lut3)             X(LUT2, row_lut2)                     \
  /* OCP microscaling, NVFP4 */                                                                      \
  X(MXFP8_E4M3, row_mxfp8_e4m3) X(MXFP8_E5M2, row_mxfp8_e5m2) X(MXFP6_E2M3, row_mxfp6_e2m3)         \
  X(MXFP6_E3M2, row_mxfp6_e3m2) X(MXFP4, row_mxfp4)           X(MXINT8, row_mxint8)                 \
  X(NVFP4, row_nvfp4)                                                                                \
  /* llama.cpp block types */                                                                        \
  X(Q4_0, row_q4_0)             X(Q4_1, row_q4_1)             X(Q5_0, row_q5_0)                     \
  X(Q5_1, row_q5_1)             X(Q8_0, row_q8_0)             X(Q2_K, row_q2_k)                     \
  X(Q3_K, row_q3_k)             X(Q4_K, row_q4_k)             X(Q5_K, row_q5_k)                     \
  X(Q6_K, row_q6_k)             X(IQ4_NL, row_iq4_nl)         X(IQ4_XS, row_iq4_xs)                 \
  X(GGML_MXFP4, row_ggml_mxfp4)
// clang-format on
