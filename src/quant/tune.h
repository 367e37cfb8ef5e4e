// Scale tuning as a recipe step (tune=STEPS): after every matrix is quantized, the train library tunes the
// stored scales and the RMSNorm gammas end to end toward the float model (train/tune_scales.h), and this
// writes the result into the model: each tuned cell's stored scale multiplied by its factor
// (tensor/qtensor.h rescale_cells), each gamma by its own. The codes and the byte count do not change.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "model/model.h"
#include "quant/recipe.h"

namespace lowbit::quant {

// Tunes `m` (quantized under r) toward `reference` (the same network before quantization) on the
// calibration windows and applies the result; returns the manifest's "tune" record.
nlohmann::json tune_quantized(const Model& reference, Model& m, const Recipe& r,
                              const std::vector<std::vector<int32_t>>& windows);

}  // namespace lowbit::quant
