// `lowbit plan`: where the memory goes (weights / KV cache / workspace) for every W/A/KV configuration, what
// fits a device or budget, and what to try first. The arithmetic lives in src/plan/.
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/lowbit/command.h"
#include "core/error.h"
#include "core/json_text.h"
#include "io/mapped_file.h"
#include "plan/plan.h"

namespace {

struct PlanArgs {
  std::string model, preset, device, budget, chart;
  std::vector<std::string> ctx{"4096"}, weights, kv;
  int64_t concurrency = 1, output = 0;
  int prefill_chunk = 512;
  int tp = 1, pp = 1;
  double gpu_util = 0.9;
  bool json = false, list = false;
};

// "8192", "8k", "32K", "1M" -> tokens.
int64_t parse_tokens(const std::string& s) {
  std::string t;
  for (char c : s)
    if (!std::isspace(static_cast<unsigned char>(c))) t += c;
  int64_t mul = 1;
  if (!t.empty() && (t.back() == 'k' || t.back() == 'K'))
    mul = 1024, t.pop_back();
  else if (!t.empty() && (t.back() == 'm' || t.back() == 'M'))
    mul = 1 << 20, t.pop_back();
  if (t.empty() || t.size() > 9 || t.find_first_not_of("0123456789") != std::string::npos)
    throw lowbit::UsageError("plan",
                             "--ctx '" + s + "' is not a token count; write e.g. --ctx 2048,8192 or 32k");
  return std::stoll(t) * mul;
}

void list_presets() {
  using namespace lowbit::plan;
  std::printf("model presets (--preset):\n");
  for (const auto& p : model_presets())
    std::printf("  %-14s %-32s %6.2f B params, %lld layers, kv heads %lld, max ctx %lld\n", p.id.c_str(),
                p.hf_id.c_str(), p.config.n_params() / 1e9, (long long)p.config.n_layers,
                (long long)p.config.n_kv_heads, (long long)p.config.max_seq_len);
  std::printf("devices (--device):\n");
  for (const auto& d : device_presets())
    std::printf("  %-10s %-32s %s, %s%s%s\n", d.id.c_str(), d.name.c_str(), fmt_bytes(d.memory_bytes).c_str(),
                d.features.c_str(), d.fp8 ? ", fp8" : "", d.fp4 ? ", fp4" : "");
  std::printf("  %-10s this machine's RAM and CPU features\n", "cpu");
  std::printf("weight configurations (--weights):");
  for (const auto& w : weight_configs()) std::printf(" %s", w.id.c_str());
  std::printf("\nKV configurations (--kv):");
  for (const auto& k : kv_configs()) std::printf(" %s", k.id.c_str());
  std::printf("\n");
}

void setup(CLI::App& cmd) {
  static PlanArgs a;
  cmd.add_option(
      "--preset", a.preset,
      "Built-in model config, e.g. llama-3-8b, llama-2-70b, qwen2.5-7b, smollm2-135m (--list-presets)");
  cmd.add_option(
      "-m,--model", a.model,
      "Model: a Hugging Face directory or config.json, a .gguf file, a llama2.c .bin (header only), or "
      "a lowbit quantized checkpoint (its stored tensor bytes are reported as the 'stored' row)");
  cmd.add_option("--ctx", a.ctx, "Context lengths in tokens, comma-separated (8192, 8k, 32k); default 4096")
      ->delimiter(',');
  cmd.add_option("--concurrency", a.concurrency,
                 "Sequences served at once (each has its own KV cache); default 1");
  cmd.add_option(
      "--output", a.output,
      "Tokens generated per sequence; they live in the KV cache too (tokens = ctx + output); default 0");
  cmd.add_option(
      "--device", a.device,
      "Device preset: l4, rtx4090, a100-40gb, a100-80gb, h100, h200, b200, or cpu (this machine's RAM); "
      "default cpu. Sets memory and which formats run natively");
  cmd.add_option(
      "--budget", a.budget,
      "Memory budget instead of (or overriding the memory of) --device: 24GiB, 80GB, 512MiB, bytes");
  cmd.add_option(
         "--weights", a.weights,
         "Weight configurations to plan, comma-separated (default all): bf16 fp8-w w8a8-int8 w8a8-fp8 "
         "w4a16 w4a16-asym nf4 nf4-dq mxfp4 nvfp4")
      ->delimiter(',');
  cmd.add_option("--kv", a.kv, "KV cache configurations, comma-separated (default all): bf16 fp8 int8 int4")
      ->delimiter(',');
  cmd.add_option("--prefill-chunk", a.prefill_chunk,
                 "Tokens per prefill batch assumed for the workspace (512)");
  cmd.add_option("--tp", a.tp,
                 "Tensor-parallel GPUs: plan vLLM's split of heads / FFN / vocab over N devices of --device "
                 "(must divide the attention heads); default 1");
  cmd.add_option("--pp", a.pp,
                 "Pipeline-parallel stages: layers split over P groups of --tp devices; default 1");
  auto* util =
      cmd.add_option("--gpu-memory-utilization", a.gpu_util,
                     "Fraction of each GPU's memory the engine may use (vLLM's flag; assumed 0.9). With "
                     "--tp/--pp or this flag, fits are checked per device against memory x fraction");
  cmd.add_option("--chart", a.chart, "Write a chart of total memory vs context: FILE.svg or FILE.html");
  cmd.add_flag("--json", a.json, "Print the plan as one JSON object instead of tables");
  cmd.add_flag("--list-presets", a.list, "List the model presets, devices and configurations, then exit");
  cmd.footer(
      "Every configuration is crossed with every KV format: BF16, FP8 weight-only, W8A8 INT8/FP8,\n"
      "W4A16 INT4 g128 sym/asym, NF4 (+double quant), MXFP4, NVFP4 x KV BF16/FP8/INT8/INT4.\n"
      "Embeddings, lm_head and norms stay 16-bit. The recommendation follows: KV dominates -> quantize\n"
      "KV first; weights dominate -> FP8 weight-only or W4A16; high concurrency -> W8A8 where the\n"
      "hardware has it; FP4 hardware -> NVFP4/MXFP4 separately.\n"
      "Formulas: docs/plan.md.\n"
      "Multi-GPU: --tp N [--pp P] plans vLLM's tensor/pipeline split per device and prints vLLM, SGLang\n"
      "and llama.cpp launch lines for the recommended configuration.\n"
      "Example: lowbit plan --preset llama-3-8b --ctx 8192 --concurrency 16 --device l4\n"
      "Example: lowbit plan --preset llama-3-70b --ctx 8192 --concurrency 32 --device h100 --tp 4 --pp 2");
  cmd.callback([util] {
    using namespace lowbit;
    if (a.list) {
      list_presets();
      return;
    }
    if (a.model.empty() == a.preset.empty())
      throw UsageError("plan", "pass exactly one of --preset NAME or --model PATH (see --list-presets)");
    plan::PlanRequest r;
    r.ctx.clear();
    for (const auto& s : a.ctx) r.ctx.push_back(parse_tokens(s));
    r.concurrency = a.concurrency;
    r.output = a.output;
    r.prefill_chunk = a.prefill_chunk;
    r.weights = a.weights;
    r.kv = a.kv;
    r.tp = a.tp;
    r.pp = a.pp;
    r.gpu_memory_utilization = a.gpu_util;
    r.utilization_given = util->count() > 0;
    if (!a.device.empty())
      r.device = plan::device_by_name(a.device);
    else if (a.budget.empty())
      r.device = plan::device_by_name("cpu");
    if (!a.budget.empty()) {
      const int64_t b = plan::parse_bytes(a.budget);
      if (a.device.empty()) {
        r.device = plan::budget_device(b);
      } else {  // keep the device's capabilities, use the budget as its memory
        r.device.memory_bytes = b;
        r.device.reserve_bytes = 0;
        r.device.budget_override = true;
        r.device.name += " with a " + plan::fmt_bytes(static_cast<double>(b)) + " budget";
      }
    }
    if (!a.chart.empty()) {
      const std::string ext = std::filesystem::path(a.chart).extension().string();
      if (ext != ".svg" && ext != ".html" && ext != ".htm")
        throw UsageError("plan", "--chart '" + a.chart + "' must end in .svg or .html");
    }
    const bool preset = !a.preset.empty();
    const plan::PlanModel m = plan::load_plan_model(preset ? a.preset : a.model, preset);
    const plan::Plan p = plan::make_plan(m, r);
    if (!a.chart.empty()) {
      const std::string ext = std::filesystem::path(a.chart).extension().string();
      const std::string chart = ext == ".svg" ? plan::plan_chart_svg(p) : plan::plan_chart_html(p);
      io::write_file_atomic(a.chart, chart.data(), chart.size());  // never a half-written chart
      std::fprintf(stderr, "chart written to %s\n", a.chart.c_str());
    }
    if (a.json)
      std::cout << lowbit::json_text(plan::plan_to_json(p), 2) << "\n";
    else
      std::cout << plan::plan_table(p);
  });
}

}  // namespace

LOWBIT_COMMAND(
    "plan", 20,
    "Where the memory goes (weights / KV / workspace) for every W/A/KV configuration, what fits, and "
    "what to try first.\nExample: lowbit plan --preset llama-3-8b --ctx 8192 --concurrency 16 --device l4",
    setup);
