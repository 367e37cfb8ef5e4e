// LUT2 / LUT3 / LUT4: per-output-row non-uniform grids (SqueezeLLM-style). A weight [rows, cols] stores
//
//   codes  [rows, ceil(cols*b/8)]  b-bit indices, the LSB-first bit stream of every code format
//                                  (tensor/qtensor.h): element c at bits [c*b, c*b + b) of its row
//   table  [rows, 2^b] binary16    row r's codebook, ascending; kept in QuantizedMatrix::scales with the
//                                  scale grid [rows, 2^b] (formats/scheme.cpp), so scale(r, u) = table[r][u]
//
//   x_hat[r][c] = table[r][code(r, c)]                      (no scale, no zero point)
//   bits per weight = b + 16 * 2^b / cols                   (LUT3 at cols 896: 3.143; LUT4: 4.286)
//
// The table row is in "element units" of nothing: the row's FormatInfo decode/encode map a code to its
// index (decode(u) = u), which keeps the table sweeps of tests/formats meaningful; values come from the
// table. Fitting: fit_row_codebook below (weighted k-means); encoding: nearest table entry (codebook.h).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "formats/codebook.h"
#include "formats/format_rows.h"

namespace lowbit {

namespace {

// Sorted values with prefix sums: cluster [lo, hi) of the sorted order has weight W[hi] - W[lo], first moment
// S[hi] - S[lo] and second moment Q[hi] - Q[lo], so one Lloyd step and the clustering's error are O(k log n).
struct SortedRow {
  std::vector<float> xs;
  std::vector<double> W, S, Q;
};

// Lloyd iterations from the centroids c (sorted on return): boundaries at the midpoints of the sorted
// centroids, centroids at the weighted means; a cluster left without weight (duplicate starts: rows with few
// distinct values, or weight on few columns) moves to the value with the largest weighted error. 1-D k-means
// converges in few steps; 64 is a cap. Returns the weighted squared error of the final clustering.
double lloyd(const SortedRow& d, std::vector<double>& c) {
  const int k = static_cast<int>(c.size());
  const int64_t n = static_cast<int64_t>(d.xs.size());
  std::vector<int64_t> edge(static_cast<size_t>(k) + 1);
  auto assign = [&] {
    std::sort(c.begin(), c.end());
    edge[0] = 0;
    edge[k] = n;
    for (int j = 1; j < k; ++j) {
      const float mid = static_cast<float>(0.5 * (c[j - 1] + c[j]));
      edge[j] = std::upper_bound(d.xs.begin(), d.xs.end(), mid) - d.xs.begin();
    }
  };
  for (int it = 0; it < 64; ++it) {
    assign();
    bool moved = false;
    int empty = -1;
    for (int j = 0; j < k; ++j) {
      const double wj = d.W[edge[j + 1]] - d.W[edge[j]];
      if (!(wj > 0)) {
        empty = j;
        continue;
      }
      const double m = (d.S[edge[j + 1]] - d.S[edge[j]]) / wj;
      if (m != c[j]) moved = true;
      c[j] = m;
    }
    if (empty >= 0) {
      double worst = 0;
      int64_t at = -1;
      for (int j = 0; j < k; ++j)
        for (int64_t i = edge[j]; i < edge[j + 1]; ++i) {
          const double e = (d.W[i + 1] - d.W[i]) * (d.xs[i] - c[j]) * (d.xs[i] - c[j]);
          if (e > worst) worst = e, at = i;
        }
      if (at >= 0) {
        c[empty] = d.xs[at];
        moved = true;
      }
    }
    if (!moved) break;
  }
  assign();
  double sse = 0;
  for (int j = 0; j < k; ++j) {
    const int64_t lo = edge[j], hi = edge[j + 1];
    sse += (d.Q[hi] - d.Q[lo]) - 2 * c[j] * (d.S[hi] - d.S[lo]) + c[j] * c[j] * (d.W[hi] - d.W[lo]);
  }
  return sse;
}

}  // namespace

void fit_row_codebook(const float* x, const float* w, int64_t n, int bits, uint16_t* table_f16) {
  const int k = 1 << bits;
  if (n < 1) fail("formats", "fit_row_codebook: empty row; quantize a matrix with at least one column");
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return x[a] < x[b]; });
  bool weighted = false;
  if (w)
    for (int64_t i = 0; i < n && !weighted; ++i) weighted = w[i] > 0;
  SortedRow d;
  d.xs.resize(static_cast<size_t>(n));
  d.W.assign(static_cast<size_t>(n) + 1, 0.0);
  d.S = d.Q = d.W;
  for (int64_t i = 0; i < n; ++i) {
    d.xs[i] = x[idx[i]];
    const double wi = weighted ? std::max(0.0f, w[idx[i]]) : 1.0;
    d.W[i + 1] = d.W[i] + wi;
    d.S[i + 1] = d.S[i] + wi * d.xs[i];
    d.Q[i + 1] = d.Q[i] + wi * d.xs[i] * d.xs[i];
  }
  // Two deterministic starts, the better clustering kept: the weighted quantiles (j + 0.5) / k (what Lloyd
  // refines best on bell-shaped rows), and the same with the row's extremes as the outer centroids (which
  // keeps a lone outlier in its own cluster, where the quantile start lets it drag the top cluster's mean).
  std::vector<double> c(static_cast<size_t>(k));
  for (int j = 0; j < k; ++j) {
    const double target = (j + 0.5) / k * d.W[n];
    const auto it = std::upper_bound(d.W.begin() + 1, d.W.end(), target);
    c[j] = d.xs[std::min<int64_t>(n - 1, it - (d.W.begin() + 1))];
  }
  std::vector<double> c2 = c;
  c2.front() = d.xs.front();
  c2.back() = d.xs.back();
  const double e1 = lloyd(d, c), e2 = lloyd(d, c2);
  if (e2 < e1) c = c2;
  for (int j = 0; j < k; ++j) table_f16[j] = f32_to_f16(static_cast<float>(c[j]));
  // FP16 rounding keeps the order (it is monotonic), so the stored table stays ascending.
}

