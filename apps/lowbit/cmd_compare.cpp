// `lowbit compare`: the controlled experiment. A 16-bit baseline and variants that change one variable each,
// measured on the same inputs; report.md / report.json / report.html with pass/fail and rollback commands.
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/lowbit/cli_common.h"
#include "apps/lowbit/command.h"
#include "core/error.h"
#include "core/json_text.h"
#include "eval/compare_experiment.h"
#include "eval/compare_report.h"
#include "eval/compare_runner.h"
#include "io/mapped_file.h"
#include "plan/plan.h"

namespace fs = std::filesystem;

namespace {

// The serving command for the best passing variant (least peak memory among the passing non-baseline
// variants), from `lowbit plan`'s launch lines. Only recipes with a plan configuration get one: a variant
// measured with another recipe would be served as something else than what passed.
void print_launch(const nlohmann::json& summary, const lowbit::compare::Experiment& e) {
  using namespace lowbit;
  const nlohmann::json* best = nullptr;
  auto mem = [](const nlohmann::json& r) {
    return r["peak_rss_bytes"].is_number() ? r["peak_rss_bytes"].get<double>() : 1e300;
  };
  for (const auto& r : summary)
    if (r["pass"].get<bool>() && !r["baseline"].get<bool>() && (!best || mem(r) < mem(*best))) best = &r;
  if (!best) return;
  const std::string name = (*best)["name"].get<std::string>();
  const compare::VariantSpec* v = nullptr;
  for (const auto& x : e.variants)
    if (x.name == name) v = &x;
  if (!v) return;
  static const std::map<std::string, std::string> weights = {{"", "bf16"},
                                                             {"W4A16", "w4a16"},
                                                             {"W4A16,algo=gptq", "w4a16"},
                                                             {"W4A16,algo=awq", "w4a16"},
                                                             {"W4A16_ASYM", "w4a16-asym"},
                                                             {"W8A8", "w8a8-int8"},
                                                             {"W8A8,algo=smoothquant+rtn", "w8a8-int8"},
                                                             {"FP8_DYNAMIC", "w8a8-fp8"},
                                                             {"NF4", "nf4"},
                                                             {"NVFP4", "nvfp4"},
                                                             {"MXFP4", "mxfp4"}};
  static const std::map<std::string, std::string> kvs = {{"f16", "bf16"}, {"bf16", "bf16"}, {"f32", "bf16"},
                                                         {"e4m3", "fp8"}, {"int8", "int8"}, {"int4", "int4"}};
  const auto w = weights.find(v->online ? std::string("online") : v->recipe);
  const auto k = kvs.find(v->kv_cache);
  std::printf("\nserve the best passing variant (%s, least peak memory):\n", name.c_str());
  if (w == weights.end() || k == kvs.end() || !v->budget.empty() || !v->kv_evict.empty()) {
    std::printf("  no launch line: its recipe '%s' / KV '%s'%s has no `lowbit plan` configuration\n",
                v->recipe.c_str(), v->kv_cache.c_str(), v->kv_evict.empty() ? "" : " with eviction");
    return;
  }
  plan::PlanModel m;
  m.name = m.compare_model = e.model;
  const std::string ext = std::filesystem::path(e.model).extension().string();
  m.source = ext == ".gguf" ? "gguf" : ext == ".bin" ? "llama2c" : "hf";
  plan::PlanRequest r;
  r.concurrency = 1;
  for (int c : e.concurrency) r.concurrency = std::max<int64_t>(r.concurrency, c);
  for (const auto& l : plan::launch_lines(m, r, e.ctx > 0 ? e.ctx : 512, w->second, k->second)) {
    std::printf("  %s: %s\n", l.engine.c_str(), l.available ? l.command.c_str() : "(no launch line)");
    for (const auto& n : l.notes) std::printf("      %s\n", n.c_str());
  }
}

struct Args {
  std::string model, experiment, preset = "default", out = "lowbit-compare", cache, text, calib, variants;
  std::string concurrency;
  int ctx = 0, chunks = 0, threads = 0, output = -1;
  bool fresh = false, json = false, list = false;
};

std::string self_exe() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) lowbit::fail("compare", "cannot find the lowbit binary via /proc/self/exe");
  buf[n] = 0;
  return buf;
}

