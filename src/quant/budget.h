// Budgeted mixed precision (`lowbit quantize --budget 4.5MB | --bpw 4.3`): the best format per matrix under a
// byte budget for the whole checkpoint.
//
//  1. Sensitivity: for every allocation unit (a weight matrix; a tied embedding + lm_head pair is one unit)
//     and every candidate format, the unit alone is quantized (imatrix-RTN with calibration statistics, RTN
//     for the embedding and lm_head, which have none) and the mean KL divergence of the model's next-token
//     distribution from the unquantized model's is measured on sensitivity windows taken from the
//     calibration windows. The residual stream at every layer's input is cached, so a unit in layer l costs
//     a forward of layers l..L-1 only.
//  2. Allocation: minimise the sum of the units' sensitivities (the additive model of HAWQ-style bit
//     allocation) subject to the checkpoint's model bytes <= budget: a multiple-choice knapsack solved
//     exactly by dynamic programming over bytes in steps of `step` bytes (each option's bytes rounded up, so
//     the result always fits), with the LP relaxation's value as a lower bound that states the gap.
//  3. The allocation becomes per-matrix overrides of the recipe (and lifts the default ignore of tok_embed /
//     lm_head), so the recipe's algorithm (GPTQ, AWQ, ...) then quantizes each matrix to its format.
//
// Model bytes = the files an engine reads (checkpoint_model_bytes): tensors, safetensors header, config.json,
// tokenizer files. Header and config.json are estimated from above before writing; the writer's result is
// checked afterwards.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kv/kv_cache.h"
#include "model/decoder.h"
#include "model/model.h"
#include "quant/calibration.h"
#include "quant/recipe.h"

namespace lowbit::quant {

// Multiple-choice knapsack: pick one option per item minimising the summed loss with summed bytes <=
// capacity.
struct KnapsackItem {
  std::vector<int64_t> bytes;  // per option
  std::vector<double> loss;    // per option
};
struct KnapsackResult {
  bool feasible = false;
  std::vector<int> choice;  // per item
  int64_t bytes = 0;        // exact bytes of the choice
  double loss = 0;          // summed loss of the choice
  double lower_bound = 0;   // LP relaxation (convex hull) optimum: no choice can do better
  int64_t step = 1;         // DP byte granularity (1 = exact)
};
// Exact when capacity / step fits max_states (step = 1); otherwise every option's bytes are rounded up to
// the step, which keeps the result feasible and bounds the loss of optimality by the stated gap.
KnapsackResult solve_knapsack(const std::vector<KnapsackItem>& items, int64_t capacity,
                              int64_t max_states = int64_t{1} << 18);

struct BudgetSpec {
  int64_t bytes = 0;  // model bytes; or
  double bpw = 0;     // bits per parameter over the whole checkpoint (model bytes * 8 / parameters)
  std::vector<QuantScheme> candidates;  // empty: default_candidates()
  // kld: every option's KL measured (units x candidates forwards); proxy: one KL measurement per unit (its
  // smallest option), the others scaled by their importance-weighted squared weight error relative to it;
  // auto: kld below 100 M parameters, proxy above.
  std::string sensitivity = "auto";
  bool progress = true;
  // Count the bytes of the GGUF file `lowbit export --to gguf` (quantize --format gguf) writes instead of the
  // checkpoint's: exact (model/gguf_model_export.h, gguf_export_sizes), and only candidates whose values the
  // GGUF file holds unchanged (GGUF blocks; int4 / int8 sym groups of 32k with f16 scales; mxfp4).
  bool gguf_file = false;
  std::string gguf_name = "lowbit-export";  // the file's general.name (GgufModelExportOptions::name)
};

// The k-quants q2_k..q6_k (two-level scales, GPTQ-capable, 256-column blocks), int3 / int4 g32 and int4 g64
// for rows the k-quants do not fit, int8 per channel and int8 g32 (Q8_0's grid, for the largest budgets).
std::vector<QuantScheme> default_candidates();

struct AllocOption {
  std::string scheme;  // QuantScheme string, or "keep" (stays unquantized in the recipe's dtype)
  int64_t bytes = 0;   // tensor bytes + safetensors header + config.json entries (upper bound)
  double kld = 0;      // measured mean KL divergence with only this unit quantized this way
};
struct AllocUnit {
  std::string name;                  // "layers.3.w_down", or "tok_embed+lm_head" (tied)
  std::vector<std::string> members;  // matrix names
  int64_t rows = 0, cols = 0;
  std::vector<AllocOption> options;
  int chosen = -1;
};

struct Allocation {
  std::string counts = "checkpoint";  // what the bytes are: "checkpoint" (model files) | "gguf" (the file)
  int64_t budget = 0;                 // model bytes
  int64_t fixed_bytes = 0;            // what no choice changes: norms, biases, tokenizer, config.json base
  int64_t predicted_bytes = 0;        // fixed + chosen options (an upper bound of the written model bytes)
  int64_t parameters = 0;             // every weight (matrices counted once when tied, norms, biases)
  double predicted_kld = 0;           // sum of the chosen options' KLD
  double lower_bound_kld = 0;         // LP relaxation bound
  int64_t step = 1;
  int sens_tokens = 0;         // scored tokens per sensitivity measurement
  std::string sensitivity;     // kld | proxy
  std::string sens_algorithm;  // how each option was quantized for its KL: gptq | imatrix | rtn-mse | rtn
  double seconds = 0;
  std::vector<AllocUnit> units;
  std::vector<std::string> ignored;  // matrices the recipe itself ignores (not allocated)
  std::vector<std::string> pinned;   // matrices the recipe's overrides give a format (not allocated)
  bool keep_with_embedding = false;  // tied lm_head whose tok_embed the recipe ignores: ignored too
  std::string head_follows;          // tied lm_head whose tok_embed the recipe's overrides pin: same scheme

