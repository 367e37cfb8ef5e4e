// The train library (libtorch: SpinQuant's rotations, scale tuning), which quant opens at run time on first
// use so that only the recipes that train pay for loading torch (src/train/CMakeLists.txt).
#pragma once
#include <string>

#include "arch/config.h"
#include "quant/recipe.h"

namespace lowbit::quant {

// The address of `symbol` in the train library (LOWBIT_TRAIN_LIBRARY in the environment names another copy
// of it). UsageError("quant") naming `feature` (e.g. "rotate=spinquant") when the build has no train library
// or it does not load.
void* train_symbol(const char* symbol, const std::string& feature);

// The --kv-cache spec that training fake-quantizes K and V with for recipe r: its INT4 / INT8 KV format,
// for a rotated model with the cache's own Hadamard (R3, `+rot`) where the head size allows, as `lowbit
// eval --kv-cache int4+rot` runs it; "" (float) for other KV formats.
std::string fake_quant_kv_spec(const Recipe& r, const ModelConfig& c);

}  // namespace lowbit::quant
