// Memory planner (`lowbit plan`): where the bytes of a deployment go (weights / KV cache / workspace) for
// every W/A/KV configuration, what fits a device or budget, and which configuration to try first (and why).
//
// Arithmetic, all in bytes, exact integers (formulas in docs/plan.md):
//   weights    = sum over the quantized linear matrices of the bytes lowbit's checkpoint stores for them
//                (model/quantized_checkpoint.h packed_checkpoint_bytes: codes with int32 packing / row
//                padding, scales incl. second-level ones, zero points, the 16-byte weight_shape tensor of
//                packed layouts; equal to a `lowbit quantize` checkpoint's tensor bytes, tested in
//                tests/plan/test_plan_checkpoint)
//              + 2 bytes per parameter of every tensor left in 16 bits (embeddings, lm_head, norms, biases,
//              and any
//                matrix the scheme cannot be applied to, e.g. a row shorter than the group)
//   KV/token   = 2 (K,V) x layers x kv_heads x (ceil(head_dim x bits / 8) + groups_per_head x scale_bytes)
//   KV         = concurrency x (tokens x KV/token + residual window extra), tokens = ctx + output
//   workspace  = the engine's float32 activation buffers for one forward (see Workspace below)
//   total      = weights + KV + workspace + device reserve
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "arch/config.h"
#include "core/memory.h"
#include "kv/kv_cache.h"

