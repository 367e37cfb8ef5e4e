// Scale tuning (train/tune_scales.h, quant/tune.h): the stored scales and RMSNorm gammas of a quantized
// model tuned end to end toward the float model. It lowers the KL divergence that lowbit's own decoder
// measures on the calibration windows, moves only scales and gammas (same codes, same bytes), and records
// itself; the recipe keys parse, round-trip and are refused where they mean nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "quant/budget.h"
#include "quant/calibration.h"
#include "quant/quantizer.h"
#include "tests/common/run_cli.h"
#include "tests/quant/quant_test_util.h"
#include "tokenizer/tokenizer.h"
#include "train/tune_scales.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace lowbit::quant {
namespace {

const std::string kShared = LOWBIT_SHARED_DIR;
const std::string kStories = kShared + "/models/stories260K/stories260K.bin";
const std::string kTinyText = kShared + "/data/tinystories/tinystories_train_head.txt";

// Mean KL(a || b) of the next-token distributions over the windows, from lowbit's decoder: the probe that
// `lowbit quantize --budget` measures with, on a copy of `a` that takes b's weights.
double mean_kl(const Model& a, const Model& b, const std::vector<std::vector<int32_t>>& seqs) {
  Model work = a;
  KldProbe probe(work, seqs);
  work.weights = b.weights;
  return probe.kld_from(-1);
}

TEST(TuneScales, LowersTheDecodersKlAndMovesOnlyScalesAndGammas) {
  if (!fs::exists(kStories)) GTEST_SKIP() << kStories << " missing";
  auto ref = load_model(kStories, {DenseMode::F32, {}});
  const CalibData calib = load_calibration({kTinyText, 8, 128, 0}, *ref->tokenizer, ref->config.max_seq_len,
                                           ref->tokenizer->bos_id(), nullptr);
  // lm_head (tied: the embedding with it) quantized too, so the tied pair is tuned as one storage.
  const std::string base = "W4A16,group=32";
  auto recipe = [&](const std::string& s) {
    Recipe r = parse_recipe_arg(s);
    r.ignore.clear();
    return r;
  };
  auto plain = load_model(kStories, {DenseMode::F32, {}});
  auto tuned = load_model(kStories, {DenseMode::F32, {}});
  quantize_model(*plain, recipe(base), {&calib, false, false});
  const QuantReport rep =
      quantize_model(*tuned, recipe(base + ",tune=24,tune_lr=0.003"), {&calib, false, false});
  const json t = rep.to_json()["tune"];
  ASSERT_TRUE(t.is_object());
  EXPECT_EQ(t["steps"], 24);
  EXPECT_EQ(t["losses"].size(), 24u);
  EXPECT_LT(t["loss_after"].get<double>(), 0.8 * t["loss_before"].get<double>());
  EXPECT_FALSE(t["reverted"].get<bool>());
  // The same improvement in lowbit's own decoder, which computes from the rescaled stored scales.
  const double kl_plain = mean_kl(*ref, *plain, calib.seqs), kl_tuned = mean_kl(*ref, *tuned, calib.seqs);
  EXPECT_NEAR(kl_plain, t["loss_before"].get<double>(), 0.05 * kl_plain);
  EXPECT_LT(kl_tuned, 0.85 * kl_plain) << kl_plain << " -> " << kl_tuned;
  // Codes, zero points and storage are quantization's; scales and gammas moved.
  auto np = plain->weights.named_matrices(), nt = tuned->weights.named_matrices();
  int scales_moved = 0;
  for (size_t i = 0; i < np.size(); ++i) {
    const WeightMatrix &a = *np[i].second, &b = *nt[i].second;
    SCOPED_TRACE(np[i].first);
    ASSERT_EQ(a.kind, WeightKind::Quant);
    ASSERT_EQ(b.kind, WeightKind::Quant);
    EXPECT_EQ(a.q->codes, b.q->codes);
    EXPECT_EQ(a.q->storage_bytes(), b.q->storage_bytes());
    scales_moved += a.q->scales != b.q->scales;
  }
  EXPECT_EQ(scales_moved, static_cast<int>(np.size()));
  EXPECT_TRUE(tuned->weights.tied());
  EXPECT_NE(plain->weights.final_norm, tuned->weights.final_norm);
  EXPECT_NE(plain->weights.layers[0].ffn_norm, tuned->weights.layers[0].ffn_norm);
  // Without tune_norms the gammas stay.
  auto scales_only = load_model(kStories, {DenseMode::F32, {}});
  quantize_model(*scales_only, recipe(base + ",tune=2,tune_norms=0"), {&calib, false, false});
  EXPECT_EQ(plain->weights.final_norm, scales_only->weights.final_norm);
  EXPECT_EQ(plain->weights.layers[1].attn_norm, scales_only->weights.layers[1].attn_norm);
}

// A step size far too large ends above the start: the factors are reset, the model is the untuned one, and
// the manifest and warnings say so.
TEST(TuneScales, StepsThatRaiseTheLossAreReverted) {
  if (!fs::exists(kStories)) GTEST_SKIP() << kStories << " missing";
  auto load = [] { return load_model(kStories, {DenseMode::F32, {}}); };
  auto ref = load();
  const CalibData calib = load_calibration({kTinyText, 4, 64, 0}, *ref->tokenizer, ref->config.max_seq_len,
                                           ref->tokenizer->bos_id(), nullptr);
  auto plain = load(), tuned = load();
  quantize_model(*plain, parse_recipe_arg("W4A16,group=32"), {&calib, false, false});
  const QuantReport rep =
      quantize_model(*tuned, parse_recipe_arg("W4A16,group=32,tune=3,tune_lr=1"), {&calib, false, false});
  const json t = rep.to_json()["tune"];
  EXPECT_TRUE(t["reverted"].get<bool>());
  EXPECT_GT(t["reverted_loss"].get<double>(), t["loss_before"].get<double>());
  EXPECT_EQ(t["loss_after"], t["loss_before"]);
  EXPECT_NE(rep.summary_table().find("reverted"), std::string::npos);
  ASSERT_FALSE(rep.warnings.empty());
  EXPECT_EQ(rep.warnings.back().rfind("tune: scale tuning raised the KL", 0), 0u) << rep.warnings.back();
  EXPECT_EQ(plain->weights.layers[0].wq.q->scales, tuned->weights.layers[0].wq.q->scales);
  EXPECT_EQ(plain->weights.final_norm, tuned->weights.final_norm);
  EXPECT_EQ(testing::logits_of(*plain, calib.seqs[0]), testing::logits_of(*tuned, calib.seqs[0]));
}

TEST(TuneScales, KeysParseRoundTripAndAreRefusedWhereTheyMeanNothing) {
  const Recipe r = parse_recipe_arg("W4A16,algo=gptq,tune=40,tune_lr=0.002,tune_batch=2,tune_norms=0");
  EXPECT_EQ(r.tune.steps, 40);
  EXPECT_EQ(r.tune.lr, 0.002);
  EXPECT_EQ(r.tune.batch, 2);
  EXPECT_FALSE(r.tune.norms);
  EXPECT_TRUE(parse_recipe_arg("W4A16,tune=8").needs_calibration());
  const Recipe back = recipe_from_json(r.to_json());
  EXPECT_EQ(back.tune.steps, 40);
  EXPECT_EQ(back.tune.batch, 2);
  EXPECT_FALSE(back.tune.norms);
  EXPECT_TRUE(parse_recipe_arg("W4A16").to_json()["tune"].is_null());
  EXPECT_THROW(parse_recipe_arg("W4A16,tune_lr=0.01"), UsageError);  // no tune=STEPS
  EXPECT_THROW(parse_recipe_arg("W4A16,tune=8,tune_lr=0"), UsageError);
  EXPECT_THROW(parse_recipe_arg("W4A16,tune=8,tune_lr=2"), UsageError);
  EXPECT_THROW(parse_recipe_arg("W4A16,tune=-1"), UsageError);
  EXPECT_THROW(parse_recipe_arg("W4A16,tune=8,tune_batch=0"), UsageError);
  EXPECT_THROW(recipe_from_json(json{{"preset", "W4A16"}, {"tune", {{"steps", 8}, {"rate", 1}}}}),
               UsageError);
  EXPECT_THROW(recipe_from_json(json{{"preset", "W4A16"}, {"tune", {{"steps", 0}}}}), UsageError);
  EXPECT_EQ(recipe_from_json(json{{"preset", "W4A16"}, {"tune", json::object()}}).tune.steps, 64);
}

// Zero steps: every factor is 1, the loss is measured twice alike, and the tied pair is one entry. (The
// direct call also links the train library into this test, so that the library quant opens finds lowbit's
// functions in the process.)
TEST(TuneScales, ZeroStepsChangeNothing) {
  if (!fs::exists(kStories)) GTEST_SKIP() << kStories << " missing";
  auto ref = load_model(kStories, {DenseMode::F32, {}});
  auto q = load_model(kStories, {DenseMode::F32, {}});
  Recipe r = parse_recipe_arg("W4A16,group=32");
  r.ignore.clear();
  quantize_model(*q, r, {nullptr, false, false});
  const CalibData calib = load_calibration({kTinyText, 2, 64, 0}, *ref->tokenizer, ref->config.max_seq_len,
                                           ref->tokenizer->bos_id(), nullptr);
  train::TuneOptions o;
  o.lr = 1e-3;
  const train::TuneResult res = train::tune_scales(*ref, *q, calib.seqs, o);
  EXPECT_EQ(res.loss_before, res.loss_after);
  EXPECT_GT(res.loss_before, 0);
  EXPECT_EQ(res.scales.size(), 1u + 7u * static_cast<size_t>(ref->config.n_layers));  // embed + layers
  for (const auto& [name, f] : res.scales)
    for (float v : f) ASSERT_EQ(v, 1.0f) << name;
  EXPECT_TRUE(res.fixed.empty());
  o.batch = 0;
  EXPECT_THROW(train::tune_scales(*ref, *q, calib.seqs, o), UsageError);
}

TEST(TuneScales, NeedsCalibrationText) {
  if (!fs::exists(kStories)) GTEST_SKIP() << kStories << " missing";
  auto m = load_model(kStories, {DenseMode::F32, {}});
  EXPECT_THROW(quantize_model(*m, parse_recipe_arg("W4A16,group=32,tune=4"), {nullptr, false, false}),
               UsageError);
}

// Through the `lowbit` executable, which opens the train library at run time: the checkpoint holds the tuned
// scales over the same codes, and its manifest the record.
TEST(TuneScales, CliWritesTheTunedCheckpointAndItsRecord) {
  if (!fs::exists(kStories)) GTEST_SKIP() << kStories << " missing";
  auto quantize = [](const std::string& recipe, const std::string& name) {
    const std::string out = testing::temp_path(name);
    const auto r = testing_cli::run_cli("quantize -m " + kStories + " -r " + recipe + " -c " + kTinyText +
                                            " --samples 4 --length 64 -o " + out + " --force",
                                        true);
    EXPECT_EQ(r.rc, 0) << r.out;
    return std::make_pair(out, r.out);
  };
  const auto [plain_dir, plain_out] = quantize("W4A16,group=32", "tune_cli_plain");
  const auto [tuned_dir, tuned_out] = quantize("W4A16,group=32,tune=4", "tune_cli_tuned");
  EXPECT_NE(tuned_out.find("scale tuning: KL"), std::string::npos) << tuned_out;
  std::ifstream mf(tuned_dir + "/lowbit_manifest.json");
  ASSERT_TRUE(mf.good());
  const json man = json::parse(mf);
  EXPECT_EQ(man["tune"]["optimizer"], "adam");
  EXPECT_EQ(man["recipe"]["tune"]["steps"], 4);
  EXPECT_LT(man["tune"]["loss_after"].get<double>(), man["tune"]["loss_before"].get<double>());
  auto a = load_model(plain_dir), b = load_model(tuned_dir);
  EXPECT_EQ(a->weights.layers[1].w_up.q->codes, b->weights.layers[1].w_up.q->codes);
  EXPECT_NE(a->weights.layers[1].w_up.q->scales, b->weights.layers[1].w_up.q->scales);
  EXPECT_NE(a->weights.layers[1].ffn_norm, b->weights.layers[1].ffn_norm);
  fs::remove_all(plain_dir);
  fs::remove_all(tuned_dir);
}

}  // namespace
}  // namespace lowbit::quant
