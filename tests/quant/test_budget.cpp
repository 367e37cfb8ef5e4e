// Budgeted mixed precision (quant/budget.h): the knapsack against brute force, byte sizes, and the allocator
// end to end on stories260K (file bytes within the budget, reproducible sensitivities, clear errors).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "core/error.h"
#include "model/gguf_model_export.h"
#include "quant/budget.h"
#include "quant/calibration.h"
#include "quant/checkpoint_writer.h"
#include "quant/gptq.h"
#include "quant/inspect.h"
#include "quant/quantizer.h"
#include "tests/common/run_cli.h"
#include "tests/quant/quant_test_util.h"

namespace fs = std::filesystem;

namespace lowbit::quant {
namespace {

const std::string kShared = LOWBIT_SHARED_DIR;
const std::string kStories = kShared + "/models/stories260K/stories260K.bin";
const std::string kTinyText = kShared + "/data/tinystories/tinystories_train_head.txt";

double brute_force(const std::vector<KnapsackItem>& items, int64_t cap) {
  double best = std::numeric_limits<double>::infinity();
  std::vector<size_t> k(items.size(), 0);
  while (true) {
    int64_t b = 0;
    double l = 0;
    for (size_t i = 0; i < items.size(); ++i) b += items[i].bytes[k[i]], l += items[i].loss[k[i]];
    if (b <= cap) best = std::min(best, l);
    size_t i = 0;
    while (i < items.size() && ++k[i] == items[i].bytes.size()) k[i++] = 0;
    if (i == items.size()) break;
  }
  return best;
}

TEST(Knapsack, MatchesBruteForceAndRespectsTheCapacity) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 6);
    std::vector<KnapsackItem> items(static_cast<size_t>(n));
    int64_t lo = 0, hi = 0;
    for (auto& it : items) {
      const int k = 1 + static_cast<int>(rng() % 4);
      for (int j = 0; j < k; ++j) {
        it.bytes.push_back(1 + static_cast<int64_t>(rng() % 1000));
        it.loss.push_back(static_cast<double>(rng() % 10000) / 100.0);
      }
      lo += *std::min_element(it.bytes.begin(), it.bytes.end());
      hi += *std::max_element(it.bytes.begin(), it.bytes.end());
    }
    const int64_t cap = lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
    const double opt = brute_force(items, cap);
    const KnapsackResult exact = solve_knapsack(items, cap);
    ASSERT_TRUE(exact.feasible);
    EXPECT_EQ(exact.step, 1);
    EXPECT_LE(exact.bytes, cap);
    EXPECT_NEAR(exact.loss, opt, 1e-9) << "trial " << trial;
    EXPECT_LE(exact.lower_bound, opt + 1e-9);
    // Coarse steps: options rounded up, so the choice still fits; never better than the optimum.
    const KnapsackResult coarse = solve_knapsack(items, cap, 16);
    if (coarse.feasible) {
      EXPECT_GT(coarse.step, 1);
      EXPECT_LE(coarse.bytes, cap);
      EXPECT_GE(coarse.loss, opt - 1e-9);
      EXPECT_LE(coarse.lower_bound, opt + 1e-9);
    }
    EXPECT_FALSE(solve_knapsack(items, lo - 1).feasible);
  }
}

struct BudgetRun {
  Allocation alloc;
  std::string dir;
  int64_t model_bytes = 0;
  double measured_kld = -1;  // the quantized model's KL on the sensitivity windows (when `out` is given)
};

// A recipe calibrated on 8 windows of 64 TinyStories tokens (the allocator tests' setting).
Recipe stories_recipe(const std::string& recipe) {
  Recipe r = parse_recipe_arg(recipe);
  r.calib.file = kTinyText;
  r.calib.samples = 8;
  r.calib.length = 64;
  return r;
}

