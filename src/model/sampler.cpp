#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <unordered_set>

#include "core/error.h"

namespace lowbit {

void SamplerParams::validate() const {
  if (!(temperature >= 0) || !std::isfinite(temperature))
    throw UsageError("model", "--temp must be >= 0 (got " + std::to_string(temperature) + ")");
  if (top_k < 0) throw UsageError("model", "--top-k must be >= 0 (0 disables it)");
  if (!(top_p > 0 && top_p <= 1)) throw UsageError("model", "--top-p must be in (0, 1]");
  if (!(min_p >= 0 && min_p < 1)) throw UsageError("model", "--min-p must be in [0, 1)");
  if (!(repeat_penalty > 0) || !std::isfinite(repeat_penalty))
    throw UsageError("model", "--repeat-penalty must be > 0 (1 disables it)");
  if (repeat_last_n < 0) throw UsageError("model", "--repeat-last-n must be >= 0");
}

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) {
  p_.validate();
}

int32_t argmax(const float* logits, int64_t n) {
  return static_cast<int32_t>(std::max_element(logits, logits + n) - logits);
}

int32_t Sampler::sample(const float* logits, int64_t vocab, const std::vector<int32_t>& history) {
  const bool penalty = p_.repeat_penalty != 1.0f && p_.repeat_last_n > 0;
  // Greedy without a penalty reads the logits in place: a copy of a 150k-entry vocabulary per token is a
  // fresh 600 KB allocation, which costs more than the argmax when a server samples many sequences per step.
  if (p_.temperature == 0.0f && !penalty) return argmax(logits, vocab);
  thread_local std::vector<float> l;
  l.assign(logits, logits + vocab);
  if (penalty) {
    std::unordered_set<int32_t> seen;
    for (size_t i = history.size() > static_cast<size_t>(p_.repeat_last_n) ? history.size() - p_.repeat_last_n
                                                                           : 0;
         i < history.size(); ++i)
      seen.insert(history[i]);
    for (int32_t id : seen)
      if (id >= 0 && id < vocab) l[id] = l[id] > 0 ? l[id] / p_.repeat_penalty : l[id] * p_.repeat_penalty;
  }
  if (p_.temperature == 0.0f) return argmax(l.data(), vocab);
  thread_local std::vector<int32_t> idx;
  idx.resize(static_cast<size_t>(vocab));
  std::iota(idx.begin(), idx.end(), 0);
  size_t n = idx.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n) {
    std::partial_sort(idx.begin(), idx.begin() + p_.top_k, idx.end(),
                      [&](int a, int b) { return l[a] > l[b]; });
    n = p_.top_k;
  } else {
    std::sort(idx.begin(), idx.end(), [&](int a, int b) { return l[a] > l[b]; });
  }
  // Softmax over the kept candidates at the given temperature (in double for stable tails).
  std::vector<double> pr(n);
  double mx = l[idx[0]], sum = 0;
  for (size_t i = 0; i < n; ++i) sum += (pr[i] = std::exp((l[idx[i]] - mx) / p_.temperature));
  for (auto& v : pr) v /= sum;
  if (p_.min_p > 0) {
    size_t keep = 1;
    while (keep < n && pr[keep] >= p_.min_p * pr[0]) ++keep;
    n = keep;
  }
  if (p_.top_p < 1) {
    double c = 0;
    size_t keep = 0;
    while (keep < n) {
      c += pr[keep++];
      if (c >= p_.top_p) break;
    }
    n = keep;
  }
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += pr[i];
  double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
  for (size_t i = 0; i < n; ++i) {
    r -= pr[i];
    if (r <= 0) return idx[i];
  }
  return idx[n - 1];
}

}  // namespace lowbit
