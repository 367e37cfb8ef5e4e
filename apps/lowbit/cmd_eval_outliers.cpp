// `lowbit eval outliers`: max |x| / RMS, kurtosis and the top channels at every linear input of every layer,
// before and after a rotation (--rotate) or a whole recipe (--quantize), with a chart (src/eval/outliers.h).
// Registered under `lowbit eval` by cmd_eval.cpp.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/lowbit/cli_common.h"
#include "core/error.h"
#include "core/json_text.h"
#include "core/progress.h"
#include "eval/eval_text.h"
#include "eval/outliers.h"
#include "io/mapped_file.h"
#include "quant/duquant.h"
#include "quant/rotate.h"

namespace {

using namespace lowbit;
using namespace lowbit::eval;
using nlohmann::json;

struct OutlierArgs {
  app::QuantizeFlags quant;
  std::string model, tokenizer, text, dtype = "native", rotate, factors, chart;
  int64_t tokens = 512, block = 0;
  uint64_t seed = 0;
  int top = 4, threads = 0;
  bool json = false, no_progress = false;
};

const char* const kRotations[] = {"quarot", "duquant"};

quant::RotationSpec rotation_spec(const OutlierArgs& a) {
  quant::RotationSpec s;
  bool known = false;
  for (const char* r : kRotations) known |= a.rotate == r;
  if (!known)
    throw UsageError("eval", "--rotate '" + a.rotate +
                                 "' is not a rotation lowbit builds without training; use --rotate quarot or "
                                 "duquant, or --quantize "
                                 "RECIPE for a whole recipe");
  s.method = a.rotate;
  s.seed = a.seed;
  s.factors = a.factors;
  return s;
}

// The "after" model: a copy of the float model rotated (--rotate) or quantized with the recipe (--quantize);
// null when neither was asked. `label` names it for the table and chart.
// DuQuant builds its R1 from the same windows the statistics are measured on.
std::unique_ptr<Model> after_model(const OutlierArgs& a, const Model& m,
                                   const std::vector<std::vector<int32_t>>& windows, std::string* label) {
  if (!a.rotate.empty() && !a.quant.recipe.empty())
    throw UsageError("eval",
                     "--rotate and --quantize both choose the model to compare; give one (a recipe with "
                     "rotate=quarot already rotates)");
  if (a.rotate.empty() && a.quant.recipe.empty()) {
    if (!a.factors.empty())
      throw UsageError("eval", "--rotate-factors is only used with --rotate; add --rotate quarot");
    return nullptr;
  }
  auto c =
      std::make_unique<Model>(m);  // shares the mapped weights; rotation replaces the matrices it touches
  if (!a.rotate.empty()) {
    quant::RotationSpec s = rotation_spec(a);
    if (s.method != "duquant" && a.block)
      throw UsageError("eval", "--duquant-block is only used with --rotate duquant");
    s.duquant_block = a.block;
    if (s.method == "duquant")
      quant::rotate_model_duquant(*c, s, windows);
    else
      quant::rotate_model(*c, s);
    *label = a.rotate;
  } else {
    app::apply_online_quantization(*c, a.quant, a.json || a.no_progress);
    *label = a.quant.recipe;
  }
  return c;
}

void print_table(const OutlierReport& b, const OutlierReport* r, const std::string& label) {
  std::printf("%-5s %-8s %6s | %9s %8s %8s %8s  %-30s", "layer", "site", "cols", "max|x|", "max/RMS",
              "tok-max", "kurt", "top channels (max|x|)");
  if (r) std::printf("| %8s %8s %8s  %s", ("max/RMS"), "tok-max", "kurt", ("top (" + label + ")").c_str());
  std::printf("\n");
  auto top = [](const SiteOutliers& s, size_t n) {
    std::string t;
    for (size_t i = 0; i < s.top.size() && i < n; ++i) {
      char b[48];
      std::snprintf(b, sizeof b, "%s%lld (%.3g)", i ? " " : "", (long long)s.top[i].first, s.top[i].second);
      t += b;
    }
    return t;
  };
  for (size_t i = 0; i < b.sites.size(); ++i) {
    const SiteOutliers& s = b.sites[i];
    std::printf("%-5d %-8s %6lld | %9.4g %8.1f %8.1f %8.1f  %-30s", s.layer, act_site_name(s.site),
                (long long)s.cols, s.max_abs, s.ratio, s.token_ratio, s.kurtosis, top(s, 3).c_str());
    if (r && i < r->sites.size()) {
      const SiteOutliers& x = r->sites[i];
      std::printf("| %8.1f %8.1f %8.1f  %s", x.ratio, x.token_ratio, x.kurtosis, top(x, 3).c_str());
    }
    std::printf("\n");
  }
  auto summary = [](const char* what, const OutlierReport& o) {
    if (o.worst < 0) return;
    const SiteOutliers& w = o.sites[static_cast<size_t>(o.worst)];
    std::printf(
        "%-8s worst site layer %d %s max/RMS %.1f (channel %lld); mean over sites: max/RMS %.1f, per-token "
        "max/RMS %.1f, kurtosis %.1f\n",
        what, w.layer, act_site_name(w.site), w.ratio, w.top.empty() ? -1LL : (long long)w.top[0].first,
        o.mean_ratio, o.mean_token_ratio, o.mean_kurtosis);
  };
  std::printf("\n");
  summary("before", b);
  if (r) summary(label.c_str(), *r);
}

void do_outliers(const OutlierArgs& a) {
  if (a.top < 1 || a.top > 64)
    throw UsageError("eval", "--top must be in [1, 64], got " + std::to_string(a.top));
  std::string ext;
  if (!a.chart.empty()) {
    ext = std::filesystem::path(a.chart).extension().string();
    if (ext != ".svg" && ext != ".html")
      throw UsageError("eval", "--chart '" + a.chart + "' must end in .svg or .html");
  }
  app::apply_threads(a.threads);
  if (a.no_progress) Progress::set_quiet(true);
  LoadOptions lo;
  lo.dense = dense_mode_from_string(a.dtype);
  lo.tokenizer_path = a.tokenizer;
  auto m = load_model(a.model, lo);
  if (!m->tokenizer)
    throw UsageError("eval",
                     "no tokenizer found for '" + a.model + "'; pass --tokenizer PATH (tokenizer.bin)");
  const auto windows = outlier_windows(*m, read_text_file(a.text), a.tokens);
  std::string label;
  auto rotated = after_model(a, *m, windows, &label);
  const OutlierReport before = measure_outliers(*m, windows, a.top);
  OutlierReport after;
  if (rotated) after = measure_outliers(*rotated, windows, a.top);
  const OutlierReport* ap = rotated ? &after : nullptr;
  if (!a.chart.empty()) {
    const std::string title = "Activation outliers: " + std::filesystem::path(a.model).filename().string() +
                              (ap ? " before / after " + label : "");
    const std::string chart = ext == ".svg" ? outliers_chart_svg(before, ap, title, label)
                                            : outliers_chart_html(before, ap, title, label);
    io::write_file_atomic(a.chart, chart.data(), chart.size());
    if (!a.json) std::fprintf(stderr, "chart written to %s\n", a.chart.c_str());
  }
  if (a.json) {
    json j = {{"model", m->path},
              {"text", a.text},
              {"tokens", before.tokens},
              {"windows", windows.size()},
              {"before", outliers_json(before)}};
    j["after"] = ap ? outliers_json(*ap) : json(nullptr);
    j["after_label"] = ap ? json(label) : json(nullptr);
    if (!a.rotate.empty()) j["rotation"] = {{"method", a.rotate}, {"seed", a.seed}, {"factors", a.factors}};
    std::cout << lowbit::json_text(j, 2) << "\n";
    return;
  }
  std::printf("model    %s; text %s: %lld tokens in %zu window(s)%s\n", m->path.c_str(), a.text.c_str(),
              (long long)before.tokens, windows.size(), ap ? (", after = " + label).c_str() : "");
  std::printf(
      "max/RMS: largest |x| over the RMS of every element; tok-max: mean over tokens of each token's "
      "max|x|/RMS (what a per-token 4-bit scale sees); kurt: Pearson kurtosis (normal = 3)\n\n");
  print_table(before, ap, label);
}

}  // namespace

