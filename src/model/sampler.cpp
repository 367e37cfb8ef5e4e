#include "model/sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <unordered_set>

#include "core/error.h"
#include "kernels/attn_tiled.h"
#include "kernels/reduce.h"

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
  return static_cast<int32_t>(argmax_f32(logits, n));
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
  return p_.top_k > 0 && p_.top_k < vocab ? sample_top_k(l.data(), vocab) : sample_all(l.data(), vocab);
}

// top-k: the k best sorted (a heap: one comparison with its top rejects almost every token), then the walk
// over them.
int32_t Sampler::sample_top_k(const float* l, int64_t vocab) {
  thread_local std::vector<int32_t> idx;
  idx.resize(static_cast<size_t>(vocab));
  std::iota(idx.begin(), idx.end(), 0);
  const size_t k = static_cast<size_t>(p_.top_k);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  std::vector<double> e(k);
  double sum = 0;
  for (size_t i = 0; i < k; ++i) sum += (e[i] = std::exp((l[idx[i]] - l[idx[0]]) / p_.temperature));
  size_t n = k;
  if (p_.min_p > 0)
    n = std::max<size_t>(
        1, static_cast<size_t>(std::count_if(e.begin(), e.end(), [&](double v) { return v >= p_.min_p; })));
  double total = 0;
  if (p_.top_p < 1) {
    size_t keep = 0;
    while (keep < n) {
      total += e[keep++];
      if (total >= p_.top_p * sum) break;
    }
    n = keep;
  } else {
    for (size_t i = 0; i < n; ++i) total += e[i];
  }
  double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
  for (size_t i = 0; i < n; ++i) {
    r -= e[i];
    if (r <= 0) return idx[i];
  }
  return idx[n - 1];
}

// The whole vocabulary, with no sort of it (sorting 150k logits took ~15 ms per token, more than a decode
// step of a 0.5B model). Tokens are visited in decreasing logit order (lower index first on ties), as a full
// sort would order them, through buckets of exp(logit) by its float bit pattern (monotone in the logit; each
// bucket spans a factor of 2^(1/8)): whole buckets are skipped by their summed mass, and only the bucket
// where a walk stops is gathered and sorted. min-p, top-p and the draw are such walks.
int32_t Sampler::sample_all(const float* l, int64_t vocab) {
  thread_local std::vector<float> e;
  e.resize(static_cast<size_t>(vocab));
  const float mx = l[argmax_f32(l, vocab)];
  // exp((l - mx) / T) over the vocabulary with the kernels' vector exp (the tiled softmax's; 151,936 libm
  // expf calls and one sequential double sum were most of the ~0.85 ms this took per token, which 16
  // sequences sampling at temperature 1 pay every step). Below its range (kExpMinInput) the vector exp gives
  // ~1e-38: those tokens (-inf logits included) get 0, as std::exp gives them or a denormal no draw can
  // reach.
  const float t = p_.temperature;
  for (int64_t i = 0; i < vocab; ++i) e[i] = (l[i] - mx) / t;
  attn_exp(e.data(), e.data(), vocab);
  double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i8 = 0;
  for (; i8 + 8 <= vocab; i8 += 8)
    for (int j = 0; j < 8; ++j) {
      float& v = e[static_cast<size_t>(i8 + j)];
      if ((l[i8 + j] - mx) / t < kExpMinInput) v = 0.0f;
      part[j] += v;
    }
  for (; i8 < vocab; ++i8) {
    float& v = e[static_cast<size_t>(i8)];
    if ((l[i8] - mx) / t < kExpMinInput) v = 0.0f;
    part[0] += v;
  }
  const double sum =
      ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
  // min-p keeps the tokens with p >= min_p * p_max, i.e. e >= min_p (p_max's e is exp(0) = 1).
  const float thr = p_.min_p > 0 ? static_cast<float>(p_.min_p) : 0.0f;
  constexpr int kBuckets = 1024;  // e in [0, 1]: bits >> 20 <= 0x3F8
  auto bucket = [&](float v) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    return static_cast<int>(b >> 20);
  };
  std::array<double, kBuckets> mass{};
  std::array<int64_t, kBuckets> count{};
  int64_t kept = 0;
  double kept_mass = 0;
  for (int64_t i = 0; i < vocab; ++i)
    if (e[i] >= thr) {
      const int b = bucket(e[i]);
      mass[b] += e[i], count[b]++, kept++, kept_mass += e[i];
    }
  // Walks the first `limit` tokens in order until their mass reaches x: (tokens taken, their mass, the last).
  struct Stop {
    int64_t k = 0;
    double c = 0;
    int32_t last = 0;
  };
  thread_local std::vector<int32_t> ids;
  auto walk = [&](double x, int64_t limit) {
    Stop s;
    for (int b = kBuckets - 1; b >= 0; --b) {
      if (count[b] == 0) continue;
      if (s.k + count[b] <= limit && s.c + mass[b] < x) {
        s.k += count[b], s.c += mass[b];
        continue;
      }
      ids.clear();
      for (int64_t i = 0; i < vocab; ++i)
        if (e[i] >= thr && bucket(e[i]) == b) ids.push_back(static_cast<int32_t>(i));
      std::sort(ids.begin(), ids.end(),
                [&](int32_t a, int32_t c) { return l[a] > l[c] || (l[a] == l[c] && a < c); });
      for (int32_t t : ids) {
        if (s.k == limit) return s;
        s.c += e[t], s.k++, s.last = t;
        if (s.c >= x) return s;
      }
    }
    return s;
  };
  int64_t n = std::max<int64_t>(kept, 1);
  double total = kept_mass;
  if (p_.top_p < 1) {
    const Stop s = walk(p_.top_p * sum, n);
    n = s.k, total = s.c;
  }
  const double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
  return walk(r, n).last;
}

}  // namespace lowbit
