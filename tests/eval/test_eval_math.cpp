// The arithmetic of evaluation against hand-computed values: NLL mean / standard error / PPL, per-row scores
// (log-sum-exp, log-prob, entropy, top-k, tail), the top-k KL and its bound, percentiles, histograms, and
// splitting text into characters.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "eval/eval_stats.h"
#include "eval/eval_text.h"

using namespace lowbit;
using namespace lowbit::eval;

TEST(SampleStats, MeanStderrAndPerplexity) {
  SampleStats s;
  for (double x : {1.0, 2.0, 3.0, 4.0}) s.add(x);
  EXPECT_DOUBLE_EQ(s.mean(), 2.5);
  EXPECT_DOUBLE_EQ(s.variance(), 1.25);                      // E[x^2] - E[x]^2 = 7.5 - 6.25
  EXPECT_NEAR(s.stderr_mean(), std::sqrt(1.25 / 3), 1e-15);  // llama.cpp: sqrt(var / (n - 1))
  Perplexity p = perplexity_from(s);
  EXPECT_NEAR(p.ppl, std::exp(2.5), 1e-12);
  EXPECT_NEAR(p.ppl_stderr, std::exp(2.5) * std::sqrt(1.25 / 3), 1e-12);
  EXPECT_EQ(p.tokens, 4);
  SampleStats one;
  one.add(3.0);
  EXPECT_EQ(one.stderr_mean(), 0.0);
  SampleStats a, b;
  a.add(1), a.add(2);
  b.add(3), b.add(4);
  a.merge(b);
  EXPECT_DOUBLE_EQ(a.mean(), 2.5);
  EXPECT_DOUBLE_EQ(a.stderr_mean(), s.stderr_mean());
}

TEST(ScoreLogits, HandComputedRow) {
  // p = {0.1, 0.2, 0.3, 0.4} from logits log(1..4) + 7 (a shift must not matter).
  std::vector<float> l;
  for (int i = 1; i <= 4; ++i) l.push_back(static_cast<float>(std::log(i) + 7.0));
  TokenScore s;
  int32_t ids[2];
  double lp[2];
  std::vector<int32_t> scratch;
  score_logits(l.data(), 4, 2, 2, &s, ids, lp, scratch);
  EXPECT_NEAR(s.lse, std::log(10.0) + 7.0, 1e-6);
  EXPECT_NEAR(s.logprob, std::log(0.3), 1e-6);
  double h = 0;
  for (double p : {0.1, 0.2, 0.3, 0.4}) h -= p * std::log(p);
  EXPECT_NEAR(s.entropy, h, 1e-6);
  EXPECT_EQ(s.top1, 3);
  EXPECT_NEAR(s.top1_logprob, std::log(0.4), 1e-6);
  EXPECT_EQ(ids[0], 3);
  EXPECT_EQ(ids[1], 2);
  EXPECT_NEAR(lp[0], std::log(0.4), 1e-6);
  EXPECT_NEAR(lp[1], std::log(0.3), 1e-6);
  EXPECT_NEAR(s.tail, 0.3, 1e-6);
  // k = V: no tail.
  int32_t ids4[4];
  double lp4[4];
  score_logits(l.data(), 4, 0, 4, &s, ids4, lp4, scratch);
  EXPECT_EQ(s.tail, 0.0);
  EXPECT_NEAR(s.logprob, std::log(0.1), 1e-6);
}

TEST(ScoreLogits, TiesPickLowestId) {
  std::vector<float> l = {1.0f, 2.0f, 2.0f, 0.5f};
  TokenScore s;
  int32_t ids[3];
  double lp[3];
  std::vector<int32_t> scratch;
  score_logits(l.data(), 4, 0, 3, &s, ids, lp, scratch);
  EXPECT_EQ(s.top1, 1);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  EXPECT_EQ(ids[2], 0);
  // Uniform row: entropy = ln V.
  std::vector<float> u(8, 0.25f);
  score_logits(u.data(), 8, 5, 0, &s, nullptr, nullptr, scratch);
  EXPECT_NEAR(s.entropy, std::log(8.0), 1e-6);
  EXPECT_NEAR(s.logprob, -std::log(8.0), 1e-6);
}

namespace {
std::vector<float> logits_of(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back(static_cast<float>(std::log(x)));
  return l;
}
double kl_full(const std::vector<double>& p, const std::vector<double>& q) {
  double k = 0;
  for (size_t i = 0; i < p.size(); ++i) k += p[i] * std::log(p[i] / q[i]);
  return k;
}
}  // namespace

