#include "eval/perplexity.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/parallel.h"
#include "core/progress.h"
#include "core/timer.h"
#include "model/decoder.h"
#include "model/observer.h"

namespace lowbit::eval {

namespace {

// Checks every activation the decoder reports (inputs of every linear layer, K/V rows, layer outputs) and
// throws CheckFailed at the first non-finite value, naming layer, site, window and position.
class HealthObserver : public ActivationObserver {
 public:
  const std::vector<BatchEntry>* batch = nullptr;
  const EvalText* text = nullptr;
  int64_t chunk0 = 0;

  void observe(int layer, ActSite site, const float* x, int64_t T, int64_t cols) override {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < cols; ++i) {
        float v = x[t * cols + i];
        if (std::isfinite(v)) continue;
        const BatchEntry& e = (*batch)[static_cast<size_t>(t)];
        const int64_t chunk = chunk0 + e.seq;
        const int64_t start = text->chunks[static_cast<size_t>(chunk)].start;
        throw CheckFailed(std::string(std::isnan(v) ? "NaN" : "Inf") + " in layer " + std::to_string(layer) +
                          " (" + act_site_name(site) + ", element " + std::to_string(i) + ") at window " +
                          std::to_string(chunk) + " position " + std::to_string(e.pos) + " (text token " +
                          std::to_string(start + e.pos) + "); the weights or the KV-cache format overflow " +
                          "there: compare with --dtype f32 --kv-cache f32");
      }
  }
};

int auto_windows_per_call(int64_t ctx, int64_t scored_per_window, int64_t vocab, int64_t n_windows) {
  int64_t w = std::max<int64_t>(1, 2048 / ctx);
  const int64_t logit_bytes_per_window = std::max<int64_t>(1, scored_per_window) * vocab * 4;
  while (w > 1 && w * logit_bytes_per_window > (int64_t{512} << 20)) --w;
  return static_cast<int>(std::min(w, std::max<int64_t>(1, n_windows)));
}

}  // namespace

int64_t resolve_ctx(const Model& m, int64_t ctx) {
  const int64_t max_ctx = m.config.max_seq_len;
  if (ctx == 0) return std::min<int64_t>(512, max_ctx);
  if (ctx < 2) throw UsageError("eval", "--ctx " + std::to_string(ctx) + " is too small; use at least 2");
  if (ctx > max_ctx)
    throw UsageError("eval", "--ctx " + std::to_string(ctx) + " exceeds the model's context of " +
                                 std::to_string(max_ctx) + " tokens; use --ctx " + std::to_string(max_ctx) +
                                 " or less");
  return ctx;
}