namespace lowbit::app {

void add_eval_outliers(CLI::App& eval) {
  static OutlierArgs a;
  auto* c = eval.add_subcommand(
      "outliers",
      "Activation outliers at every linear input (max|x|/RMS, kurtosis, top channels), before and after a "
      "rotation");
  c->add_option("-m,--model", a.model, "Model: a Hugging Face directory, a .gguf file or a llama2.c .bin")
      ->required();
  c->add_option("--text", a.text, "Text file whose tokens are fed (UTF-8)")->required();
  c->add_option("--tokens", a.tokens,
                "Tokens of the text fed, in windows of the model's context (default 512)");
  c->add_option(
      "--rotate", a.rotate,
      "Compare with the model rotated by this method: quarot, duquant (its R1 built from the text's "
      "activations)");
  c->add_option("--duquant-block", a.block,
                "DuQuant's block size (as duquant_block=; default 128 where it divides)");
  c->add_option("--seed", a.seed, "Seed of the rotation's random signs (default 0, as rotate_seed)");
  c->add_option("--rotate-factors", a.factors,
                "Hadamard factor file for orders no construction gives (as rotate_factors=)");
  c->add_option("--top", a.top, "Top channels by max|x| reported per site (default 4)");
  c->add_option("--chart", a.chart, "Write a chart of max|x|/RMS per layer and site: FILE.svg or FILE.html");
  c->add_option("--tokenizer", a.tokenizer, "llama2.c tokenizer.bin (default: found next to the model)");
  c->add_option("--dtype", a.dtype, "Dense weights in memory: native (as stored, default), f32, f16, bf16");
  app::add_quantize_options(c, a.quant);
  app::add_threads_option(c, a.threads);
  c->add_flag("--no-progress", a.no_progress, "Do not draw progress bars on stderr");
  c->add_flag("--json", a.json, "Print one JSON object with every number instead of the table");
  c->footer(
      "Example: lowbit eval outliers -m ../shared/models/kjv-brown-6M/model.bin --text "
      "../shared/data/kjv-brown/val.txt --rotate quarot --chart outliers.html\n"
      "(--quantize W4A4KV4,rotate=quarot compares with the quantized model's activation inputs instead)");
  c->callback([] { do_outliers(a); });
}

}  // namespace lowbit::app