void setup(CLI::App& cmd) {
  static Args a;
  static std::vector<std::string> raw_args;
  cmd.add_option("-m,--model", a.model, "Model to study (HF directory, .gguf, llama2.c .bin)");
  cmd.add_option("-e,--experiment", a.experiment, "Experiment file (JSON; see docs/compare.md)");
  cmd.add_option(
      "--preset", a.preset,
      "Built-in experiment: default, kv-first, weights-first, compute, fp4 (the seeds' decision path)");
  cmd.add_option("--variants", a.variants,
                 "Only these variants (comma-separated names) besides the baseline");
  cmd.add_option("-o,--out", a.out,
                 "Report directory (default ./lowbit-compare); results are kept for resuming");
  cmd.add_option("--cache", a.cache, "Quantized checkpoint cache (default: OUT/cache)");
  cmd.add_option("--text", a.text, "Evaluation text (default: ../shared TinyStories text)");
  cmd.add_option("--calib", a.calib,
                 "Calibration text for GPTQ/AWQ/SmoothQuant (default: ../shared WikiText-2)");
  cmd.add_option("--ctx", a.ctx, "Evaluation context (default: the model's, at most 512)");
  cmd.add_option("--chunks", a.chunks, "Evaluation windows (default 8)");
  cmd.add_option("--concurrency", a.concurrency, "Concurrency levels of the throughput test (default 1,4)");
  cmd.add_option("--output", a.output, "Tokens generated per fixed prompt (default 32)");
  lowbit::app::add_threads_option(&cmd, a.threads, "Threads for every measurement (default: all cores)");
  lowbit::app::add_gguf_acts_option(&cmd);
  cmd.add_flag("--fresh", a.fresh, "Recompute every step instead of resuming from OUT/results");
  cmd.add_flag("--list", a.list, "List the presets and their variants, then exit");
  cmd.add_flag("--json", a.json, "Print the summary as JSON on stdout");
  cmd.footer(
      "Example: lowbit compare -m ../shared/models/tinystories-656K --preset default -o /tmp/cmp\n"
      "Exit code 3 when a variant fails a threshold; rerunning resumes where it stopped.");
  cmd.callback([] {
    using namespace lowbit;
    using namespace lowbit::compare;
    if (a.list) {
      for (auto& p : preset_names()) {
        Experiment e;
        apply_preset(e, p);
        std::printf("%s:\n", p.c_str());
        for (auto& v : e.variants)
          std::printf("  %-12s %-26s %s\n", v.name.c_str(),
                      (!v.recipe.empty() ? "recipe " + v.recipe : "kv " + v.kv_cache).c_str(),
                      v.description.c_str());
      }
      return;
    }
    Experiment e;
    if (!a.experiment.empty()) {
      std::ifstream in(a.experiment);
      if (!in) throw UsageError("compare", "cannot read experiment file '" + a.experiment + "'");
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(in);
      } catch (const std::exception& ex) {
        throw UsageError("compare", "experiment file '" + a.experiment + "' is not valid JSON: " + ex.what());
      }
      e = experiment_from_json(j, a.experiment);
    } else {
      apply_preset(e, a.preset);
    }
    if (!a.model.empty()) e.model = a.model;
    if (e.model.empty())
      throw UsageError("compare", "no model: pass --model or set \"model\" in the experiment");
    if (!a.text.empty()) e.eval_text = a.text;
    if (!a.calib.empty()) e.calib_text = a.calib;
    if (a.ctx > 0) e.ctx = a.ctx;
    if (a.chunks > 0) e.chunks = a.chunks;
    if (a.output >= 0) e.gen_tokens = a.output;
    if (!a.concurrency.empty())
      e.concurrency = app::parse_concurrency_list(a.concurrency, "compare", "--concurrency");
    fill_defaults(e, LOWBIT_SHARED_DIR);
    if (!a.variants.empty()) {
      std::vector<VariantSpec> keep;
      std::stringstream ss(a.variants);
      std::string name;
      while (std::getline(ss, name, ',')) {
        auto it = std::find_if(e.variants.begin(), e.variants.end(), [&](auto& v) { return v.name == name; });
        if (it == e.variants.end())
          throw UsageError("compare", "--variants: no variant named '" + name + "'");
        keep.push_back(*it);
      }
      e.variants = keep;
    }
    for (auto* f : {&e.eval_text, &e.calib_text})
      if (!f->empty() && !fs::exists(*f))
        throw UsageError("compare", "text file '" + *f + "' does not exist");
    // One variable at a time: say so when a variant changes more.
    for (auto& v : e.variants) {
      auto ch = changed_variables(e.baseline, v);
      if (ch.size() > 1) {
        std::string list;
        for (auto& c : ch) list += (list.empty() ? "" : ", ") + c;
        std::fprintf(stderr,
                     "compare: WARNING: variant '%s' changes %zu variables against the baseline (%s); its "
                     "differences cannot be attributed to one of them\n",
                     v.name.c_str(), ch.size(), list.c_str());
      }
      if (ch.empty())
        std::fprintf(stderr, "compare: WARNING: variant '%s' changes nothing against the baseline\n",
                     v.name.c_str());
    }
    fs::create_directories(a.out);
    RunnerOptions o;
    o.exe = self_exe();
    o.out_dir = a.out;
    o.cache_dir = a.cache.empty() ? a.out + "/cache" : a.cache;
    o.threads = a.threads;
    o.fresh = a.fresh;
    // The experiment as run is saved, so the rerun command is exact.
    std::string exp_path = fs::absolute(a.out + "/experiment.json").string();
    {
      const std::string text = lowbit::json_text(e.to_json(), 2) + "\n";
      io::write_file_atomic(exp_path, text.data(), text.size());
    }
    std::string rerun = shell_join({"lowbit", "compare", "-e", exp_path, "-o", fs::absolute(a.out).string()});
    auto results = run_experiment(e, o);
    auto summary = write_reports(results, e, a.out, rerun);
    bool all_pass = true;
    for (auto& r : summary) all_pass = all_pass && r["pass"].get<bool>();
    if (a.json) {
      std::cout << lowbit::json_text(summary, 2) << "\n";
    } else {
      std::printf("%-14s %-10s %8s %10s %10s %8s %12s %12s  %s\n", "variant", "changes", "bpw", "dPPL %",
                  "KLD", "top-1", "decode t/s", "peak MiB", "verdict");
      for (auto& r : summary) {
        auto f = [](const nlohmann::json& v, const char* fm) {
          char b[32];
          if (!v.is_number()) return std::string("-");
          std::snprintf(b, sizeof b, fm, v.get<double>());
          return std::string(b);
        };
        std::string ch = r["baseline"].get<bool>() ? "baseline" : "";
        for (auto& c : r["changed"]) ch += (ch.empty() ? "" : ",") + c.get<std::string>();
        std::string failed;
        for (auto& c : r["checks"])
          if (!c["pass"].get<bool>())
            failed += " " + c["name"].get<std::string>() + "=" + compare::check_number(c["value"]) + " (" +
                      c["rule"].get<std::string>() + " " + compare::check_number(c["limit"]) + ")";
        std::printf(
            "%-14s %-10s %8s %10s %10s %8s %12s %12s  %s%s\n", r["name"].get<std::string>().c_str(),
            ch.c_str(), f(r["bpw"], "%.2f").c_str(), f(r["dppl_pct"], "%+.2f").c_str(),
            f(r["kld_mean"], "%.5f").c_str(), f(r["top1"], "%.3f").c_str(),
            f(r["decode_tps"], "%.1f").c_str(),
            f(r["peak_rss_bytes"].is_number() ? nlohmann::json(r["peak_rss_bytes"].get<double>() / 1048576.0)
                                              : nlohmann::json(),
              "%.1f")
                .c_str(),
            r["pass"].get<bool>() ? "PASS" : "FAIL", failed.c_str());
      }
      std::printf("\nreports: %s/report.md, report.html, report.json\nrerun:   %s\n", a.out.c_str(),
                  rerun.c_str());
      print_launch(summary, e);
    }
    if (!all_pass) app::set_exit_code(3);
  });
}

}  // namespace

LOWBIT_COMMAND(
    "compare", 60,
    "The controlled experiment: baseline + one-variable variants, quality/speed/memory, pass/fail report.",
    setup);
