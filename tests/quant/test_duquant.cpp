// DuQuant's dual transformation (quant/duquant.h): G = R_blk2 . P_zigzag . R_blk1 is orthogonal, the zigzag
// permutation deals the largest channels to different blocks, and on a planted outlier channel G lowers
// max |x| / RMS far below the input's. As rotate=duquant: the rotated float model keeps its logits, the
// planted residual outlier falls at the q/k/v input, and a quantized checkpoint reloads with identical
// logits and nothing recomputed.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "kernels/matmul.h"
#include "model/fixture.h"
#include "quant/checkpoint_writer.h"
#include "quant/duquant.h"
#include "quant/quantizer.h"
#include "quant/rotate.h"
#include "tests/quant/quant_test_util.h"

namespace lowbit::quant {
namespace {

// [rows, n] standard normal rows with channel 5 x 30 and channel 40 x 12 (two outlier channels, one block).
std::vector<float> planted_rows(int64_t rows, int64_t n) {
  std::mt19937_64 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c) x[r * n + c] = nd(rng) * (c == 5 ? 30.0f : c == 40 ? 12.0f : 1.0f);
  return x;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// x G^T for rows x: each row transformed as a column vector, x' = G x.
std::vector<double> transform_rows(const std::vector<float>& x, int64_t rows, const DuquantTransform& t) {
  const int64_t n = t.n;
  std::vector<double> y(static_cast<size_t>(rows * n), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) {
      double acc = 0;
      for (int64_t j = 0; j < n; ++j) acc += t.g[i * n + j] * x[r * n + j];
      y[r * n + i] = acc;
    }
  return y;
}

TEST(DuQuant, TransformIsOrthogonal) {
  const int64_t rows = 256, n = 64;
  const auto x = planted_rows(rows, n);
  DuquantOptions o;
  o.block = 16;
  const DuquantTransform t = build_duquant(x, rows, n, o);
  ASSERT_EQ(t.g.size(), static_cast<size_t>(n * n));
  double worst = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int64_t k = 0; k < n; ++k) dot += t.g[i * n + k] * t.g[j * n + k];
      worst = std::max(worst, std::fabs(dot - (i == j ? 1.0 : 0.0)));
    }
  EXPECT_LT(worst, 1e-12);
  EXPECT_GT(t.steps1, 0);  // the greedy search took at least one step on the planted outliers
}

TEST(DuQuant, LowersMaxOverRmsOnAPlantedOutlier) {
  const int64_t rows = 512, n = 64;
  const auto x = planted_rows(rows, n);
  DuquantOptions o;
  o.block = 16;
  const DuquantTransform t = build_duquant(x, rows, n, o);
  const auto y = transform_rows(x, rows, t);
  double sq = 0, mx = 0;
  for (float v : x) sq += static_cast<double>(v) * v, mx = std::max(mx, std::fabs(static_cast<double>(v)));
  const double rms = std::sqrt(sq / static_cast<double>(x.size()));
  const double before = mx / rms, after = max_abs(y) / rms;  // G is orthogonal: the RMS is unchanged
  EXPECT_LT(after, before / 3) << "before " << before << " after " << after;
  EXPECT_NEAR(t.max_before, mx, 1e-6 * mx);
  EXPECT_NEAR(t.max_after, max_abs(y), 1e-9 * mx);
  EXPECT_NEAR(t.rms, rms, 1e-9 * rms);
}

