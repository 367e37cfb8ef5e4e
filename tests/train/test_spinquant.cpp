// SpinQuant (train/spinquant.h, quant/rotate.h): Cayley steps stay orthogonal and descend, a few steps lower
// the fake-quantized calibration loss, the learned rotations fused into the float model keep its logits, and
// a SpinQuant checkpoint reloads and runs like a QuaRot one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/error.h"
#include "kernels/matmul.h"
#include "quant/calibration.h"
#include "quant/checkpoint_writer.h"
#include "quant/quantizer.h"
#include "quant/rotate.h"
#include "tests/common/run_cli.h"
#include "tests/quant/quant_test_util.h"
#include "tokenizer/tokenizer.h"
#include "train/cayley.h"
#include "train/spinquant.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace lowbit::quant {
namespace {

const std::string kShared = LOWBIT_SHARED_DIR;
const std::string kFactors = kShared + "/data/hadamard/hadamards.safetensors";
const std::string kStories = kShared + "/models/stories260K/stories260K.bin";
const std::string kTinyText = kShared + "/data/tinystories/tinystories_train_head.txt";
// stories260K's FFN width 172 has its Hadamard only in the shared factor file.
const std::string kRecipe =
    "W4A4KV4,rotate=spinquant,spin_steps=6,spin_tokens=1024,rotate_factors=" + kFactors;

Eigen::MatrixXd random_orthogonal(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd;
  Eigen::MatrixXd g(n, n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) g(i, j) = nd(rng);
  return Eigen::HouseholderQR<Eigen::MatrixXd>(g).householderQ();
}

TEST(Cayley, StepsStayOrthogonalAndFollowTheProjectedGradient) {
  const int n = 48;
  Eigen::MatrixXd R = random_orthogonal(n, 1);
  std::mt19937_64 rng(2);
  std::normal_distribution<double> nd;
  for (int step = 0; step < 50; ++step) {
    Eigen::MatrixXd G(n, n);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) G(i, j) = nd(rng);
    train::cayley_step(R, G, 0.5);
  }
  EXPECT_LT(train::orthogonality_error(R), 1e-5);
  // To first order a step is R - lr (G - R G^T R): the descent direction of the loss on the manifold.
  Eigen::MatrixXd G = random_orthogonal(n, 3) * 2.0 + Eigen::MatrixXd::Constant(n, n, 0.1);
  const double lr = 1e-5;
  Eigen::MatrixXd R1 = R;
  train::cayley_step(R1, G, lr);
  const Eigen::MatrixXd expect = -(G - R * G.transpose() * R);
  EXPECT_LT(((R1 - R) / lr - expect).cwiseAbs().maxCoeff(), 1e-3 * expect.cwiseAbs().maxCoeff());
  // A descent step lowers a smooth loss: f(R) = -trace(A^T R) with gradient -A.
  const Eigen::MatrixXd A = random_orthogonal(n, 4);
  Eigen::MatrixXd R2 = R;
  train::cayley_step(R2, -A, 0.1);
  EXPECT_GT((A.transpose() * R2).trace(), (A.transpose() * R).trace());
}

TEST(SpinQuantRecipe, KeysParseRoundTripAndNeedSpinquant) {
  const Recipe r = parse_recipe_arg("W4A4KV4,rotate=spinquant,spin_steps=3,spin_lr=2.5,spin_tokens=512");
  EXPECT_EQ(r.rotation.method, "spinquant");
  EXPECT_EQ(r.rotation.spin_steps, 3);
  EXPECT_EQ(r.rotation.spin_lr, 2.5);
  EXPECT_EQ(r.rotation.spin_tokens, 512);
  EXPECT_TRUE(r.needs_calibration());
  const Recipe back = recipe_from_json(r.to_json());
  EXPECT_EQ(back.rotation.spin_steps, 3);
  EXPECT_EQ(back.rotation.spin_lr, 2.5);
  EXPECT_EQ(back.rotation.spin_tokens, 512);
  const Recipe j = recipe_from_json(
      json::parse(R"({"preset": "W4A16", "rotation": {"method": "spinquant", "steps": 7, "lr": 0.5}})"));
  EXPECT_EQ(j.rotation.spin_steps, 7);
  EXPECT_EQ(j.rotation.spin_lr, 0.5);
  EXPECT_THROW(parse_recipe_arg("W4A16,rotate=quarot,spin_steps=3"), UsageError);
  EXPECT_THROW(parse_recipe_arg("W4A16,spin_lr=1"), UsageError);
  EXPECT_THROW(parse_recipe_arg("W4A16,rotate=spinquant,spin_lr=0"), UsageError);
  EXPECT_THROW(
      recipe_from_json(json::parse(R"({"preset": "W4A16", "rotation": {"method": "quarot", "steps": 7}})")),
      UsageError);
}

