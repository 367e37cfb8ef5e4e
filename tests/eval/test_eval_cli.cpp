// `lowbit eval` end to end: --json output, baseline round trip through the CLI, and the exit codes
// (0 ok, 1 bad input such as an empty text or a truncated baseline, 2 bad flags, 3 a failed health check).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/common/run_cli.h"

namespace {
const std::string kShared = LOWBIT_SHARED_DIR;
const std::string& kLowbit = lowbit::testing_cli::lowbit_exe();
const std::string kModel = kShared + "/models/stories260K/stories260K.bin";
const std::string kTok = kShared + "/models/stories260K/tok512.bin";
const std::string kText = kShared + "/data/tinystories/tinystories_train_head.txt";

using Result = lowbit::testing_cli::CliResult;

// Every eval run here is quiet: no progress bar.
Result run(const std::string& args) {
  return lowbit::testing_cli::run_cli(args + " --no-progress");
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("lowbit_cli_" + std::to_string(::getpid()) + "_" + name))
      .string();
}
}  // namespace

TEST(EvalCli, PplJsonAndKldAgainstOwnBaseline) {
  ASSERT_TRUE(std::filesystem::exists(kLowbit)) << kLowbit;
  const std::string base = temp_path("b.lbbase");
  Result r = run("eval ppl -m " + kModel + " --text " + kText +
                 " --method first-window --dtype f32 --json "
                 "--position-curve --buckets 4 --save-baseline " +
                 base);
  ASSERT_EQ(r.rc, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j["perplexity"]["ppl"].get<double>(), 4.34636, 4.34636e-3);
  EXPECT_EQ(j["tokens_scored"].get<int>(), 511);
  EXPECT_EQ(j["position_curve"]["tokens"].size(), 4u);
  EXPECT_EQ(j["baseline"]["topk"].get<int>(), 32);

  r = run("eval kld --baseline " + base + " -m " + kModel + " --dtype f32 --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  j = nlohmann::json::parse(r.out);
  EXPECT_LT(j["comparison"]["kld"]["max"].get<double>(), 1e-6);
  EXPECT_EQ(j["comparison"]["top1_agreement"]["value"].get<double>(), 1.0);

  r = run("eval kld --baseline " + base + " -m " + kModel + " --dtype f16 --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["comparison"]["kld"]["mean"].get<double>(), 0.0);
  EXPECT_LT(j["comparison"]["kld"]["mean"].get<double>(), 1e-3);

  // Truncated baseline: clear error, exit 1. Another ctx: refused, exit 1.
  {
    std::ifstream in(base, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(base, std::ios::binary | std::ios::trunc).write(bytes.data(), 1000);
  }
  EXPECT_EQ(run("eval kld --baseline " + base + " -m " + kModel).rc, 1);
  std::filesystem::remove(base);
}

TEST(EvalCli, ExitCodes) {
  const std::string empty = temp_path("empty.txt");
  { std::ofstream(empty).flush(); }
  EXPECT_EQ(run("eval ppl -m " + kModel + " --text " + empty).rc, 1);
  std::filesystem::remove(empty);
  EXPECT_EQ(run("eval ppl -m " + kModel + " --text " + kText + " --method sliding").rc, 2);
  EXPECT_EQ(run("eval ppl -m " + kModel + " --text " + kText + " --ctx 100000").rc, 2);

  // A checkpoint with one NaN weight in layer 0's wq: exit 3, with and without --check-layers.
  const std::string bad = temp_path("nan.bin");
  std::filesystem::copy_file(kModel, bad);
  std::filesystem::permissions(bad, std::filesystem::perms::owner_write, std::filesystem::perm_options::add);
  {
    std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
    const float nan = std::nanf("");
    f.seekp(28 + (512 * 64 + 5 * 64 + 10) * 4);  // header, embedding, attention norms, then wq[0][10]
    f.write(reinterpret_cast<const char*>(&nan), 4);
  }
  Result r =
      run("eval ppl -m " + bad + " --tokenizer " + kTok + " --text " + kText + " --chunks 1 --check-layers");
  EXPECT_EQ(r.rc, 3);
  EXPECT_EQ(run("eval ppl -m " + bad + " --tokenizer " + kTok + " --text " + kText + " --chunks 1").rc, 3);
  std::filesystem::remove(bad);
  EXPECT_EQ(run("eval batch -m " + kModel + " --text " + kText + " --seqs 2 --len 32").rc, 0);
}

// KV-cache specs reach eval: the cache's exact bytes per token are reported, eviction switches to
// decode-style steps, and a bad spec is a usage error (exit 2).
TEST(EvalCli, KvCacheSpecsAndEviction) {
  Result r =
      run("eval ppl -m " + kModel + " --text " + kText + " --ctx 64 --chunks 2 --kv-cache int8 --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  // stories260K: 5 layers x 4 kv heads x 8 dims; INT8 row = 32 codes + 4 F16 scales, for K and V.
  EXPECT_DOUBLE_EQ(j["kv"]["bytes_per_token_exact"].get<double>(), 5 * 2 * (32 + 4 * 2));
  EXPECT_EQ(j["kv"]["step"].get<int>(), 64);
  r = run("eval ppl -m " + kModel + " --text " + kText + " --ctx 64 --chunks 2 --kv-evict h2o:50% --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["kv"]["step"].get<int>(), 1);
  EXPECT_TRUE(std::isfinite(j["perplexity"]["ppl"].get<double>()));
  EXPECT_EQ(run("eval ppl -m " + kModel + " --text " + kText + " --kv-cache int5").rc, 2);
}

// `lowbit info --json` with the environment variable `name` set to `value` (unset when null) for that run.
static nlohmann::json info_json_with(const char* name, const char* value) {
  if (value) setenv(name, value, 1);
  const auto r = lowbit::testing_cli::run_cli("info --json");
  unsetenv(name);
  EXPECT_EQ(r.rc, 0);
  return nlohmann::json::parse(r.out);
}

// `lowbit info` names the kernel tier, and LOWBIT_ISA lowers it (avx512 = FP32 activations in every
// weight-only kernel, the A/B switch of docs/kernels.md).
TEST(InfoCli, KernelTierFollowsLowbitIsa) {
  auto tier = [](const char* isa) {
    return info_json_with("LOWBIT_ISA", isa).at("kernel_isa").get<std::string>();
  };
  const std::string best = tier(nullptr);
  EXPECT_TRUE(best == "generic" || best == "avx2" || best == "avx512" || best == "avx512bf16" ||
              best == "amx")
      << best;
  EXPECT_EQ(tier("generic"), "generic");
  if (best == "amx") {
    EXPECT_EQ(tier("avx512bf16"), "avx512bf16");
  }
  if (best == "amx" || best == "avx512bf16") {
    EXPECT_EQ(tier("avx512"), "avx512");
  }
  if (best == "amx" || best == "avx512bf16" || best == "avx512") {
    EXPECT_EQ(tier("avx2"), "avx2");
  }
  // A value that is not a tier is refused with a clear error instead of silently running the best tier.
  setenv("LOWBIT_ISA", "avx512bf", 1);
  const auto bad = lowbit::testing_cli::run_cli("info --json", true);
  unsetenv("LOWBIT_ISA");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.out.find("[core] LOWBIT_ISA=avx512bf is not an ISA tier"), std::string::npos) << bad.out;
}

// lowbit re-executes itself with glibc's malloc advising transparent huge pages (when the kernel's THP mode
// allows it), reports it in `info`, and LOWBIT_HUGEPAGES=0 turns it off.
TEST(InfoCli, HugePagesFollowLowbitHugepages) {
  const auto on = info_json_with("LOWBIT_HUGEPAGES", nullptr);
  const std::string mode = on.at("thp_mode").get<std::string>();
  EXPECT_EQ(on.at("malloc_huge_pages").get<bool>(), mode == "always" || mode == "madvise") << mode;
  EXPECT_FALSE(info_json_with("LOWBIT_HUGEPAGES", "0").at("malloc_huge_pages").get<bool>());
  // A value that is neither 0 nor 1 is refused with a clear error, not read as "on".
  setenv("LOWBIT_HUGEPAGES", "off", 1);
  const auto bad = lowbit::testing_cli::run_cli("info --json", true);
  unsetenv("LOWBIT_HUGEPAGES");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.out.find("[core] LOWBIT_HUGEPAGES=off is not 0 or 1"), std::string::npos) << bad.out;
}

// `lowbit info` names OpenBLAS's kernel set (calibration, GPTQ, AWQ), and OPENBLAS_CORETYPE chooses it.
TEST(InfoCli, BlasKernelsAreNamed) {
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  const std::string saved = env ? env : "";
  unsetenv("OPENBLAS_CORETYPE");
  const auto own = info_json_with("LOWBIT_ISA", nullptr);
  setenv("OPENBLAS_CORETYPE", "Haswell", 1);
  const auto chosen = info_json_with("LOWBIT_ISA", nullptr);
  if (env)
    setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
  else
    unsetenv("OPENBLAS_CORETYPE");
  EXPECT_FALSE(own.at("blas_core").get<std::string>().empty());
  EXPECT_EQ(own.at("blas_coretype_env").get<std::string>(), "");
  EXPECT_EQ(chosen.at("blas_core").get<std::string>(), "Haswell");
  EXPECT_EQ(chosen.at("blas_coretype_env").get<std::string>(), "Haswell");
}

// `lowbit bench --json`: each counted decode repetition is compared with the read bandwidth probed right
// after it (fraction_of_bound is the mean of those ratios), and a fixed --bw replaces the probe. Bad flags
// exit 2.
TEST(BenchCli, DecodeBoundPerRepetition) {
  const auto r = lowbit::testing_cli::run_cli("bench -m " + kModel + " -p 8 -n 4 -r 2 -t 1 --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["prefill"]["tokens_per_second"].get<double>(), 0.0);
  const auto& d = j["decode"];
  ASSERT_EQ(d["read_bandwidth_per_repetition"].size(), 2u);
  for (const auto& bw : d["read_bandwidth_per_repetition"]) EXPECT_GT(bw.get<double>(), 1e8);
  EXPECT_GT(d["fraction_of_bound"].get<double>(), 0.0);
  EXPECT_GE(d["fraction_of_bound_sd"].get<double>(), 0.0);
  EXPECT_GT(j["peak_rss_bytes"].get<double>(), 0.0);
  EXPECT_GE(j["huge_page_bytes"].get<double>(), 0.0);

  // --bw 10: every repetition's bound is 10 GB/s, so the fraction is tokens/s x bytes/token / 1e10.
  const auto f = lowbit::testing_cli::run_cli("bench -m " + kModel + " -p 0 -n 4 -r 2 -t 1 --bw 10 --json");
  ASSERT_EQ(f.rc, 0) << f.out;
  const auto k = nlohmann::json::parse(f.out)["decode"];
  for (const auto& bw : k["read_bandwidth_per_repetition"]) EXPECT_EQ(bw.get<double>(), 1e10);
  const double want = k["tokens_per_second"].get<double>() * k["bytes_per_token"].get<double>() / 1e10;
  EXPECT_NEAR(k["fraction_of_bound"].get<double>(), want, 1e-9 * want);

  // The bound divides by what a decode reads: a dense model reads all it holds (+ the KV cache); int4:g32
  // reads its codes and the decoded scale table, not the stored f16 cells as well.
  const auto dense = nlohmann::json::parse(f.out);
  EXPECT_GE(dense["decode"]["bytes_per_token"].get<double>(), dense["size_bytes"].get<double>());
  const auto q = lowbit::testing_cli::run_cli("bench -m " + kModel +
                                              " --quantize int4:g32 -p 0 -n 4 -r 1 -t 1 --bw 10 --json");
  ASSERT_EQ(q.rc, 0) << q.out;
  const auto qj = nlohmann::json::parse(q.out);
  EXPECT_LT(qj["decode"]["bytes_per_token"].get<double>(), qj["size_bytes"].get<double>());

  EXPECT_EQ(lowbit::testing_cli::run_cli("bench -m " + kModel + " -r 0").rc, 2);
  EXPECT_EQ(lowbit::testing_cli::run_cli("bench -n 4").rc, 2);  // no model
}

// `lowbit run` names the unfused kernel (rows dequantized, then multiplied) as a slow fallback, in --json and
// with a warning, and does not when every matrix has a fused kernel.
TEST(RunCli, ReportsUnfusedKernelsAsSlowFallback) {
  const std::string base = "run -m " + kModel + " -p Once -n 2 --seed 1";
  auto r = lowbit::testing_cli::run_cli(base + " --quantize int3:g48 --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  auto k = nlohmann::json::parse(r.out)["kernels"];
  const bool avx512 = k["by_kernel"].dump().find("avx512") != std::string::npos;
  EXPECT_TRUE(k["slow_fallback"].get<bool>());  // INT3 g48 (not a lane group) has no fused decode on any tier
  ASSERT_EQ(k["unfused"].size(), 1u) << k.dump();
  EXPECT_NE(k["unfused"].begin().key().find("int3:g48:sym:f16.deq."), std::string::npos);
  r = lowbit::testing_cli::run_cli(base + " --quantize int3:g48", true);
  EXPECT_NE(r.out.find("WARNING: 35 matrices run the unfused kernel"), std::string::npos) << r.out;
  if (avx512) {  // below the avx512 tier every quantized format is unfused
    r = lowbit::testing_cli::run_cli(base + " --quantize int4:g32 --json");
    ASSERT_EQ(r.rc, 0) << r.out;
    k = nlohmann::json::parse(r.out)["kernels"];
    EXPECT_FALSE(k["slow_fallback"].get<bool>()) << k.dump();
    EXPECT_TRUE(k["unfused"].empty());
  }
}

namespace {

// `lowbit convert` writes GGUF from 16/32-bit sources only: a quantized checkpoint, or a rotated one whose
// down_proj needs the online Hadamard transform llama.cpp does not run, is refused with the reason and no
// file.
TEST(ConvertCli, RefusesQuantizedAndRotatedCheckpoints) {
  const std::string src = kShared + "/models/tinystories-656K";
  struct Case {
    const char *recipe, *name, *reason;
  };
  for (const Case& c : {Case{"W8A16", "q", "quantized checkpoint"},
                        Case{"W8A16,rotate=quarot", "rot", "rotated checkpoint"}}) {
    const std::string dir = temp_path(std::string("convert_src_") + c.name);
    const std::string out = dir + ".gguf";
    std::filesystem::remove_all(dir);
    std::filesystem::remove(out);
    ASSERT_EQ(lowbit::testing_cli::run_cli("quantize -m " + src + " -r " + c.recipe + " -o " + dir, true).rc,
              0);
    const Result r = lowbit::testing_cli::run_cli("convert -m " + dir + " -o " + out, true);
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find(c.reason), std::string::npos) << r.out;
    EXPECT_FALSE(std::filesystem::exists(out));
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
