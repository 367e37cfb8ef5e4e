// `lowbit compare` end to end on the real stories260K model, with small settings: a baseline and two
// variants, one of which violates a threshold. Checks the three report files, the failed threshold with its
// deciding number, exit code 3, and that a rerun resumes (every finished step is reused, the numbers are
// identical).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/common/run_cli.h"

namespace {
namespace fs = std::filesystem;
using nlohmann::json;

const std::string kShared = LOWBIT_SHARED_DIR;
const std::string& kLowbit = lowbit::testing_cli::lowbit_exe();

using Result = lowbit::testing_cli::CliResult;
Result run(const std::string& args) {
  return lowbit::testing_cli::run_cli(args);
}

json read_json(const fs::path& p) {
  std::ifstream f(p);
  return json::parse(f);
}

// A variant's summary row (name, checks, pass, ppl, kld_mean, ...).
const json* find_variant(const json& report, const std::string& name) {
  for (const auto& v : report["summary"])
    if (v["name"] == name) return &v;
  return nullptr;
}

}  // namespace

TEST(CompareCli, ThresholdFailureReportsAndResume) {
  ASSERT_TRUE(fs::exists(kLowbit)) << kLowbit;
  const fs::path dir = fs::temp_directory_path() / ("lowbit_compare_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // The evaluation text is a copy, so that it can be changed in place below.
  const fs::path text_file = dir / "eval.txt";
  fs::copy_file(kShared + "/data/tinystories/tinystories_train_head.txt", text_file);
  const json exp = {{"model", kShared + "/models/stories260K/stories260K.bin"},
                    {"baseline", {{"name", "baseline"}, {"dtype", "f32"}, {"kv_cache", "f32"}}},
                    {"variants",
                     {{{"name", "kv-int8"}, {"dtype", "f32"}, {"kv_cache", "int8"}},
                      {{"name", "kv-e5m2"}, {"dtype", "f32"}, {"kv_cache", "e5m2"}},
                      // Formats per matrix chosen by lowbit quantize --budget: a point at a file size.
                      {{"name", "budget-170kB"},
                       {"dtype", "f32"},
                       {"kv_cache", "f32"},
                       {"recipe", "W4A16,algo=gptq,samples=8,length=64"},
                       {"budget", "170kB"}}}},
                    {"calib", {{"text", kShared + "/data/tinystories/tinystories_train_head.txt"}}},
                    {"eval", {{"text", text_file.string()}, {"ctx", 128}, {"chunks", 2}}},
                    {"prompts", {"Once upon a time"}},
                    {"generation", {{"n", 8}}},
                    {"bench", {{"prompt", 16}, {"gen", 8}, {"repetitions", 1}}},
                    {"throughput", {{"concurrency", {1, 2}}, {"prompt", 8}, {"gen", 4}}},
                    // E5M2 keys on a head_dim-8 model cost far more than 2 % PPL; INT8 stays within it.
                    {"thresholds", {{"max_dppl_pct", 2.0}, {"no_nan", true}}}};
  const fs::path ef = dir / "experiment.json";
  std::ofstream(ef) << exp.dump(2);
  const fs::path out = dir / "report";

  Result r = run("compare -e " + ef.string() + " -o " + out.string() + " -t 1 --json");
  ASSERT_EQ(r.rc, 3) << r.out;  // a variant failed a threshold
  for (const char* f : {"report.md", "report.json", "report.html"}) EXPECT_TRUE(fs::exists(out / f)) << f;
  const json rep = read_json(out / "report.json");
  const json* i8 = find_variant(rep, "kv-int8");
  const json* e5 = find_variant(rep, "kv-e5m2");
  ASSERT_TRUE(i8 && e5) << rep["summary"].dump().substr(0, 2000);
  EXPECT_TRUE((*i8)["pass"].get<bool>()) << i8->dump(1);
  EXPECT_FALSE((*e5)["pass"].get<bool>()) << e5->dump(1);
  // The failing check names the threshold and the number that decided it.
  bool found = false;
  for (const auto& c : (*e5)["checks"])
    if (c["name"] == "dppl_pct" && !c["pass"].get<bool>()) {
      found = true;
      EXPECT_GT(c["value"].get<double>(), 2.0) << c.dump();
    }
  EXPECT_TRUE(found) << e5->dump(1);
  // Whole-file accounting: the variants run the source file, so each counts its bytes (model + tokenizer).
  const json* base = find_variant(rep, "baseline");
  ASSERT_TRUE(base);
  const double file_bytes =
      static_cast<double>(fs::file_size(kShared + "/models/stories260K/stories260K.bin") +
                          fs::file_size(kShared + "/models/stories260K/tok512.bin"));
  for (const json* v : {base, i8, e5}) {
    ASSERT_TRUE((*v)["file_bytes"].is_number()) << v->dump(1).substr(0, 1000);
    EXPECT_EQ((*v)["file_bytes"].get<double>(), file_bytes);
    EXPECT_NEAR((*v)["file_bpw"].get<double>(), 8 * file_bytes / 260032, 1e-9);
  }
  const json* bud = find_variant(rep, "budget-170kB");
  ASSERT_TRUE(bud);
  ASSERT_TRUE((*bud)["file_bytes"].is_number()) << bud->dump(1).substr(0, 1000);
  EXPECT_LE((*bud)["file_bytes"].get<double>(), 170000.0);
  EXPECT_GT((*bud)["file_bytes"].get<double>(), 150000.0);
  std::ifstream md(out / "report.md");
  std::string text((std::istreambuf_iterator<char>(md)), {});
  EXPECT_NE(text.find("FAIL"), std::string::npos);

  // Resume: a second run recomputes nothing and reproduces the quality numbers exactly.
  Result r2 = run("compare -e " + ef.string() + " -o " + out.string() + " -t 1 --json");
  ASSERT_EQ(r2.rc, 3) << r2.out;
  const json rep2 = read_json(out / "report.json");
  const json* e5b = find_variant(rep2, "kv-e5m2");
  ASSERT_TRUE(e5b);
  EXPECT_EQ((*e5)["ppl"].dump(), (*e5b)["ppl"].dump());
  EXPECT_EQ((*e5)["kld_mean"].dump(), (*e5b)["kld_mean"].dump());
  EXPECT_TRUE(fs::exists(out / "results" / "kv-e5m2" / "quality.json"));
  std::string recomputed;
  for (const auto& v : rep2["variants"])
    for (const auto& [name, s] : v["steps"].items())
      if (!s.value("reused", false)) recomputed += v["name"].get<std::string>() + "/" + name + " ";
  EXPECT_EQ(recomputed, "") << "steps recomputed on resume";

  // The text replaced in place (same path, same argv): every step that reads it, and every variant scored
  // against the recomputed baseline, runs again; the report never shows the old numbers beside the new hash.
  {
    std::ifstream in(text_file);
    std::string t((std::istreambuf_iterator<char>(in)), {});
    in.close();
    std::ofstream(text_file, std::ios::trunc) << t.substr(t.size() / 2);
  }
  Result r3 = run("compare -e " + ef.string() + " -o " + out.string() + " -t 1 --json");
  ASSERT_EQ(r3.rc, 3) << r3.out;
  const json rep3 = read_json(out / "report.json");
  for (const auto& v : rep3["variants"])
    for (const char* name : {"quality", "batch"}) {
      ASSERT_TRUE(v["steps"].contains(name)) << v["name"] << " " << name;
      EXPECT_FALSE(v["steps"][name].value("reused", true))
          << v["name"] << " " << name << " reused after the text changed";
    }
  const json* base2 = find_variant(rep2, "baseline");
  const json* base3 = find_variant(rep3, "baseline");
  ASSERT_TRUE(base2 && base3);
  EXPECT_NE((*base2)["ppl"].dump(), (*base3)["ppl"].dump()) << "same PPL on a different text";
  EXPECT_NE(rep2["manifest"]["eval_text_sha256"], rep3["manifest"]["eval_text_sha256"]);
  if (!HasFailure()) fs::remove_all(dir);
}

// A budget is a file size for an offline recipe: without a recipe, online, or not a size, the experiment is
// refused before anything runs.
TEST(CompareCli, BudgetVariantsNeedAnOfflineRecipeAndASize) {
  const fs::path dir = fs::temp_directory_path() / ("lowbit_compare_budget_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::vector<std::pair<json, std::string>> bad = {
      {{{"name", "b"}, {"budget", "1MB"}}, "recipe"},
      {{{"name", "b"}, {"recipe", "W4A16"}, {"online", true}, {"budget", "1MB"}}, "online"},
      {{{"name", "b"}, {"recipe", "W4A16"}, {"budget", "12XB"}}, "invalid size"}};
  for (const auto& [variant, why] : bad) {
    const json exp = {{"model", kShared + "/models/stories260K/stories260K.bin"}, {"variants", {variant}}};
    const fs::path ef = dir / "experiment.json";
    std::ofstream(ef) << exp.dump(2);
    const auto r =
        lowbit::testing_cli::run_cli("compare -e " + ef.string() + " -o " + (dir / "out").string(), true);
    EXPECT_NE(r.rc, 0) << variant.dump();
    EXPECT_NE(r.out.find(why), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(dir / "out" / "results")) << "nothing may run for a refused experiment";
  }
  fs::remove_all(dir);
}
