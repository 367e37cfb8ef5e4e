// The arithmetic of evaluation: negative log-likelihood and perplexity with their standard errors, per-token
// scores of a logits row (log-sum-exp, log-prob of the correct token, entropy, top-k), the KL divergence of a
// variant's row against a stored top-k baseline row, percentiles and histograms.
//
// Everything here is plain scalar code on one row or one sample vector; the runners in perplexity.h and kld.h
// call it in parallel over rows. Accumulations are in double; values that are stored (log-probs) are rounded
// to double, so a model compared with its own baseline gives bit-identical numbers (KLD exactly 0) and the KL
// of nearly identical models is not drowned in rounding noise (float log-probs would add ~1e-7 nats per
// token).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace lowbit::eval {

// Running sums of a sample (NLL per token, KL per token, ...). Mean and standard error as llama.cpp's
// perplexity tool computes them: var = E[x^2] - E[x]^2 (population), stderr of the mean = sqrt(var / (n -
// 1)).
struct SampleStats {
  double sum = 0, sum2 = 0;
  int64_t n = 0;
  void add(double x) {
    sum += x;
    sum2 += x * x;
    ++n;
  }
  void merge(const SampleStats& o) {
    sum += o.sum;
    sum2 += o.sum2;
    n += o.n;
  }
  double mean() const { return n > 0 ? sum / static_cast<double>(n) : 0.0; }
  double variance() const;     // population variance, >= 0
  double stderr_mean() const;  // 0 when n < 2
};

// Perplexity from NLL samples: PPL = exp(mean NLL), its uncertainty PPL * stderr(mean NLL) (first-order).
struct Perplexity {
  double mean_nll = 0, mean_nll_stderr = 0, ppl = 0, ppl_stderr = 0;
  int64_t tokens = 0;
};
Perplexity perplexity_from(const SampleStats& nll);

// What is kept of one scored position: the model's distribution over the next token, reduced.
struct TokenScore {
  int32_t target = 0;       // the correct next token
  int32_t pos = 0;          // position of the target token inside its chunk (1..ctx-1)
  int32_t chunk = 0;        // chunk index
  double lse = 0;           // log-sum-exp of the logits row (double: log-probs are derived from it)
  double logprob = 0;       // log p(target)
  float entropy = 0;        // entropy of the full distribution, nats
  double tail = 0;          // probability mass outside the top-k: 1 - sum_{i in top-k} exp(top_lp[i])
  int32_t top1 = 0;         // argmax (lowest id on ties)
  double top1_logprob = 0;  // log p(top1)
};

// Scores one logits row [V]: fills `s` (target must be in [0, V)) and, when k > 0, the k most likely ids and
// their log-probs (descending probability, lowest id first on ties) into top_ids[k] / top_lp[k].
// `scratch` is reused between calls by one thread. k is clamped to V by the caller.
void score_logits(const float* logits, int64_t V, int32_t target, int k, TokenScore* s, int32_t* top_ids,
                  double* top_lp, std::vector<int32_t>& scratch);

// Comparison of one variant row with the baseline's stored row for the same position.
struct RowCompare {
  double kl = 0;  // KL(baseline || variant), nats (top-k + tail approximation, see docs/eval.md)
  double dp = 0;  // p_variant(target) - p_baseline(target)
  bool same_top1 = false;
};

// KL(P || Q) with P known only through its top-k (ids, log-probs) and tail mass:
//   sum_{i in K} p_i (log p_i - log q_i) + p_tail log(p_tail / q_tail),  q_tail = 1 - sum_{i in K} q_i.
// This is the exact KL of the (k+1)-bin coarse-graining of P and Q, a lower bound of the full KL that misses
// p_tail * KL(P_tail || Q_tail); it is exact when k = V. var_logits: the variant's raw logits row [V],
// var: its score (for lse, target and top-1).
RowCompare compare_row(const TokenScore& base, const int32_t* base_ids, const double* base_lp, int k,
                       const float* var_logits, int64_t V, const TokenScore& var);

// Percentile q in [0, 1] of a sorted sample, linear interpolation between closest ranks; 0 when empty.
double percentile_sorted(const std::vector<double>& sorted, double q);

// Fixed-range histogram; values outside [lo, hi] land in the first / last bin.
struct Histogram {
  double lo = 0, hi = 1;
  std::vector<int64_t> counts;
  Histogram() = default;
  Histogram(double lo_, double hi_, int bins) : lo(lo_), hi(hi_), counts(static_cast<size_t>(bins), 0) {}
  void add(double x);
  int64_t total() const;
  nlohmann::json to_json() const;
  static Histogram from_json(const nlohmann::json& j);  // throws nlohmann exceptions on bad input
};

}  // namespace lowbit::eval
