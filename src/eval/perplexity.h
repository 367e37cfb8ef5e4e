// Scoring a model on prepared text windows (eval_text.h): one prefill-style forward pass per batch of
// windows, several windows per call as separate sequences of one KV cache, every scored row reduced to a
// TokenScore (and compared with a baseline row when one is given). Perplexity, the position curve and the
// score histograms are summaries of the resulting ScoreTable.
//
// The runner takes an already loaded Model (any weight format, quantized or not) plus options, so every rung
// that produces a model variant (dtype, quantization recipe, KV-cache format) evaluates through the same
// path.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/error.h"
#include "eval/eval_stats.h"
#include "eval/eval_text.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace lowbit::eval {

// A failed health check (NaN/Inf in the logits or, with check_layers, in any layer's activations). The CLI
// maps it to exit code 3. The message names the chunk, the position inside it, the layer and the activation
// site.
class CheckFailed : public Error {
 public:
  explicit CheckFailed(std::string_view message) : Error("eval", message) {}
};

struct PplOptions {
  int64_t ctx = 0;     // tokens per window; 0 = min(512, model context)
  int64_t chunks = 0;  // windows to evaluate; 0 = all
  int batch = 0;       // windows per forward call; 0 = auto (~2048 tokens, logits <= 512 MiB)
  KvCacheSpec kv;      // KV-cache format, options and eviction (model/kv_formats.h); default F32
  // Tokens of each window fed per forward call. 0 = auto: the whole window at once (prefill, as llama.cpp's
  // perplexity does), or 1 when the spec evicts (eviction decides token by token, so every query must see the
  // cache as it was when that token was generated). 1 = decode-style scoring for any format.
  int64_t kv_step = 0;
  PplMethod method = PplMethod::Chunks;
  int64_t first_chars = 4000;  // first-window: characters of the text
  int topk = 1;                // top-k kept per scored token (32 when saving a baseline)
  bool check_layers = false;   // NaN/Inf check of every activation site of every layer
  bool progress = true;        // progress bar on stderr
};

// Resolves ctx = 0 to the default (min(512, model context)) and validates ctx against the model.
int64_t resolve_ctx(const Model& m, int64_t ctx);

// Every scored position of a run, in order (chunk by chunk, position by position).
struct ScoreTable {
  int k = 0;                     // top-k entries per row
  std::vector<TokenScore> rows;  // [n]
  std::vector<int32_t> top_ids;  // [n, k]
  std::vector<double> top_lp;    // [n, k] log-probs
  int64_t size() const { return static_cast<int64_t>(rows.size()); }
};

struct EvalRun {
  ScoreTable scores;
  std::vector<RowCompare> compare;  // [n] when run against a baseline, else empty
  double seconds = 0;               // wall time of the forward passes and scoring
  int64_t tokens_forwarded = 0;     // tokens fed to the model (ctx per window)
  int64_t forward_calls = 0;
  int windows_per_call = 1;
  int64_t kv_step = 0;            // tokens of each window per forward call
  std::string kv_cache;           // KvCache::describe()
  double kv_bytes_per_token = 0;  // exact, scales included
  int64_t kv_bytes = 0;           // allocated by the cache
  double tokens_per_second() const { return seconds > 0 ? tokens_forwarded / seconds : 0; }
};

// Runs the model over the windows of `text`. With `baseline` (same windows, same order: checked by the caller
// through the baseline header), every row is also compared with the baseline's row. Throws CheckFailed on
// NaN/Inf, Error("eval") on inconsistent inputs.
EvalRun evaluate(const Model& m, const EvalText& text, const PplOptions& o,
                 const ScoreTable* baseline = nullptr);

// Perplexity of a table's scored tokens.
Perplexity table_perplexity(const ScoreTable& t);

// Mean NLL by position of the scored token inside its window, in `buckets` equal ranges of [0, ctx).
struct PositionBucket {
  int64_t begin = 0, end = 0;  // positions [begin, end)
  int64_t tokens = 0;
  double mean_nll = 0, mean_nll_stderr = 0, ppl = 0;
};
std::vector<PositionBucket> position_curve(const ScoreTable& t, int64_t ctx, int buckets);
nlohmann::json position_curve_json(const std::vector<PositionBucket>& c);  // arrays: begin, end, tokens, ...

// Distributions of the top-1 probability ([0, 1], 10 bins) and of the entropy ([0, ln V], 10 bins).
struct ScoreHistograms {
  Histogram top1_prob, entropy;
  nlohmann::json to_json() const;
};
ScoreHistograms score_histograms(const ScoreTable& t, int64_t vocab);

}  // namespace lowbit::eval
