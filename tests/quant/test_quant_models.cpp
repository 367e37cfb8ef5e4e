// Quantization of the real tiny models: checkpoint round trips (identical dequantized weights and logits,
// tokenizer carried over) and GPTQ / AWQ against RTN on real calibration text.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "kernels/matmul.h"
#include "quant/checkpoint_writer.h"
#include "quant/quantizer.h"
#include "tests/quant/quant_test_util.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;

namespace lowbit::quant {
namespace {

const std::string kShared = LOWBIT_SHARED_DIR;
const std::string kStories = kShared + "/models/stories260K/stories260K.bin";
const std::string kKjv = kShared + "/models/kjv-brown-6M/model.bin";
const std::string kTinyText = kShared + "/data/tinystories/tinystories_train_head.txt";

void round_trip(const std::string& path, const std::string& recipe, const std::string& prompt) {
  ASSERT_TRUE(fs::exists(path)) << path << " not found: the shared folder (LOWBIT_SHARED_DIR) is incomplete";
  auto m = load_model(path);
  QuantReport rep = quantize_model(*m, parse_recipe_arg(recipe), {nullptr, false, false});
  const std::string dir = testing::temp_path("model_rt");
  write_quantized_checkpoint(*m, rep, dir);
  auto q = load_model(dir);
  ASSERT_TRUE(q->tokenizer) << "the tokenizer must travel with the checkpoint";
  auto ids = m->tokenizer->encode(prompt, true);
  EXPECT_EQ(q->tokenizer->encode(prompt, true), ids);
  auto na = m->weights.named_matrices(), nb = q->weights.named_matrices();
  for (size_t i = 0; i < na.size(); ++i) {
    const WeightMatrix& a = *na[i].second;
    const WeightMatrix& b = *nb[i].second;
    ASSERT_EQ(a.kind, b.kind) << na[i].first;
    std::vector<float> ra(static_cast<size_t>(a.cols)), rb(ra.size());
    for (int64_t r = 0; r < a.rows; ++r) {
      weight_row_f32(a, r, ra.data());
      weight_row_f32(b, r, rb.data());
      ASSERT_EQ(ra, rb) << na[i].first << " row " << r;
    }
  }
  EXPECT_EQ(testing::max_abs_diff(testing::logits_of(*m, ids), testing::logits_of(*q, ids)), 0.0);
  fs::remove_all(dir);
}

TEST(QuantModels, Stories260kW4A16G32RoundTrip) {
  round_trip(kStories, "W4A16,group=32", "Once upon a time");
}

TEST(QuantModels, KjvW4A16G32RoundTrip) {
  round_trip(kKjv, "W4A16,group=32", "In the beginning God");
}

TEST(QuantModels, GptqAndAwqLowerOutputErrorThanRtnOnStories260k) {
  ASSERT_TRUE(fs::exists(kStories) && fs::exists(kTinyText)) << "shared files not found under " << kShared;
  auto m0 = load_model(kStories);
  Recipe base = parse_recipe_arg("int3:g32:sym");
  base.calib = {kTinyText, 8, 128, 0};
  auto calib =
      load_calibration(base.calib, *m0->tokenizer, m0->config.max_seq_len, m0->tokenizer->bos_id(), nullptr);
  ASSERT_EQ(calib.seqs.size(), 8u);
  EXPECT_EQ(calib.sha256.size(), 64u);
  // Held-out tokens: a later window of the same text.
  auto held = calib.seqs[7];
  auto ref = testing::logits_of(*m0, held);
  auto err = [&](const char* algo) {
    auto m = load_model(kStories);
    Recipe r = base;
    r.algorithm = std::string(algo) == "gptq"  ? Algorithm::Gptq
                  : std::string(algo) == "awq" ? Algorithm::Awq
                                               : Algorithm::Rtn;
    QuantizeOptions o;
    o.calib = &calib;
    o.progress = false;
    QuantReport rep = quantize_model(*m, r, o);
    if (r.algorithm == Algorithm::Gptq) {
      double g = 0, rt = 0;
      for (auto& t : rep.tensors)
        if (t.quantized && t.rel_error_out >= 0) g += t.rel_error_out, rt += t.rel_error_out_rtn;
      EXPECT_LT(g, rt) << "mean output error of GPTQ layers must be below RTN's";
    }
    auto l = testing::logits_of(*m, held);
    double e = 0;
    for (size_t i = 0; i < l.size(); ++i) e += (l[i] - ref[i]) * (l[i] - ref[i]);
    return e;
  };
  const double rtn = err("rtn"), gptq = err("gptq"), awq = err("awq");
  EXPECT_LT(gptq, rtn);
  EXPECT_LT(awq, rtn);
}

// A calibration text with too few tokens is refused with a message that names the file and the count, instead
// of quantizing on statistics of a handful of tokens.
TEST(QuantModels, CalibrationTextTooShortIsAnError) {
  ASSERT_TRUE(fs::exists(kStories)) << kStories << " not found under the shared folder";
  auto m = load_model(kStories);
  const fs::path p =
      fs::temp_directory_path() / ("lowbit_short_calib_" + std::to_string(::getpid()) + ".txt");
  std::ofstream(p) << "Once upon a time.";
  CalibSpec spec{p.string(), 8, 128, 0};
  try {
    load_calibration(spec, *m->tokenizer, m->config.max_seq_len, m->tokenizer->bos_id(), nullptr);
    ADD_FAILURE() << "a short calibration text was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("has only"), std::string::npos) << e.what();
  }
  fs::remove(p);
}

}  // namespace
}  // namespace lowbit::quant
