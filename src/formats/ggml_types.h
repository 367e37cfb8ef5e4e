// llama.cpp (ggml) tensor type ids and block geometry, as stored in GGUF files (ggml-common.h).
// The io rung uses this to check tensor sizes; the formats table uses it to map ids to formats.
#pragma once
#include <cstdint>

namespace lowbit {

// ggml's type ids (ggml.h enum ggml_type), the values GGUF files store. An unscoped enum in its own namespace
// so that the ids stay plain ints where files and plans carry them: `ggml_type == ggml::Q4_K`.
namespace ggml {
enum Type : int {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  IQ4_NL = 20,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
  MXFP4 = 39,
};
}  // namespace ggml

struct GgmlTypeInfo {
  int id;
  const char* name;  // llama.cpp spelling, e.g. "Q4_K"
  int block_elems;   // elements per block (1 for plain types)
  int block_bytes;   // bytes per block
};

// nullptr when the id is unknown or not supported by lowbit.
const GgmlTypeInfo* ggml_type_info(int id);
const GgmlTypeInfo* ggml_type_by_name(const char* name);

// Bytes for a row of n elements; -1 when n is not a multiple of the block size.
inline int64_t ggml_row_bytes(const GgmlTypeInfo& t, int64_t n) {
  if (n % t.block_elems) return -1;
  return n / t.block_elems * t.block_bytes;
}

}  // namespace lowbit
