// Quantization recipes: what to quantize, to which format, with which algorithm, and with which calibration.
//
// A recipe comes from a JSON file or a CLI shorthand (parse_recipe_arg):
//   W4A16 | W4A16_ASYM | W8A16 | W8A8 | W4A8 | FP8 | FP8_DYNAMIC | FP8_BLOCK | NF4 | NVFP4 | MXFP4 ...
//   presets W4A16KV8, W4A4KV4, W3A16 ...                                   W/A/KV notation, parsed into its
//   parts int4:g32:sym:f16                                               a bare QuantScheme (weight-only)
// each optionally followed by ",key=value" refinements: algo=gptq, scheme=int4:g32, group=32, act=int8,
// act=int4, act=nvfp4, act_clip=0.9, act_scale=mse, act_static=1, kv=e4m3, kv_strategy=head, alpha=0.5,
// samples=32, length=256, seed=0, calib=FILE, ignore=PATTERN, rotate=quarot|spinquant|duquant, rotate_seed=0,
// rotate_r1=1, rotate_r2=1, rotate_r4=1, rotate_factors=FILE, spin_steps=24, spin_lr=1.5, spin_tokens=2048,
// spin_loss=kl|ce, duquant_block=128, duquant_steps=8, tune=64, tune_lr=0.001, tune_batch=4, tune_norms=1.
//
// JSON form (every key optional except that some scheme must result; unknown keys are named in the error):
//   { "name": "...", "preset": "W4A16", "scheme": "int4:g32:sym:f16", "algorithm": "gptq",
//     "activations": {"format": "int8", "dynamic": true} | {"format": "int4", "dynamic": true, "clip": 0.9}
//                    | {"format": "nvfp4", "clip": 1, "scale": "amax"|"mse"} | null,
//     "kv_cache": {"format": "e4m3", "strategy": "tensor"|"head"} | null,
//     "overrides": [{"pattern": "*.w_down", "scheme": "int8:channel"}],
//     "ignore": ["lm_head", {"pattern": "re:.*embed.*", "reason": "..."}],
//     "calibration": {"file": "...", "samples": 32, "length": 256, "seed": 0},
//     "gptq": {"block_size": 128, "damp": 0.01, "act_order": true, "target": "layer"|"float",
//              "target_damp": 1},
//     "awq": {"grid": 20, "clip": true}, "smoothquant": {"alpha": 0.5},
//     "unquantized_dtype": "source"|"f32"|"f16"|"bf16",
//     "rotation": null | "quarot" | {"method": "quarot", "seed": 0, "r1": true, "r2": true, "r4": true,
//                                    "factors": "hadamards.safetensors"}
//                 | {"method": "spinquant", ..., "steps": 24, "lr": 1.5, "tokens": 2048, "loss": "kl"}
//                 | {"method": "duquant", ..., "block": 128, "greedy_steps": 8},
//     "tune": null | {"steps": 64, "lr": 0.001, "batch": 4, "norms": true} }
// Patterns match a matrix's lowbit name ("layers.3.wq", "lm_head", "tok_embed") or its Hugging Face module
// name
// ("model.layers.3.self_attn.q_proj"); "re:" prefix = regular expression (compressed-tensors style),
// otherwise a glob (* and ?). Later overrides win over earlier ones; ignore wins over overrides.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "arch/config.h"
#include "formats/scheme.h"
#include "kernels/weight.h"

