// The controlled experiment of `lowbit compare`: a 16-bit baseline and variants that each change one variable
// (weights recipe, weight dtype, KV cache format, KV eviction), measured on the same inputs under the same
// settings, judged against thresholds.
//
// Experiment file (JSON; every key optional except "model" when not given on the command line):
// {
//   "model": "DIR|FILE", "preset": "default",
//   "baseline": {"name": "baseline", "dtype": "f16", "kv_cache": "f16"},
//   "variants": [{"name": "kv-e4m3", "kv_cache": "e4m3"},
//                {"name": "w4a16-gptq", "recipe": "W4A16,algo=gptq", "online": false}],
//   "eval": {"text": "FILE", "ctx": 512, "chunks": 8},
//   "calib": {"text": "FILE"},
//   "prompts": ["Once upon a time", ...],
//   "generation": {"n": 32},
//   "bench": {"prompt": 128, "gen": 32, "repetitions": 2},
//   "throughput": {"concurrency": [1, 4], "prompt": 32, "gen": 16},
//   "thresholds": {"max_dppl_pct": 5, "max_kld": 0.05, "min_top1": 0.9, "max_peak_mib": 0,
//                  "min_decode_speedup": 0, "no_nan": true}
// }
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace lowbit::compare {

struct VariantSpec {
  std::string name;
  std::string dtype = "f16";  // dense weights in memory (f32 | f16 | bf16 | native)
  std::string recipe;         // quantization recipe (lowbit quantize --recipe); empty = none
  bool online = false;        // quantize at load (--quantize) instead of an offline checkpoint
  std::string budget;         // offline only: lowbit quantize --budget (formats per matrix under a file size)
  std::string kv_cache = "f16";
  std::string kv_evict;     // empty = no eviction
  std::string description;  // why this variant is in the experiment (presets fill it in)
  nlohmann::json to_json() const;
};

struct Thresholds {
  double max_dppl_pct = 0;  // 0 = not checked
  double max_kld = 0;
  double min_top1 = 0;  // fraction 0..1
  double max_peak_mib = 0;
  double min_decode_speedup = 0;  // variant decode tok/s / baseline decode tok/s
  bool no_nan = true;
  nlohmann::json to_json() const;
};

struct Experiment {
  std::string model;
  std::string preset;
  VariantSpec baseline;
  std::vector<VariantSpec> variants;
  std::string eval_text;
  int ctx = 0;  // 0 = model context (capped at 512)
  int chunks = 8;
  std::string calib_text;
  std::vector<std::string> prompts;
  int gen_tokens = 32;
  int bench_prompt = 128, bench_gen = 32, bench_reps = 2;
  std::vector<int> concurrency = {1, 4};
  int tp_prompt = 32, tp_gen = 16;
  Thresholds thresholds;
  nlohmann::json to_json() const;
};

// Built-in presets following the seeds' decision path: default (all), kv-first, weights-first, compute, fp4.
std::vector<std::string> preset_names();
// Fills variants (and thresholds) of a preset; UsageError listing the presets when unknown.
void apply_preset(Experiment& e, const std::string& preset);

// Parses an experiment file; UsageError naming unknown keys and bad values.
Experiment experiment_from_json(const nlohmann::json& j, const std::string& where);

// The variables a variant changes against the baseline ("weights", "kv_cache", "kv_evict").
std::vector<std::string> changed_variables(const VariantSpec& base, const VariantSpec& v);

// Fills defaults that depend on the shared data folder (eval text, calibration text, prompts).
void fill_defaults(Experiment& e, const std::string& shared_dir);

}  // namespace lowbit::compare
