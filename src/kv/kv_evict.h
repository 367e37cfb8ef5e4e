// KV eviction policies (`--kv-evict`): which cached token to drop when a sequence's layer is at its token
// budget.
//   streaming:SINKS+WINDOW   StreamingLLM: keep the first SINKS tokens and the WINDOW most recent ones.
//   h2o:BUDGET[:recentR]     H2O: keep BUDGET tokens (a count, or a % of the cache's per-sequence capacity):
//                            the most recent R (default BUDGET/2) plus the heavy hitters, i.e. the tokens
//                            with the largest attention probability accumulated over all queries and heads of
//                            the layer.
// Decisions are made per (sequence, layer) when a new token arrives. Kept tokens keep their original
// position: their RoPE angle is the one they were stored with (no StreamingLLM re-indexing).
#pragma once
#include <cstdint>
#include <string>

namespace lowbit {

enum class KvEvictPolicy { None, Streaming, H2O };

struct KvEvictSpec {
  KvEvictPolicy policy = KvEvictPolicy::None;
  int64_t sinks = 0, window = 0;  // streaming
  int64_t budget = 0;             // h2o tokens (0 with budget_percent > 0: resolved against the capacity)
  double budget_percent = 0;      // h2o budget as % of capacity
  int64_t recent = -1;            // h2o recent window; -1 = budget / 2
  std::string describe() const;
};

KvEvictSpec parse_kv_evict(const std::string& s);  // UsageError on bad text

// Tokens a (sequence, layer) may hold, given the cache's per-sequence capacity. 0 = unlimited (no eviction).
int64_t kv_evict_budget(const KvEvictSpec& e, int64_t capacity);
int64_t kv_evict_recent(const KvEvictSpec& e, int64_t capacity);

// Index (in [0, n)) of the token to evict from n live tokens ordered by position; scores[n] are the
// accumulated attention probabilities (H2O). Streaming: the oldest non-sink. H2O: the lowest score outside
// the protected recent window (ties: the oldest).
int64_t kv_choose_victim(const KvEvictSpec& e, int64_t n, const float* scores, int64_t capacity);

}  // namespace lowbit
