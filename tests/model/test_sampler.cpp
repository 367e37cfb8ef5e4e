#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include "core/error.h"
#include "model/sampler.h"
#include "tests/common/sanitized.h"

using namespace lowbit;

TEST(Sampler, GreedyIsArgmax) {
  Sampler s({});
  std::vector<float> l = {0.1f, 3.0f, -1.0f, 2.9f};
  EXPECT_EQ(s.sample(l.data(), 4, {}), 1);
}

TEST(Sampler, SeedIsReproducible) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  std::vector<float> l = {1, 1, 1, 1, 1, 1, 1, 1};
  Sampler a(p), b(p);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a.sample(l.data(), 8, {}), b.sample(l.data(), 8, {}));
}

TEST(Sampler, TopKRestrictsCandidates) {
  SamplerParams p;
  p.temperature = 5.0f;
  p.top_k = 2;
  Sampler s(p);
  std::vector<float> l = {0, 10, 9, 0, 0};
  for (int i = 0; i < 200; ++i) {
    int id = s.sample(l.data(), 5, {});
    EXPECT_TRUE(id == 1 || id == 2);
  }
}

TEST(Sampler, TopPAndMinPCutTails) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_p = 0.5f;
  Sampler s(p);
  std::vector<float> l = {5, 0, 0, 0};  // p(0) ~ 0.95 > 0.5: only token 0 survives
  for (int i = 0; i < 100; ++i) EXPECT_EQ(s.sample(l.data(), 4, {}), 0);
  SamplerParams q;
  q.temperature = 1.0f;
  q.min_p = 0.5f;
  Sampler m(q);
  std::vector<float> l2 = {2, 2, -5, -5};
  std::map<int, int> seen;
  for (int i = 0; i < 300; ++i) seen[m.sample(l2.data(), 4, {})]++;
  EXPECT_EQ(seen.count(2) + seen.count(3), 0u);
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[1], 0);
}

TEST(Sampler, RepetitionPenaltyChangesGreedyChoice) {
  SamplerParams p;
  p.repeat_penalty = 2.0f;
  Sampler s(p);
  std::vector<float> l = {3.0f, 2.0f};
  EXPECT_EQ(s.sample(l.data(), 2, {0}), 1);  // 3/2 = 1.5 < 2
}

TEST(Sampler, RejectsBadParameters) {
  SamplerParams p;
  p.top_p = 0;
  EXPECT_THROW(Sampler{p}, UsageError);
  p = {};
  p.temperature = -1;
  EXPECT_THROW(Sampler{p}, UsageError);
}

// The oracle: the definition, written the slow way. Every candidate sorted by logit (lower index first on
// ties), e = exp((l - max) / T) in float, top-k, then min-p (e >= min_p), then top-p (the sorted prefix whose
// mass first reaches top_p of the total before min-p), then r uniform in [0, kept mass) and the first token
// at which the sorted cumulative mass reaches r. Same draws from the same seed as Sampler.
int32_t reference_sample(const SamplerParams& p, std::mt19937_64& rng, const std::vector<float>& l) {
  std::vector<int32_t> idx(l.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(),
            [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  size_t n = p.top_k > 0 ? std::min<size_t>(idx.size(), static_cast<size_t>(p.top_k)) : idx.size();
  std::vector<double> e(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += (e[i] = std::exp((l[idx[i]] - l[idx[0]]) / p.temperature));
  if (p.min_p > 0) {
    size_t keep = 0;
    while (keep < n && e[keep] >= p.min_p) ++keep;
    n = std::max<size_t>(keep, 1);
  }
  double total = 0;
  size_t keep = 0;
  while (keep < n) {
    total += e[keep++];
    if (p.top_p < 1 && total >= p.top_p * sum) break;
  }
  double r = std::uniform_real_distribution<double>(0.0, total)(rng);
  double c = 0;
  for (size_t i = 0; i < keep; ++i)
    if ((c += e[i]) >= r) return idx[i];
  return idx[keep - 1];
}

// Sampler against the oracle, draw by draw, on an 8k vocabulary shaped like a model's (a few strong tokens
// over a wide tail, ties included), for temperatures, top-k, top-p and min-p alone and together.
TEST(Sampler, MatchesTheSortedDefinitionDrawForDraw) {
  std::mt19937_64 g(3);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> l(8000);
  for (auto& v : l) v = std::round(d(g) * 64.0f) / 64.0f;  // coarse values: many exact ties
  for (int i = 0; i < 6; ++i) l[g() % l.size()] += 5.0f;
  struct Case {
    float t;
    int k;
    float top_p, min_p;
  };
  for (const Case c :
       {Case{1.0f, 0, 1.0f, 0.0f}, Case{0.7f, 0, 1.0f, 0.0f}, Case{1.0f, 0, 0.9f, 0.0f},
        Case{1.3f, 0, 0.5f, 0.0f}, Case{1.0f, 0, 1.0f, 0.05f}, Case{1.0f, 0, 0.8f, 0.01f},
        Case{0.8f, 40, 1.0f, 0.0f}, Case{1.0f, 100, 0.9f, 0.02f}, Case{2.0f, 0, 0.999f, 0.0f}}) {
    SamplerParams p;
    p.temperature = c.t, p.top_k = c.k, p.top_p = c.top_p, p.min_p = c.min_p, p.seed = 11;
    Sampler s(p);
    std::mt19937_64 rng(p.seed);
    int mismatches = 0;
    std::map<int32_t, int> seen;
    for (int i = 0; i < test::repetitions(400, 50); ++i) {
      const int32_t a = s.sample(l.data(), static_cast<int64_t>(l.size()), {});
      mismatches += a != reference_sample(p, rng, l);
      seen[a]++;
    }
    EXPECT_EQ(mismatches, 0) << "T " << c.t << " top_k " << c.k << " top_p " << c.top_p << " min_p "
                             << c.min_p;
    EXPECT_GT(seen.size(), 1u) << "a sampler, not an argmax";
  }
}
