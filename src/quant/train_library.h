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
// The function an entry symbol of the train library returns (lowbit_train_entry: train::LearnRotationsFn,
// lowbit_train_tune_entry: train::TuneScalesFn).
template <class Fn>
Fn train_entry(const char* symbol, const std::string& feature) {
  return reinterpret_cast<Fn (*)()>(train_symbol(symbol, feature))();
}

// The --kv-cache spec that training fake-quantizes K and V with for recipe r: its INT4 / INT8 KV format,
// for a rotated model with the cache's own Hadamard (R3, `+rot`) where the head size allows, as `lowbit
// eval --kv-cache int4+rot` runs it; "" (float) for other KV formats.
std::string fake_quant_kv_spec(const Recipe& r, const ModelConfig& c);

// The quantizers a checkpoint of recipe r runs with, as training models them (train::SpinOptions,
// train::TuneOptions): 4-bit activations (act=int4 / act=nvfp4) with their clip, and the KV cache above.
template <class Options>
void set_fake_quant(Options& o, const Recipe& r, const ModelConfig& c) {
  if (r.act.format == FormatId::INT4 || r.act.format == FormatId::NVFP4) o.act = r.act.format;
  o.act_clip = r.act.clip;
  o.act_scale = r.act.scale;
  o.kv_cache = fake_quant_kv_spec(r, c);
}

}  // namespace lowbit::quant
