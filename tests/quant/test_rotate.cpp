// QuaRot-style rotation (quant/rotate.h). The first test of every rotation: the rotated float model
// reproduces the original logits to float tolerance (each of R1 / R2 / R4 alone and together, on synthetic,
// fixture and real models, through prefill, decode and batched forwards). Then: rotated checkpoints reload
// bit for bit with the online R4 taken from the checkpoint, and online quantization applies the same
// rotation.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "kernels/matmul.h"
#include "model/fixture.h"
#include "quant/checkpoint_writer.h"
#include "quant/quantizer.h"
#include "quant/rotate.h"
#include "tests/quant/quant_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace lowbit::quant {
namespace {

const std::string kShared = LOWBIT_SHARED_DIR;
const std::string kFactors = kShared + "/data/hadamard/hadamards.safetensors";
const std::string kStories = kShared + "/models/stories260K/stories260K.bin";
const std::string kKjv = kShared + "/models/kjv-brown-6M/model.bin";

// Norms of random fixtures are all 1: give them spread so folding them is tested too.
void perturb_norms(Model& m, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.5f, 1.8f);
  for (auto& L : m.weights.layers)
    for (auto* v : {&L.attn_norm, &L.ffn_norm})
      for (auto& x : *v) x = u(rng);
  for (auto& x : m.weights.final_norm) x = u(rng);
}

std::unique_ptr<Model> fixture_model(const std::string& name, const std::string& dir_name,
                                     FixtureShape* custom = nullptr) {
  const std::string dir = testing::temp_path(dir_name);
  FixtureOptions o;
  o.seed = 3;
  o.dtype = "f32";
  write_fixture_hf(custom ? *custom : fixture_shape(name), o, dir);
  auto m = load_model(dir, {DenseMode::F32, {}});
  perturb_norms(*m, 11);
  return m;
}

// dim 172 (no Hadamard: R1 falls back to a random orthogonal matrix), head_dim 86 (R2 likewise), FFN 344 =
// 172 * 2 (R4 needs the shared factor file).
FixtureShape odd_shape() {
  FixtureShape s = fixture_shape("tiny-llama");
  s.name = "tiny-odd";
  s.config["hidden_size"] = 172;
  s.config["num_attention_heads"] = 2;
  s.config["num_key_value_heads"] = 1;
  s.config["intermediate_size"] = 344;
  return s;
}

// dim 96 = 12 * 8, head_dim 24 = 12 * 2, FFN 160 = 20 * 8: every rotation a Paley x Sylvester product.
FixtureShape paley_shape() {
  FixtureShape s = fixture_shape("tiny-qwen2");
  s.name = "tiny-paley";
  s.config["hidden_size"] = 96;
  s.config["num_attention_heads"] = 4;
  s.config["num_key_value_heads"] = 2;
  s.config["intermediate_size"] = 160;
  return s;
}

RotationSpec spec(bool r1, bool r2, bool r4, const std::string& factors = "") {
  RotationSpec s;
  s.method = "quarot";
  s.seed = 5;
  s.r1 = r1, s.r2 = r2, s.r4 = r4;
  s.factors = factors;
  return s;
}

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

// Logits of the sequence token by token (the decode path).
std::vector<float> decode_logits(const Model& m, const std::vector<int32_t>& toks) {
  Decoder dec(m.config, m.weights);
  KvCache kv(m.config, 1, static_cast<int64_t>(toks.size()), KvDtype::F32);
  const size_t V = static_cast<size_t>(m.config.vocab_size);
  std::vector<float> out(toks.size() * V);
  for (size_t i = 0; i < toks.size(); ++i)
    dec.forward({{toks[i], 0, static_cast<int64_t>(i), true}}, kv, out.data() + i * V);
  return out;
}

// Two sequences interleaved in one batch (the batched path); logits of sequence 0.
std::vector<float> batched_logits(const Model& m, const std::vector<int32_t>& toks) {
  Decoder dec(m.config, m.weights);
  KvCache kv(m.config, 2, static_cast<int64_t>(toks.size()), KvDtype::F32);
  std::vector<BatchEntry> b;
  for (size_t i = 0; i < toks.size(); ++i) {
    b.push_back({toks[i], 0, static_cast<int64_t>(i), true});
    b.push_back({toks[toks.size() - 1 - i], 1, static_cast<int64_t>(i), true});
  }
  const size_t V = static_cast<size_t>(m.config.vocab_size);
  std::vector<float> all(b.size() * V), out;
  dec.forward(b, kv, all.data());
  for (size_t i = 0; i < toks.size(); ++i)
    out.insert(out.end(), all.begin() + 2 * i * V, all.begin() + (2 * i + 1) * V);
  return out;
}

