// `lowbit eval`: perplexity (llama.cpp chunks, whole windows, GOLDEN first window), KL divergence / top-1
// agreement against a saved baseline, the NLL-by-position curve, batch consistency and NaN/Inf health checks;
// `eval outliers` lives in cmd_eval_outliers.cpp.
// Exit codes: 0 ok, 1 runtime failure, 2 bad usage / bad input, 3 a health or consistency check failed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/lowbit/cli_common.h"
#include "apps/lowbit/command.h"
#include "core/error.h"
#include "core/json_text.h"
#include "core/memory.h"
#include "core/parallel.h"
#include "core/progress.h"
#include "eval/baseline.h"
#include "eval/batch_check.h"
#include "eval/kld.h"
#include "eval/perplexity.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::app {
void add_eval_outliers(CLI::App& eval);  // cmd_eval_outliers.cpp
}  // namespace lowbit::app

namespace {

using namespace lowbit;
using namespace lowbit::eval;
using nlohmann::json;

struct EvalArgs {
  app::KvFlags kv;
  app::QuantizeFlags quant;
  std::string model, tokenizer, text, dtype = "native", method = "chunks", save_baseline, baseline,
                                      rope_scaling;
  std::string variant;
  int64_t ctx = 0, chunks = 0, first_chars = 4000, len = 0, kv_step = 0;
  int batch = 0, threads = 0, topk = 32, buckets = 16, seqs = 4;
  double tolerance = 1e-4;
  bool json = false, check_layers = false, position_curve = false, no_progress = false;
};

void add_model_options(CLI::App* c, EvalArgs& a, bool model_required) {
  auto* m = c->add_option("-m,--model", a.model,
                          "Model: a Hugging Face directory, a .gguf file or a llama2.c .bin");
  if (model_required) m->required();
  c->add_option("--tokenizer", a.tokenizer, "llama2.c tokenizer.bin (default: found next to the model)");
  c->add_option("--dtype", a.dtype, "Dense weights in memory: native (as stored, default), f32, f16, bf16");
  app::add_kv_options(c, a.kv);
  app::add_quantize_options(c, a.quant);
  app::add_rope_scaling_option(c, a.rope_scaling);
  lowbit::app::add_threads_option(c, a.threads);
  lowbit::app::add_gguf_acts_option(c);
  c->add_flag(
      "--check-layers", a.check_layers,
      "Check every layer's activations for NaN/Inf (the logits are always checked); exit code 3 on failure");
  c->add_flag("--no-progress", a.no_progress, "Do not draw the progress bar on stderr");
  c->add_flag("--json", a.json, "Print one JSON object with every number instead of tables");
}

void add_text_options(CLI::App* c, EvalArgs& a, bool text_required, const std::string& ctx_help) {
  auto* t = c->add_option("--text", a.text, "Text file to evaluate on (UTF-8)");
  if (text_required) t->required();
  c->add_option("--ctx", a.ctx, ctx_help);
  c->add_option("--chunks", a.chunks,
                "Evaluate at most this many windows (0 = every whole window of the text)");
  c->add_option("--first-chars", a.first_chars,
                "first-window method: characters of the text used (default 4000)");
  c->add_option("--batch", a.batch,
                "Windows per forward call, as separate sequences (0 = auto: ~2048 tokens)");
  c->add_option(
      "--kv-step", a.kv_step,
      "Tokens of each window fed per forward call: 0 = auto (the whole window; 1 with --kv-evict), 1 "
      "= decode-style, so KIVI windows and eviction act as in generation. Example: --kv-step 1");
}

// The online-quantization report of this process's model (null without --quantize), for the JSON output.
json& online_report() {
  static json j;
  return j;
}

std::unique_ptr<Model> load(const EvalArgs& a) {
  app::apply_threads(a.threads);
  if (a.no_progress) Progress::set_quiet(true);
  LoadOptions lo;
  lo.dense = dense_mode_from_string(a.dtype);
  lo.tokenizer_path = a.tokenizer;
  auto m = load_model(a.model, lo);
  app::apply_rope_scaling(*m, a.rope_scaling, a.json || a.no_progress);
  online_report() = app::apply_online_quantization(*m, a.quant, a.json || a.no_progress);
  if (!m->tokenizer)
    throw UsageError("eval",
                     "no tokenizer found for '" + a.model + "'; pass --tokenizer PATH (tokenizer.bin)");
  return m;
}

PplOptions ppl_options(const EvalArgs& a, const Model& m) {
  PplOptions o;
  o.ctx = resolve_ctx(m, a.ctx);
  o.chunks = a.chunks;
  o.batch = a.batch;
  o.kv = a.kv.spec();
  if (a.kv_step < 0) throw UsageError("eval", "--kv-step must be >= 0");
  o.kv_step = a.kv_step;
  o.method = ppl_method_from_string(a.method);
  o.first_chars = a.first_chars;
  o.check_layers = a.check_layers;
  o.progress = !a.no_progress;
  if (a.chunks < 0) throw UsageError("eval", "--chunks must be >= 0");
  if (a.batch < 0) throw UsageError("eval", "--batch must be >= 0");
  return o;
}

EvalText prepare(const Model& m, const std::string& path, const PplOptions& o) {
  std::string text = read_text_file(path);
  TextOptions to;
  to.method = o.method;
  to.ctx = o.ctx;
  to.max_chunks = o.chunks;
  to.first_chars = o.first_chars;
  return prepare_eval_text(*m.tokenizer, text, path, to);
}

json ppl_json(const Perplexity& p) {
  return {{"ppl", p.ppl},
          {"ppl_stderr", p.ppl_stderr},
          {"mean_nll", p.mean_nll},
          {"mean_nll_stderr", p.mean_nll_stderr},
          {"tokens", p.tokens}};
}

json run_json(const EvalArgs& a, const Model& m, const EvalText& t, const EvalRun& r) {
  return {{"model",
           {{"path", m.path},
            {"format", m.format},
            {"dtype", a.dtype},
            {"kv_cache", a.kv.text()},
            {"vocab_size", m.config.vocab_size},
            {"context", m.config.max_seq_len}}},
          {"text", {{"path", t.path}, {"sha256", t.text_sha256}, {"tokens", t.text_tokens}}},
          {"method", ppl_method_name(t.method)},
          {"ctx", t.ctx},
          {"windows", t.chunks.size()},
          {"bos", t.bos},
          {"tokens_scored", r.scores.size()},
          {"tokens_forwarded", r.tokens_forwarded},
          {"windows_per_call", r.windows_per_call},
          {"kv",
           {{"format", r.kv_cache},
            {"bytes_per_token_exact", r.kv_bytes_per_token},
            {"bytes", r.kv_bytes},
            {"step", r.kv_step}}},
          {"seconds", r.seconds},
          {"tokens_per_second", r.tokens_per_second()},
          {"peak_rss_bytes", peak_rss_bytes()},
          {"online_quantization", online_report()},
          {"threads", num_threads()}};
}

void print_run_header(const EvalArgs& a, const Model& m, const EvalText& t) {
  std::printf("model    %s (%s, weights %s, KV cache %s, vocab %lld)\n", m.path.c_str(), m.format.c_str(),
              a.dtype.c_str(), a.kv.text().c_str(), (long long)m.config.vocab_size);
  std::printf("text     %s: %lld tokens; method %s, ctx %lld, %zu window(s)%s\n", t.path.c_str(),
              (long long)t.text_tokens, ppl_method_name(t.method), (long long)t.ctx, t.chunks.size(),
              t.bos ? ", BOS at each window start" : "");
}

void print_speed(const EvalRun& r) {
  if (!r.kv_cache.empty())
    std::printf(
        "kv cache %s, %.2f bytes/token, %s allocated, %lld token(s) of each window per forward call\n",
        r.kv_cache.c_str(), r.kv_bytes_per_token, app::human_bytes(static_cast<double>(r.kv_bytes)).c_str(),
        (long long)r.kv_step);
  std::printf(
      "speed    %lld tokens in %.3f s = %.1f tokens/s (%d window(s) per forward), peak RSS %s, %d threads\n",
      (long long)r.tokens_forwarded, r.seconds, r.tokens_per_second(), r.windows_per_call,
      app::human_bytes(static_cast<double>(peak_rss_bytes())).c_str(), num_threads());
}

void print_curve(const std::vector<PositionBucket>& c) {
  std::printf("\nmean NLL by position in the window\n  %-14s %8s %10s %10s %10s\n", "positions", "tokens",
              "mean NLL", "± stderr", "PPL");
  for (const auto& b : c) {
    char range[32];
    std::snprintf(range, sizeof range, "[%lld, %lld)", (long long)b.begin, (long long)b.end);
    if (b.tokens == 0)
      std::printf("  %-14s %8s\n", range, "-");
    else
      std::printf("  %-14s %8lld %10.4f %10.4f %10.3f\n", range, (long long)b.tokens, b.mean_nll,
                  b.mean_nll_stderr, b.ppl);
  }
}

// Runs the body and turns a failed health check into exit code 3 with its message.
template <typename F>
void guarded(F body) {
  try {
    body();
  } catch (const CheckFailed& e) {
    std::cerr << e.what() << "\n";
    app::set_exit_code(3);
  }
}

void do_ppl(const EvalArgs& a, bool positions) {
  guarded([&] {
    auto m = load(a);
    EvalArgs b = a;
    if (positions && a.ctx == 0) {
      // As long a window as the model allows and the text fills.
      auto n = static_cast<int64_t>(
          m->tokenizer->encode(read_text_file(a.text), m->tokenizer->bos_id() >= 0).size());
      b.ctx = std::max<int64_t>(2, std::min<int64_t>(m->config.max_seq_len, n));
    }
    PplOptions o = ppl_options(b, *m);
    if (!a.save_baseline.empty()) {
      if (a.topk < 1 || a.topk > kBaselineMaxK)
        throw UsageError("eval", "--topk must be in [1, " + std::to_string(kBaselineMaxK) + "]");
      o.topk = static_cast<int>(std::min<int64_t>(a.topk, m->config.vocab_size));
    }
    if (a.buckets < 1) throw UsageError("eval", "--buckets must be >= 1");
    EvalText t = prepare(*m, a.text, o);
    EvalRun r = evaluate(*m, t, o);
    Perplexity p = table_perplexity(r.scores);
    const bool curve = positions || a.position_curve;
    auto buckets = curve ? position_curve(r.scores, t.ctx, a.buckets) : std::vector<PositionBucket>{};
    ScoreHistograms hist = score_histograms(r.scores, m->config.vocab_size);
    json bj;
    if (!a.save_baseline.empty()) {
      Baseline base;
      base.meta = make_baseline_meta(*m, t, r.scores);
      base.meta.model_sha256 = model_sha256(*m);
      base.meta.dtype = a.dtype;
      base.meta.kv_cache = a.kv.text();
      base.meta.variant = a.variant;
      base.table = r.scores;  // copied: run_json below still reports tokens_scored from r
      save_baseline(a.save_baseline, base);
      bj = {{"path", a.save_baseline},
            {"topk", base.table.k},
            {"rows", base.table.size()},
            {"model_sha256", base.meta.model_sha256}};
      r.scores = std::move(base.table);  // the table moved in only to be written
    }
    if (a.json) {
      json j = run_json(a, *m, t, r);
      j["perplexity"] = ppl_json(p);
      j["histograms"] = hist.to_json();
      if (curve) j["position_curve"] = position_curve_json(buckets);
      if (!bj.is_null()) j["baseline"] = bj;
      std::cout << lowbit::json_text(j, 2) << "\n";
      return;
    }
    print_run_header(a, *m, t);
    std::printf("PPL      %.5f ± %.5f   (mean NLL %.6f ± %.6f over %lld scored tokens)\n", p.ppl,
                p.ppl_stderr, p.mean_nll, p.mean_nll_stderr, (long long)p.tokens);
    print_speed(r);
    if (curve) print_curve(buckets);
    if (!bj.is_null())
      std::printf("baseline saved to %s (top-%d per token, %lld tokens, model sha256 %.12s…)\n",
                  a.save_baseline.c_str(), bj["topk"].get<int>(), (long long)bj["rows"].get<int64_t>(),
                  bj["model_sha256"].get<std::string>().c_str());
  });
}

void print_hist_pair(const char* title, const Histogram& b, const Histogram& v, const char* fmt) {
  std::printf("  %-22s %10s %10s\n", title, "baseline", "variant");
  const int n = static_cast<int>(b.counts.size());
  for (int i = 0; i < n && i < static_cast<int>(v.counts.size()); ++i) {
    char range[48];
    double lo = b.lo + (b.hi - b.lo) * i / n, hi = b.lo + (b.hi - b.lo) * (i + 1) / n;
    std::snprintf(range, sizeof range, fmt, lo, hi);
    std::printf("  %-22s %10lld %10lld\n", range, (long long)b.counts[i], (long long)v.counts[i]);
  }
}

void do_kld(const EvalArgs& a) {
  guarded([&] {
    Baseline base = load_baseline(a.baseline);
    const BaselineMeta& bm = base.meta;
    auto m = load(a);
    EvalArgs b = a;
    // Unset text options come from the baseline; explicit ones must agree (check_baseline_matches says which
    // not).
    if (b.text.empty()) b.text = bm.text_path;
    if (b.ctx == 0) b.ctx = bm.ctx;
    if (b.method.empty()) b.method = ppl_method_name(bm.method);
    if (b.chunks == 0) b.chunks = bm.windows;
    if (b.first_chars == 0) b.first_chars = bm.first_chars;
    PplOptions o = ppl_options(b, *m);
    EvalText t = prepare(*m, b.text, o);
    check_baseline_matches(bm, t, m->config.vocab_size);
    EvalRun r = evaluate(*m, t, o, &base.table);
    KldSummary s = summarize_kld(base, r, m->config.vocab_size);
    if (a.buckets < 1) throw UsageError("eval", "--buckets must be >= 1");
    std::vector<PositionBucket> cb, cv;
    if (a.position_curve) {
      cb = position_curve(base.table, t.ctx, a.buckets);
      cv = position_curve(r.scores, t.ctx, a.buckets);
    }
    if (a.json) {
      json j = run_json(b, *m, t, r);
      j["baseline"] = {{"path", a.baseline}, {"model", bm.model_path},  {"model_sha256", bm.model_sha256},
                       {"dtype", bm.dtype},  {"kv_cache", bm.kv_cache}, {"variant", bm.variant},
                       {"tool", bm.tool}};
      j["comparison"] = s.to_json();
      if (a.position_curve)
        j["position_curve"] = {{"baseline", position_curve_json(cb)}, {"variant", position_curve_json(cv)}};
      std::cout << lowbit::json_text(j, 2) << "\n";
      return;
    }
    print_run_header(b, *m, t);
    std::printf("baseline %s (model %s, weights %s, KV cache %s, top-%d, %s)\n", a.baseline.c_str(),
                bm.model_path.c_str(), bm.dtype.c_str(), bm.kv_cache.c_str(), bm.k, bm.tool.c_str());
    std::printf("\nKL divergence KL(baseline || variant), %lld tokens, nats\n", (long long)s.tokens);
    std::printf(
        "  mean     %.6g ± %.2g\n  median   %.6g\n  90 %%     %.6g\n  99 %%     %.6g\n  99.9 %%   %.6g\n"
        "  max      %.6g\n",
        s.kl_mean, s.kl_mean_stderr, s.kl_median, s.kl_p90, s.kl_p99, s.kl_p999, s.kl_max);
    if (s.k < bm.vocab_size)
      std::printf("  (top-%d + tail approximation; baseline mass outside the top-%d: mean %.3g, max %.3g)\n",
                  s.k, s.k, s.tail_mean, s.tail_max);
    std::printf("\nPPL baseline     %.5f ± %.5f\nPPL variant      %.5f ± %.5f\n", s.base.ppl,
                s.base.ppl_stderr, s.variant.ppl, s.variant.ppl_stderr);
    std::printf("ΔPPL             %+.5f ± %.5f   (ln ratio %+.6f ± %.6f, NLL correlation %.4f)\n", s.dppl,
                s.dppl_stderr, s.ln_ratio, s.ln_ratio_stderr, s.nll_correlation);
    std::printf("top-1 agreement  %.3f %% ± %.3f %%\n", 100 * s.top1_agree, 100 * s.top1_agree_stderr);
    std::printf("RMS Δp           %.4f %% ± %.4f %%   (mean Δp %+.4f %%, correct token)\n", 100 * s.rms_dp,
                100 * s.rms_dp_stderr, 100 * s.mean_dp);
    print_speed(r);
    std::printf("\nscore distributions\n");
    print_hist_pair("top-1 probability", s.base_hist.top1_prob, s.variant_hist.top1_prob, "[%.2f, %.2f)");
    print_hist_pair("entropy (nats)", s.base_hist.entropy, s.variant_hist.entropy, "[%.2f, %.2f)");
    if (a.position_curve) {
      std::printf("\nmean NLL by position in the window\n  %-14s %8s %10s %10s %10s\n", "positions", "tokens",
                  "baseline", "variant", "Δ");
      for (size_t i = 0; i < cb.size() && i < cv.size(); ++i) {
        char range[32];
        std::snprintf(range, sizeof range, "[%lld, %lld)", (long long)cb[i].begin, (long long)cb[i].end);
        if (cv[i].tokens == 0) continue;
        std::printf("  %-14s %8lld %10.4f %10.4f %+10.4f\n", range, (long long)cv[i].tokens, cb[i].mean_nll,
                    cv[i].mean_nll, cv[i].mean_nll - cb[i].mean_nll);
      }
    }
  });
}

void do_batch(const EvalArgs& a) {
  guarded([&] {
    auto m = load(a);
    std::string text = read_text_file(a.text);
    auto ids = m->tokenizer->encode(text, m->tokenizer->bos_id() >= 0);
    BatchCheckOptions o;
    o.seqs = a.seqs;
    o.len = a.len;
    o.tolerance = a.tolerance;
    o.kv = a.kv.spec();
    o.check_layers = a.check_layers;
    BatchCheckResult r = check_batch_consistency(*m, ids, o);
    if (a.json) {
      json j = r.to_json();
      j["model"] = m->path;
      j["text"] = a.text;
      std::cout << lowbit::json_text(j, 2) << "\n";
    } else {
      std::printf("model    %s (weights %s, KV cache %s)\n", m->path.c_str(), a.dtype.c_str(),
                  a.kv.text().c_str());
      std::printf("batch    %d sequences of lengths", r.seqs);
      for (auto l : r.lengths) std::printf(" %lld", (long long)l);
      std::printf(", %lld logits compared\n", (long long)r.logits_compared);
      std::printf("alone vs mixed batch       max |Δlogit| %.3g (worst: sequence %d position %lld)\n",
                  r.max_abs_mixed, r.worst_seq, (long long)r.worst_pos);
      std::printf(
          "alone vs pieces of 1..7    max |Δlogit| %.3g (informational: decode and prefill kernels, dynamic "
          "KV scales and per-page INT4 keys depend on the call shape)\n",
          r.max_abs_split);
      std::printf("%s (tolerance %.3g)\n", r.pass ? "PASS" : "FAIL", r.tolerance);
    }
    if (!r.pass) app::set_exit_code(3);
  });
}

void setup(CLI::App& cmd) {
  static EvalArgs ppl, pos, kld, bat;
  app::add_eval_outliers(cmd);
  cmd.require_subcommand(1, 1);
  cmd.footer(
      "Example: lowbit eval ppl -m ../shared/models/stories260K/stories260K.bin "
      "--text ../shared/data/tinystories/tinystories_train_head.txt");

  auto* p =
      cmd.add_subcommand("ppl", "Perplexity with its standard error; optionally save a baseline for kld");
  add_model_options(p, ppl, true);
  add_text_options(p, ppl, true, "Tokens per window (default: min(512, model context))");
  p->add_option(
      "--method", ppl.method,
      "chunks (llama.cpp: BOS-led windows, second half scored, default) | window (every token after the "
      "first) | first-window (GOLDEN.md: first --first-chars characters, one window)");
  p->add_option("--save-baseline", ppl.save_baseline,
                "Write a baseline file for `lowbit eval kld` (docs/eval.md)");
  p->add_option("--topk", ppl.topk,
                "Top-k log-probs per token kept in the baseline (default 32; = vocab: exact KL)");
  p->add_option("--variant", ppl.variant,
                "Free-text description stored in the baseline header (e.g. a recipe)");
  p->add_flag("--position-curve", ppl.position_curve, "Also report mean NLL by position inside the window");
  p->add_option("--buckets", ppl.buckets, "Position buckets for --position-curve (default 16)");
  p->footer(
      "Example: lowbit eval ppl -m ../shared/models/kjv-brown-6M/model.bin --text "
      "../shared/data/kjv-brown/val.txt --ctx 256 --save-baseline kjv.lbbase");
  p->callback([] { do_ppl(ppl, false); });

  auto* q =
      cmd.add_subcommand("positions", "Mean NLL by token position over the longest context the model allows");
  add_model_options(q, pos, true);
  add_text_options(q, pos, true, "Tokens per window (default: the model's full context)");
  q->add_option("--buckets", pos.buckets, "Position buckets (default 16)");
  q->footer(
      "Example: lowbit eval positions -m ../shared/models/stories260K/stories260K.bin --text "
      "../shared/data/tinystories/tinystories_train_head.txt --buckets 16");
  q->callback([] {
    pos.method = "window";
    do_ppl(pos, true);
  });

  auto* k = cmd.add_subcommand("kld",
                               "KL divergence, ΔPPL and top-1 agreement of a model against a saved baseline");
  k->add_option("--baseline", kld.baseline, "Baseline file written by `lowbit eval ppl --save-baseline`")
      ->required();
  add_model_options(k, kld, true);
  add_text_options(k, kld, false,
                   "Tokens per window (default: the baseline's; a different value is refused)");
  kld.method.clear();
  kld.first_chars = 0;
  k->add_option("--method", kld.method,
                "Scoring method (default: the baseline's; a different one is refused)");
  k->add_flag("--position-curve", kld.position_curve,
              "Also report mean NLL by position inside the window, baseline beside variant");
  k->add_option("--buckets", kld.buckets, "Position buckets for --position-curve (default 16)");
  k->footer(
      "Example: lowbit eval kld --baseline kjv.lbbase -m ../shared/models/kjv-brown-6M/model.bin --dtype "
      "f16\n"
      "(--text defaults to the baseline's text path; its sha256 must match)");
  k->callback([] { do_kld(kld); });

  auto* b =
      cmd.add_subcommand("batch", "Batch consistency: sequences alone vs in a mixed batch vs fed in pieces");
  add_model_options(b, bat, true);
  b->add_option("--text", bat.text, "Text file the sequences are cut from")->required();
  b->add_option("--seqs", bat.seqs, "Sequences in the mixed batch (default 4)");
  b->add_option("--len", bat.len, "Tokens of the longest sequence (default: min(128, model context))");
  b->add_option("--tolerance", bat.tolerance,
                "Largest |Δlogit| that passes (default 1e-4); exit code 3 above");
  b->footer(
      "Example: lowbit eval batch -m ../shared/models/stories260K/stories260K.bin --text "
      "../shared/data/tinystories/tinystories_train_head.txt");
  b->callback([] { do_batch(bat); });
}

}  // namespace

LOWBIT_COMMAND(
    "eval", 50,
    "Evaluate a model: perplexity, KL divergence / top-1 agreement against a baseline, NLL by position, "
    "batch consistency, NaN/Inf checks, activation outliers before/after rotation.\nExample: lowbit eval ppl "
    "-m MODEL --text FILE",
    setup);
