// A small decoder shape for KV-cache tests (only the fields the cache and attention read are meaningful).
#pragma once
#include <cstdint>

#include "arch/config.h"

namespace lowbit::test {

inline ModelConfig make_config(int64_t layers, int64_t heads, int64_t kv_heads, int64_t hd) {
  ModelConfig c;
  c.n_layers = layers, c.n_heads = heads, c.n_kv_heads = kv_heads, c.head_dim = hd;
  c.dim = heads * hd, c.ffn_dim = 4 * c.dim, c.vocab_size = 32, c.max_seq_len = 4096;
  return c;
}

}  // namespace lowbit::test