// Rotates a copy of `make()` under `s` and checks the logits of every forward path against the original.
void expect_same_function(const std::function<std::unique_ptr<Model>()>& make, const RotationSpec& s,
                          const std::string& what, double rel_tol = 2e-4) {
  auto base = make();
  auto rot = make();
  const auto toks = testing::test_tokens(base->config.vocab_size, 24, 1);
  const auto ref = testing::logits_of(*base, toks);
  const json rec = rotate_model(*rot, s);
  const double scale = std::max(1.0, max_abs(ref));
  const double d = testing::max_abs_diff(ref, testing::logits_of(*rot, toks));
  EXPECT_LT(d, rel_tol * scale) << what << ": prefill logits moved (max |logit| " << scale << ")";
  EXPECT_LT(testing::max_abs_diff(ref, decode_logits(*rot, toks)), rel_tol * scale) << what << ": decode";
  EXPECT_LT(testing::max_abs_diff(ref, batched_logits(*rot, toks)), rel_tol * scale) << what << ": batched";
  // Something really changed: the rotated weights differ from the original ones.
  std::vector<float> a(static_cast<size_t>(base->config.dim)), b(a.size());
  weight_row_f32(base->weights.layers[0].wq, 0, a.data());
  weight_row_f32(rot->weights.layers[0].wq, 0, b.data());
  EXPECT_GT(testing::max_abs_diff(a, b), 1e-3) << what;
  EXPECT_EQ(rot->weights.down_rotation.valid(), s.r4) << what;
  EXPECT_FALSE(rot->weights.tied()) << what;
  EXPECT_EQ(rec["r1"].is_null(), !s.r1) << what;
}

void each_combination(const std::function<std::unique_ptr<Model>()>& make, const std::string& what,
                      const std::string& factors = "", bool with_r4 = true) {
  for (int c = 0; c < 4; ++c) {
    if (!with_r4 && (c == 2 || c == 3)) continue;
    const bool all = c == 3;
    expect_same_function(make, spec(c == 0 || all, c == 1 || all, c == 2 || all, factors),
                         what + (c == 0   ? " R1"
                                 : c == 1 ? " R2"
                                 : c == 2 ? " R4"
                                          : " R1+R2+R4"));
  }
}

TEST(QuantRotate, SyntheticModelKeepsItsLogits) {
  each_combination([] { return testing::make_random_model(7, false, 96); }, "synthetic llama");
  each_combination([] { return testing::make_random_model(8, true, 128); }, "synthetic GQA");
}

TEST(QuantRotate, FixtureArchitecturesKeepTheirLogits) {
  // qwen2: QKV bias and tied embeddings; gemma: norm offset, embedding scale, GeLU, MQA, head_dim 32; qwen3:
  // q/k norms.
  for (const char* name : {"tiny-qwen2", "tiny-gemma", "tiny-qwen3", "tiny-llama"})
    each_combination([&] { return fixture_model(name, std::string("rot_") + name); }, name);
  FixtureShape p = paley_shape();
  each_combination([&] { return fixture_model("", "rot_paley", &p); }, "paley dims 96/24/160");
}

TEST(QuantRotate, DimensionsWithoutAHadamardUseRandomOrthogonalOrTheFactorFile) {
  if (!fs::exists(kFactors)) GTEST_SKIP() << kFactors << " missing";
  FixtureShape s = odd_shape();
  auto make = [&] { return fixture_model("", "rot_odd", &s); };
  each_combination(make, "odd dims 172/86/344", kFactors);
  each_combination(make, "odd dims 172/86/344 without a factor file", "", /*r4=*/false);
  auto m = make();
  const json rec = rotate_model(*m, spec(true, true, true, kFactors));
  EXPECT_EQ(rec["r1"]["kind"], "randomized-hadamard");  // 172 is in the file
  EXPECT_EQ(rec["r1"]["construction"], "given");
  EXPECT_EQ(rec["r2"]["kind"], "random-orthogonal");  // 86 = 43 * 2 has no Hadamard
  EXPECT_EQ(rec["r4"]["factor"], 172);
  EXPECT_EQ(rec["r4"]["construction"], "given");
  auto m1 = make();
  EXPECT_EQ(rotate_model(*m1, spec(true, false, false))["r1"]["kind"], "random-orthogonal");
  // Without the file, R4 of order 344 has no Hadamard: the error says what to pass.
  auto m2 = make();
  try {
    rotate_model(*m2, spec(true, true, true));
    FAIL() << "expected a UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("rotate_factors"), std::string::npos) << e.what();
  }
}

TEST(QuantRotate, BrokenRotationsAreCaught) {
  // The tests above would see a missing online R4 or a rotation applied to one side only.
  auto base = testing::make_random_model(7);
  const auto toks = testing::test_tokens(base->config.vocab_size, 16, 2);
  const auto ref = testing::logits_of(*base, toks);
  auto m = testing::make_random_model(7);
  rotate_model(*m, spec(false, false, true));
  m->weights.down_rotation = Hadamard{};  // offline half only
  EXPECT_GT(testing::max_abs_diff(ref, testing::logits_of(*m, toks)), 0.05);
  auto r = testing::make_random_model(7);
  rotate_model(*r, spec(true, false, false));
  r->weights.layers[1].attn_norm[3] = 2.0f;  // an unfolded gamma no longer commutes with R1
  EXPECT_GT(testing::max_abs_diff(ref, testing::logits_of(*r, toks)), 0.05);
  // Rotating twice is refused (the online R4 would be applied once).
  auto twice = testing::make_random_model(7);
  rotate_model(*twice, spec(true, true, true));
  EXPECT_THROW(rotate_model(*twice, spec(true, true, true)), UsageError);
}

