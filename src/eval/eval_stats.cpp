#include "eval/eval_stats.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>

namespace lowbit::eval {

double SampleStats::variance() const {
  if (n == 0) return 0.0;
  double m = mean();
  double v = sum2 / static_cast<double>(n) - m * m;
  return v > 0 ? v : 0.0;
}

double SampleStats::stderr_mean() const {
  if (n < 2) return 0.0;
  return std::sqrt(variance() / static_cast<double>(n - 1));
}

Perplexity perplexity_from(const SampleStats& nll) {
  Perplexity p;
  p.tokens = nll.n;
  p.mean_nll = nll.mean();
  p.mean_nll_stderr = nll.stderr_mean();
  p.ppl = std::exp(p.mean_nll);
  p.ppl_stderr = p.ppl * p.mean_nll_stderr;
  return p;
}

void score_logits(const float* logits, int64_t V, int32_t target, int k, TokenScore* s, int32_t* top_ids,
                  double* top_lp, std::vector<int32_t>& scratch) {
  float mx = logits[0];
  int32_t arg = 0;
  for (int64_t i = 1; i < V; ++i)
    if (logits[i] > mx) mx = logits[i], arg = static_cast<int32_t>(i);
  double se = 0, sel = 0;  // sum exp(l - mx), sum exp(l - mx) * (l - mx)
  for (int64_t i = 0; i < V; ++i) {
    double d = static_cast<double>(logits[i]) - mx;
    double e = std::exp(d);
    se += e;
    sel += e * d;
  }
  const double lse = mx + std::log(se);
  s->target = target;
  s->lse = lse;
  s->logprob = static_cast<double>(logits[target]) - lse;
  // H = -sum p log p = log(se) - sum(e * d) / se, with p = e / se and log p = d - log(se).
  s->entropy = static_cast<float>(std::max(0.0, std::log(se) - sel / se));
  s->top1 = arg;
  s->top1_logprob = static_cast<double>(mx) - lse;
  s->tail = 0;
  if (k <= 0) return;
  if (k == 1) {  // plain perplexity runs: the argmax is already known, skip the O(V) selection
    top_ids[0] = arg;
    top_lp[0] = s->top1_logprob;
    s->tail = V <= 1 ? 0.0 : std::max(0.0, 1.0 - std::exp(top_lp[0]));
    return;
  }
  scratch.resize(static_cast<size_t>(V));
  std::iota(scratch.begin(), scratch.end(), 0);
  auto better = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  if (k < V) std::nth_element(scratch.begin(), scratch.begin() + k, scratch.end(), better);
  std::sort(scratch.begin(), scratch.begin() + k, better);
  double in = 0;
  for (int i = 0; i < k; ++i) {
    top_ids[i] = scratch[i];
    top_lp[i] = static_cast<double>(logits[scratch[i]]) - lse;
    in += std::exp(top_lp[i]);
  }
  s->tail = k >= V ? 0.0 : std::max(0.0, 1.0 - in);
}

RowCompare compare_row(const TokenScore& base, const int32_t* base_ids, const double* base_lp, int k,
                       const float* var_logits, int64_t V, const TokenScore& var) {
  RowCompare r;
  const double lse = var.lse;
  double kl = 0, q_in = 0;
  for (int i = 0; i < k; ++i) {
    // Computed exactly as score_logits computes the baseline's values, so identical rows give exactly 0.
    const double lq = static_cast<double>(var_logits[base_ids[i]]) - lse;
    const double lp = base_lp[i];
    kl += std::exp(lp) * (lp - lq);
    q_in += std::exp(lq);
  }
  if (k < V && base.tail > 0) {
    double q_tail = std::max(1.0 - q_in, 1e-300);
    kl += base.tail * std::log(base.tail / q_tail);
  }
  r.kl = std::max(0.0, kl);
  r.dp = std::exp(var.logprob) - std::exp(base.logprob);
  r.same_top1 = var.top1 == base.top1;
  return r;
}

double percentile_sorted(const std::vector<double>& v, double q) {
  if (v.empty()) return 0.0;
  q = std::clamp(q, 0.0, 1.0);
  double r = q * static_cast<double>(v.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(r));
  size_t hi = std::min(lo + 1, v.size() - 1);
  double f = r - static_cast<double>(lo);
  return v[lo] + (v[hi] - v[lo]) * f;
}

void Histogram::add(double x) {
  if (counts.empty()) return;
  const int n = static_cast<int>(counts.size());
  // Clamp in double before the cast: converting NaN or an out-of-range value to int is undefined.
  const double t = hi > lo ? std::floor((x - lo) / (hi - lo) * n) : 0.0;
  const int b = !(t >= 0) ? 0 : t >= n ? n - 1 : static_cast<int>(t);  // !(t >= 0) also catches NaN
  counts[static_cast<size_t>(b)]++;
}

int64_t Histogram::total() const {
  return std::accumulate(counts.begin(), counts.end(), int64_t{0});
}

nlohmann::json Histogram::to_json() const {
  return {{"lo", lo}, {"hi", hi}, {"counts", counts}};
}

Histogram Histogram::from_json(const nlohmann::json& j) {
  Histogram h;
  h.lo = j.at("lo").get<double>();
  h.hi = j.at("hi").get<double>();
  h.counts = j.at("counts").get<std::vector<int64_t>>();
  return h;
}

}  // namespace lowbit::eval
