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

void fit_row_codebook(const float* x, const float* w, int64_t n, int bits, uint16_t* table_f16) {
  const int k = 1 << bits;
  if (n < 1) fail("formats", "fit_row_codebook: empty row; quantize a matrix with at least one column");
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return x[a] < x[b]; });
  bool weighted = false;
  if (w)
    for (int64_t i = 0; i < n && !weighted; ++i) weighted = w[i] > 0;
  // Prefix sums over the sorted values: cluster [lo, hi) has weight W[hi] - W[lo] and moment S[hi] - S[lo].
  std::vector<float> xs(static_cast<size_t>(n));
  std::vector<double> W(static_cast<size_t>(n) + 1, 0.0), S(static_cast<size_t>(n) + 1, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    xs[i] = x[idx[i]];
    const double wi = weighted ? std::max(0.0f, w[idx[i]]) : 1.0;
    W[i + 1] = W[i] + wi;
    S[i + 1] = S[i] + wi * xs[i];
  }
  // Weighted-quantile start: centroid j at the value where the cumulative weight crosses (j + 0.5) / k.
  std::vector<double> c(static_cast<size_t>(k));
  for (int j = 0; j < k; ++j) {
    const double target = (j + 0.5) / k * W[n];
    const auto it = std::upper_bound(W.begin() + 1, W.end(), target);
    c[j] = xs[std::min<int64_t>(n - 1, it - (W.begin() + 1))];
  }
  // Lloyd iterations: boundaries at the midpoints of the sorted centroids, centroids at the weighted means.
  // A cluster without weight keeps its centroid. 1-D k-means converges in few steps; 64 is a cap.
  std::vector<int64_t> edge(static_cast<size_t>(k) + 1);
  for (int it = 0; it < 64; ++it) {
    std::sort(c.begin(), c.end());
    edge[0] = 0;
    edge[k] = n;
    for (int j = 1; j < k; ++j) {
      const float mid = static_cast<float>(0.5 * (c[j - 1] + c[j]));
      edge[j] = std::upper_bound(xs.begin(), xs.end(), mid) - xs.begin();
    }
    bool moved = false;
    int empty = -1;
    for (int j = 0; j < k; ++j) {
      const double wj = W[edge[j + 1]] - W[edge[j]];
      if (!(wj > 0)) {
        empty = j;
        continue;
      }
      const double m = (S[edge[j + 1]] - S[edge[j]]) / wj;
      if (m != c[j]) moved = true;
      c[j] = m;
    }
    // A cluster left without weight (duplicate quantiles: rows with few distinct values, or weight on few
    // columns) moves to the value with the largest weighted error, so no table entry is wasted.
    if (empty >= 0) {
      double worst = 0;
      int64_t at = -1;
      for (int j = 0; j < k; ++j)
        for (int64_t i = edge[j]; i < edge[j + 1]; ++i) {
          const double e = (W[i + 1] - W[i]) * (xs[i] - c[j]) * (xs[i] - c[j]);
          if (e > worst) worst = e, at = i;
        }
      if (at >= 0) {
        c[empty] = xs[at];
        moved = true;
      }
    }
    if (!moved) break;
  }
  std::sort(c.begin(), c.end());
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