namespace lowbit::quant {

enum class Algorithm { Rtn, RtnMse, Imatrix, Gptq, Awq };
const char* algorithm_name(Algorithm a);  // "rtn", "rtn-mse", "imatrix", "gptq", "awq"

struct ActivationSpec {
  FormatId format = FormatId::F32;  // F32 = not quantized (A16); INT8, INT4, NVFP4 or an FP8 format otherwise
  bool dynamic = true;              // true: per-token scales at run time; false: calibrated static per-tensor
  // INT4 and NVFP4 only: the per-token scale is clip * absmax / 7, codes in [-7, 7] (INT4), or the per-token
  // global scale clip * absmax / (6 * 448) (NVFP4); values past the clipped range saturate. 1 = absmax;
  // QuaRot clips 4-bit activations at 0.9.
  float clip = 1.0f;
  // NVFP4 only: how each block of 16 gets its E4M3 scale (kernels/weight.h ActScale): amax (NVIDIA's rule,
  // what vLLM computes) or mse (the least squared error among nearby scales; lowbit's engine only).
  ActScale scale = ActScale::Amax;
  bool enabled() const { return format != FormatId::F32; }
};

struct KvSpec {
  FormatId format = FormatId::F32;  // F32 = KV cache stays 16-bit (no scales calibrated)
  bool per_head = false;            // k_scale/v_scale of shape [n_kv_heads] instead of [1]
  bool enabled() const { return format != FormatId::F32; }
};

struct CalibSpec {
  std::string file;   // any text file; empty = none given
  int samples = 32;   // number of windows
  int length = 256;   // tokens per window (BOS + length-1 tokens of text), capped at the model context
  uint64_t seed = 0;  // window start positions
};

// QuaRot-style rotation of the dense model before quantization (quant/rotate.h): RMSNorm scales folded into
// the linears, then R1 (residual stream), R2 (per head, V and O) and R4 (down_proj input, online).
// SpinQuant starts R1 / R2 from QuaRot's and learns them on the calibration text (train/spinquant.h).
struct RotationSpec {
  std::string method;  // "" = none; "quarot"; "spinquant"; "duquant"
  uint64_t seed = 0;   // random signs of R1's Hadamard (or the Gaussian of its QR fallback)
  bool r1 = true, r2 = true, r4 = true;
  std::string factors;  // safetensors file of extra Hadamard factors by order (orders no construction gives)
  // SpinQuant: Cayley SGD steps, step size, calibration tokens per step (spin_steps, spin_lr, spin_tokens).
  int spin_steps = 24;
  double spin_lr = 1.5;
  int64_t spin_tokens = 2048;
  std::string spin_loss = "kl";  // "kl" (from the float model) or "ce" (next-token cross-entropy): spin_loss
  // DuQuant (quant/duquant.h): channels per block (0 = 128 where it divides hidden_size, else its largest
  // divisor below) and greedy rotation steps per block (duquant_block, duquant_steps).
  int64_t duquant_block = 0;
  int duquant_steps = 8;
  // Explicit matrices used instead of generated ones (row-major, x <- R x): R1 [dim, dim], R2 [head_dim,
  // head_dim]; SpinQuant's learned rotations. Empty = generated from the seed.
  std::vector<double> r1_matrix, r2_matrix;
  bool enabled() const { return !method.empty(); }
};

struct TensorRule {
  std::string pattern;  // glob, or "re:REGEX"
  QuantScheme scheme;   // overrides only
  std::string reason;   // ignore rules: why the tensor stays unquantized
};

// Scale tuning after quantization (train/tune_scales.h): Adam on the stored scales and the RMSNorm gammas,
// minimising the KL divergence from the float model on the calibration windows. steps = 0: off.
struct TuneSpec {
  int steps = 0;
  double lr = 1e-3;
  int batch = 4;      // calibration windows per step
  bool norms = true;  // tune the RMSNorm gammas too
  bool enabled() const { return steps > 0; }
};

struct Recipe {
  std::string name;     // preset or file name, for reports
  QuantScheme weights;  // default scheme for every decoder linear layer
  Algorithm algorithm = Algorithm::Rtn;
  bool smoothquant = false;  // "smoothquant+rtn" / "smoothquant+gptq"
  float smoothquant_alpha = 0.5f;
  int gptq_block = 128;
  float gptq_damp = 0.01f;     // fraction of the mean Hessian diagonal added to the diagonal
  bool gptq_act_order = true;  // columns by decreasing Hessian diagonal, with static groups
  // "layer": each layer reproduces its own float outputs on the inputs the quantized layers before it give
  // (the GPTQ paper's objective); "float": it reproduces the float model's outputs from those inputs as the
  // activation route rounds them (asymmetric calibration, gptq.h fit_float_target)
  std::string gptq_target = "layer";
  // The float target's ridge toward W, as a fraction of the mean Hessian diagonal (fit_float_target): the fit
  // is made on the calibration text and, unregularised, follows it too closely (docs/quant.md)
  float gptq_target_damp = 1.0f;
  int awq_grid = 20;     // alpha in {0, 1/grid, ..., 1}
  bool awq_clip = true;  // MSE clip search weighted by the (scaled) input energy after the scaling
  ActivationSpec act;
  KvSpec kv;
  CalibSpec calib;
  std::vector<TensorRule> overrides;
  std::vector<TensorRule> ignore;            // default: tok_embed and lm_head
  std::string unquantized_dtype = "source";  // source | f32 | f16 | bf16
  RotationSpec rotation;
  TuneSpec tune;
  std::vector<std::string> notes;  // what the shorthand left unstated and how it was filled in

  bool needs_calibration() const;  // algorithm / smoothquant / static activations / KV scales / imatrix
  nlohmann::json to_json() const;  // normalised, complete form (round-trips through recipe_from_json)
};

// The shortest decimal that reads back as f (0.9f -> 0.9, not 0.899999976): how clip ratios go into JSON.
double short_decimal(float f);

// Presets by name (case-insensitive); nullopt when unknown.
std::optional<Recipe> preset_recipe(const std::string& name);
std::vector<std::string> preset_names();

// Parses the W/A/KV notation ("W4A16", "W8A8", "W4A16KV8", "W4A4KV4"); nullopt if `s` is not in it. Fills
// weights/activations/KV and records in `notes` every choice the notation leaves open.
std::optional<Recipe> parse_wakv(const std::string& s);

// JSON recipe; UsageError("quant", ...) naming unknown keys, bad values and where they are.
Recipe recipe_from_json(const nlohmann::json& j, const std::string& where = "recipe");
// A path to a .json file, or a shorthand (see top of file).
Recipe parse_recipe_arg(const std::string& arg);

// How one weight matrix is treated under a recipe.
struct TensorPlan {
  std::string name;     // lowbit name: "layers.0.wq"
  std::string hf_name;  // "model.layers.0.self_attn.q_proj"
  int64_t rows = 0, cols = 0;
  bool quantize = false;
  QuantScheme scheme;  // when quantize
  std::string reason;  // when !quantize
  ActivationSpec act;  // activation route for this matrix (none for unquantized ones)
};

// Lowbit matrix names ("tok_embed", "layers.{i}.wq", ..., "lm_head") for a config, in named_matrices() order.
std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> matrix_shapes(const ModelConfig& c);
bool pattern_matches(const std::string& pattern, const std::string& name);

// Resolves the recipe against a model: one plan per matrix. Throws UsageError("quant") explaining every
// problem (a group that does not fit a matrix, an activation format the kernels cannot serve, ...). Warnings
// that do not stop the run (ragged last groups, W4A4 without rotation, ...) are appended to `warnings`.
std::vector<TensorPlan> plan_recipe(const Recipe& r, const ModelConfig& c,
                                    std::vector<std::string>* warnings);

}  // namespace lowbit::quant