TEST(QuantRotate, RealModelsKeepTheirLogits) {
  for (const auto& p : {kKjv, kStories})
    if (!fs::exists(p)) GTEST_SKIP() << p << " missing";
  each_combination([] { return load_model(kKjv, {DenseMode::F32, {}}); }, "kjv-brown-6M");
  each_combination([] { return load_model(kStories, {DenseMode::F32, {}}); }, "stories260K", kFactors);
}

void expect_bitwise_equal(Model& a, Model& b) {
  auto na = a.weights.named_matrices(), nb = b.weights.named_matrices();
  ASSERT_EQ(na.size(), nb.size());
  for (size_t i = 0; i < na.size(); ++i) {
    const WeightMatrix& x = *na[i].second;
    const WeightMatrix& y = *nb[i].second;
    ASSERT_EQ(x.kind, y.kind) << na[i].first;
    std::vector<float> rx(static_cast<size_t>(x.cols)), ry(rx.size());
    for (int64_t r = 0; r < x.rows; ++r) {
      weight_row_f32(x, r, rx.data());
      weight_row_f32(y, r, ry.data());
      ASSERT_EQ(rx, ry) << na[i].first << " row " << r;
    }
  }
  for (size_t l = 0; l < a.weights.layers.size(); ++l) {
    EXPECT_EQ(a.weights.layers[l].attn_norm, b.weights.layers[l].attn_norm);
    EXPECT_EQ(a.weights.layers[l].bv, b.weights.layers[l].bv);
  }
  EXPECT_EQ(a.weights.final_norm, b.weights.final_norm);
  const Hadamard &ha = a.weights.down_rotation, &hb = b.weights.down_rotation;
  EXPECT_EQ(ha.n, hb.n);
  EXPECT_EQ(ha.m, hb.m);
  EXPECT_EQ(ha.hm, hb.hm);
}

// quantize (offline) -> write -> load: identical weights, online R4 from the checkpoint, identical logits;
// the same recipe applied online at load gives the same model.
void round_trip(const std::string& path, const std::string& recipe, int64_t expect_m) {
  auto m = load_model(path);
  const Recipe r = parse_recipe_arg(recipe);
  QuantReport rep = quantize_model(*m, r, {nullptr, false, false});
  ASSERT_FALSE(rep.rotation.is_null());
  EXPECT_EQ(m->weights.down_rotation.m, expect_m);
  const std::string dir = testing::temp_path("rot_ckpt");
  write_quantized_checkpoint(*m, rep, dir);
  std::ifstream mf(dir + "/lowbit_manifest.json");
  const json manifest = json::parse(mf);
  EXPECT_EQ(manifest["rotation"]["method"], "quarot");
  EXPECT_EQ(manifest["rotation"]["seed"], r.rotation.seed);
  EXPECT_TRUE(manifest["rotation"].contains("untied_embeddings"));
  EXPECT_EQ(manifest["recipe"]["rotation"]["method"], "quarot");
  auto q = load_model(dir);
  ASSERT_TRUE(q->weights.down_rotation.valid()) << "the online R4 must come from the checkpoint";
  expect_bitwise_equal(*m, *q);
  const auto toks = testing::test_tokens(m->config.vocab_size, 20, 4);
  const auto lm = testing::logits_of(*m, toks);
  EXPECT_EQ(testing::max_abs_diff(lm, testing::logits_of(*q, toks)), 0.0);
  // Online: `lowbit run --quantize RECIPE` goes through quantize_model_online.
  auto o = load_model(path);
  quantize_model_online(*o, r, {nullptr, false, false});
  expect_bitwise_equal(*m, *o);
  fs::remove_all(dir);
}

TEST(QuantRotate, CheckpointReloadsBitForBitWithItsOnlineRotation) {
  for (const auto& p : {kKjv, kStories, kFactors})
    if (!fs::exists(p)) GTEST_SKIP() << p << " missing";
  round_trip(kKjv, "W4A16,rotate=quarot,rotate_seed=3", 12);
  round_trip(kStories, "W8A16,rotate=quarot,rotate_factors=" + kFactors, 172);
}

TEST(QuantRotate, TiedEmbeddingsAreUntiedAndSaidSo) {
  auto m = fixture_model("tiny-qwen2", "rot_tied");
  ASSERT_TRUE(m->weights.tied());
  QuantReport rep = quantize_model(*m, parse_recipe_arg("W8A16,rotate=quarot"), {nullptr, false, false});
  EXPECT_TRUE(rep.rotation["untied_embeddings"].get<bool>());
  EXPECT_FALSE(m->weights.tied());
  EXPECT_FALSE(m->config.tie_embeddings);
  EXPECT_NE(rep.summary_table().find("tied embeddings untied"), std::string::npos);
}

}  // namespace
}  // namespace lowbit::quant