BudgetRun budget_run(const std::string& recipe, double bpw, const std::string& out,
                     const std::string& sensitivity = "auto") {
  auto m = load_model(kStories);
  Recipe r = stories_recipe(recipe);
  auto calib = load_recipe_calibration(*m, r, nullptr);
  KldProbe probe(*m, calib->seqs);
  BudgetSpec spec;
  spec.bpw = bpw;
  spec.sensitivity = sensitivity;
  BudgetRun run;
  run.alloc = allocate_budget(*m, r, *calib, probe, spec);
  if (out.empty()) return run;
  QuantizeOptions qo;
  qo.calib = &*calib;
  qo.progress = false;
  QuantReport rep = quantize_model(*m, run.alloc.apply(r), qo);
  run.measured_kld = probe.kld_from(-1);
  rep.budget = run.alloc.to_json();
  WriteOptions wo;
  wo.force = true;
  wo.max_model_bytes = run.alloc.budget;
  auto res = write_quantized_checkpoint(*m, rep, out, wo);
  run.dir = res.dir;
  run.model_bytes = res.model_bytes;
  return run;
}

TEST(Budget, Stories260kCheckpointFitsItsBudgetAndReloads) {
  ASSERT_TRUE(fs::exists(kStories)) << "LOWBIT_SHARED_DIR is incomplete";
  const std::string dir = testing::temp_path("budget_ck");
  BudgetRun run = budget_run("W4A16,group=32", 5.0, dir);
  const Allocation& a = run.alloc;
  ASSERT_GT(a.budget, 0);
  EXPECT_LE(run.model_bytes, a.budget) << "model files over the budget";
  EXPECT_EQ(checkpoint_model_bytes(dir), run.model_bytes);
  EXPECT_LE(run.model_bytes, a.predicted_bytes) << "the byte estimate must bound the written files";
  EXPECT_GT(run.model_bytes, a.budget * 9 / 10) << "the allocation should use most of the budget";
  EXPECT_LE(a.lower_bound_kld, a.predicted_kld + 1e-12);
  // Every unit has 'keep' plus the candidates that fit; the embedding is allocated, not ignored by default.
  bool embed = false;
  std::set<std::string> chosen;
  for (const auto& u : a.units) {
    ASSERT_GE(u.options.size(), 2u) << u.name;
    EXPECT_EQ(u.options[0].scheme, "keep");
    EXPECT_EQ(u.options[0].kld, 0.0);
    for (size_t k = 1; k < u.options.size(); ++k) EXPECT_GT(u.options[k].kld, 0.0) << u.name;
    embed |= u.name.rfind("tok_embed", 0) == 0;
    chosen.insert(u.options[static_cast<size_t>(u.chosen)].scheme);
  }
  EXPECT_TRUE(embed);
  EXPECT_GE(chosen.size(), 2u) << "a mixed allocation was expected at 5 bits per parameter";
  auto q = load_model(dir);
  ASSERT_TRUE(q->tokenizer);
  // inspect counts the same bytes (every file but the manifest) over the same parameters as the allocator.
  const nlohmann::json ins = inspect_checkpoint(dir);
  EXPECT_EQ(ins["whole_file"]["bytes"].get<int64_t>(), run.model_bytes);
  EXPECT_EQ(ins["whole_file"]["parameters"].get<int64_t>(), a.parameters);
  const nlohmann::json src = inspect_checkpoint(kStories);
  EXPECT_EQ(src["whole_file"]["parameters"].get<int64_t>(), a.parameters);
  EXPECT_EQ(src["whole_file"]["bytes"].get<int64_t>(),
            static_cast<int64_t>(fs::file_size(kStories) +
                                 fs::file_size(kShared + "/models/stories260K/tok512.bin")));
  const std::string manifest = dir + "/lowbit_manifest.json";
  ASSERT_TRUE(fs::exists(manifest));
  fs::remove_all(dir);
}

TEST(Budget, SensitivitiesAreReproducibleAndAllocationsMonotone) {
  BudgetRun a = budget_run("W4A16,group=32", 5.0, "");
  BudgetRun b = budget_run("W4A16,group=32", 5.0, "");
  ASSERT_EQ(a.alloc.units.size(), b.alloc.units.size());
  for (size_t i = 0; i < a.alloc.units.size(); ++i)
    for (size_t k = 0; k < a.alloc.units[i].options.size(); ++k)
      EXPECT_EQ(a.alloc.units[i].options[k].kld, b.alloc.units[i].options[k].kld) << a.alloc.units[i].name;
  BudgetRun bigger = budget_run("W4A16,group=32", 6.5, "");
  EXPECT_LE(bigger.alloc.predicted_kld, a.alloc.predicted_kld) << "more bytes cannot predict more loss";
}

