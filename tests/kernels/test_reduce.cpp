// The row reductions of kernels/reduce.h (RMSNorm's sum of squares, the logits' finiteness check, greedy
// argmax) on every ISA tier this CPU has, against their definitions:
//  - sum_squares_f64: the generic tier equals the definition written out here (8 lane sums, the stated
//    combination, the tail in order) and every tier equals it bit for bit, lengths 0..70 and 896 / 4864,
//    values spread over many magnitudes so that a different order would round differently;
//  - all_finite_f32: one NaN, +Inf or -Inf at every position of rows 1..40 long is found, large finite
//    values and denormals are not;
//  - argmax_f32: std::max_element's index on random rows, ties (the first wins), -0 / +0, infinities, rows
//    of -Inf, a NaN at the start, the middle and the end (where std::max_element's answer depends on it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/reduce.h"

namespace lowbit {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Tiers {
  std::vector<Isa> isas = available_isas();
  ~Tiers() { set_kernel_isa(best_isa()); }
};

double sum_squares_definition(const std::vector<float>& x) {
  const size_t n = x.size();
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (size_t j = 0; j < 8; ++j) s[j] += static_cast<double>(x[i + j]) * static_cast<double>(x[i + j]);
  double r = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
  for (; i < n; ++i) r += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return r;
}

std::vector<float> spread_row(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> e(-30, 30);
  std::vector<float> x(n);
  for (auto& v : x) v = std::ldexp(g(rng), e(rng));
  return x;
}

TEST(Reduce, SumSquaresFollowsItsDefinitionOnEveryTier) {
  Tiers tiers;
  std::mt19937 rng(7);
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 70; ++n) lengths.push_back(n);
  lengths.push_back(896);
  lengths.push_back(4864);
  int order_matters = 0;
  for (size_t n : lengths) {
    const std::vector<float> x = spread_row(n, rng);
    const double want = sum_squares_definition(x);
    double seq = 0;
    for (float v : x) seq += static_cast<double>(v) * v;
    order_matters += seq != want;
    EXPECT_EQ(kern::sum_squares_f64_generic(x.data(), static_cast<int64_t>(n)), want) << n;
    for (Isa isa : tiers.isas) {
      set_kernel_isa(isa);
      EXPECT_EQ(sum_squares_f64(x.data(), static_cast<int64_t>(n)), want) << isa_name(isa) << " n " << n;
    }
  }
  // The rows are such that the order shows: a kernel that summed sequentially would fail above.
  EXPECT_GT(order_matters, 10);
}

TEST(Reduce, AllFiniteFindsEveryNonFiniteValueOnEveryTier) {
  Tiers tiers;
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::signaling_NaN(), kInf, -kInf};
  const float good[] = {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                        std::numeric_limits<float>::denorm_min(), -0.0f};
  for (Isa isa : tiers.isas) {
    set_kernel_isa(isa);
    for (int64_t n = 1; n <= 40; ++n) {
      std::vector<float> x(static_cast<size_t>(n), 1.5f);
      ASSERT_TRUE(all_finite_f32(x.data(), n)) << isa_name(isa);
      for (int64_t p = 0; p < n; ++p) {
        for (float b : bad) {
          x[static_cast<size_t>(p)] = b;
          EXPECT_FALSE(all_finite_f32(x.data(), n)) << isa_name(isa) << " n " << n << " at " << p << " " << b;
        }
        for (float g : good) {
          x[static_cast<size_t>(p)] = g;
          EXPECT_TRUE(all_finite_f32(x.data(), n)) << isa_name(isa) << " n " << n << " at " << p << " " << g;
        }
        x[static_cast<size_t>(p)] = 1.5f;
      }
    }
    EXPECT_TRUE(all_finite_f32(nullptr, 0));
  }
}

void expect_argmax(const std::vector<float>& x, const Tiers& tiers, const char* what) {
  const int64_t want = std::max_element(x.begin(), x.end()) - x.begin();
  for (Isa isa : tiers.isas) {
    set_kernel_isa(isa);
    EXPECT_EQ(argmax_f32(x.data(), static_cast<int64_t>(x.size())), want)
        << isa_name(isa) << " " << what << " n " << x.size();
  }
}

TEST(Reduce, ArgmaxIsMaxElementOnEveryTier) {
  Tiers tiers;
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 3.0f);
  for (size_t n : {1, 2, 7, 8, 15, 16, 17, 31, 33, 63, 64, 65, 100, 129, 1000, 151936}) {
    std::vector<float> x(n);
    for (auto& v : x) v = g(rng);
    expect_argmax(x, tiers, "random");
    // Ties: the largest value at several places, the first of them wins.
    const float top = *std::max_element(x.begin(), x.end()) + 1.0f;
    for (size_t p : {n - 1, n / 2, n / 3, size_t{0}}) {
      x[p] = top;
      expect_argmax(x, tiers, "tie");
    }
    // Signed zeros as the largest values: -0 before +0 and after it (the first zero wins either way).
    std::fill(x.begin(), x.end(), -1.0f);
    x[n - 1] = 0.0f;
    x[(n - 1) / 2] = -0.0f;
    expect_argmax(x, tiers, "zeros");
    std::fill(x.begin(), x.end(), -kInf);
    expect_argmax(x, tiers, "all -inf");
    x[n - 1] = kInf;
    expect_argmax(x, tiers, "+inf last");
    // A NaN: std::max_element's answer depends on its place (a NaN first is never replaced).
    for (size_t p : {size_t{0}, n / 2, n - 1}) {
      for (auto& v : x) v = g(rng);
      x[p] = std::numeric_limits<float>::quiet_NaN();
      expect_argmax(x, tiers, "nan");
    }
  }
}

}  // namespace
}  // namespace lowbit
