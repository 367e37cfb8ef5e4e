// Text generation on one sequence: prefill the prompt in one batch, then decode token by token, with timings.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/sampler.h"

namespace lowbit {

struct GenerateOptions {
  int max_new_tokens = 32;
  SamplerParams sampler;
  bool stop_at_eos = true;
  KvCacheSpec kv_spec;                              // --kv-cache/--kv-evict (model/kv_formats.h); default F32
  std::function<void(const KvCache&)> on_kv_cache;  // called once the cache is allocated (to report its size)
  int64_t ctx = 0;          // KV capacity; 0 = prompt + max_new_tokens (capped by the model's context)
  int prefill_chunk = 512;  // tokens per prefill batch
};

struct GenerateStats {
  int64_t prompt_tokens = 0, generated_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0, ttft_seconds = 0;
  double prefill_tps() const { return prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0; }
  // Decode speed excludes the first token (it comes from the prefill logits).
  double decode_tps() const {
    return decode_seconds > 0 && generated_tokens > 1 ? (generated_tokens - 1) / decode_seconds : 0;
  }
  int64_t kv_bytes_per_token = 0, kv_capacity_tokens = 0, kv_total_bytes = 0;
  double kv_bytes_per_token_exact = 0;
  std::string kv_format;    // KvCache::describe()
  std::string stop_reason;  // "length", "eos", "context"
};

// Generates from prompt token ids. `on_token(id)` is called for every new token as it is produced.
// Returns the generated ids (not including the prompt).
std::vector<int32_t> generate(const Model& m, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                              const std::function<void(int32_t)>& on_token, GenerateStats* stats);

}  // namespace lowbit