EvalRun evaluate(const Model& m, const EvalText& text, const PplOptions& o, const ScoreTable* baseline) {
  const int64_t V = m.config.vocab_size, ctx = text.ctx;
  const int64_t n_windows = static_cast<int64_t>(text.chunks.size());
  if (n_windows == 0) throw Error("eval", "no windows to evaluate in '" + text.path + "'");
  if (ctx > m.config.max_seq_len)
    throw UsageError("eval", "window of " + std::to_string(ctx) + " tokens exceeds the model's context of " +
                                 std::to_string(m.config.max_seq_len));
  const int64_t score_from = text.chunks[0].score_from;
  const int64_t scored = ctx - 1 - score_from;  // rows per window
  for (const auto& c : text.chunks) {
    if (static_cast<int64_t>(c.tokens.size()) != ctx || c.score_from != score_from)
      throw Error("eval", "inconsistent windows in '" + text.path + "' (internal error)");
    for (int32_t id : c.tokens)
      if (id < 0 || id >= V)
        throw Error("eval", "token id " + std::to_string(id) +
                                " from the tokenizer is outside the model's "
                                "vocabulary of " +
                                std::to_string(V) + "; the tokenizer does not belong to this model");
  }
  const int64_t n_rows = n_windows * scored;
  if (baseline) {
    if (baseline->size() != n_rows)
      throw Error("eval", "the baseline holds " + std::to_string(baseline->size()) +
                              " scored tokens but this run scores " + std::to_string(n_rows) +
                              "; it was made with other windows");
    for (int64_t w = 0, r = 0; w < n_windows; ++w)
      for (int64_t j = score_from; j < ctx - 1; ++j, ++r)
        if (baseline->rows[static_cast<size_t>(r)].target !=
            text.chunks[static_cast<size_t>(w)].tokens[j + 1])
          throw Error("eval", "the baseline's target token at window " + std::to_string(w) + " position " +
                                  std::to_string(j + 1) +
                                  " differs from this run's; the text or tokenizer differ");
  }

  EvalRun run;
  const int k = static_cast<int>(std::clamp<int64_t>(o.topk, 0, V));
  run.scores.k = k;
  run.scores.rows.resize(static_cast<size_t>(n_rows));
  run.scores.top_ids.resize(static_cast<size_t>(n_rows * k));
  run.scores.top_lp.resize(static_cast<size_t>(n_rows * k));
  if (baseline) run.compare.resize(static_cast<size_t>(n_rows));

  const int64_t step =
      o.kv_step > 0 ? std::min(o.kv_step, ctx) : (o.kv.evict.policy != KvEvictPolicy::None ? 1 : ctx);
  // Stepping feeds few rows per call, so more windows share each call (bounded by the logits' memory).
  const int w = o.batch > 0 ? static_cast<int>(std::min<int64_t>(o.batch, n_windows))
                            : auto_windows_per_call(step < ctx ? std::min<int64_t>(ctx, 128) : ctx, scored, V,
                                                    n_windows);
  run.windows_per_call = w;
  KvCache kv(m.config, w, ctx, o.kv);
  run.kv_bytes_per_token = kv.bytes_per_token_exact();
  run.kv_bytes = kv.total_bytes();
  run.kv_step = step;
  Decoder dec(m.config, m.weights);
  HealthObserver health;
  health.text = &text;
  if (o.check_layers) dec.set_observer(&health);
  ForwardOptions fo;
  fo.check_layers = o.check_layers;

  std::unique_ptr<Progress> prog;
  if (o.progress)
    prog = std::make_unique<Progress>(std::string("eval ") + ppl_method_name(text.method), n_windows);
  std::vector<float> logits, step_logits;
  std::vector<BatchEntry> batch;
  SampleStats nll_so_far;
  Timer timer;
  for (int64_t c0 = 0; c0 < n_windows; c0 += w) {
    const int64_t nb = std::min<int64_t>(w, n_windows - c0);
    logits.resize(static_cast<size_t>(nb * scored * V));
    health.chunk0 = c0;
    try {
      // Tokens [j0, j0 + step) of every window in this call; logits of scored rows land at row s*scored + j -
      // score_from. With step == ctx this is one prefill call writing straight into `logits`.
      for (int64_t j0 = 0; j0 < ctx; j0 += step) {
        const int64_t j1 = std::min(ctx, j0 + step);
        batch.clear();
        for (int64_t s = 0; s < nb; ++s) {
          const auto& toks = text.chunks[static_cast<size_t>(c0 + s)].tokens;
          for (int64_t j = j0; j < j1; ++j)
            batch.push_back(
                {toks[static_cast<size_t>(j)], static_cast<int32_t>(s), j, j >= score_from && j < ctx - 1});
        }
        health.batch = &batch;
        if (step == ctx) {
          dec.forward(batch, kv, logits.data(), fo);
          continue;
        }
        step_logits.resize(batch.size() * static_cast<size_t>(V));
        dec.forward(batch, kv, step_logits.data(), fo);
        int64_t r = 0;
        for (const auto& e : batch)
          if (e.logits)
            std::copy_n(step_logits.data() + (r++) * V, V,
                        logits.data() + (e.seq * scored + e.pos - score_from) * V);
      }
    } catch (const CheckFailed&) {
      throw;
    } catch (const UsageError&) {
      throw;
    } catch (const Error& e) {
      if (e.module() != "model") throw;
      // The decoder names the sequence slot and position; say which window (and text tokens) that slot holds.
      throw CheckFailed("health check failed: " + std::string(e.what()) + " [sequence slot s holds window " +
                        std::to_string(c0) + "+s, text tokens from " +
                        std::to_string(text.chunks[static_cast<size_t>(c0)].start) + " + s*" +
                        std::to_string(ctx) + "]");
    }
    ++run.forward_calls;
    run.tokens_forwarded += nb * ctx;
    const int64_t row0 = c0 * scored;
    const int64_t nrows = nb * scored;
    parallel_for(nrows, 4, [&](int64_t a, int64_t b) {
      std::vector<int32_t> scratch;
      for (int64_t r = a; r < b; ++r) {
        const int64_t s = r / scored, j = score_from + r % scored;
        const int64_t idx = row0 + r;
        const auto& chunk = text.chunks[static_cast<size_t>(c0 + s)];
        TokenScore& ts = run.scores.rows[static_cast<size_t>(idx)];
        const float* row = logits.data() + r * V;
        score_logits(row, V, chunk.tokens[static_cast<size_t>(j + 1)], k, &ts,
                     run.scores.top_ids.data() + idx * k, run.scores.top_lp.data() + idx * k, scratch);
        ts.pos = static_cast<int32_t>(j + 1);
        ts.chunk = static_cast<int32_t>(c0 + s);
        if (baseline) {
          const int bk = baseline->k;
          run.compare[static_cast<size_t>(idx)] =
              compare_row(baseline->rows[static_cast<size_t>(idx)], baseline->top_ids.data() + idx * bk,
                          baseline->top_lp.data() + idx * bk, bk, row, V, ts);
        }
      }
    });
    for (int64_t r = row0; r < row0 + nrows; ++r) nll_so_far.add(-run.scores.rows[r].logprob);
    if (prog) {
      char detail[64];
      std::snprintf(detail, sizeof detail, "PPL %.4f", std::exp(nll_so_far.mean()));
      prog->update(c0 + nb, detail);
    }
  }
  run.seconds = timer.seconds();
  run.kv_cache = kv.describe();  // after the run: it names checkpoint KV scales once the decoder applied them
  if (prog) prog->finish();
  return run;
}

