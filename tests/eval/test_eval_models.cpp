// Evaluation on the real tiny models: GOLDEN.md first-window perplexities, the llama.cpp chunk method's
// accounting, own-baseline KLD = 0, F16 copy KLD small but > 0 (and the top-k KL below the exact one), batch
// invariance, batch consistency, NaN/Inf health checks naming the layer, and clear errors for bad input.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <ostream>

#include "core/hash.h"
#include "eval/baseline.h"
#include "eval/batch_check.h"
#include "eval/kld.h"
#include "eval/perplexity.h"
#include "kernels/weight.h"
#include "model/model.h"

using namespace lowbit;
using namespace lowbit::eval;

namespace {
const std::string kShared = LOWBIT_SHARED_DIR;
const std::string kStories = kShared + "/models/stories260K/stories260K.bin";
const std::string kTiny = kShared + "/models/tinystories-656K";
const std::string kKjv = kShared + "/models/kjv-brown-6M/model.bin";
const std::string kTinyText = kShared + "/data/tinystories/tinystories_train_head.txt";
const std::string kKjvText = kShared + "/data/kjv-brown/val.txt";

EvalText windows(const Model& m, const std::string& path, PplMethod method, int64_t ctx, int64_t chunks = 0) {
  TextOptions o;
  o.method = method;
  o.ctx = ctx;
  o.max_chunks = chunks;
  return prepare_eval_text(*m.tokenizer, read_text_file(path), path, o);
}

PplOptions quiet(int topk = 1) {
  PplOptions o;
  o.progress = false;
  o.topk = topk;
  return o;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("lowbit_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

struct GoldenPpl {
  std::string model, text;
  int64_t ctx;
  double mean_nll, ppl;
};

void PrintTo(const GoldenPpl& g, std::ostream* os) {
  *os << g.model << " ctx " << g.ctx;
}

class GoldenFirstWindow : public ::testing::TestWithParam<GoldenPpl> {};

TEST_P(GoldenFirstWindow, ReproducesGoldenPerplexity) {
  const GoldenPpl& g = GetParam();
  auto m = load_model(g.model, {DenseMode::F32});
  EvalText t = windows(*m, g.text, PplMethod::FirstWindow, g.ctx);
  ASSERT_EQ(t.chunks.size(), 1u);
  EXPECT_EQ(t.chunks[0].tokens[0], m->tokenizer->bos_id());
  EvalRun r = evaluate(*m, t, quiet());
  EXPECT_EQ(r.scores.size(), g.ctx - 1);  // tokens 1..ctx-1
  Perplexity p = table_perplexity(r.scores);
  EXPECT_NEAR(p.ppl, g.ppl, g.ppl * 1e-3);  // GOLDEN.md: 0.1 %
  EXPECT_NEAR(p.mean_nll, g.mean_nll, 1e-3);
  EXPECT_GT(p.ppl_stderr, 0);
}

INSTANTIATE_TEST_SUITE_P(RealModels, GoldenFirstWindow,
                         ::testing::Values(GoldenPpl{kStories, kTinyText, 512, 1.469340, 4.34636},
                                           GoldenPpl{kTiny, kTinyText, 512, 3.485902, 32.65187},
                                           GoldenPpl{kKjv, kKjvText, 256, 3.884980, 48.66596}),
                         [](const auto& info) {
                           return info.index == 0   ? std::string("stories260K")
                                  : info.index == 1 ? std::string("tinystories656K")
                                                    : std::string("kjv_brown_6M");
                         });

TEST(Perplexity, ChunkMethodAccountingAndBatchInvariance) {
  auto m = load_model(kStories, {DenseMode::F32});
  EvalText t = windows(*m, kTinyText, PplMethod::Chunks, 128, 6);
  ASSERT_EQ(t.chunks.size(), 6u);
  for (size_t i = 0; i < t.chunks.size(); ++i) {
    EXPECT_EQ(t.chunks[i].start, static_cast<int64_t>(i) * 128);
    EXPECT_EQ(t.chunks[i].tokens[0], 1);  // BOS replaces each window's first token
    EXPECT_EQ(t.chunks[i].score_from, 64);
  }
  PplOptions o = quiet();
  o.batch = 1;
  EvalRun one = evaluate(*m, t, o);
  EXPECT_EQ(one.scores.size(), 6 * (128 - 1 - 64));  // llama.cpp: n_ctx - 1 - n_ctx/2 per chunk
  EXPECT_EQ(one.forward_calls, 6);
  EXPECT_EQ(one.scores.rows.front().pos, 65);
  EXPECT_EQ(one.scores.rows.back().pos, 127);
  o.batch = 4;
  EvalRun four = evaluate(*m, t, o);
  EXPECT_EQ(four.forward_calls, 2);
  Perplexity a = table_perplexity(one.scores), b = table_perplexity(four.scores);
  EXPECT_NEAR(a.ppl, b.ppl, a.ppl * 1e-6);
  // Window method scores every token after the first; the position curve accounts for all of them.
  EvalText w = windows(*m, kTinyText, PplMethod::Window, 128, 2);
  EvalRun rw = evaluate(*m, w, quiet());
  EXPECT_EQ(rw.scores.size(), 2 * 127);
  auto curve = position_curve(rw.scores, 128, 16);
  ASSERT_EQ(curve.size(), 16u);
  int64_t total = 0;
  for (const auto& c : curve) total += c.tokens;
  EXPECT_EQ(total, rw.scores.size());
  EXPECT_EQ(curve[0].tokens, 2 * 7);  // positions 1..7
  EXPECT_EQ(curve[15].end, 128);
  // Early positions (little context) are harder than late ones on this text.
  EXPECT_GT(curve[0].mean_nll, curve[15].mean_nll);
}

TEST(Kld, OwnBaselineIsZeroAndF16CopyIsSmallButPositive) {
  auto m = load_model(kStories, {DenseMode::F32});
  EvalText t = windows(*m, kTinyText, PplMethod::Chunks, 256, 4);
  EvalRun ref = evaluate(*m, t, quiet(32));
  Baseline base;
  base.meta = make_baseline_meta(*m, t, ref.scores);
  base.meta.model_sha256 = model_sha256(*m);
  base.table = ref.scores;
  const std::string path = temp_path("own.lbbase");
  save_baseline(path, base);
  Baseline loaded = load_baseline(path);
  std::filesystem::remove(path);
  EXPECT_EQ(loaded.meta.model_sha256, sha256_file_hex(kStories));
  check_baseline_matches(loaded.meta, t, m->config.vocab_size);

  PplOptions o = quiet();
  o.batch = 1;  // another batch layout than the baseline's: still identical rows
  EvalRun same = evaluate(*m, t, o, &loaded.table);
  KldSummary s = summarize_kld(loaded, same, m->config.vocab_size);
  EXPECT_LT(s.kl_max, 1e-6);
  EXPECT_LT(s.kl_mean, 1e-9);
  EXPECT_DOUBLE_EQ(s.top1_agree, 1.0);
  EXPECT_NEAR(s.dppl, 0.0, 1e-6);
  EXPECT_NEAR(s.base.ppl, loaded.meta.ppl.ppl, 1e-9);

  auto h = load_model(kStories, {DenseMode::F16});
  EvalRun var = evaluate(*h, t, quiet(), &loaded.table);
  KldSummary f = summarize_kld(loaded, var, h->config.vocab_size);
  std::printf(
      "stories260K F16 copy vs F32 baseline: mean KLD %.3g ± %.2g, max %.3g, top-1 %.2f %%, dPPL %+.5f\n",
      f.kl_mean, f.kl_mean_stderr, f.kl_max, 100 * f.top1_agree, f.dppl);
  EXPECT_GT(f.kl_mean, 0.0);
  EXPECT_LT(f.kl_mean, 1e-3);
  EXPECT_GT(f.top1_agree, 0.95);
  EXPECT_LE(f.kl_median, f.kl_p90);
  EXPECT_LE(f.kl_p90, f.kl_p99);
  EXPECT_LE(f.kl_p999, f.kl_max);

  // Top-32 KL vs the exact KL (k = vocab = 512): a lower bound, and close on this model.
  EvalRun full = evaluate(*m, t, quiet(512));
  EvalRun var_exact = evaluate(*h, t, quiet(), &full.scores);
  double approx = 0, exact = 0;
  for (size_t i = 0; i < var.compare.size(); ++i) {
    EXPECT_LE(var.compare[i].kl, var_exact.compare[i].kl + 1e-9) << i;
    approx += var.compare[i].kl;
    exact += var_exact.compare[i].kl;
  }
  EXPECT_GT(approx, 0.5 * exact);
}

TEST(Kld, RefusesMismatchedRuns) {
  auto m = load_model(kStories, {DenseMode::F32});
  EvalText t = windows(*m, kTinyText, PplMethod::Chunks, 256, 2);
  EvalRun ref = evaluate(*m, t, quiet(8));
  BaselineMeta meta = make_baseline_meta(*m, t, ref.scores);
  EvalText other_ctx = windows(*m, kTinyText, PplMethod::Chunks, 128, 2);
  EXPECT_THROW(check_baseline_matches(meta, other_ctx, m->config.vocab_size), Error);
  EvalText other_text = windows(*m, kKjvText, PplMethod::Chunks, 256, 2);
  try {
    check_baseline_matches(meta, other_text, m->config.vocab_size);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("text differs"), std::string::npos) << e.what();
  }
  // A baseline from another model family (vocabulary 4096 vs 512).
  auto kjv = load_model(kKjv, {DenseMode::F32});
  EXPECT_THROW(check_baseline_matches(meta, t, kjv->config.vocab_size), Error);
  // evaluate() itself refuses a table of another size.
  EvalText fewer = windows(*m, kTinyText, PplMethod::Chunks, 256, 1);
  EXPECT_THROW(evaluate(*m, fewer, quiet(), &ref.scores), Error);
}

TEST(Health, NanInALayerIsNamed) {
  auto m = load_model(kStories, {DenseMode::F32});
  EvalText t = windows(*m, kTinyText, PplMethod::FirstWindow, 64);
  auto& w = m->weights.layers[2].w_down;
  std::vector<float> bad(static_cast<size_t>(w.rows * w.cols), 0.01f);
  bad[5] = std::numeric_limits<float>::quiet_NaN();
  w = make_f32_weight(bad.data(), w.rows, w.cols);
  PplOptions o = quiet();
  o.check_layers = true;
  try {
    evaluate(*m, t, o);
    ADD_FAILURE() << "NaN not detected";
  } catch (const CheckFailed& e) {
    std::string s = e.what();
    EXPECT_NE(s.find("NaN in layer 2"), std::string::npos) << s;
    EXPECT_NE(s.find("position 0"), std::string::npos) << s;
  }
  // Without --check-layers the logits check still fails loudly.
  EXPECT_THROW(evaluate(*m, t, quiet()), CheckFailed);
}

TEST(BatchConsistency, PassesOnRealModel) {
  auto m = load_model(kKjv, {DenseMode::F32});
  auto ids = m->tokenizer->encode(read_text_file(kKjvText), true);
  BatchCheckOptions o;
  o.seqs = 3;
  o.len = 48;
  BatchCheckResult r = check_batch_consistency(*m, ids, o);
  EXPECT_TRUE(r.pass) << r.to_json().dump();
  EXPECT_LT(r.max_abs_mixed, 1e-4);
  EXPECT_LT(r.max_abs_split, 1e-4);
  EXPECT_EQ(r.lengths, (std::vector<int64_t>{48, 40, 32}));
  EXPECT_EQ(r.logits_compared, (48 + 40 + 32 + 48) * m->config.vocab_size);
  std::vector<int32_t> few(ids.begin(), ids.begin() + 10);
  EXPECT_THROW(check_batch_consistency(*m, few, o), Error);
}

TEST(BadInput, ClearErrors) {
  auto m = load_model(kStories, {DenseMode::F32});
  const std::string empty = temp_path("empty.txt");
  { std::ofstream(empty).flush(); }
  try {
    read_text_file(empty);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("empty"), std::string::npos);
  }
  std::filesystem::remove(empty);
  EXPECT_THROW(read_text_file(temp_path("missing.txt")), Error);
  TextOptions o;
  o.ctx = 512;
  try {
    prepare_eval_text(*m->tokenizer, "Once upon a time there was a cat.", "short.txt", o);
    ADD_FAILURE();
  } catch (const Error& e) {
    std::string s = e.what();
    EXPECT_NE(s.find("tokenizes to only"), std::string::npos) << s;
    EXPECT_NE(s.find("--ctx 512"), std::string::npos) << s;
  }
  EXPECT_THROW(resolve_ctx(*m, 4096), UsageError);  // stories260K's context is 512
  EXPECT_EQ(resolve_ctx(*m, 0), 512);
}

}  // namespace

// Dynamic FP8 / FP4 KV scales belong to each sequence (from its own first stored rows), so a sequence gives
// the same logits alone and inside a mixed batch; before, the first batch of the layer set one scale for
// everyone.
TEST(BatchConsistency, DynamicKvScalesArePerSequence) {
  auto m = load_model(kKjv, {DenseMode::F32});
  auto ids = m->tokenizer->encode(read_text_file(kKjvText), true);
  for (const char* spec : {"e4m3", "e5m2:head", "fp4", "int4:window16"}) {
    BatchCheckOptions o;
    o.seqs = 3;
    o.len = 48;
    o.kv = parse_kv_spec(spec);
    BatchCheckResult r = check_batch_consistency(*m, ids, o);
    EXPECT_TRUE(r.pass) << spec << " " << r.to_json().dump();
    EXPECT_EQ(r.max_abs_mixed, 0.0) << spec;
  }
}
