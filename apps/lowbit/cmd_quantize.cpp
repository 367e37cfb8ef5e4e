// `lowbit quantize`: model + recipe (+ calibration text) -> quantized Hugging Face style checkpoint +
// manifest.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "apps/lowbit/cli_common.h"
#include "apps/lowbit/command.h"
#include "core/error.h"
#include "core/json_text.h"
#include "core/memory.h"
#include "core/progress.h"
#include "core/timer.h"
#include "model/gguf_model_export.h"
#include "model/model.h"
#include "quant/budget.h"
#include "quant/checkpoint_writer.h"
#include "quant/export.h"
#include "quant/quantizer.h"
#include "quant/recipe.h"

namespace {

struct QuantizeArgs {
  std::string model, recipe, calib, out, tokenizer, dtype = "native", budget, format = "compressed-tensors";
  std::vector<std::string> candidates;
  double bpw = 0;
  int sens_samples = 8, sens_length = 128;
  std::string sensitivity = "auto";
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
         ",key=value refinements (algo=gptq, group=32, act=int8, kv=e4m3, alpha=0.5, tune=64, ...), or a "
         ".json recipe "
         "file (see docs/quant.md)")
      ->required();
  cmd.add_option("-c,--calib", a.calib,
                 "Calibration text file (needed by gptq, awq, imatrix, smoothquant, static "
                 "activation scales, KV scales, rotate=spinquant / duquant and tune=STEPS); overrides the "
                 "recipe's file");
  cmd.add_option("--samples", a.samples, "Calibration windows (default: recipe, 32)");
  cmd.add_option("--length", a.length, "Tokens per calibration window (default: recipe, 256)");
  cmd.add_option("--seed", a.seed, "Seed for the calibration window offsets (default: recipe, 0)");
  cmd.add_option("-o,--out", a.out, "Output directory (must not exist unless --force)")->required();
  cmd.add_flag("--force", a.force, "Replace an existing output directory");
  cmd.add_option(
         "--format", a.format,
         "Output layout: compressed-tensors (default: lowbit's checkpoint with its manifest), gptq, awq "
         "(lowbit export's layouts) or gguf (-o names a .gguf file; each matrix in the GGUF type that "
         "holds it, see lowbit export --to gguf)")
      ->check(CLI::IsMember({"compressed-tensors", "gptq", "awq", "gguf"}));
  cmd.add_flag(
      "--requantize", a.requantize,
      "Allow quantizing an already-quantized model, starting from its dequantized weights (the second "
      "rounding error adds to the first; recorded as a warning in the manifest)");
  cmd.add_option("--tokenizer", a.tokenizer, "llama2.c tokenizer.bin (default: found next to the model)");
  cmd.add_option("--dtype", a.dtype,
                 "How dense source weights are held while quantizing: native (default), f32");
  cmd.add_option("--budget", a.budget,
                 "Mixed precision under a size: the checkpoint's model files (all but the manifest), or with "
                 "--format gguf the GGUF file, must fit in this many bytes (4570000, 4.5MB, 4.3MiB; K/M/G "
                 "alone are binary); each matrix gets the candidate format that minimises the measured KL "
                 "divergence in total (needs --calib)");
  cmd.add_option("--bpw", a.bpw,
                 "Mixed precision under a size given as bits per parameter over the whole checkpoint "
                 "(model bytes x 8 / parameters)")
      ->excludes("--budget")
      ->check(CLI::PositiveNumber);
  cmd.add_option(
         "--candidates", a.candidates,
         "Formats the budget allocator chooses from, comma-separated schemes (default: q2_k, q3_k, iq4_xs, "
         "q4_k, q5_k, q6_k, int3:g32, int4:g32, int4:g64, int8:channel, int8:g32; 'keep' = unquantized is "
         "always a "
         "choice; matrices the recipe's overrides name keep their format)")
      ->delimiter(',');
  cmd.add_option(
         "--sensitivity", a.sensitivity,
         "How the allocator measures a matrix's sensitivity to each format: kld (the KL divergence "
         "measured for every option), proxy (measured once per matrix, at its smallest option; the "
         "others scaled by their importance-weighted weight error: candidates times fewer forwards) or "
         "auto (default: kld below 100 M parameters, proxy above)")
      ->check(CLI::IsMember({"auto", "kld", "proxy"}));
  cmd.add_option("--sens-samples", a.sens_samples,
                 "Calibration windows the sensitivities are measured on (default 8)")
      ->check(CLI::Range(1, 1024));
  cmd.add_option("--sens-length", a.sens_length, "Tokens per sensitivity window (default 128)")
      ->check(CLI::Range(2, 1 << 20));
  lowbit::app::add_threads_option(&cmd, a.threads);
  lowbit::app::add_gguf_acts_option(&cmd);
  cmd.add_flag("--tensors", a.per_tensor,
               "Print one line per tensor (format, bpw, errors) after the summary");
  cmd.add_flag("-q,--quiet", a.quiet, "No progress bar");
  cmd.add_flag("--json", a.json,
               "Print the full report (the manifest's tensors and summary) as JSON on stdout");
  cmd.footer(
      "Example: lowbit quantize -m ../shared/models/kjv-brown-6M/model.bin -r W4A16,group=32,algo=gptq "
      "-c ../shared/data/kjv-brown/val.txt -o /tmp/kjv-w4g32-gptq\n"
      "Under a size: lowbit quantize -m ../shared/models/kjv-brown-6M/model.bin -r W4A16,algo=gptq "
      "--budget 4.5MB -c ../shared/data/wikitext-2-raw/wiki.test.raw -o /tmp/kjv-4.5MB");
  cmd.callback([] {
    using namespace lowbit;
    app::apply_threads(a.threads);
    // Refused before minutes of quantization, not after (the writer checks again when it renames).
    if (!a.force && std::filesystem::exists(a.out))
      throw UsageError("quant", "'" + a.out + "' exists; choose another --out or pass --force to replace it");
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
    const bool budgeted = !a.budget.empty() || a.bpw > 0;
    if (budgeted && r.calib.file.empty())
      throw UsageError("quant",
                       "--budget / --bpw measure each matrix's sensitivity on calibration text; pass "
                       "--calib FILE");
    if ((!a.candidates.empty() || a.sensitivity != "auto") && !budgeted)
      throw UsageError("quant",
                       "--candidates and --sensitivity are for the budget allocator; add --budget or --bpw");
    auto calib = quant::load_recipe_calibration(*m, r, &warnings);  // a given file is always loaded
    quant::QuantizeOptions qo;
    qo.calib = calib ? &*calib : nullptr;
    qo.requantize = a.requantize;
    qo.progress = !a.quiet && !a.json;
    std::optional<quant::Allocation> alloc;
    std::unique_ptr<quant::KldProbe> probe;
    if (budgeted) {
      Progress::set_quiet(!qo.progress);
      quant::BudgetSpec bs;
      if (!a.budget.empty()) bs.bytes = parse_bytes(a.budget, "quant");
      bs.bpw = a.bpw;
      bs.sensitivity = a.sensitivity;
      bs.gguf_file = a.format == "gguf";  // the budget is the GGUF file's size
      bs.gguf_name = std::filesystem::path(a.out).stem().string();
      for (const auto& c : a.candidates) bs.candidates.push_back(parse_scheme(c));
      const auto windows =
          quant::sensitivity_windows(*calib, a.sens_samples, a.sens_length, m->config.vocab_size, &warnings);
      probe = std::make_unique<quant::KldProbe>(*m, windows);
      alloc = quant::allocate_budget(*m, r, *calib, *probe, bs, a.tokenizer);
      r = alloc->apply(r);
      if (!a.json) std::cout << alloc->summary();
    }
    quant::QuantReport rep = quant::quantize_model(*m, r, qo);
    rep.warnings.insert(rep.warnings.begin(), warnings.begin(), warnings.end());
    if (alloc) {
      rep.budget = alloc->to_json();
      rep.budget["measured_kld"] = probe->kld_from(-1);  // the quantized model, same windows
    }
    quant::WriteOptions wo;
    wo.force = a.force;
    wo.tokenizer_path = a.tokenizer;
    if (alloc && !(alloc->counts == "gguf")) wo.max_model_bytes = alloc->budget;
    // Another layout: the checkpoint is written next to OUT, re-emitted by the exporter `lowbit export` uses
    // (the same code path, so the same checks), then removed.
    const bool other = a.format != "compressed-tensors";
    namespace fs = std::filesystem;
    if (other && fs::exists(a.out) && !a.force)
      throw UsageError("quant", "'" + a.out + "' exists; choose another --out or pass --force");
    const std::string ck_dir = other ? a.out + ".lowbit-ck" : a.out;
    struct RemoveDir {
      std::string dir;
      ~RemoveDir() {
        std::error_code ec;
        if (!dir.empty()) fs::remove_all(dir, ec);
      }
    } cleanup{other ? ck_dir : std::string()};
    if (other) wo.force = true;  // our own scratch directory
    auto res = quant::write_quantized_checkpoint(*m, rep, ck_dir, wo);
    std::string exported;
    int64_t gguf_bytes = -1;
    if (a.format == "gguf") {
      if (a.force && fs::is_directory(a.out)) fs::remove_all(a.out);
      if (a.force) fs::remove(a.out);
      auto ck = load_model(ck_dir);
      GgufModelExportOptions go;
      go.name = fs::path(a.out).stem().string();
      const auto gr = export_gguf_model(*ck, go, a.out);
      if (alloc && gr.file_bytes > alloc->budget) {
        fs::remove(a.out);  // never a file over the budget the user asked for
        throw Error("quant", "the GGUF file came out at " + std::to_string(gr.file_bytes) +
                                 " bytes, over the budget of " + std::to_string(alloc->budget) +
                                 " (predicted " + std::to_string(alloc->predicted_bytes) +
                                 "); nothing was written. Please report this: the prediction is meant to "
                                 "be exact");
      }
      exported = "gguf, " + std::to_string(gr.file_bytes) + " bytes, file type " + gr.file_type;
      gguf_bytes = gr.file_bytes;
    } else if (other) {
      quant::ExportOptions eo;
      eo.to = a.format;
      eo.force = a.force;
      const auto er = quant::export_checkpoint(ck_dir, a.out, eo);
      exported = a.format + ", " + std::to_string(er.bytes) + " bytes";
    }
    if (a.json) {
      nlohmann::json j = rep.to_json();
      j["output"] = {{"dir", res.dir},
                     {"bytes", res.bytes},
                     {"model_bytes", res.model_bytes},
                     {"parameters", res.parameters},
                     {"shards", res.shards},
                     {"files", res.files}};
      if (other) j["output"]["exported"] = {{"format", a.format}, {"path", a.out}};
      if (gguf_bytes >= 0) j["output"]["exported"]["bytes"] = gguf_bytes;
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
    if (alloc) {
      const int64_t counted = gguf_bytes >= 0 ? gguf_bytes : res.model_bytes;
      std::printf(
          "budget %lld bytes: %s %lld bytes (%.3f bits per parameter); KLD on the %d "
          "sensitivity tokens: predicted %.5f, measured %.5f\n",
          static_cast<long long>(alloc->budget), gguf_bytes >= 0 ? "GGUF file" : "model files",
          static_cast<long long>(counted),
          8.0 * static_cast<double>(counted) / static_cast<double>(std::max<int64_t>(1, res.parameters)),
          alloc->sens_tokens, alloc->predicted_kld, rep.budget["measured_kld"].get<double>());
    }
    const auto& ph = rep.phase_seconds;
    std::printf(
        "wrote %s (%s in %d file(s), %d shard(s)) in %.2f s (quantization %.2f s: calibration %.1f, "
        "scale search %.1f, quantize %.1f, error report %.1f; peak RSS %s)\n",
        res.dir.c_str(), app::human_bytes(static_cast<double>(res.bytes)).c_str(),
        static_cast<int>(res.files.size()), res.shards, t.seconds(), rep.seconds, ph.calibration, ph.search,
        ph.quantize, ph.report, app::human_bytes(static_cast<double>(rep.peak_rss_bytes)).c_str());
    if (other)
      std::printf("re-emitted as %s (%s); the intermediate checkpoint was removed\n", a.out.c_str(),
                  exported.c_str());
  });
}

}  // namespace

LOWBIT_COMMAND(
    "quantize", 40,
    "Quantize a model with a recipe (RTN, GPTQ, AWQ, SmoothQuant; INT/FP8/FP4/NF4/MX/NVFP4) into a "
    "checkpoint with a manifest.",
    setup);