CalibData stories_calib(const Model& m) {
  return load_calibration({kTinyText, 8, 128, 0}, *m.tokenizer, m.config.max_seq_len, m.tokenizer->bos_id(),
                          nullptr);
}

bool have_files() {
  return fs::exists(kStories) && fs::exists(kFactors) && fs::exists(kTinyText);
}

// Training from QuaRot's start keeps R1 / R2 orthogonal, and the learned rotations fused into the float model
// (no quantization) reproduce its logits.
TEST(SpinQuant, LearnedRotationsFusedIntoTheFloatModelKeepItsLogits) {
  if (!have_files()) GTEST_SKIP() << "shared stories260K, its text or the Hadamard factor file missing";
  auto base = load_model(kStories, {DenseMode::F32, {}});
  auto m = load_model(kStories, {DenseMode::F32, {}});
  const Recipe r = parse_recipe_arg(kRecipe);
  const CalibData calib = stories_calib(*m);
  RotationSpec s = r.rotation;
  const json rec = learn_spinquant(*m, r, calib.seqs, &s);
  EXPECT_EQ(rec["steps"], 6);
  EXPECT_EQ(rec["fake_quant"]["activations"], "int4");
  EXPECT_EQ(rec["fake_quant"]["kv_cache"], "int4+rot");
  EXPECT_TRUE(rec["learned"]["r1"].get<bool>() && rec["learned"]["r2"].get<bool>());
  EXPECT_EQ(rec["losses"].size(), 6u);
  EXPECT_LT(rec["orthogonality_error"].get<double>(), 1e-5);
  const json rot = rotate_model(*m, s);
  EXPECT_EQ(rot["method"], "spinquant");
  EXPECT_EQ(rot["r1"]["kind"], "learned");
  const auto toks = testing::test_tokens(m->config.vocab_size, 32, 6);
  const auto ref = testing::logits_of(*base, toks), got = testing::logits_of(*m, toks);
  double mx = 0;
  for (float x : ref) mx = std::max(mx, static_cast<double>(std::fabs(x)));
  EXPECT_LT(testing::max_abs_diff(ref, got), 2e-4 * mx);
  // The learned matrices differ from QuaRot's start: otherwise this compared QuaRot with itself.
  RotationSpec q = r.rotation;
  q.method = "quarot";
  auto qm = load_model(kStories, {DenseMode::F32, {}});
  rotate_model(*qm, q);
  EXPECT_GT(
      testing::max_abs_diff(weight_to_f32(qm->weights.layers[0].wq), weight_to_f32(m->weights.layers[0].wq)),
      1e-4);
}

// Three Cayley steps from no rotation (R1 = R2 = I, where stories260K's activation outliers cost int4 the
// most) lower the fake-quantized calibration loss; ascent (a sign error in the step) raises it. From QuaRot's
// start the loss of this 260K-parameter model moves by about as much as the rounding noise of a step, so that
// start cannot show descent reliably.
TEST(SpinQuant, FewStepsFromNoRotationLowerTheCalibrationLoss) {
  if (!have_files()) GTEST_SKIP() << "shared stories260K, its text or the Hadamard factor file missing";
  auto m = load_model(kStories, {DenseMode::F32, {}});
  const CalibData calib = load_calibration({kTinyText, 16, 256, 0}, *m->tokenizer, m->config.max_seq_len,
                                           m->tokenizer->bos_id(), nullptr);
  auto eye = [](int64_t n) {
    std::vector<double> v(static_cast<size_t>(n * n), 0.0);
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i * n + i)] = 1.0;
    return v;
  };
  train::SpinOptions o;
  o.steps = 3, o.lr = 2.0, o.tokens = 2048, o.act = FormatId::INT4, o.kv_cache = "int4+rot";
  const train::SpinResult r =
      train::learn_rotations(*m, calib.seqs, eye(m->config.dim), eye(m->config.head_dim), nullptr, o);
  ASSERT_EQ(r.losses.size(), 3u);
  EXPECT_EQ(r.tokens, 2048);
  EXPECT_LT(r.loss_after, r.loss_before - 0.02) << "losses " << ::testing::PrintToString(r.losses);
  EXPECT_LT(r.orthogonality_error, 1e-5);
}