// Under GPTQ each option's KL is measured with the matrix quantized by GPTQ on the float model's inputs to
// it: a layer matrix on its layer's Gram matrix, lm_head (with a tied embedding) on the classifier's input.
// Reproduced here for one matrix of each kind; the checkpoint then scores close to the sum.
TEST(Budget, GptqSensitivitiesAreGptqsLosses) {
  auto m = load_model(kStories);
  Recipe r = stories_recipe("W4A16,group=32,algo=gptq");
  auto calib = load_recipe_calibration(*m, r, nullptr);
  KldProbe probe(*m, calib->seqs);
  BudgetSpec spec;
  spec.bpw = 5.0;
  const Allocation a = allocate_budget(*m, r, *calib, probe, spec);
  EXPECT_EQ(a.sens_algorithm, "gptq");
  EXPECT_EQ(a.to_json()["sensitivity_algorithm"], "gptq");
  std::map<std::string, WeightMatrix*> mats;
  for (auto& [n, w] : m->weights.named_matrices()) mats[n] = w;
  const SiteStats head = head_input_stats(*m, *calib, true);
  int checked = 0;
  for (const auto& u : a.units) {
    const bool is_head = u.name == "tok_embed+lm_head" || u.name == "lm_head";
    if (u.name != "layers.2.w_down" && u.name != "layers.1.wk" && !is_head) continue;
    const int layer = is_head ? static_cast<int>(m->config.n_layers) : u.name[7] - '0';
    const Eigen::MatrixXf gram =
        is_head ? head.gram
                : collect_stats(*m, *calib, layer, layer, true)[0]
                      .at(u.name.find("w_down") != std::string::npos ? ActSite::DownIn : ActSite::AttnIn)
                      .gram;
    const WeightMatrix saved = *mats.at(u.members[0]);
    const std::vector<float> w = weight_to_f32(saved);
    for (size_t k = 1; k < u.options.size(); ++k) {
      QuantizedMatrix q = gptq_quantize(w.data(), u.rows, u.cols, gram, parse_scheme(u.options[k].scheme),
                                        GptqOptions{r.gptq_block, r.gptq_damp, r.gptq_act_order, 0.0f});
      const WeightMatrix qw = make_quant_weight(std::make_shared<QuantizedMatrix>(std::move(q)));
      for (const auto& n : u.members) *mats.at(n) = qw;
      const double kld = probe.kld_from(is_head ? -1 : layer);
      EXPECT_NEAR(u.options[k].kld, kld, 1e-6 * kld) << u.name << " " << u.options[k].scheme;
      ++checked;
    }
    for (const auto& n : u.members) *mats.at(n) = saved;
  }
  EXPECT_GE(checked, 3 * 4) << "three units with their candidates";
  QuantizeOptions qo;
  qo.calib = &*calib;
  qo.progress = false;
  quantize_model(*m, a.apply(r), qo);
  const double measured = probe.kld_from(-1);
  std::printf("predicted %.5f measured %.5f\n", a.predicted_kld, measured);
  EXPECT_LT(std::fabs(std::log(a.predicted_kld / measured)), std::log(2.0))
      << "predicted " << a.predicted_kld << " measured " << measured;
}

// The cheap estimate is validated against the measurement it replaces: its one measured option per matrix is
// the measured value, and over all options it ranks like the measured KLDs.
TEST(Budget, ProxySensitivitiesTrackMeasuredOnes) {
  BudgetRun kld = budget_run("W4A16,group=32,algo=imatrix", 5.0, "", "kld");
  BudgetRun px = budget_run("W4A16,group=32,algo=imatrix", 5.0, "", "proxy");
  EXPECT_EQ(px.alloc.sensitivity, "proxy");
  EXPECT_EQ(budget_run("W4A16,group=32", 5.0, "").alloc.sensitivity, "kld") << "auto below 100 M parameters";
  ASSERT_EQ(kld.alloc.units.size(), px.alloc.units.size());
  std::vector<double> a, b;
  int exact = 0;
  for (size_t i = 0; i < kld.alloc.units.size(); ++i)
    for (size_t k = 1; k < kld.alloc.units[i].options.size(); ++k) {
      const double m = kld.alloc.units[i].options[k].kld, p = px.alloc.units[i].options[k].kld;
      exact += m == p;
      a.push_back(std::log(m));
      b.push_back(std::log(std::max(p, 1e-12)));
    }
  EXPECT_EQ(exact, static_cast<int>(kld.alloc.units.size())) << "one measured option per matrix";
  double ma = 0, mb = 0;
  for (size_t i = 0; i < a.size(); ++i) ma += a[i], mb += b[i];
  ma /= a.size(), mb /= b.size();
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i)
    sab += (a[i] - ma) * (b[i] - mb), saa += (a[i] - ma) * (a[i] - ma), sbb += (b[i] - mb) * (b[i] - mb);
  const double corr = sab / std::sqrt(saa * sbb);
  EXPECT_GT(corr, 0.9) << "log-KLD correlation of proxy and measured sensitivities";
  EXPECT_LE(px.alloc.predicted_bytes, px.alloc.budget);
  std::printf("proxy vs measured log-KLD correlation %.3f over %zu options\n", corr, a.size());
}

