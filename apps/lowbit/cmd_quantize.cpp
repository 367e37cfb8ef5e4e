// `lowbit quantize`: model + recipe (+ calibration text) -> quantized Hugging Face style checkpoint +
// manifest.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/lowbit/cli_common.h"
#include "apps/lowbit/command.h"
#include "core/error.h"
#include "core/json_text.h"
#include "core/progress.h"
#include "core/timer.h"
#include "model/model.h"
#include "quant/checkpoint_writer.h"
#include "quant/quantizer.h"
#include "quant/recipe.h"

namespace {

struct QuantizeArgs {
  std::string model, recipe, calib, out, tokenizer, dtype = "native";
  int samples = 0, length = 0, threads = 0;
  int64_t seed = -1;
  bool force = false, requantize = false, json = false, quiet = false, per_tensor = false;
};

void setup(CLI::App& cmd) {
  static QuantizeArgs a;
  cmd.add_option("-m,--model", a.model,
                 "Source model: a Hugging Face directory, a .gguf file or a llama2.c .bin")
      ->required();
  cmd.add_option(
         "-r,--recipe", a.recipe,
         "Recipe: a preset (W4A16, W4A16_ASYM, W8A16, W8A8, W4A8, FP8, FP8_DYNAMIC, FP8_BLOCK, NF4, NVFP4, "
         "MXFP4, MXFP8), the W/A/KV notation (W4A16KV8), a scheme (int4:g32:sym), each optionally with "
         ",key=value refinements (algo=gptq, group=32, act=int8, kv=e4m3, alpha=0.5, ...), or a .json recipe "
         "file (see docs/quant.md)")
      ->required();
  cmd.add_option("-c,--calib", a.calib,
                 "Calibration text file (needed by gptq, awq, imatrix, smoothquant, static "
                 "activation scales and KV scales); overrides the recipe's file");
  cmd.add_option("--samples", a.samples, "Calibration windows (default: recipe, 32)");
  cmd.add_option("--length", a.length, "Tokens per calibration window (default: recipe, 256)");
  cmd.add_option("--seed", a.seed, "Seed for the calibration window offsets (default: recipe, 0)");
  cmd.add_option("-o,--out", a.out, "Output directory (must not exist unless --force)")->required();
  cmd.add_flag("--force", a.force, "Replace an existing output directory");
  cmd.add_flag(
      "--requantize", a.requantize,
      "Allow quantizing an already-quantized model, starting from its dequantized weights (the second "
      "rounding error adds to the first; recorded as a warning in the manifest)");
  cmd.add_option("--tokenizer", a.tokenizer, "llama2.c tokenizer.bin (default: found next to the model)");
  cmd.add_option("--dtype", a.dtype,
                 "How dense source weights are held while quantizing: native (default), f32");
  lowbit::app::add_threads_option(&cmd, a.threads);
  cmd.add_flag("--tensors", a.per_tensor,
               "Print one line per tensor (format, bpw, errors) after the summary");
  cmd.add_flag("-q,--quiet", a.quiet, "No progress bar");
  cmd.add_flag("--json", a.json,
               "Print the full report (the manifest's tensors and summary) as JSON on stdout");
  cmd.footer(
      "Example: lowbit quantize -m ../shared/models/kjv-brown-6M/model.bin -r W4A16,group=32,algo=gptq "
      "-c ../shared/data/kjv-brown/val.txt -o /tmp/kjv-w4g32-gptq");
  cmd.callback([] {
    using namespace lowbit;
    app::apply_threads(a.threads);
    quant::Recipe r = quant::parse_recipe_arg(a.recipe);
    if (!a.calib.empty()) r.calib.file = a.calib;
    if (a.samples > 0) r.calib.samples = a.samples;
    if (a.length > 0) r.calib.length = a.length;
    if (a.seed >= 0) r.calib.seed = static_cast<uint64_t>(a.seed);
    Timer t;
    LoadOptions lo;
    lo.dense = dense_mode_from_string(a.dtype);
    lo.tokenizer_path = a.tokenizer;
    auto m = load_model(a.model, lo);
    std::vector<std::string> warnings;
    auto calib = quant::load_recipe_calibration(*m, r, &warnings);
    quant::QuantizeOptions qo;
    qo.calib = calib ? &*calib : nullptr;
    qo.requantize = a.requantize;
    qo.progress = !a.quiet && !a.json;
    quant::QuantReport rep = quant::quantize_model(*m, r, qo);
    rep.warnings.insert(rep.warnings.begin(), warnings.begin(), warnings.end());
    quant::WriteOptions wo;
    wo.force = a.force;
    wo.tokenizer_path = a.tokenizer;
    auto res = quant::write_quantized_checkpoint(*m, rep, a.out, wo);
    if (a.json) {
      nlohmann::json j = rep.to_json();
      j["output"] = {{"dir", res.dir}, {"bytes", res.bytes}, {"shards", res.shards}, {"files", res.files}};
      j["total_seconds"] = t.seconds();
      std::cout << lowbit::json_text(j, 2) << "\n";
      return;
    }
    std::cout << rep.summary_table();
    if (a.per_tensor) {
      std::printf("%-20s %-26s %-16s %8s %9s %9s %9s\n", "tensor", "scheme", "algorithm", "bpw", "errW",
                  "errOut", "errOutRTN");
      for (auto& x : rep.tensors) {
        if (!x.quantized) continue;
        auto f = [](double v) {
          char b[32];
          if (v < 0) return std::string("-");
          std::snprintf(b, sizeof b, "%.4f", v);
          return std::string(b);
        };
        std::printf("%-20s %-26s %-16s %8.4f %9s %9s %9s\n", x.name.c_str(), x.scheme.c_str(),
                    x.algorithm.c_str(), x.bpw, f(x.rel_error_w).c_str(), f(x.rel_error_out).c_str(),
                    f(x.rel_error_out_rtn).c_str());
      }
    }
    const auto& ph = rep.phase_seconds;
    std::printf(
        "wrote %s (%s in %d file(s), %d shard(s)) in %.2f s (quantization %.2f s: calibration %.1f, "
        "scale search %.1f, quantize %.1f, error report %.1f; peak RSS %s)\n",
        res.dir.c_str(), app::human_bytes(static_cast<double>(res.bytes)).c_str(),
        static_cast<int>(res.files.size()), res.shards, t.seconds(), rep.seconds, ph.calibration, ph.search,
        ph.quantize, ph.report, app::human_bytes(static_cast<double>(rep.peak_rss_bytes)).c_str());
  });
}

}  // namespace

LOWBIT_COMMAND(
    "quantize", 40,
    "Quantize a model with a recipe (RTN, GPTQ, AWQ, SmoothQuant; INT/FP8/FP4/NF4/MX/NVFP4) into a "
    "checkpoint with a manifest.",
    setup);
