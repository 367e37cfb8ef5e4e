// Multi-GPU hand-off: how vLLM shards a dense decoder over tensor-parallel ranks and pipeline stages, and
// what each device then holds (weights, KV cache, workspace) against memory x gpu_memory_utilization. The
// rules are re-derived from vLLM's QKVParallelLinear / MergedColumnParallelLinear / RowParallelLinear,
// VocabParallelEmbedding (padding to 64), ModelConfig.get_num_kv_heads and distributed get_pp_indices; see
// plan.h and docs/plan.md "Multi-GPU".
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "plan/plan.h"

namespace lowbit::plan {
namespace {

using i128 = __int128;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kVocabPadding = 64;  // vLLM DEFAULT_VOCAB_PADDING_SIZE

int64_t sat(i128 v) {
  return v > static_cast<i128>(kInt64Max) ? kInt64Max : static_cast<int64_t>(v);
}

[[noreturn]] void refuse(const std::string& what) {
  throw UsageError("plan", what);
}

}  // namespace

int64_t PlanRequest::device_limit() const {
  if (!parallel()) return device.memory_bytes;
  return static_cast<int64_t>(std::floor(static_cast<double>(device.memory_bytes) * gpu_memory_utilization));
}

std::vector<int64_t> pp_layer_split(int64_t layers, int pp) {
  std::vector<int64_t> v(static_cast<size_t>(pp), layers / pp);
  // The remainder goes one layer each to the stages before the last, from the second-to-last backwards: the
  // last stage also holds the final norm and lm_head, the first the embedding.
  const int64_t rem = layers % pp;
  for (int64_t i = 2; i < rem + 2; ++i) v[static_cast<size_t>(pp - i)] += 1;
  return v;
}

ShardLayout shard_layout(const ModelConfig& c, int tp, int pp) {
  const std::string model = " (" + std::to_string(c.n_heads) + " heads, " + std::to_string(c.n_kv_heads) +
                            " KV heads, " + std::to_string(c.n_layers) + " layers)";
  if (tp < 1 || tp > 1024) refuse("--tp " + std::to_string(tp) + " is out of range; use 1..1024 GPUs");
  if (pp < 1 || pp > 1024) refuse("--pp " + std::to_string(pp) + " is out of range; use 1..1024 GPUs");
  if (c.n_heads % tp != 0) {
    std::string ok;
    for (int64_t t = 1; t <= c.n_heads && t <= 64; ++t)
      if (c.n_heads % t == 0 && (c.n_kv_heads % t == 0 || t % c.n_kv_heads == 0))
        ok += (ok.empty() ? "" : ", ") + std::to_string(t);
    refuse("--tp " + std::to_string(tp) + " does not divide the model's " + std::to_string(c.n_heads) +
           " attention heads" + model +
           "; vLLM splits heads evenly across tensor-parallel ranks and refuses " +
           "this. Use --tp one of: " + ok);
  }
  if (!(c.n_kv_heads % tp == 0 || tp % c.n_kv_heads == 0))
    refuse("--tp " + std::to_string(tp) + " and the model's " + std::to_string(c.n_kv_heads) + " KV heads" +
           model +
           ": vLLM needs one to divide the other (KV heads split, or replicated when tp > KV heads). Use a "
           "--tp that divides or is a multiple of " +
           std::to_string(c.n_kv_heads));
  if (c.ffn_dim % tp != 0)
    refuse("--tp " + std::to_string(tp) + " does not divide intermediate_size " + std::to_string(c.ffn_dim) +
           model + "; vLLM splits gate/up/down evenly. Use a --tp that divides it");
  if (pp > c.n_layers)
    refuse("--pp " + std::to_string(pp) + " is more pipeline stages than the model's " +
           std::to_string(c.n_layers) + " layers; use --pp 1.." + std::to_string(c.n_layers));
  ShardLayout s;
  s.tp = tp;
  s.pp = pp;
  s.heads_per_rank = c.n_heads / tp;
  if (tp >= c.n_kv_heads) {
    s.kv_heads_per_rank = 1;
    s.kv_head_replicas = tp / c.n_kv_heads;
  } else {
    s.kv_heads_per_rank = c.n_kv_heads / tp;
    s.kv_head_replicas = 1;
  }
  s.ffn_per_rank = c.ffn_dim / tp;
  s.vocab_padded = (c.vocab_size + kVocabPadding - 1) / kVocabPadding * kVocabPadding;
  if (s.vocab_padded % tp != 0)
    refuse("--tp " + std::to_string(tp) + " does not divide the padded vocabulary " +
           std::to_string(s.vocab_padded) + " (vocab " + std::to_string(c.vocab_size) +
           " rounded up to a multiple of 64); vLLM's vocab-parallel embedding refuses this. Use a "
           "power-of-two --tp");
  s.vocab_per_rank = s.vocab_padded / tp;
  s.stage_layers = pp_layer_split(c.n_layers, pp);
  return s;
}

ModelConfig rank_config(const ModelConfig& c, const ShardLayout& s, int stage) {
  ModelConfig r = c;
  r.n_heads = s.heads_per_rank;
  r.n_kv_heads = s.kv_heads_per_rank;
  r.ffn_dim = s.ffn_per_rank;
  r.n_layers = s.stage_layers[static_cast<size_t>(stage)];
  return r;
}

std::vector<StageBytes> stage_weights(const ModelConfig& c, const ShardLayout& s, const std::string& scheme) {
  std::vector<StageBytes> out;
  int64_t first = 0;
  const int64_t D = c.dim;
  for (int st = 0; st < s.pp; ++st) {
    StageBytes b;
    b.stage = st;
    b.layer_begin = first;
    b.layer_end = first + s.stage_layers[static_cast<size_t>(st)];
    first = b.layer_end;
    b.embedding = st == 0;
    b.lm_head = st == s.pp - 1;
    const ModelConfig rc = rank_config(c, s, st);
    // weight_bytes counts this rank's layer matrices (sharded shapes), its norms and biases, plus a whole
    // embedding / lm_head and the final norm; replace those by what the stage holds.
    WeightBytes w = weight_bytes(rc, scheme);
    const int64_t whole = c.vocab_size * D * (c.tie_embeddings ? 1 : 2) + D;
    w.unquantized_params -= whole;
    int64_t add = 0;
    const int64_t slice = s.vocab_per_rank * D;  // padded rows of this rank
    if (b.embedding) {
      add += slice;
      b.embed_bytes = 2 * slice;
    }
    // The last stage computes logits: its own lm_head slice, or (tied) the embedding's, which it shares when
    // it is also the first stage and otherwise holds as a copy.
    if (b.lm_head && (!c.tie_embeddings || !b.embedding)) {
      add += slice;
      b.lm_head_bytes = 2 * slice;
    }
    if (b.lm_head) add += D;  // final norm
    w.unquantized_params += add;
    w.unquantized = 2 * w.unquantized_params;
    w.unquantized_names.clear();
    if (b.embedding)
      w.unquantized_names.push_back("model.embed_tokens slice [" + std::to_string(s.vocab_per_rank) + ", " +
                                    std::to_string(D) + "]");
    if (b.lm_head)
      w.unquantized_names.push_back(
          b.lm_head_bytes == 0 ? "lm_head (tied to embed_tokens, stored once)"
                               : "lm_head slice [" + std::to_string(s.vocab_per_rank) + ", " +
                                     std::to_string(D) + "]" + (c.tie_embeddings ? " (tied: a copy)" : ""));
    w.unquantized_names.push_back("norms (replicated)");
    b.weights = std::move(w);
    out.push_back(std::move(b));
  }
  return out;
}

ParallelRow parallel_row(const ModelConfig& c, const ShardLayout& s, std::vector<StageBytes> stages,
                         const KvConfig& kv, int64_t tokens, int64_t concurrency, const PlanRequest& r) {
  ParallelRow pr;
  const int64_t limit = r.device_limit();
  for (auto& b : stages) {
    const ModelConfig rc = rank_config(c, s, b.stage);
    auto ws = [&](int64_t t, int64_t conc) {
      Workspace w = workspace_bytes(rc, t, conc, r.prefill_chunk, r.device.attn_workers);
      if (!b.lm_head) w.logits = 0;  // logits exist on the last stage only
      return w;
    };
    auto total = [&](int64_t t, int64_t conc) {
      const i128 v = static_cast<i128>(b.weights.total()) +
                     static_cast<i128>(conc) * kv_bytes_per_sequence(rc, kv, t) + ws(t, conc).total() +
                     r.device.reserve_bytes;
      return sat(v);
    };
    b.kv_per_token = kv_bytes_per_token(rc, kv);
    b.kv = sat(static_cast<i128>(concurrency) * kv_bytes_per_sequence(rc, kv, tokens));
    b.workspace = ws(tokens, concurrency);
    b.total = total(tokens, concurrency);
    b.limit = limit;
    b.fits = b.total <= limit;
    b.max_concurrency = 0;
    if (total(tokens, 1) <= limit) {
      int64_t lo = 1, hi = kMaxConcurrency;
      while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        if (total(tokens, mid) <= limit)
          lo = mid;
        else
          hi = mid - 1;
      }
      b.max_concurrency = lo;
    }
    const i128 n = s.tp;
    pr.weights_all_devices = sat(pr.weights_all_devices + n * b.weights.total());
    pr.kv_all_devices = sat(pr.kv_all_devices + n * b.kv);
    pr.peak = std::max(pr.peak, b.total);
  }
  pr.fits = std::all_of(stages.begin(), stages.end(), [](const StageBytes& b) { return b.fits; });
  pr.stages = std::move(stages);
  return pr;
}

}  // namespace lowbit::plan
