// Quantizing a loaded model in memory under a recipe: the one code path behind `lowbit quantize` (offline,
// then quant/checkpoint_writer.h writes it) and `lowbit run --quantize` (online).
//
// Order of work per decoder layer:
//   0. the recipe's rotation (quant/rotate.h), on the dense weights before anything else
//   1. statistics of the layer's inputs from calibration (GPTQ/AWQ: layer by layer, the forward stopping
//   after the
//      layer, so earlier layers are already quantized and only one layer's Gram matrices are alive at a time;
//      imatrix / SmoothQuant / static activation scales / KV scales: one pass for all layers without Gram
//      matrices)
//   2. SmoothQuant scales folded into the RMSNorms (smoothquant+...)
//   3. AWQ scales searched and folded (norms, v->o, up->down)
//   4. each matrix quantized (rtn | rtn-mse | imatrix | gptq | awq's final RTN) and its error measured
//   5. activation route (+ static per-tensor scale) and KV-cache scales set
// tok_embed and lm_head (when not ignored) use RTN / RTN-MSE: no calibration statistics are gathered for
// them.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>  // complete type: QuantReport holds json members (one = json::array())
#include <optional>
#include <string>
#include <vector>

#include "model/model.h"
#include "quant/calibration.h"
#include "quant/recipe.h"

namespace lowbit::quant {

struct QuantizeOptions {
  const CalibData* calib = nullptr;  // required when recipe.needs_calibration()
  bool requantize = false;  // allow quantizing already-quantized weights (from their dequantized values)
  bool progress = true;     // progress bar on stderr
  int batch_seqs = 8;       // calibration sequences per forward pass
};

struct TensorReport {
  std::string name, hf_name;
  int64_t rows = 0, cols = 0;
  bool quantized = false;
  std::string scheme;        // QuantScheme string, or the dense dtype ("f32", "bf16", ...)
  std::string layout;        // checkpoint layout ("pack-quantized", ...) or "dense"
  std::string reason;        // why it stays unquantized
  std::string algorithm;     // rtn | rtn-mse | imatrix | gptq | awq (+ smoothquant)
  std::string scale_source;  // "absmax", "mse clip search", "mse clip search (imatrix weights)", "gptq", ...
  double bpw = 0;
  int64_t bytes = 0;
  double rel_error_w = -1;    // ||W - Q||_F / ||W||_F (W after any folded scales)
  double rel_error_out = -1;  // sqrt(trace(D G D^T) / trace(W G W^T)) on calibration inputs, when measured
  double rel_error_out_rtn = -1;  // the same for plain RTN of the same weights (GPTQ only)
  int64_t error_rows = 0;         // rows the output errors were measured on (every k-th of large matrices)
  FormatId act_format = FormatId::F32;
  bool act_static = false;
  float act_scale = 0;                        // static per-tensor activation scale (absmax / format max)
  float act_clip = 1;                         // INT4 / NVFP4 activations: the per-token absmax clipping ratio
  ActScale act_block_scale = ActScale::Amax;  // NVFP4 activations: the block-scale rule
  nlohmann::json to_json() const;
};

struct QuantReport {
  Recipe recipe;
  std::vector<TensorReport> tensors;
  nlohmann::json layers = nlohmann::json::array();  // per layer: smoothquant / awq choices, KV absmax
  std::vector<std::string> warnings;
  nlohmann::json calibration;  // CalibData::to_json() or null
  bool requantized = false;
  bool tied_embeddings = false;  // lm_head shares tok_embed's storage (counted once)
  nlohmann::json rotation;       // quant/rotate.h's record when the recipe rotates the model, else null
  nlohmann::json budget;         // quant/budget.h's allocation (lowbit quantize --budget), else null
  nlohmann::json tune;           // quant/tune.h's record when the recipe tunes scales (tune=STEPS), else null
  double seconds = 0;
  uint64_t peak_rss_bytes = 0;
  // Where the seconds went (wall time): calibration forwards and statistics, the AWQ / SmoothQuant scale
  // search and SpinQuant's rotation training, quantization itself (GPTQ, RTN and its clip search), and the
  // output-error report rows, and scale tuning.
  struct Phases {
    double calibration = 0, search = 0, quantize = 0, report = 0, tune = 0;
  } phase_seconds;

  // Bits per weight over the quantized matrices only, and over every weight matrix (dense ones at their
  // dtype).
  double bpw_quantized() const;
  double bpw_all() const;
  nlohmann::json to_json() const;
  // Human-readable summary: one row per tensor role group (min/mean/max error), then totals.
  std::string summary_table() const;
};

// Loads the calibration windows the recipe asks for (nullopt when the recipe needs none and gives no file).
std::optional<CalibData> load_recipe_calibration(const Model& m, const Recipe& r,
                                                 std::vector<std::string>* warnings);

// Quantizes `m` in place. Throws UsageError("quant") for a recipe that does not fit the model, missing
// calibration, or already-quantized weights without o.requantize (explaining why and what to do).
QuantReport quantize_model(Model& m, const Recipe& r, const QuantizeOptions& o = {});

// Online quantization at load time (`lowbit run --quantize`): quantize_model, with the extra time and the
// peak RSS recorded in the report (when given).
void quantize_model_online(Model& m, const Recipe& r, const QuantizeOptions& o = {},
                           QuantReport* report = nullptr);

}  // namespace lowbit::quant
