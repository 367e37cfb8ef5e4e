// Serving under concurrency: R requests share C sequence slots of one engine with continuous batching (every
// step runs one forward over the new requests' prompts and one decode token of every active request). Reports
// throughput, time to first token and queueing delay per concurrency level.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "kv/kv_cache.h"
#include "model/model.h"

namespace lowbit {

struct ThroughputOptions {
  int concurrency = 1;     // sequence slots served at once
  int requests = 0;        // 0 = 2 x concurrency
  int prompt_tokens = 64;  // per request
  int gen_tokens = 32;     // per request (no early stop: fixed work per request)
  KvCacheSpec kv;          // KV-cache format, options and eviction (model/kv_formats.h); default F32
  uint64_t seed = 0;       // prompt token ids are drawn from the vocabulary with this seed
};

struct ThroughputResult {
  int concurrency = 0, requests = 0;
  double wall_seconds = 0;
  double gen_tokens_per_second = 0;                                // generated tokens / wall
  double total_tokens_per_second = 0;                              // (prompt + generated) / wall
  double ttft_mean = 0, ttft_p50 = 0, ttft_p90 = 0, ttft_max = 0;  // seconds from arrival (t=0)
  double queue_mean = 0, queue_max = 0;                            // seconds waiting for a free slot
  double latency_mean = 0;                                         // seconds from arrival to last token
  nlohmann::json to_json() const;
};

ThroughputResult measure_throughput(const Model& m, const ThroughputOptions& o);

}  // namespace lowbit