namespace lowbit::plan {

// ---------------------------------------------------------------- configurations (plan.cpp)

// One weight/activation precision candidate. Linear layers (q,k,v,o,gate,up,down) are quantized with
// `scheme`; everything else stays 16-bit as in the quantizer's default ignore list.
struct WeightConfig {
  std::string id;      // "bf16", "fp8-w", "w8a8-int8", "w8a8-fp8", "w4a16", "w4a16-asym", "nf4", "nf4-dq",
                       // "mxfp4", "nvfp4", "stored" (a checkpoint's bytes as stored)
  std::string label;   // "W4A16 INT4 g128 sym"
  std::string scheme;  // formats/scheme.h string for the linear layers; "" = 16-bit (BF16)
  std::string activations;  // "bf16", "int8 per-token dynamic", ...
  std::string family;       // baseline | weight-only | w8a8 | fp4 | stored
};
const std::vector<WeightConfig>& weight_configs();
const WeightConfig& weight_config(std::string_view id);  // UsageError when unknown

// One KV-cache element format.
struct KvConfig {
  std::string id;       // "bf16", "fp8", "int8", "int4"
  std::string label;    // "INT4 g32 + f16 scale, 128-token BF16 window"
  int elem_bits = 16;   // bits per stored K/V element
  int group = 0;        // elements (along head_dim) sharing one per-token scale; 0 = per-layer static scale
  int scale_bytes = 0;  // bytes per group scale (+ zero point)
  int64_t residual_window = 0;  // most recent tokens kept in BF16 per sequence (KIVI-style)
  std::string scale_note;       // how its scales are stored, stated in reports
  std::string engine_spec;  // the lowbit engine's --kv-cache spec for it (device "cpu" plans use its layout)
};
const std::vector<KvConfig>& kv_configs();
const KvConfig& kv_config(std::string_view id);  // UsageError when unknown

// ---------------------------------------------------------------- arithmetic (plan.cpp)

// KV bytes one token occupies across all layers (K and V).
int64_t kv_bytes_per_token(const ModelConfig& c, const KvConfig& kv);
// The engine's allocation for F32/F16/BF16 (equal to KvCache(c, 1, 1, d).bytes_per_token()).
int64_t kv_bytes_per_token(const ModelConfig& c, KvDtype d);
// What lowbit's own engine allocates for this KV configuration (its --kv-cache engine_spec): exact, pages and
// staging included. Plans for device "cpu" use it instead of the generic formula.
KvFootprint engine_kv_footprint(const ModelConfig& c, const KvConfig& kv);
// One sequence holding `tokens` tokens, including the BF16 residual window's extra bytes.
int64_t kv_bytes_per_sequence(const ModelConfig& c, const KvConfig& kv, int64_t tokens);

struct WeightBytes {
  int64_t elements = 0;     // quantized element codes (bytes)
  int64_t scales = 0;       // scales incl. second-level (NF4 double quant, NVFP4 tensor scale)
  int64_t zeros = 0;        // zero points (asymmetric INT)
  int64_t unquantized = 0;  // 16-bit tensors: embeddings, lm_head, norms, biases, skipped matrices
  int64_t quantized_params = 0, unquantized_params = 0;
  std::vector<std::string> unquantized_names;  // "model.embed_tokens (16-bit)", "lm_head (16-bit)", ...
  std::vector<std::string> notes;              // e.g. "down_proj kept 16-bit: group 128 > row 64"
  int64_t metadata = 0;                        // per-matrix shape tensors of packed layouts (16 bytes each)
  int64_t total() const { return elements + scales + zeros + metadata + unquantized; }
};
// scheme "" = every tensor 16-bit (= 2 x n_params()).
WeightBytes weight_bytes(const ModelConfig& c, const std::string& scheme);

// The engine's activation buffers for one forward pass (model/decoder.cpp, float32):
//   hidden     = T x (3 dim + 2 q_dim + 2 kv_dim + 2 ffn) x 4,  T = max(min(prefill_chunk, tokens),
//   concurrency) attention  = attn_workers x (n_heads / n_kv_heads) x tokens x 4   (score rows, one per
//   worker) logits     = concurrency x (vocab + dim) x 4                      (last-position logits of each
//   sequence)
struct Workspace {
  int64_t hidden = 0, attention = 0, logits = 0;
  int64_t batch_tokens = 0;  // T
  int64_t total() const { return hidden + attention + logits; }
};
Workspace workspace_bytes(const ModelConfig& c, int64_t tokens, int64_t concurrency, int prefill_chunk,
                          int attn_workers);

// ---------------------------------------------------------------- devices (plan_devices.cpp)

struct Device {
  std::string id;                 // "l4", "h100", "cpu", "budget"
  std::string name;               // "NVIDIA L4 (24 GB)"
  int64_t memory_bytes = 0;       // what the device has (nvidia-smi memory.total; cpu: MemTotal)
  int64_t reserve_bytes = 0;      // held back for the runtime (CUDA context, library workspaces)
  double compute_capability = 0;  // 0 for cpu / budget
  bool is_cpu = false, is_budget = false;
  bool budget_override = false;  // --device X --budget B: X's capabilities, B's memory (no reserve)
  bool bf16 = true;              // fast BF16 matmul
  bool int8 = true;              // INT8 tensor cores / VNNI / AMX-INT8
  bool fp8 = false;              // FP8 tensor cores (cc >= 8.9)
  bool fp4 = false;              // FP4 tensor cores (Blackwell, cc >= 10.0)
  int attn_workers = 1;          // attention score rows alive at once (cpu: threads)
  std::string features;          // cpu: feature summary; gpu: "sm_89"
  int64_t usable() const { return memory_bytes - reserve_bytes; }
};
const std::vector<Device>& device_presets();  // GPUs; "cpu" is built on demand
// Preset by name (case-insensitive, aliases such as "rtx4090", "a100-80gb"); "cpu" = this machine.
// UsageError with "did you mean" suggestions when unknown.
Device device_by_name(std::string_view name);
// A plain memory budget (no reserve, capabilities unknown: treated as a generic GPU with BF16/INT8).
Device budget_device(int64_t bytes);
// Sizes ("24GiB", "80GB") for --memory / --budget: core/memory.h.
using ::lowbit::parse_bytes;

// How a configuration runs on a device.
struct Support {
  std::string level;  // "native" | "dequant" (weight-only kernel widens to 16-bit) | "emulated" | "n/a"
  std::string note;
};
Support weight_support(const Device& d, const WeightConfig& w);
Support kv_support(const Device& d, const KvConfig& kv);

// ---------------------------------------------------------------- models (plan_presets.cpp, plan_input.cpp)

struct ModelPreset {
  std::string id;     // "llama-3-8b"
  std::string hf_id;  // "meta-llama/Meta-Llama-3-8B"
  ModelConfig config;
};
const std::vector<ModelPreset>& model_presets();
// Case-insensitive match on id or hf_id; UsageError "unknown model preset 'X'; did you mean 'a', 'b'?".
const ModelPreset& model_preset(std::string_view name);
// Up to `max` candidates within a plausible edit distance of `name`, closest first.
std::vector<std::string> suggest_names(std::string_view name, const std::vector<std::string>& candidates,
                                       size_t max = 3);

struct PlanModel {
  ModelConfig config;
  // Every file an engine reads to serve the model, with its size on disk (headers, configs, tokenizer files
  // included): a Hugging Face directory's model files (checkpoint_model_files), the .gguf file, or a llama2.c
  // .bin with its tokenizer.bin. Empty for presets and bare config.json files.
  std::vector<std::pair<std::string, int64_t>> files;
  int64_t files_bytes() const {
    int64_t n = 0;
    for (const auto& f : files) n += f.second;
    return n;
  }
  std::string name;                     // what --model/--preset said
  std::string compare_model;            // what to pass to `lowbit compare --model` (HF id for presets)
  std::string source;                   // preset | hf | hf-config | hf-quantized | gguf | llama2c
  std::optional<int64_t> stored_bytes;  // tensor bytes as stored (quantized HF checkpoints, GGUF)
  std::string stored_desc;              // "compressed-tensors W4A16 (safetensors headers)"
};
// A preset name (preset=true), or a path: HF directory, config.json, .gguf, llama2.c .bin (header only).
// Any unreadable or inconsistent model is a UsageError naming the path and what to do.
PlanModel load_plan_model(const std::string& name_or_path, bool preset);
// Reads the 28-byte llama2.c header from memory (checked); config_from_llama2c validates the rest.
ModelConfig config_from_llama2c_header(const uint8_t* bytes, size_t n, const std::string& name_for_errors);

// ---------------------------------------------------------------- the plan (plan.cpp, plan_recommend.cpp)

struct PlanRequest {
  std::vector<int64_t> ctx{4096};  // context lengths (prompt tokens) to plan for
  int64_t concurrency = 1;         // sequences served at once
  int64_t output = 0;              // generated tokens per sequence; they occupy the KV cache too
  Device device = budget_device(int64_t(24) << 30);
  int prefill_chunk = 512;           // engine default (model/generate.h)
  std::vector<std::string> weights;  // weight config ids to plan (empty = all)
  std::vector<std::string> kv;       // kv config ids (empty = all)
  // Multi-GPU hand-off (plan_parallel.cpp): vLLM's tensor-parallel / pipeline-parallel split over tp x pp
  // devices of `device`, each allowed memory x gpu_memory_utilization (vLLM's --gpu-memory-utilization).
  int tp = 1, pp = 1;
  double gpu_memory_utilization = 0.9;
  bool utilization_given = false;  // --gpu-memory-utilization passed: plan under vLLM's limit even at 1x1
  bool parallel() const { return tp > 1 || pp > 1 || utilization_given; }
  int64_t device_limit()
      const;  // per device: memory x gpu_memory_utilization (whole memory when !parallel())
};

// ---------------------------------------------------------------- multi-GPU split (plan_parallel.cpp)

// How vLLM shards a dense decoder over tp x pp devices (its rules, re-derived; docs/plan.md "Multi-GPU"):
//   q/o: n_heads / tp heads per rank (vLLM requires tp | n_heads);
//   k/v: n_kv_heads / tp per rank, or, when tp >= n_kv_heads, one KV head per rank replicated tp / n_kv_heads
//        times (vLLM requires tp | n_kv_heads or n_kv_heads | tp); the KV cache holds the same per-rank
//        heads;
//   gate/up split along their output rows, down/o_proj along their input columns (ffn / tp, q_dim / tp);
//   embed_tokens / lm_head vocab-parallel: vocab padded to a multiple of 64, then / tp rows per rank;
//   norms replicated; q/k/v biases follow their heads;
//   pp: layers split as vLLM's get_pp_indices (floor(L / pp) each, the remainder one extra per stage from the
//       second-to-last stage backwards), embedding on the first stage, final norm + lm_head on the last (a
//       tied lm_head gets its own copy of the embedding there when pp > 1).
struct ShardLayout {
  int tp = 1, pp = 1;
  int64_t heads_per_rank = 0, kv_heads_per_rank = 0, kv_head_replicas = 1;
  int64_t ffn_per_rank = 0;
  int64_t vocab_padded = 0, vocab_per_rank = 0;
  std::vector<int64_t> stage_layers;  // layers of each pipeline stage
  int devices() const { return tp * pp; }
};
// UsageError "[plan] ..." when vLLM would refuse the split (tp does not divide n_heads, ...).
ShardLayout shard_layout(const ModelConfig& c, int tp, int pp);
std::vector<int64_t> pp_layer_split(int64_t layers, int pp);
// The config one rank of `stage` computes with: its heads, KV heads, FFN slice and layers.
ModelConfig rank_config(const ModelConfig& c, const ShardLayout& s, int stage);

// One device of pipeline stage `stage` (every tensor-parallel rank of a stage holds the same bytes).
struct StageBytes {
  int stage = 0;
  int64_t layer_begin = 0, layer_end = 0;
  bool embedding = false, lm_head = false;
  WeightBytes weights;                         // this rank's layer matrices, norms and vocab slices
  int64_t embed_bytes = 0, lm_head_bytes = 0;  // the vocab slices inside `weights` (16-bit)
  int64_t kv_per_token = 0;                    // this rank's KV heads x this stage's layers
  int64_t kv = 0;                              // concurrency x tokens on this rank
  Workspace workspace;
  int64_t total = 0;  // weights + kv + workspace + device reserve
  int64_t limit = 0;  // memory x gpu_memory_utilization
  bool fits = false;
  int64_t max_concurrency = 0;  // on this device at these tokens
};
struct ParallelRow {
  std::vector<StageBytes> stages;
  int64_t weights_all_devices = 0, kv_all_devices = 0;  // summed over tp x pp devices
  int64_t peak = 0;                                     // largest device total
  bool fits = false;
};
// Weights of one rank of each stage for a weight configuration (scheme "" = 16-bit).
std::vector<StageBytes> stage_weights(const ModelConfig& c, const ShardLayout& s, const std::string& scheme);
// Fills KV, workspace, totals and fits of `stages` (from stage_weights) at (tokens, concurrency).
ParallelRow parallel_row(const ModelConfig& c, const ShardLayout& s, std::vector<StageBytes> stages,
                         const KvConfig& kv, int64_t tokens, int64_t concurrency, const PlanRequest& r);

// ---------------------------------------------------------------- launch lines (plan_launch.cpp)

// The command line that serves one configuration with an engine ("vllm", "sglang", "llama.cpp"), with only
// flags that engine's argument parser has; `available` = false (and no command) where the engine has no
// setting for the configuration, `notes` saying why or what the line assumes.
struct LaunchLine {
  std::string engine;
  bool available = false;
  std::string command;
  std::vector<std::string> notes;
};
std::vector<LaunchLine> launch_lines(const PlanModel& m, const PlanRequest& r, int64_t ctx,
                                     const std::string& weight_id, const std::string& kv_id);

struct Row {
  std::string weight_id, kv_id;
  WeightBytes weights;
  int64_t kv_per_token = 0;
  int64_t kv_total = 0;
  Workspace workspace;
  int64_t total = 0;  // weights + kv + workspace + reserve
  bool fits = false;
  int64_t max_concurrency = 0;     // largest concurrency that fits at these tokens/sequence
  int64_t max_tokens = 0;          // largest tokens/sequence that fits at this concurrency (0 = none)
  bool max_tokens_capped = false;  // search hit the cap (kMaxTokens)
  Support weight_support, kv_support;
  std::optional<ParallelRow> parallel;  // PlanRequest::parallel(): per-device bytes; total = peak device
};

struct Recommendation {
  std::string weight_id, kv_id;  // empty when nothing fits
  std::string bottleneck;        // "kv" | "weights" | "none"
  bool fits = false;
  std::vector<std::string> reasons;
  std::vector<std::string> commands;  // `lowbit compare ...` lines to run next
};

struct CtxPlan {
  int64_t ctx = 0, tokens = 0;  // tokens = ctx + output
  std::vector<Row> rows;
  Recommendation rec;
  const Row* find(std::string_view w, std::string_view kv) const;
};

struct Plan {
  PlanModel model;
  PlanRequest req;
  std::optional<ShardLayout> shards;  // set when req.parallel()
  std::vector<CtxPlan> per_ctx;
};

constexpr int64_t kMaxTokens = int64_t(1) << 24;  // search cap for the largest context
constexpr int64_t kMaxConcurrency = int64_t(1) << 20;

// Validates the request (ctx > 0, concurrency > 0, output >= 0; UsageError otherwise) and fills every row.
Plan make_plan(const PlanModel& m, const PlanRequest& r);
// Total bytes for one configuration at (tokens, concurrency) on the request's device.
int64_t total_bytes(const ModelConfig& c, const WeightBytes& w, const KvConfig& kv, int64_t tokens,
                    int64_t concurrency, const PlanRequest& r);
// The seed's decision path applied to one context (plan_recommend.cpp).
Recommendation recommend(const Plan& p, const CtxPlan& cp);

// ---------------------------------------------------------------- reports (plan_report.cpp, plan_chart.cpp)

nlohmann::json plan_to_json(const Plan& p);
std::string plan_table(const Plan& p);       // readable text for stdout
std::string plan_chart_svg(const Plan& p);   // total memory vs context, budget line, legend
std::string plan_chart_html(const Plan& p);  // the SVG + the recommendation in one self-contained page

std::string fmt_bytes(double bytes);  // "1.25 GiB"

}  // namespace lowbit::plan
