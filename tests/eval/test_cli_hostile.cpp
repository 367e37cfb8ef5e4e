// Bad flags and inputs given to the CLI the way a careless or hostile user would (issue "Reliability"): each
// gets a clear error and a usage exit code (2), or correct behaviour, never a crash, a silent default or a
// half-written output. Every case reproduces a finding that crashed or misbehaved before the fix.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/common/run_cli.h"

namespace {
namespace fs = std::filesystem;
using lowbit::testing_cli::run_cli;

const std::string kShared = LOWBIT_SHARED_DIR;
const std::string kModel = kShared + "/models/stories260K/stories260K.bin";
const std::string kText = kShared + "/data/tinystories/tinystories_train_head.txt";

bool has(const std::string& out, const std::string& what) {
  return out.find(what) != std::string::npos;
}

fs::path scratch(const std::string& name) {
  const fs::path d =
      fs::temp_directory_path() / ("lowbit_hostile_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// --ctx of 2^61 made the plain KV cache's size product wrap, allocate 0 bytes and corrupt the heap (exit
// 134).
TEST(HostileCli, ContextPastTheModelIsRefused) {
  const std::string run = "run -m " + kModel + " -p Once -n 4 ";
  for (const char* ctx : {"2305843009213693952", "100000", "513"}) {
    const auto r = run_cli(run + "--ctx " + ctx, true);
    EXPECT_EQ(r.rc, 2) << ctx << ": " << r.out;
    EXPECT_TRUE(has(r.out, "exceeds the model's context of 512 tokens")) << r.out;
  }
  const auto neg = run_cli(run + "--ctx -5", true);
  EXPECT_EQ(neg.rc, 2) << neg.out;
  EXPECT_TRUE(has(neg.out, "--ctx: must be >= 0")) << neg.out;
  EXPECT_EQ(run_cli(run + "--ctx 512").rc, 0);
  // An explicit RoPE-scaling flag extends the context (and says so).
  const auto ext = run_cli(run + "--ctx 1000 --rope-scaling linear:2 --json");
  ASSERT_EQ(ext.rc, 0) << ext.out;
  const auto j = nlohmann::json::parse(ext.out);
  EXPECT_EQ(j["kv_cache"]["capacity_tokens"].get<double>(), 1000) << j["kv_cache"];
  EXPECT_EQ(j["config"]["max_position_embeddings"].get<double>(), 1024) << j["config"];
  EXPECT_EQ(j["config"]["rope_scaling"], "linear");
  for (const char* bad : {"linear:0.5", "linear:", "yarn:2", "linear:nan", "linear:1e9"})
    EXPECT_EQ(run_cli(run + "--rope-scaling " + bad).rc, 2) << bad;
  EXPECT_EQ(run_cli("bench -m " + kModel + " -p 600 -n 0 -r 1").rc, 2);         // past the 512-token context
  EXPECT_EQ(run_cli("bench -m " + kModel + " -p 8 -n 0 -r 1000000000").rc, 2);  // ran for hours
  EXPECT_EQ(run_cli("eval batch -m " + kModel + " --text " + kText + " --len -1").rc, 2);
}

// Invalid UTF-8 in a prompt or a path used to abort every --json output after the work was done.
TEST(HostileCli, JsonOutputSurvivesInvalidUtf8) {
  const auto r = run_cli("run --json -m " + kModel + " -n 4 -p \"$(printf 'Once \\377\\376 upon')\"");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt"].get<std::string>(), "Once \xEF\xBF\xBD\xEF\xBF\xBD upon");  // U+FFFD per invalid byte
  EXPECT_EQ(j["generated_tokens"].get<int>(), 4);
  const fs::path d = scratch("utf8");
  const fs::path link = d / "dir\xff";
  fs::create_directory_symlink(fs::path(kModel).parent_path(), link);
  const auto p =
      run_cli("run --json -n 2 -p Once -m '" + (link / fs::path(kModel).filename()).string() + "'");
  ASSERT_EQ(p.rc, 0) << p.out;
  EXPECT_NO_THROW((void)nlohmann::json::parse(p.out));
  fs::remove_all(d);
}

// --threads 0 / -3 meant "all cores" and 3000 ran without a word.
TEST(HostileCli, ThreadCountsAreValidated) {
  for (const char* t : {"0", "-3", "3000", "two"}) {
    const auto r = run_cli("run -m " + kModel + " -p Once -n 2 --threads " + t, true);
    EXPECT_EQ(r.rc, 2) << t << ": " << r.out;
    EXPECT_TRUE(has(r.out, "--threads")) << r.out;
  }
  const int cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  const auto over =
      run_cli("run -m " + kModel + " -p Once -n 2 --threads " + std::to_string(cores + 1), true);
  EXPECT_EQ(over.rc, 0) << over.out;
  EXPECT_TRUE(has(over.out, "warning: --threads")) << over.out;
}

// Recipe numbers: group=0 / nan / 32.5 / 1e12 were accepted and ignored (1e12: an undefined float -> int
// cast).
TEST(HostileCli, RecipeNumbersAreValidated) {
  for (const char* v : {"group=0", "group=nan", "group=32.5", "group=1e12", "group=-32", "samples=0.5",
                        "seed=-1", "act_order=2", "damp=inf"}) {
    const auto r = run_cli("run -m " + kModel + " -p Once -n 2 --quantize 'int4:g32," + v + "'", true);
    EXPECT_EQ(r.rc, 2) << v << ": " << r.out;
    EXPECT_TRUE(has(r.out, "[quant] --recipe")) << v << ": " << r.out;
    EXPECT_FALSE(has(r.out, "group 128")) << v << ": " << r.out;
  }
  EXPECT_EQ(run_cli("run -m " + kModel + " -p Once -n 2 --quantize 'int4:g32,group=64'").rc, 0);
}

// A directory given as a text file was reported as an "empty" file.
TEST(HostileCli, DirectoryAsTextIsNamed) {
  const auto r = run_cli("eval ppl -m " + kModel + " --text " + kShared + "/data", true);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_TRUE(has(r.out, "is a directory")) << r.out;
  const std::string out = (scratch("dir_as_text") / "out").string();  // not /tmp/x: it may exist
  const auto c =
      run_cli("quantize -m " + kModel + " -r int4:g32,algo=gptq -c " + kShared + "/data -o " + out, true);
  EXPECT_EQ(c.rc, 2) << c.out;
  EXPECT_TRUE(has(c.out, "is a directory")) << c.out;
}

// quantize found an existing --out only when writing, after minutes of calibration: now it is refused
// before the model is read (the model path here does not exist, so a later check would name the model).
TEST(HostileCli, ExistingQuantizeOutputIsRefusedFirst) {
  const fs::path d = scratch("quantize_out");
  std::ofstream(d / "keep.txt") << "mine";
  const auto r =
      run_cli("quantize -m " + (d / "no_such_model.bin").string() + " -r W4A16 -o " + d.string(), true);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_TRUE(has(r.out, "exists; choose another --out or pass --force")) << r.out;
  EXPECT_TRUE(fs::exists(d / "keep.txt"));
  fs::remove_all(d);
}

// fixture --out created missing parents and deleted <out>.hf-tmp; now a missing parent is an error and
// nothing of the user's is touched.
TEST(HostileCli, FixtureNeverTouchesOtherPaths) {
  const fs::path d = scratch("fixture");
  const auto missing = run_cli("fixture --shape tiny-llama --out " + (d / "no/such/dir/m").string(), true);
  EXPECT_EQ(missing.rc, 2) << missing.out;
  EXPECT_TRUE(has(missing.out, "does not exist")) << missing.out;
  EXPECT_FALSE(fs::exists(d / "no"));
  fs::create_directories(d / "m.gguf.hf-tmp");
  std::ofstream(d / "m.gguf.hf-tmp" / "keep.txt") << "mine";
  const auto g = run_cli("fixture --shape tiny-llama --format gguf --out " + (d / "m.gguf").string(), true);
  EXPECT_EQ(g.rc, 0) << g.out;
  EXPECT_TRUE(fs::exists(d / "m.gguf"));
  EXPECT_TRUE(fs::exists(d / "m.gguf.hf-tmp" / "keep.txt"));
  for (const auto& e : fs::directory_iterator(d))  // no temporaries left behind
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  fs::remove_all(d);
}

}  // namespace