namespace formats_detail {
namespace {
template <int B>
float lut_decode(uint32_t u) {
  return static_cast<float>(u & ((1u << B) - 1));
}
template <int B>
uint32_t lut_encode(float x, bool) {
  if (std::isnan(x)) return 0;
  return static_cast<uint32_t>(std::clamp(std::nearbyint(x), 0.0f, static_cast<float>((1 << B) - 1)));
}
template <int B>
FormatInfo lut_row(FormatId id, const char* name, const char* desc) {
  FormatInfo r{};
  r.id = id;
  r.name = name;
  r.kind = FormatKind::Codebook;
  r.bits = B;
  r.block_elems = 1;
  r.native_scale = ScaleType::None;  // the table entries are f16 (the scheme's scale type)
  r.routes = kRouteWeights;
  r.elem = id;
  r.max_finite = (1 << B) - 1;  // code indices (see the header comment)
  r.min_positive = 1;
  r.has_inf = r.has_nan = r.has_neg_zero = false;
  r.ggml_type = -1;
  r.description = desc;
  r.decode = &lut_decode<B>;
  r.encode = &lut_encode<B>;
  return r;
}
}  // namespace

FormatInfo row_lut4() {
  return lut_row<4>(FormatId::LUT4, "lut4", "per-row k-means codebook: 16 f16 values per row, 4-bit indices");
}
FormatInfo row_lut3() {
  return lut_row<3>(FormatId::LUT3, "lut3", "per-row k-means codebook: 8 f16 values per row, 3-bit indices");
}
FormatInfo row_lut2() {
  return lut_row<2>(FormatId::LUT2, "lut2", "per-row k-means codebook: 4 f16 values per row, 2-bit indices");
}

}  // namespace formats_detail
}  // namespace lowbit
