#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "model/sampler.h"

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
