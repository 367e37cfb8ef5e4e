// Scale tuning: after a model is quantized, the numbers it still stores as floats (every scale cell of its
// quantized matrices, tensor/qtensor.h rescale_grid, and the RMSNorm gammas) are tuned end to end so that
// the quantized network's next-token distribution moves toward the float model's on calibration text: Adam
// on the log of a factor per cell and per gamma channel, minimising KL(float || quantized). The codes stay
// as quantization chose them and no byte is added (EfficientQAT's end-to-end training of the quantization
// parameters; AQLM / QuIP#'s fine-tuning of the continuous parameters). GPTQ and AWQ fit one layer at a
// time to its own inputs; this sees the whole network and the loss that evaluation measures.
//
// The backward pass is libtorch's (train/torch_decoder.h); this header includes no torch.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

#include "formats/format.h"
#include "model/model.h"

namespace lowbit::train {

struct TuneOptions {
  int steps = 0;      // Adam steps; step k sees windows [k * batch, (k + 1) * batch) modulo their number
  double lr = 0;      // Adam's step size on each log-factor
  int batch = 1;      // calibration windows per step
  bool norms = true;  // also tune the RMSNorm gammas (attention, FFN, final; a factor per channel)
  FormatId act = FormatId::F32;  // the activation route the checkpoint runs with (INT4 / NVFP4), modelled
  float act_clip = 1.0f;
  ActScale act_scale = ActScale::Amax;  // NVFP4: the block-scale rule
  std::string kv_cache;                 // the KV cache format it runs with, fake-quantized ("" = float)
};

struct TuneResult {
  // The factors of every tuned matrix, by name (ModelWeights::named_matrices): rescale_grid(q).cells()
  // values, row-major. A tied lm_head shares its embedding's entry and is not listed.
  std::vector<std::pair<std::string, std::vector<float>>> scales;
  // Gamma factors [dim] per layer (attention, FFN) and of the final norm; empty when norms were not tuned.
  std::vector<std::vector<float>> attn_norm, ffn_norm;
  std::vector<float> final_norm;
  std::vector<std::string> fixed;  // quantized matrices whose scales cannot move (rescale_grid empty)
  int64_t parameters = 0;          // factors trained
  double loss_before = 0;          // KL(float || quantized), nats per token, over all calibration windows
  double loss_after = 0;           // ... after the steps, or loss_before when reverted
  // The steps ended with a higher loss than they started from (reverted_loss): every factor was reset to
  // 1, so the model is returned as quantization left it.
  bool reverted = false;
  double reverted_loss = 0;
  std::vector<double> losses;  // per step, on its batch, before its update
  int64_t tokens = 0;          // calibration tokens (all windows)
  int windows = 0;
  double seconds = 0;
  nlohmann::json to_json(const TuneOptions& o) const;  // the manifest's "tune" record
};

// Tunes `quantized` toward `reference` (the same network before quantization: same config, rotation and
// folded scales) on the calibration windows (equal lengths, token ids). UsageError("train") for no windows,
// mismatched models or options out of range.
TuneResult tune_scales(const Model& reference, const Model& quantized,
                       const std::vector<std::vector<int32_t>>& windows, const TuneOptions& o);

// What quant calls through the library it opens at run time, with the manifest record in `record`.
using TuneScalesFn = TuneResult (*)(const Model& reference, const Model& quantized,
                                    const std::vector<std::vector<int32_t>>& windows, const TuneOptions& o,
                                    nlohmann::json* record);

}  // namespace lowbit::train

// The library's entry symbol for scale tuning (dlsym).
extern "C" lowbit::train::TuneScalesFn lowbit_train_tune_entry();
