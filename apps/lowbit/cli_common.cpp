#include "apps/lowbit/cli_common.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/error.h"

#include "core/parallel.h"
#include "kernels/matmul.h"
#include "quant/quantizer.h"
#include "quant/recipe.h"

namespace lowbit::app {

std::string KvFlags::text() const {
  std::string s = cache;
  if (!k.empty()) s += " k=" + k;
  if (!v.empty()) s += " v=" + v;
  if (!evict.empty()) s += " evict=" + evict;
  return s;
}

void add_kv_options(CLI::App* cmd, KvFlags& f, bool with_evict) {
  cmd->add_option(
      "--kv-cache", f.cache,
      "KV cache format: f32 (default), f16, bf16, e4m3, e5m2, int8, int4, int2, fp4, with options after "
      "':' or '+': windowN (recent N tokens kept in F16), rot (Hadamard rotation), prerope (keys "
      "before RoPE), keep:0,-1 (layers kept in F16), head|tensor|token (FP8 scales), scale=X "
      "(calibrated FP8), asym, pertoken, group=N, block=N, budget=N|64MiB, paged. Example: "
      "--kv-cache int4:window32+rot. See docs/kv_cache.md");
  cmd->add_option("--kv-cache-k", f.k, "Format and options for keys only (overrides --kv-cache), e.g. int4");
  cmd->add_option("--kv-cache-v", f.v,
                  "Format and options for values only (overrides --kv-cache), e.g. int2");
  if (with_evict)
    cmd->add_option("--kv-evict", f.evict,
                    "KV eviction: streaming:SINKS+WINDOW (StreamingLLM) or h2o:BUDGET (tokens or %, heavy "
                    "hitters + recent). Example: --kv-evict h2o:25%");
}

void add_quantize_options(CLI::App* cmd, QuantizeFlags& f) {
  cmd->add_option(
      "--quantize", f.recipe,
      "Quantize the weights at load time with a recipe (same forms as lowbit quantize --recipe: W4A16, "
      "W8A8, NF4, int4:g32, W4A16,algo=gptq, a .json file); reports the extra load time and peak memory. "
      "Example: --quantize W4A16,group=32");
  cmd->add_option(
      "--calib", f.calib,
      "Calibration text for --quantize recipes that need it (gptq, awq, imatrix, smoothquant, static "
      "activation scales)");
}

nlohmann::json apply_online_quantization(Model& m, const QuantizeFlags& f, bool quiet) {
  if (f.recipe.empty()) {
    if (!f.calib.empty())
      throw UsageError("cli", "--calib is only used with --quantize; add --quantize RECIPE");
    return nullptr;
  }
  quant::Recipe r = quant::parse_recipe_arg(f.recipe);
  if (!f.calib.empty()) r.calib.file = f.calib;
  std::vector<std::string> warnings;
  auto calib = quant::load_recipe_calibration(m, r, &warnings);
  quant::QuantizeOptions qo;
  qo.calib = calib ? &*calib : nullptr;
  qo.progress = !quiet;
  quant::QuantReport rep;
  quant::quantize_model_online(m, r, qo, &rep);
  for (auto& w : warnings) rep.warnings.push_back(w);
  if (!quiet) {
    std::fprintf(stderr,
                 "quantized online with %s in %.3f s (%.3f bpw over quantized matrices, peak RSS %s)\n",
                 r.name.c_str(), rep.seconds, rep.bpw_quantized(),
                 human_bytes(static_cast<double>(rep.peak_rss_bytes)).c_str());
    for (auto& w : rep.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  }
  return {{"recipe", r.name},
          {"seconds", rep.seconds},
          {"peak_rss_bytes", rep.peak_rss_bytes},
          {"bits_per_weight_quantized", rep.bpw_quantized()},
          {"warnings", rep.warnings}};
}

void print_kv_cache(const KvCache& kv) {
  std::fprintf(stderr, "kv cache: %s, %.2f bytes/token, capacity %lld tokens, %s allocated\n",
               kv.describe().c_str(), kv.bytes_per_token_exact(), (long long)kv.capacity_tokens(),
               human_bytes(static_cast<double>(kv.total_bytes())).c_str());
}

nlohmann::json kv_cache_json(const KvCache& kv) {
  return {{"format", kv.describe()},
          {"bytes_per_token_exact", kv.bytes_per_token_exact()},
          {"capacity_tokens", kv.capacity_tokens()},
          {"bytes", kv.total_bytes()}};
}

std::string human_bytes(double b) {
  const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (b >= 1024 && i < 4) b /= 1024, ++i;
  char buf[32];
  std::snprintf(buf, sizeof buf, i == 0 ? "%.0f %s" : "%.2f %s", b, u[i]);
  return buf;
}

nlohmann::json KernelReport::to_json() const {
  return {{"by_kernel", by_kernel},
          {"by_tensor", by_tensor},
          {"slow_fallback", fallback()},
          {"unfused", unfused}};
}

void KernelReport::print(bool per_tensor) const {
  std::fprintf(stderr, "kernels:");
  for (auto& [k, n] : by_kernel) std::fprintf(stderr, " %s x%d", k.c_str(), n);
  std::fprintf(stderr, "\n");
  if (per_tensor)
    for (auto& [t, k] : by_tensor) std::fprintf(stderr, "  %-24s %s\n", t.c_str(), k.c_str());
  if (fallback()) {
    int n = 0;
    std::string which;
    for (auto& [k, c] : unfused) {
      n += c;
      which += (which.empty() ? "" : ", ") + k + " x" + std::to_string(c);
    }
    std::fprintf(
        stderr,
        "WARNING: %d matrices run the unfused kernel (%s): their rows are dequantized into a buffer, then "
        "multiplied; expect several times lower speed than a fused format (docs/kernels.md lists them). "
        "Run with --kernels to see which.\n",
        n, which.c_str());
  }
}

KernelReport kernel_report(Model& m) {
  KernelReport r;
  for (auto& [name, w] : m.weights.named_matrices()) {
    if (name == "tok_embed") continue;  // embedding rows are gathered, not multiplied
    std::string k = matmul_kernel_name(*w);
    r.by_tensor[name] = k;
    r.by_kernel[k]++;
    if (k.find(".deq.") != std::string::npos) r.unfused[k]++;
  }
  return r;
}

std::vector<int> parse_concurrency_list(const std::string& s, const std::string& module,
                                        const std::string& flag) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    long c = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != 0 || c < 1 || c > 4096)
      throw UsageError(
          module, flag + " wants positive integers separated by commas, got '" + s + "' (example: 1,4,8)");
    v.push_back(static_cast<int>(c));
  }
  if (v.empty()) throw UsageError(module, flag + " is empty (example: 1,4,8)");
  return v;
}

