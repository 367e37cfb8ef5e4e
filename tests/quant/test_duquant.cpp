// DuQuant's dual transformation (quant/duquant.h): G = R_blk2 . P_zigzag . R_blk1 is orthogonal, the zigzag
// permutation deals the largest channels to different blocks, and on a planted outlier channel G lowers
// max |x| / RMS far below the input's.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "quant/duquant.h"

namespace lowbit::quant {
namespace {

// [rows, n] standard normal rows with channel 5 x 30 and channel 40 x 12 (two outlier channels, one block).
std::vector<float> planted_rows(int64_t rows, int64_t n) {
  std::mt19937_64 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c) x[r * n + c] = nd(rng) * (c == 5 ? 30.0f : c == 40 ? 12.0f : 1.0f);
  return x;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// x G^T for rows x: each row transformed as a column vector, x' = G x.
std::vector<double> transform_rows(const std::vector<float>& x, int64_t rows, const DuquantTransform& t) {
  const int64_t n = t.n;
  std::vector<double> y(static_cast<size_t>(rows * n), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) {
      double acc = 0;
      for (int64_t j = 0; j < n; ++j) acc += t.g[i * n + j] * x[r * n + j];
      y[r * n + i] = acc;
    }
  return y;
}

TEST(DuQuant, TransformIsOrthogonal) {
  const int64_t rows = 256, n = 64;
  const auto x = planted_rows(rows, n);
  DuquantOptions o;
  o.block = 16;
  const DuquantTransform t = build_duquant(x, rows, n, o);
  ASSERT_EQ(t.g.size(), static_cast<size_t>(n * n));
  double worst = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int64_t k = 0; k < n; ++k) dot += t.g[i * n + k] * t.g[j * n + k];
      worst = std::max(worst, std::fabs(dot - (i == j ? 1.0 : 0.0)));
    }
  EXPECT_LT(worst, 1e-12);
  EXPECT_GT(t.steps1, 0);  // the greedy search took at least one step on the planted outliers
}

TEST(DuQuant, LowersMaxOverRmsOnAPlantedOutlier) {
  const int64_t rows = 512, n = 64;
  const auto x = planted_rows(rows, n);
  DuquantOptions o;
  o.block = 16;
  const DuquantTransform t = build_duquant(x, rows, n, o);
  const auto y = transform_rows(x, rows, t);
  double sq = 0, mx = 0;
  for (float v : x) sq += static_cast<double>(v) * v, mx = std::max(mx, std::fabs(static_cast<double>(v)));
  const double rms = std::sqrt(sq / static_cast<double>(x.size()));
  const double before = mx / rms, after = max_abs(y) / rms;  // G is orthogonal: the RMS is unchanged
  EXPECT_LT(after, before / 3) << "before " << before << " after " << after;
  EXPECT_NEAR(t.max_before, mx, 1e-6 * mx);
  EXPECT_NEAR(t.max_after, max_abs(y), 1e-9 * mx);
  EXPECT_NEAR(t.rms, rms, 1e-9 * rms);
}

TEST(DuQuant, ZigzagDealsTheLargestChannelsToDifferentBlocks) {
  // 32 channels in 4 blocks of 8; the 8 largest all sit in block 0.
  std::vector<double> m(32, 1.0);
  for (int c = 0; c < 8; ++c) m[c] = 100.0 - c;
  const auto p = zigzag_permutation(m, 8);
  ASSERT_EQ(p.size(), 32u);
  std::vector<int> seen(32, 0);
  for (int64_t c : p) ++seen[c];
  for (int s : seen) EXPECT_EQ(s, 1);  // a permutation
  // Dealing order: ranks 0..3 to blocks 0..3, ranks 4..7 to blocks 3..0.
  const std::vector<int64_t> want_first = {0, 1, 2, 3}, want_second = {7, 6, 5, 4};
  for (int b = 0; b < 4; ++b) {
    EXPECT_EQ(p[b * 8], want_first[b]) << b;
    EXPECT_EQ(p[b * 8 + 1], want_second[b]) << b;
  }
  // Block maxima before: {100, 1, 1, 1}; after: every block holds two of the eight, and the sums balance.
  double lo = 1e9, hi = 0;
  for (int b = 0; b < 4; ++b) {
    double mx = 0, sum = 0;
    for (int i = 0; i < 8; ++i) mx = std::max(mx, m[p[b * 8 + i]]), sum += m[p[b * 8 + i]];
    EXPECT_GE(mx, 97.0) << b;
    lo = std::min(lo, sum), hi = std::max(hi, sum);
  }
  EXPECT_LE(hi - lo, 1.0 + 1e-9);  // zigzag pairs rank r with rank 2K-1-r: sums 193 each (+ the 1s)
}

TEST(DuQuant, BlockSize) {
  EXPECT_EQ(duquant_block_size(256, 0), 128);
  EXPECT_EQ(duquant_block_size(96, 0), 96);
  EXPECT_EQ(duquant_block_size(172, 0), 86);
  EXPECT_EQ(duquant_block_size(256, 64), 64);
  EXPECT_THROW(duquant_block_size(256, 48), UsageError);
}

}  // namespace
}  // namespace lowbit::quant