  // Per-matrix overrides (and ignore rules for "keep") added to `r`; the default tok_embed / lm_head ignores
  // are dropped. The result still goes through plan_recipe.
  Recipe apply(const Recipe& r) const;
  nlohmann::json to_json() const;
  std::string summary() const;  // readable table: unit, chosen scheme, bytes, KLD
};

// The first `samples` calibration windows cut to `length` tokens, and to 2^26 / vocab tokens in all (the
// probe keeps every scored token's reference log-probabilities), with a warning when that cut them.
std::vector<std::vector<int32_t>> sensitivity_windows(const CalibData& calib, int samples, int length,
                                                      int64_t vocab, std::vector<std::string>* warnings);

// KL divergence of the model's next-token distributions from a reference, on fixed token windows. The
// constructor runs the model as it is (the reference) and keeps the residual stream at every layer's input,
// so kld_from(l) after changing a weight of layer l runs layers l..L-1 and the head only.
class KldProbe {
 public:
  KldProbe(Model& m, const std::vector<std::vector<int32_t>>& windows);
  ~KldProbe();
  // Mean KL(P_ref || P_now) per scored token with the model's current weights, from layer `first_layer`'s
  // input (-1: from the embedding; n_layers: the head only).
  double kld_from(int first_layer);
  int64_t tokens() const { return static_cast<int64_t>(scored_.size()); }

 private:
  std::vector<float> logprobs(const Decoder& dec, const float* x) const;
  Model& m_;
  std::vector<BatchEntry> batch_;            // every window, one sequence each
  std::vector<int64_t> scored_;              // batch positions with a next token in their window
  std::vector<std::vector<float>> streams_;  // [n_layers + 1][T, dim]: residual at each layer's input
  std::vector<float> ref_;                   // [scored, vocab] reference log-probabilities
  std::unique_ptr<KvCache> kv_;
};

// Measures sensitivities on `probe` and allocates. The model's weights are restored before returning.
// UsageError("quant") for a budget below the smallest checkpoint the candidates allow (saying how small it
// can be) or a recipe with a rotation.
Allocation allocate_budget(Model& m, const Recipe& r, const CalibData& calib, KldProbe& probe,
                           const BudgetSpec& spec, const std::string& tokenizer_path = "");

}  // namespace lowbit::quant