void add_rope_scaling_option(CLI::App* cmd, std::string& spec) {
  cmd->add_option(
      "--rope-scaling", spec,
      "Extend the model's context by linear RoPE interpolation, e.g. linear:2 (positions / 2, context x "
      "2); quality past the trained context is the model's, measure it with eval");
}

void apply_rope_scaling(Model& m, const std::string& spec, bool quiet) {
  if (spec.empty()) return;
  ModelConfig& c = m.config;
  const std::string prefix = "linear:";
  char* end = nullptr;
  const double f = spec.rfind(prefix, 0) == 0 ? std::strtod(spec.c_str() + prefix.size(), &end) : 0.0;
  if (!end || *end != 0 || end == spec.c_str() + prefix.size() || !(f >= 1.0 && f <= 64.0))
    throw UsageError("cli",
                     "--rope-scaling '" + spec + "': expected linear:F with F in [1, 64], e.g. linear:2");
  if (c.rope_scaling.type != "none")
    throw UsageError("cli", "--rope-scaling: the model already scales RoPE (" + c.rope_scaling.type +
                                ", factor " + std::to_string(c.rope_scaling.factor) + "); drop the flag");
  const int64_t before = c.max_seq_len;
  c.rope_scaling.type = "linear";
  c.rope_scaling.factor = f;
  c.max_seq_len = static_cast<int64_t>(std::floor(static_cast<double>(before) * f));
  if (!quiet)
    std::fprintf(stderr, "rope scaling: linear x%g, context %lld -> %lld tokens\n", f, (long long)before,
                 (long long)c.max_seq_len);
}

void check_context(const ModelConfig& c, int64_t tokens, const std::string& flag, const std::string& module) {
  if (tokens > c.max_seq_len)
    throw UsageError(module, flag + " " + std::to_string(tokens) + " exceeds the model's context of " +
                                 std::to_string(c.max_seq_len) + " tokens; use " + flag + " " +
                                 std::to_string(c.max_seq_len) +
                                 " or less, or extend the context with --rope-scaling linear:F");
}

void add_threads_option(CLI::App* cmd, int& threads, const std::string& help) {
  // Unset means all cores (threads stays 0); a given value must be a real thread count.
  cmd->add_option("-t,--threads", threads, help)->check(CLI::Range(1, kMaxThreads));
}

void apply_threads(int threads) {
  if (threads == 0) return;  // add_threads_option has refused anything outside [1, kMaxThreads]
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (cores > 0 && threads > cores)
    std::fprintf(
        stderr,
        "warning: --threads %d on %d hardware threads: the threads share cores and every parallel step "
        "waits for the slowest; expect lower speed than --threads %d\n",
        threads, cores, cores);
  set_num_threads(threads);
}

void add_gguf_acts_option(CLI::App* cmd) {
  cmd->add_option_function<std::string>(
         "--gguf-acts", [](const std::string& v) { set_q8_residual_pass(v == "q8x2"); },
         "Activations of the GGUF block kernels (Q4_0 .. Q8_0, Q2_K .. Q6_K, IQ4_NL, MXFP4): q8 (default: "
         "rounded to 8-bit blocks of 32, as llama.cpp computes) or q8x2 (plus the block-rounded residual: "
         "~16-bit activations, results closer to the file's own values, prefill about half as fast; kernel "
         "names end in x2, e.g. q4_k.q8vnni16x2.avx512). Example: --gguf-acts q8x2")
      ->check(CLI::IsMember({"q8", "q8x2"}));
}

}  // namespace lowbit::app