TEST(CompareRow, ExactWithFullTopKAndLowerBoundWithTail) {
  const std::vector<double> P = {0.1, 0.2, 0.3, 0.4}, Q = {0.25, 0.25, 0.25, 0.25};
  auto lp = logits_of(P), lq = logits_of(Q);
  std::vector<int32_t> scratch;
  TokenScore sp, sq;
  int32_t ids[4], qids[4];
  double plp[4], qlp[4];
  score_logits(lq.data(), 4, 1, 4, &sq, qids, qlp, scratch);

  score_logits(lp.data(), 4, 1, 4, &sp, ids, plp, scratch);
  RowCompare exact = compare_row(sp, ids, plp, 4, lq.data(), 4, sq);
  EXPECT_NEAR(exact.kl, kl_full(P, Q), 1e-6);  // 0.1064...
  EXPECT_NEAR(exact.dp, 0.25 - 0.2, 1e-6);
  EXPECT_FALSE(exact.same_top1);  // P: 3, Q: 0 (ties -> lowest id)

  // k = 2: the 3-bin coarse-graining {3, 2, rest}: 0.4 ln(0.4/0.25) + 0.3 ln(0.3/0.25) + 0.3 ln(0.3/0.5).
  score_logits(lp.data(), 4, 1, 2, &sp, ids, plp, scratch);
  RowCompare approx = compare_row(sp, ids, plp, 2, lq.data(), 4, sq);
  const double want = 0.4 * std::log(0.4 / 0.25) + 0.3 * std::log(0.3 / 0.25) + 0.3 * std::log(0.3 / 0.5);
  EXPECT_NEAR(approx.kl, want, 1e-6);
  EXPECT_LE(approx.kl, exact.kl + 1e-9);
  // The missing part is p_tail * KL(P_tail || Q_tail) = 0.3 * KL({1/3, 2/3} || {1/2, 1/2}).
  const double missing =
      0.3 * ((1.0 / 3) * std::log((1.0 / 3) / 0.5) + (2.0 / 3) * std::log((2.0 / 3) / 0.5));
  EXPECT_NEAR(exact.kl - approx.kl, missing, 1e-6);
}

TEST(CompareRow, SameRowIsExactlyZero) {
  std::vector<float> l = {0.3f, -1.7f, 2.25f, 0.0f, 1.1f, -0.4f};
  std::vector<int32_t> scratch;
  TokenScore a, b;
  int32_t ids[3], ids2[3];
  double lp[3], lp2[3];
  score_logits(l.data(), 6, 4, 3, &a, ids, lp, scratch);
  score_logits(l.data(), 6, 4, 3, &b, ids2, lp2, scratch);
  RowCompare c = compare_row(a, ids, lp, 3, l.data(), 6, b);
  EXPECT_EQ(c.kl, 0.0);
  EXPECT_EQ(c.dp, 0.0);
  EXPECT_TRUE(c.same_top1);
}

TEST(Percentile, LinearBetweenRanks) {
  std::vector<double> v = {0, 1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 0.5), 2.0);
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 0.9), 3.6);
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 1.0), 4.0);
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 0.0), 0.0);
  EXPECT_DOUBLE_EQ(percentile_sorted({7.0}, 0.99), 7.0);
  EXPECT_DOUBLE_EQ(percentile_sorted({}, 0.5), 0.0);
}

TEST(Histogram, BinsAndClamping) {
  Histogram h(0.0, 1.0, 4);
  for (double x : {0.0, 0.1, 0.25, 0.6, 0.99, 1.0, -3.0, 7.0, std::nan("")}) h.add(x);
  EXPECT_EQ(h.counts, (std::vector<int64_t>{4, 1, 1, 3}));
  EXPECT_EQ(h.total(), 9);
  Histogram r = Histogram::from_json(h.to_json());
  EXPECT_EQ(r.counts, h.counts);
  EXPECT_EQ(r.hi, 1.0);
}

TEST(EvalText, FirstCharsCountsCodePoints) {
  const std::string s =
      "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"
      "bc";  // a é € 😀 b c
  EXPECT_EQ(first_chars(s, 4), "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  EXPECT_EQ(first_chars(s, 2), "a\xc3\xa9");
  EXPECT_EQ(first_chars(s, 100), s);
  EXPECT_EQ(first_chars("\xff\xfex", 2), "\xff\xfe");  // invalid bytes count one each
  EXPECT_EQ(first_chars("abc", 0), "");
}

TEST(EvalText, MethodNames) {
  for (auto m : {PplMethod::Chunks, PplMethod::Window, PplMethod::FirstWindow})
    EXPECT_EQ(ppl_method_from_string(ppl_method_name(m)), m);
  EXPECT_THROW(ppl_method_from_string("sliding"), UsageError);
}

TEST(ScoreLogits, TopOneFastPathMatchesSelection) {
  std::vector<float> l = {0.5f, 3.0f, -1.0f, 3.0f, 2.0f};
  std::vector<int32_t> scratch;
  TokenScore a, b;
  int32_t id1[1], id2[2];
  double lp1[1], lp2[2];
  score_logits(l.data(), 5, 4, 1, &a, id1, lp1, scratch);
  score_logits(l.data(), 5, 4, 2, &b, id2, lp2, scratch);
  EXPECT_EQ(id1[0], 1);
  EXPECT_EQ(id2[0], 1);
  EXPECT_EQ(lp1[0], lp2[0]);
  EXPECT_NEAR(a.tail, 1.0 - std::exp(lp1[0]), 1e-15);
  EXPECT_NEAR(b.tail, a.tail - std::exp(lp2[1]), 1e-12);
}