Perplexity table_perplexity(const ScoreTable& t) {
  SampleStats s;
  for (const auto& r : t.rows) s.add(-r.logprob);
  return perplexity_from(s);
}

std::vector<PositionBucket> position_curve(const ScoreTable& t, int64_t ctx, int buckets) {
  buckets = static_cast<int>(std::clamp<int64_t>(buckets, 1, ctx));
  std::vector<SampleStats> acc(static_cast<size_t>(buckets));
  for (const auto& r : t.rows) {
    int64_t b = std::clamp<int64_t>(static_cast<int64_t>(r.pos) * buckets / ctx, 0, buckets - 1);
    acc[static_cast<size_t>(b)].add(-r.logprob);
  }
  std::vector<PositionBucket> out(static_cast<size_t>(buckets));
  for (int b = 0; b < buckets; ++b) {
    auto& o = out[static_cast<size_t>(b)];
    o.begin = b * ctx / buckets;
    o.end = (b + 1) * ctx / buckets;
    const auto& a = acc[static_cast<size_t>(b)];
    o.tokens = a.n;
    o.mean_nll = a.mean();
    o.mean_nll_stderr = a.stderr_mean();
    o.ppl = a.n ? std::exp(a.mean()) : 0;
  }
  return out;
}

nlohmann::json position_curve_json(const std::vector<PositionBucket>& c) {
  nlohmann::json j = {{"begin", nlohmann::json::array()},           {"end", nlohmann::json::array()},
                      {"tokens", nlohmann::json::array()},          {"mean_nll", nlohmann::json::array()},
                      {"mean_nll_stderr", nlohmann::json::array()}, {"ppl", nlohmann::json::array()}};
  for (const auto& b : c) {
    j["begin"].push_back(b.begin);
    j["end"].push_back(b.end);
    j["tokens"].push_back(b.tokens);
    j["mean_nll"].push_back(b.mean_nll);
    j["mean_nll_stderr"].push_back(b.mean_nll_stderr);
    j["ppl"].push_back(b.ppl);
  }
  return j;
}

nlohmann::json ScoreHistograms::to_json() const {
  return {{"top1_prob", top1_prob.to_json()}, {"entropy", entropy.to_json()}};
}

ScoreHistograms score_histograms(const ScoreTable& t, int64_t vocab) {
  ScoreHistograms h;
  h.top1_prob = Histogram(0.0, 1.0, 10);
  h.entropy = Histogram(0.0, std::log(static_cast<double>(std::max<int64_t>(vocab, 2))), 10);
  for (const auto& r : t.rows) {
    h.top1_prob.add(std::exp(r.top1_logprob));
    h.entropy.add(r.entropy);
  }
  return h;
}

}  // namespace lowbit::eval
