// The plan's numbers against what lowbit really stores and allocates:
//  - for every quantized weight configuration of the plan, `lowbit quantize` with that configuration's scheme
//    writes a checkpoint whose stored tensor bytes equal the planned weight bytes exactly (HF bf16 fixtures
//    of four architectures: untied llama, tied GQA llama3, qwen2 with QKV biases, gemma);
//  - planned KV bytes per token equal the engine's allocation for F32/F16/BF16 on the same configs.
// Integration: runs the lowbit binary (fixture, quantize).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include "kv/kv_cache.h"
#include "plan/plan.h"
#include "tests/common/run_cli.h"

namespace lowbit::plan {
namespace {
namespace fs = std::filesystem;

int sh(const std::string& args, std::string* out) {
  const auto r = lowbit::testing_cli::run_cli(args, /*merge_stderr=*/true);
  *out = r.out;
  return r.rc;
}

class PlanVsCheckpoint : public ::testing::TestWithParam<const char*> {};

TEST_P(PlanVsCheckpoint, PlannedWeightBytesEqualStoredBytes) {
  const std::string shape = GetParam();
  const fs::path dir =
      fs::temp_directory_path() / ("lowbit_plan_ck_" + shape + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string src = (dir / "src").string();
  std::string out;
  ASSERT_EQ(sh("fixture --shape " + shape + " --format hf --out " + src, &out), 0) << out;
  const PlanModel m = load_plan_model(src, false);
  int compared = 0;
  for (const auto& wc : weight_configs()) {
    if (wc.scheme.empty()) continue;  // the BF16 baseline is not a quantized checkpoint
    const std::string ck = (dir / wc.id).string();
    const WeightBytes planned = weight_bytes(m.config, wc.scheme);
    if (!planned.notes.empty()) {
      // The plan keeps matrices the scheme does not fit in 16 bits (and says so); the quantizer refuses such
      // a bare scheme and names the matrices instead of silently changing the recipe.
      EXPECT_EQ(sh("quantize -m " + src + " -r " + wc.scheme + " -o " + ck + " -q", &out), 2) << wc.id << out;
      EXPECT_NE(out.find("does not fit"), std::string::npos) << out;
      ++compared;
      continue;
    }
    ASSERT_EQ(sh("quantize -m " + src + " -r " + wc.scheme + " -o " + ck + " -q", &out), 0) << wc.id << "\n"
                                                                                            << out;
    const PlanModel q = load_plan_model(ck, false);
    ASSERT_TRUE(q.stored_bytes.has_value()) << wc.id;
    EXPECT_EQ(planned.total(), *q.stored_bytes)
        << shape << " " << wc.id << " (" << wc.scheme << "): planned elements " << planned.elements
        << " scales " << planned.scales << " zeros " << planned.zeros << " 16-bit " << planned.unquantized;
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(weight_configs().size()) - 1);
  for (KvDtype d : {KvDtype::F32, KvDtype::F16, KvDtype::BF16})
    EXPECT_EQ(kv_bytes_per_token(m.config, d), KvCache(m.config, 1, 1, d).bytes_per_token());
  if (!HasFailure()) fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PlanVsCheckpoint,
                         ::testing::Values("tiny-llama", "tiny-llama3", "tiny-qwen2", "tiny-gemma"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace lowbit::plan
