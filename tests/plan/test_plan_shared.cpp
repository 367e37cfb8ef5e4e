// Planner on the real models in ../shared/models: the llama2.c header path, the HF directory path, and a
// whole plan for each (integration: needs LOWBIT_SHARED_DIR).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "kv/kv_cache.h"
#include "plan/plan.h"
#include "tests/common/run_cli.h"

namespace lowbit::plan {
namespace {

std::string shared(const std::string& rel) {
  return std::string(LOWBIT_SHARED_DIR) + "/" + rel;
}

TEST(PlanShared, Stories260KHeader) {
  const PlanModel m = load_plan_model(shared("models/stories260K/stories260K.bin"), false);
  EXPECT_EQ(m.source, "llama2c");
  EXPECT_EQ(m.config.dim, 64);
  EXPECT_EQ(m.config.ffn_dim, 172);
  EXPECT_EQ(m.config.n_layers, 5);
  EXPECT_EQ(m.config.n_heads, 8);
  EXPECT_EQ(m.config.n_kv_heads, 4);
  EXPECT_EQ(m.config.vocab_size, 512);
  EXPECT_TRUE(m.config.tie_embeddings);
  EXPECT_EQ(kv_bytes_per_token(m.config, KvDtype::F32),
            KvCache(m.config, 1, 1, KvDtype::F32).bytes_per_token());
}

TEST(PlanShared, KjvBrownParamsAndPlan) {
  const PlanModel m = load_plan_model(shared("models/kjv-brown-6M/model.bin"), false);
  EXPECT_EQ(m.config.n_params(), 6163712);  // GOLDEN.md
  PlanRequest r;
  r.ctx = {256};
  r.device = device_by_name("cpu");
  const Plan p = make_plan(m, r);
  // Dimensions are multiples of 256: every scheme quantizes every linear.
  const Row* w4 = p.per_ctx[0].find("w4a16", "bf16");
  ASSERT_NE(w4, nullptr);
  EXPECT_TRUE(w4->weights.notes.empty());
  EXPECT_TRUE(p.per_ctx[0].rec.fits);
}

TEST(PlanShared, TinyStoriesHfDirectory) {
  const PlanModel m = load_plan_model(shared("models/tinystories-656K"), false);
  EXPECT_EQ(m.source, "hf");
  EXPECT_EQ(m.config.dim, 128);
  EXPECT_EQ(m.config.n_layers, 2);
  EXPECT_TRUE(m.config.tie_embeddings);
  EXPECT_FALSE(m.stored_bytes.has_value());  // not a quantized checkpoint
  PlanRequest r;
  r.ctx = {512};
  r.device = budget_device(int64_t(64) << 20);
  const Plan p = make_plan(m, r);
  // hidden 128 < group 128? No: 128 columns hold one full group; ffn down has 384 inputs. Nothing is skipped.
  const Row* w4 = p.per_ctx[0].find("w4a16", "bf16");
  ASSERT_NE(w4, nullptr);
  EXPECT_TRUE(w4->weights.notes.empty());
  EXPECT_EQ(p.per_ctx[0].find("bf16", "bf16")->weights.total(), 2 * m.config.n_params());
}

// The files line: every file an engine reads, headers and tokenizer included, equals the directory's bytes.
TEST(PlanShared, TinyStoriesFilesAreEveryFileOnDisk) {
  const std::string dir = shared("models/tinystories-656K");
  int64_t on_disk = 0, n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file()) on_disk += static_cast<int64_t>(e.file_size()), ++n;
  const PlanModel m = load_plan_model(dir, false);
  EXPECT_EQ(m.files_bytes(), on_disk);
  EXPECT_EQ(static_cast<int64_t>(m.files.size()), n);
  // More than the tensors: the safetensors header, config and tokenizer files count too.
  EXPECT_GT(m.files_bytes(), 2 * m.config.n_params());
  bool tokenizer = false;
  for (const auto& [name, bytes] : m.files) tokenizer = tokenizer || name == "tokenizer.json";
  EXPECT_TRUE(tokenizer);
  PlanRequest r;
  r.ctx = {256};
  r.device = budget_device(int64_t(64) << 20);
  EXPECT_NE(plan_table(make_plan(m, r)).find("files:  "), std::string::npos);
  // A llama2.c checkpoint: the .bin and the tokenizer.bin next to it.
  const PlanModel k = load_plan_model(shared("models/kjv-brown-6M/model.bin"), false);
  ASSERT_EQ(k.files.size(), 2u);
  EXPECT_EQ(k.files_bytes(),
            static_cast<int64_t>(std::filesystem::file_size(shared("models/kjv-brown-6M/model.bin")) +
                                 std::filesystem::file_size(shared("models/kjv-brown-6M/tokenizer.bin"))));
  // Presets have no files.
  EXPECT_TRUE(load_plan_model("llama-3-8b", true).files.empty());
}

// `lowbit compare` prints the launch line of its best passing variant (stories260K: FP8 KV passes).
TEST(PlanShared, BestPassingVariantGetsALaunchLine) {
  using lowbit::testing_cli::run_cli;
  auto has = [](const std::string& s, const std::string& p) { return s.find(p) != std::string::npos; };
  const std::string out = ::testing::TempDir() + "lowbit_plan_compare_" + std::to_string(::getpid());
  const auto r =
      run_cli("compare -m " + std::string(LOWBIT_SHARED_DIR) +
              "/models/stories260K/stories260K.bin --preset kv-first --variants kv-e4m3 --chunks 2 "
              "--concurrency 1,2 -o " +
              out);
  std::filesystem::remove_all(out);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, "serve the best passing variant (kv-e4m3")) << r.out;
  EXPECT_TRUE(has(r.out, "--kv-cache-dtype fp8 --max-model-len")) << r.out;
  EXPECT_TRUE(has(r.out, "--max-num-seqs 2")) << r.out;
}

}  // namespace
}  // namespace lowbit::plan
