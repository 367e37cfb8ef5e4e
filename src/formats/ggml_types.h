// llama.cpp (ggml) tensor type ids and block geometry, as stored in GGUF files (ggml-common.h).
// The io rung uses this to check tensor sizes; the formats table uses it to map ids to formats.
#pragma once
#include <cstdint>

namespace lowbit {

struct GgmlTypeInfo {
  int id;
  const char* name;   // llama.cpp spelling, e.g. "Q4_K"
  int block_elems;    // elements per block (1 for plain types)
  int block_bytes;    // bytes per block
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