// A recipe override pins its matrix's format; on a tied model the classifier follows the pinned embedding
// (one storage, counted once), and the file still fits.
TEST(Budget, OverridesPinTheirMatricesAndTheTiedHeadFollows) {
  const std::string dir = testing::temp_path("budget_pin");
  const std::string recipe = R"({"preset": "W4A16", "scheme": "int4:g32:sym:f16", "algorithm": "gptq",
      "overrides": [{"pattern": "tok_embed", "scheme": "int8:channel:sym:f16"},
                    {"pattern": "*.w_down", "scheme": "int4:g32:sym:f16"}]})";
  const std::string rf = dir + ".json";
  { std::ofstream(rf) << recipe; }
  BudgetRun run = budget_run(rf, 7.0, dir);
  const Allocation& a = run.alloc;
  EXPECT_LE(run.model_bytes, a.budget);
  for (const auto& u : a.units) {
    EXPECT_EQ(u.name.find("w_down"), std::string::npos) << "pinned matrices are not allocated";
    EXPECT_EQ(u.name.find("tok_embed"), std::string::npos);
  }
  auto q = load_model(dir);
  ASSERT_EQ(q->weights.tok_embed.kind, WeightKind::Quant);
  EXPECT_EQ(to_string(q->weights.tok_embed.q->scheme), "int8:channel:sym:f16");
  EXPECT_TRUE(q->weights.tied()) << "the tied classifier shares the pinned embedding";
  EXPECT_EQ(to_string(q->weights.layers[0].w_down.q->scheme), "int4:g32:sym:f16");
  fs::remove_all(dir);
  fs::remove(rf);
}

TEST(Budget, TooSmallABudgetSaysHowSmallItCanBe) {
  try {
    budget_run("W4A16,group=32", 0.5, "");
    FAIL() << "expected a UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("smallest checkpoint"), std::string::npos) << e.what();
  }
}

TEST(Budget, CliRefusesBudgetsWithoutWhatTheyNeed) {
  using testing_cli::run_cli;
  const std::string out = testing::temp_path("budget_cli");
  auto r = run_cli("quantize -m " + kStories + " -r W4A16 --budget 150kB -o " + out, true);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("--calib"), std::string::npos) << r.out;
  r = run_cli("quantize -m " + kStories + " -r W4A16 --candidates int4:g32 -o " + out, true);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("--budget"), std::string::npos) << r.out;
  r = run_cli("quantize -m " + kStories + " -r W4A16 --sensitivity proxy -o " + out, true);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("--budget"), std::string::npos) << r.out;
  r = run_cli("quantize -m " + kStories + " -r W4A16 --bpw -2 -c " + kTinyText + " -o " + out, true);
  EXPECT_NE(r.rc, 0);
  r = run_cli("quantize -m " + kStories + " -r W4A16 --budget 12XB -c " + kTinyText + " -o " + out, true);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("invalid size"), std::string::npos) << r.out;
  r = run_cli("quantize -m " + kStories + " -r W4A16,rotate=quarot --bpw 5 -c " + kTinyText + " -o " + out,
              true);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("rotate"), std::string::npos) << r.out;
  // A candidate GPTQ cannot produce is refused before any sensitivity is measured (a fraction of a second).
  r = run_cli("quantize -m " + kStories + " -r W4A16,algo=gptq --bpw 6 --candidates q4_k,q8_0 -c " +
                  kTinyText + " -o " + out,
              true, 20);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("int8:g32"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out)) << "a refused run must not leave an output";
}