TEST(DuQuant, ZigzagDealsTheLargestChannelsToDifferentBlocks) {
  // 32 channels in 4 blocks of 8; the 8 largest all sit in block 0.
  std::vector<double> m(32, 1.0);
  for (int c = 0; c < 8; ++c) m[c] = 100.0 - c;
  const auto p = zigzag_permutation(m, 8);
  ASSERT_EQ(p.size(), 32u);
  std::vector<int> seen(32, 0);
  for (int64_t c : p) ++seen[c];
  for (int s : seen) EXPECT_EQ(s, 1);  // a permutation
  // Dealing order: ranks 0..3 to blocks 0..3, ranks 4..7 to blocks 3..0.
  const std::vector<int64_t> want_first = {0, 1, 2, 3}, want_second = {7, 6, 5, 4};
  for (int b = 0; b < 4; ++b) {
    EXPECT_EQ(p[b * 8], want_first[b]) << b;
    EXPECT_EQ(p[b * 8 + 1], want_second[b]) << b;
  }
  // Block maxima before: {100, 1, 1, 1}; after: every block holds two of the eight, and the sums balance.
  double lo = 1e9, hi = 0;
  for (int b = 0; b < 4; ++b) {
    double mx = 0, sum = 0;
    for (int i = 0; i < 8; ++i) mx = std::max(mx, m[p[b * 8 + i]]), sum += m[p[b * 8 + i]];
    EXPECT_GE(mx, 97.0) << b;
    lo = std::min(lo, sum), hi = std::max(hi, sum);
  }
  EXPECT_LE(hi - lo, 1.0 + 1e-9);  // zigzag pairs rank r with rank 2K-1-r: sums 193 each (+ the 1s)
}

TEST(DuQuant, BlockSize) {
  EXPECT_EQ(duquant_block_size(256, 0), 128);
  EXPECT_EQ(duquant_block_size(96, 0), 96);
  EXPECT_EQ(duquant_block_size(172, 0), 86);
  EXPECT_EQ(duquant_block_size(256, 64), 64);
  EXPECT_THROW(duquant_block_size(256, 48), UsageError);
}

// The tiny llama fixture (dim 64: four DuQuant blocks of 16) with residual channel 13 of every token
// embedding x 40 and norms with spread, in `dir` (kept: checkpoints copy its tokenizer).
std::unique_ptr<Model> planted_fixture(const std::string& dir) {
  auto m = testing::planted_outlier_model(dir, 13, 40.0f);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> u(0.5f, 1.8f);
  for (auto& L : m->weights.layers)
    for (auto* v : {&L.attn_norm, &L.ffn_norm})
      for (auto& x : *v) x = u(rng);
  return m;
}

RotationSpec duquant_spec() {
  RotationSpec s;
  s.method = "duquant";
  s.seed = 2;
  s.duquant_block = 16;
  return s;
}

// max |x| / RMS of layer 0's q/k/v input.
struct AttnInRatio : ActivationObserver {
  double mx = 0, sq = 0, n = 0;
  void observe(int layer, ActSite site, const float* x, int64_t T, int64_t cols) override {
    if (layer != 0 || site != ActSite::AttnIn) return;
    for (int64_t i = 0; i < T * cols; ++i)
      mx = std::max(mx, std::fabs(static_cast<double>(x[i]))), sq += x[i] * x[i];
    n += static_cast<double>(T * cols);
  }
  double ratio() const { return mx / std::sqrt(sq / n); }
};

double attn_in_ratio(const Model& m, const std::vector<int32_t>& toks) {
  AttnInRatio obs;
  Decoder dec(m.config, m.weights);
  dec.set_observer(&obs);
  KvCache kv(m.config, 1, static_cast<int64_t>(toks.size()), KvDtype::F32);
  std::vector<BatchEntry> b;
  for (size_t i = 0; i < toks.size(); ++i) b.push_back({toks[i], 0, static_cast<int64_t>(i), false});
  std::vector<float> none(1);
  dec.forward(b, kv, none.data());
  return obs.ratio();
}

TEST(DuQuant, RotatedFloatModelKeepsItsLogitsAndSpreadsThePlantedOutlier) {
  const std::string dir = testing::temp_path("duq_float");
  auto base = planted_fixture(dir);
  Model rot = *base;
  const CalibData calib = testing::random_calib(*base, 4, 32, 1);
  const auto rec = rotate_model_duquant(rot, duquant_spec(), calib.seqs)["r1"];
  EXPECT_EQ(rec["kind"], "duquant");
  EXPECT_EQ(rec["block"], 16);
  EXPECT_LT(rec["calibration_max_abs_after"].get<double>(), rec["calibration_max_abs_before"].get<double>());
  const auto toks = testing::test_tokens(base->config.vocab_size, 24, 5);
  const auto ref = testing::logits_of(*base, toks);
  double scale = 1;
  for (float v : ref) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  EXPECT_LT(testing::max_abs_diff(ref, testing::logits_of(rot, toks)), 2e-4 * scale);
  // The decode path (one token per forward) reads the same fused weights.
  Decoder dec(rot.config, rot.weights);
  KvCache kv(rot.config, 1, static_cast<int64_t>(toks.size()), KvDtype::F32);
  const size_t V = static_cast<size_t>(rot.config.vocab_size);
  std::vector<float> step(toks.size() * V);
  for (size_t i = 0; i < toks.size(); ++i)
    dec.forward({{toks[i], 0, static_cast<int64_t>(i), true}}, kv, step.data() + i * V);
  EXPECT_LT(testing::max_abs_diff(ref, step), 2e-4 * scale);
  const double before = attn_in_ratio(*base, toks), after = attn_in_ratio(rot, toks);
  EXPECT_GT(before, 6.0);
  EXPECT_LT(after, before / 2) << "before " << before << " after " << after;
  std::filesystem::remove_all(dir);
}

