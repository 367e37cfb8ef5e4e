// Helpers shared by the CLI commands: model options, human-readable numbers, kernel reports.
#pragma once
#include <CLI/CLI.hpp>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "kv/kv_cache.h"
#include "kv/kv_formats.h"
#include "model/model.h"

namespace lowbit::app {

std::string human_bytes(double bytes);  // "1.25 GiB"

// Which kernel serves each weight matrix: {"f32.avx512": ["layers.0.wq", ...]} collapsed to counts, and
// whether any slow fallback (the unfused kernel) ran.
struct KernelReport {
  std::map<std::string, int> by_kernel;          // kernel -> number of matrices
  std::map<std::string, std::string> by_tensor;  // matrix name -> kernel
  // Matrices on the unfused kernel (`deq`: each row dequantized into a buffer, then dot products): kernel ->
  // count. No fused kernel serves their format / group on this ISA tier (INT3 / INT2, FP6, odd groups, Q2_K /
  // Q3_K prefill, or every format below the avx512 tier), so expect several times lower speed than a fused
  // one.
  std::map<std::string, int> unfused;
  bool fallback() const { return !unfused.empty(); }
  nlohmann::json to_json() const;
  void print(bool per_tensor) const;  // to stderr
};
KernelReport kernel_report(Model& m);

// Parses a comma-separated list of concurrency levels ("1,4,8"), each in [1, 4096]; UsageError naming the
// flag and an example otherwise.
std::vector<int> parse_concurrency_list(const std::string& s, const std::string& module,
                                        const std::string& flag);

// The KV-cache flags every command that runs the model shares: --kv-cache, --kv-cache-k, --kv-cache-v and
// (where the command can honour it) --kv-evict. spec() parses them once (UsageError naming the bad token).
struct KvFlags {
  std::string cache = "f32", k, v, evict;
  KvCacheSpec spec() const { return parse_kv_spec(cache, k, v, evict); }
  std::string text() const;  // what the user asked for, for reports: "int4:window32 k=int8 evict=h2o:50%"
};
void add_kv_options(CLI::App* cmd, KvFlags& f, bool with_evict = true);
// One line on stderr: the cache's format, exact bytes per token, capacity in tokens and bytes allocated.
void print_kv_cache(const KvCache& kv);
nlohmann::json kv_cache_json(const KvCache& kv);

// --quantize RECIPE [--calib FILE]: online quantization at load time, shared by run, eval and bench.
struct QuantizeFlags {
  std::string recipe, calib;
};
void add_quantize_options(CLI::App* cmd, QuantizeFlags& f);
// Quantizes m in place when a recipe was given; returns the report ({"recipe", "seconds", "peak_rss_bytes",
// "bits_per_weight_quantized", "warnings"}) or null. Prints a line (and warnings) to stderr unless quiet.
nlohmann::json apply_online_quantization(Model& m, const QuantizeFlags& f, bool quiet);

// --rope-scaling linear:F: extends the model's context F-fold by linear position interpolation (positions
// divided by F in RoPE; Hugging Face's rope_scaling {"type": "linear"}), for models whose config has no RoPE
// scaling.
// --ctx / -p past the model's context are refused unless this is given.
void add_rope_scaling_option(CLI::App* cmd, std::string& spec);
// Applies a non-empty spec to m's config (and prints one line on stderr unless quiet); UsageError when the
// spec is malformed or the model already scales RoPE.
void apply_rope_scaling(Model& m, const std::string& spec, bool quiet);
// A token count given by `flag` (run --ctx, bench -p) must fit the model's context (after --rope-scaling):
// UsageError naming the flag, the limit and the way out otherwise.
void check_context(const ModelConfig& c, int64_t tokens, const std::string& flag, const std::string& module);

// -t,--threads: optional; when given it must be in [1, kMaxThreads] (CLI error otherwise). 0 (unset) = all
// cores.
constexpr int kMaxThreads = 1024;
void add_threads_option(CLI::App* cmd, int& threads,
                        const std::string& help = "Threads (default: all cores)");
// Applies --threads (0 = all cores; other values come checked from add_threads_option); warns on stderr when
// it exceeds the hardware threads.
void apply_threads(int threads);

// --gguf-acts q8|q8x2: the activation rounding of the GGUF block kernels (kernels/matmul.h,
// set_q8_residual_pass), applied when the command line is parsed.
void add_gguf_acts_option(CLI::App* cmd);

}  // namespace lowbit::app
