// Comparing a model variant with a saved baseline (baseline.h): KL divergence of the next-token
// distributions, perplexity of both and its change with uncertainty, top-1 agreement, change of the correct
// token's probability, and how the score distributions (top-1 probability, entropy) moved.
#pragma once
#include <cstdint>

#include <nlohmann/json_fwd.hpp>

#include "eval/baseline.h"
#include "eval/perplexity.h"

namespace lowbit::eval {

struct KldSummary {
  int64_t tokens = 0;
  int k = 0;  // baseline top-k (k = vocab: exact KL)
  double kl_mean = 0, kl_mean_stderr = 0;
  double kl_median = 0, kl_p90 = 0, kl_p99 = 0, kl_p999 = 0, kl_max = 0, kl_min = 0;
  Perplexity base, variant;
  double dppl = 0, dppl_stderr = 0;          // PPL(variant) - PPL(base), delta method with their covariance
  double ln_ratio = 0, ln_ratio_stderr = 0;  // mean ln(PPL(variant) / PPL(base)) from paired NLL differences
  double nll_correlation = 0;                // Pearson correlation of the per-token NLLs
  double top1_agree = 0, top1_agree_stderr = 0;       // fraction of positions with the same most likely token
  double rms_dp = 0, rms_dp_stderr = 0, mean_dp = 0;  // p_variant(target) - p_base(target)
  double tail_mean = 0, tail_max = 0;  // baseline mass outside its top-k (what the KL cannot see)
  ScoreHistograms base_hist, variant_hist;
  nlohmann::json to_json() const;
};

// `run` must come from evaluate(..., &base.table) on matching text (check_baseline_matches first).
KldSummary summarize_kld(const Baseline& base, const EvalRun& run, int64_t vocab);

}  // namespace lowbit::eval
