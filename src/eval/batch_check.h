// Batch consistency: a sequence must give the same logits whether it is evaluated alone in one prefill,
// inside a mixed batch interleaved with other sequences of other lengths, or fed in pieces of varying size
// (prefill split + token-by-token decode). Differences come only from floating-point summation order;
// anything larger than the tolerance means sequences leak into each other or the KV cache is mis-indexed.
#pragma once
#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kv/kv_cache.h"
#include "model/model.h"

namespace lowbit::eval {

struct BatchCheckOptions {
  int seqs = 4;             // sequences in the mixed batch (>= 2)
  int64_t len = 0;          // tokens of the longest sequence; 0 = min(128, model context)
  double tolerance = 1e-4;  // max |delta logit| allowed
  KvCacheSpec kv;           // KV-cache format, options and eviction (model/kv_formats.h); default F32
  bool check_layers = false;
};

struct BatchCheckResult {
  int seqs = 0;
  std::vector<int64_t> lengths;  // [seqs]
  double max_abs_mixed = 0;      // alone vs mixed batch, over every logit of every sequence
  double max_abs_split = 0;      // alone vs fed in pieces of 1, 2, 3, ... tokens (sequence 0)
  int worst_seq = 0;
  int64_t worst_pos = 0;
  int64_t logits_compared = 0;
  double tolerance = 0;
  bool pass = false;
  double seconds = 0;
  nlohmann::json to_json() const;
};

// `tokens` must hold at least seqs * len ids (Error("eval") otherwise, saying how many are needed).
BatchCheckResult check_batch_consistency(const Model& m, const std::vector<int32_t>& tokens,
                                         const BatchCheckOptions& o);

}  // namespace lowbit::eval