// quantize -> write -> load: the manifest and config keep the training record, the reloaded checkpoint has
// its online R4 and computes the quantized model's logits bit for bit.
TEST(SpinQuant, CheckpointReloadsAndRunsLikeQuaRot) {
  if (!have_files()) GTEST_SKIP() << "shared stories260K, its text or the Hadamard factor file missing";
  auto m = load_model(kStories);
  const Recipe r = parse_recipe_arg(kRecipe + ",spin_steps=2,group=32");
  const CalibData calib = stories_calib(*m);
  QuantReport rep = quantize_model(*m, r, {&calib, false, false});
  const std::string dir = testing::temp_path("spinquant_ckpt");
  write_quantized_checkpoint(*m, rep, dir);
  std::ifstream mf(dir + "/lowbit_manifest.json");
  const json man = json::parse(mf);
  EXPECT_EQ(man["rotation"]["method"], "spinquant");
  EXPECT_EQ(man["rotation"]["seed"], 0);
  EXPECT_EQ(man["rotation"]["spinquant"]["steps"], 2);
  EXPECT_TRUE(man["rotation"]["spinquant"].contains("loss_before"));
  EXPECT_TRUE(man["rotation"]["spinquant"].contains("loss_after"));
  EXPECT_EQ(man["recipe"]["rotation"]["method"], "spinquant");
  std::ifstream cf(dir + "/config.json");
  EXPECT_EQ(json::parse(cf)["lowbit_rotation"]["method"], "spinquant");
  auto q = load_model(dir);
  ASSERT_TRUE(q->weights.down_rotation.valid());
  const auto toks = testing::test_tokens(m->config.vocab_size, 24, 4);
  EXPECT_EQ(testing::max_abs_diff(testing::logits_of(*m, toks), testing::logits_of(*q, toks)), 0.0);
  fs::remove_all(dir);
}

}  // namespace
// The `lowbit` executable does not link libtorch (its start-up stays fast); rotate=spinquant opens the train
// library at run time and resolves every lowbit function it calls in the executable.
TEST(SpinQuant, CliLoadsTheTrainLibraryOnlyWhenAsked) {
  using testing_cli::run_cli;
  const std::string shared = LOWBIT_SHARED_DIR;
  const std::string out = testing::temp_path("spinquant_cli");
  auto r = run_cli("quantize -m " + shared + "/models/stories260K/stories260K.bin -r " +
                       "W4A4KV4,group=32,rotate=spinquant,spin_steps=1,rotate_r4=0 -c " + shared +
                       "/data/tinystories/tinystories_train_head.txt -o " + out + " --force --json",
                   true);
  ASSERT_EQ(r.rc, 0) << r.out;
  std::ifstream mf(out + "/lowbit_manifest.json");
  ASSERT_TRUE(mf.good());
  std::stringstream ss;
  ss << mf.rdbuf();
  EXPECT_NE(ss.str().find("cayley-sgd"), std::string::npos) << "the SpinQuant record is in the manifest";
  std::filesystem::remove_all(out);
  // ldd: the executable itself has no libtorch among its libraries.
  FILE* p = popen(("ldd " + testing_cli::lowbit_exe() + " 2>/dev/null").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string libs;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) libs.append(buf, n);
  pclose(p);
  EXPECT_EQ(libs.find("libtorch"), std::string::npos) << libs;
}

}  // namespace lowbit::quant