// --format gguf: the budget is the GGUF file's size, predicted exactly (header, vectors, each matrix padded
// in its GGUF type); only candidates the file holds unchanged are offered. stories260K (llama2.c, 172-column
// down_proj that no GGUF block divides) and tinystories-656K (tokenizer.json, byte tokens appended to the
// tied embedding, GPTQ).
TEST(Budget, GgufFileIsExactlyThePredictedBytes) {
  using testing_cli::run_cli;
  struct Case {
    std::string model, recipe;
    int64_t budget;
  };
  // 8 windows of 64 calibration tokens: the test checks bytes, not the quality of the allocation.
  const std::vector<Case> cases = {
      {kStories, "W4A16,samples=8,length=64", 400000},
      {kShared + "/models/tinystories-656K", "W4A16,algo=gptq,samples=8,length=64", 600000}};
  for (const Case& c : cases) {
    const std::string out = testing::temp_path("budget_gguf") + ".gguf";
    auto r = run_cli("quantize -m " + c.model + " -r " + c.recipe + " --format gguf --budget " +
                     std::to_string(c.budget) + " -c " + kTinyText + " -o " + out + " --json --force");
    ASSERT_EQ(r.rc, 0) << c.model;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    const nlohmann::json& b = j["budget"];
    EXPECT_EQ(b["counts"], "gguf");
    const int64_t file = static_cast<int64_t>(fs::file_size(out));
    EXPECT_EQ(j["output"]["exported"]["bytes"].get<int64_t>(), file);
    EXPECT_EQ(b["predicted_bytes"].get<int64_t>(), file) << c.model << ": the prediction is exact";
    EXPECT_LE(file, c.budget);
    EXPECT_GT(file, c.budget * 97 / 100) << c.model << ": the allocation should use the budget";
    std::set<std::string> chosen;
    for (const auto& u : b["units"]) {
      for (const auto& o : u["options"]) {
        const std::string sch = o["scheme"];
        if (sch == "keep") continue;
        EXPECT_GE(gguf_exact_type(parse_scheme(sch), u["shape"][0], u["shape"][1]), 0)
            << u["unit"] << " offered " << sch << ", which the GGUF file cannot hold unchanged";
      }
      chosen.insert(u["chosen"].get<std::string>());
    }
    EXPECT_GE(chosen.size(), 2u) << c.model << ": a mixed allocation was expected";
    fs::remove(out);
  }
  // Too small a budget: an error and no file.
  const std::string out = testing::temp_path("budget_gguf_small") + ".gguf";
  auto r = run_cli(
      "quantize -m " + kStories + " -r W4A16 --format gguf --budget 100000 -c " + kTinyText + " -o " + out,
      true);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("below the smallest"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));
}

// gguf_export_sizes against the exporter itself: every matrix written as Q8_0 (a file with a quantization
// version, so the prediction holds with nothing left over).
TEST(Budget, GgufExportSizesMatchTheWrittenFile) {
  auto m = load_model(kShared + "/models/tinystories-656K");
  GgufModelExportOptions o;
  o.dense = "q8_0";
  o.name = "sizes";
  const GgufExportSizes z = gguf_export_sizes(*m, o);
  int64_t predicted = z.fixed_bytes;
  for (const auto& [name, mat] : z.matrices) {
    const int64_t b = z.matrix_bytes(name, 8);
    ASSERT_GT(b, 0) << name;
    EXPECT_EQ(b % 32, 0);
    predicted += b;
  }
  EXPECT_EQ(z.matrices.count("lm_head"), 0u) << "tied: token_embd serves the output";
  EXPECT_GT(z.matrices.at("tok_embed").rows, m->config.vocab_size) << "byte tokens appended";
  EXPECT_EQ(z.matrix_bytes("no_such_matrix", 8), -1);
  const std::string out = testing::temp_path("gguf_sizes") + ".gguf";
  const GgufModelExportReport rep = export_gguf_model(*m, o, out);
  EXPECT_EQ(rep.file_bytes, predicted);
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(out)), predicted);
  fs::remove(out);
}

}  // namespace
}  // namespace lowbit::quant