TEST(DuQuant, CheckpointReloadsWithItsRotationAndNothingRecomputed) {
  const std::string dir = testing::temp_path("duq_src");
  auto m = planted_fixture(dir);
  const Recipe r = parse_recipe_arg("W4A16,group=16,rotate=duquant,duquant_block=16,duquant_steps=4");
  EXPECT_TRUE(r.needs_calibration());
  EXPECT_THROW(quantize_model(*planted_fixture(dir), r, {nullptr, false, false}), UsageError);
  const CalibData calib = testing::random_calib(*m, 4, 32, 1);
  QuantReport rep = quantize_model(*m, r, {&calib, false, false});
  EXPECT_EQ(rep.rotation["method"], "duquant");
  EXPECT_EQ(rep.rotation["r1"]["kind"], "duquant");
  EXPECT_EQ(rep.rotation["r1"]["block"], 16);
  const std::string out = testing::temp_path("duq_ckpt");
  write_quantized_checkpoint(*m, rep, out);
  std::ifstream mf(out + "/lowbit_manifest.json");
  const auto manifest = nlohmann::json::parse(mf);
  EXPECT_EQ(manifest["rotation"]["r1"]["kind"], "duquant");
  EXPECT_EQ(manifest["recipe"]["rotation"]["method"], "duquant");
  EXPECT_EQ(manifest["recipe"]["rotation"]["block"], 16);
  auto q = load_model(out);  // no calibration text: G is in the weights, R4 in the checkpoint
  ASSERT_TRUE(q->weights.down_rotation.valid());
  const auto toks = testing::test_tokens(m->config.vocab_size, 20, 4);
  EXPECT_EQ(testing::max_abs_diff(testing::logits_of(*m, toks), testing::logits_of(*q, toks)), 0.0);
  std::filesystem::remove_all(out);
  std::filesystem::remove_all(dir);
}

TEST(DuQuant, RecipeKeys) {
  EXPECT_THROW(parse_recipe_arg("W4A16,duquant_block=16"), UsageError);  // needs rotate=duquant
  EXPECT_THROW(parse_recipe_arg("W4A16,rotate=duquant,duquant_block=0"), UsageError);
  const Recipe r = parse_recipe_arg("W4A4KV4,rotate=duquant,duquant_block=64");
  EXPECT_EQ(r.rotation.method, "duquant");
  EXPECT_EQ(r.rotation.duquant_block, 64);
  EXPECT_EQ(r.rotation.duquant_steps, 8);
  const Recipe back = recipe_from_json(r.to_json());
  EXPECT_EQ(back.rotation.method, "duquant");
  EXPECT_EQ(back.rotation.duquant_block, 64);
  auto m = testing::make_random_model(7, false, 96);  // dim 64: a block of 48 does not divide it
  RotationSpec s = duquant_spec();
  s.duquant_block = 48;
  EXPECT_THROW(rotate_model_duquant(*m, s, {{1, 2, 3}}), UsageError);
  s.duquant_block = 16;
  EXPECT_THROW(rotate_model_duquant(*m, s, {}), UsageError);  // no calibration windows
  s.r1 = false;
  EXPECT_THROW(rotate_model_duquant(*m, s, {{1, 2, 3}}), UsageError);
}

}  // namespace
}  // namespace lowbit::quant
