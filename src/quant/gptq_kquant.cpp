// GPTQ on the GGUF k-quant grids (Q2_K .. Q6_K) and IQ4_XS's non-linear grid: the super-block scales,
// sub-block scales and mins are chosen once, up front, from the original weights by the format's own encoder
// with the Hessian diagonal as its importance (the "static groups" of act-order GPTQ: no group's parameters
// depend on the column order); the column loop then rounds each error-updated weight to the nearest code of
// its fixed sub-block grid (value = scale * q + offset, FormatInfo::row_grid; scale * code_values[q] for
// IQ4_XS) and pushes the rounding error onto the columns not yet quantized. The result keeps the ggml block
// layout, so the fused KPack kernels and the checkpoint's lowbit-packed GGUF blocks take it unchanged.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "quant/blas.h"
#include "quant/gptq.h"

namespace lowbit::quant {
namespace {
using RowMajorF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Nearest code of x under one grid point set; a zero step keeps code 0 (or the code nearest 0).
inline int nearest_code(float x, float scale, float offset, int qmin, int qmax) {
  const int q0 = std::clamp(0, qmin, qmax);
  if (!(std::fabs(scale) > 0) || !std::isfinite(scale)) return q0;
  const float v = (x - offset) / scale;
  if (!(v > static_cast<float>(qmin))) return qmin;
  if (v >= static_cast<float>(qmax)) return qmax;
  return static_cast<int>(std::nearbyint(v));
}

// Nearest code of x on a non-affine grid (values[q - qmin] ascending), ties to the upper code; a zero step
// keeps the code whose value is nearest 0.
inline int nearest_value_code(float x, float scale, float offset, const int8_t* values, int qmin, int qmax) {
  const float v = std::fabs(scale) > 0 && std::isfinite(scale) ? (x - offset) / scale : 0.0f;
  const int8_t* last = values + (qmax - qmin);
  const int8_t* hi = std::upper_bound(values, last + 1, v, [](float a, int8_t b) { return a < b; });
  if (hi == values) return qmin;
  if (hi > last) return qmax;
  const int8_t* lo = hi - 1;
  return qmin + static_cast<int>((v - *lo < *hi - v ? lo : hi) - values);
}
}  // namespace

QuantizedMatrix gptq_quantize_kquant(const float* w, int64_t rows, int64_t cols, const Eigen::MatrixXf& gram,
                                     const QuantScheme& s, const GptqOptions& o, double* damp_used) {
  validate(s, rows, cols);
  const FormatInfo& fi = s.info();
  if (!fi.row_grid || !fi.set_row_codes)
    throw UsageError("quant", std::string("GPTQ on ggml blocks needs a k-quant (q2_k .. q6_k) or iq4_xs; '") +
                                  fi.name + "' is not one; use rtn for it");
  const int8_t* values = fi.code_values;
  GptqProblem pr = gptq_problem(w, rows, cols, gram);
  const Eigen::MatrixXd& H = pr.H;
  const Eigen::MatrixXf& W = pr.W;
  const std::vector<float>& importance = pr.importance;

  // The block headers, importance-weighted by the Hessian diagonal, from the (dead-zeroed) original weights.
  RowMajorF W0 = W;
  QuantizedMatrix q = quantize_matrix(W0.data(), rows, cols, s, importance.data());
  // Each element's grid, column-major like the working copy (the column loop walks rows of one column).
  std::vector<float> gs(static_cast<size_t>(rows * cols)), go(gs.size()), rs(static_cast<size_t>(cols)),
      ro(rs.size());
  for (int64_t r = 0; r < rows; ++r) {
    fi.row_grid(q.row_data(r), rs.data(), ro.data(), cols);
    for (int64_t c = 0; c < cols; ++c) {
      gs[c * rows + r] = rs[c];
      go[c * rows + r] = ro[c];
    }
  }
  std::vector<int8_t> codes(static_cast<size_t>(rows * cols));  // row-major, for set_row_codes

  const std::vector<int64_t> perm = gptq_column_order(H, o.act_order);
  const Eigen::MatrixXf U = gptq_inverse_hessian_factor(H, perm, o.damp, damp_used);
  Eigen::MatrixXf Wp(rows, cols);
  for (int64_t i = 0; i < cols; ++i) Wp.col(i) = W.col(perm[i]);
  gptq_column_loop(Wp, U, o.block, [&](int64_t i, const Eigen::MatrixXf& Wc, float* deq) {
    const int64_t c = perm[i];
    const float* cs = gs.data() + c * rows;
    const float* co = go.data() + c * rows;
    for (int64_t r = 0; r < rows; ++r) {
      const int qv = values ? nearest_value_code(Wc(r, i), cs[r], co[r], values, fi.code_min, fi.code_max)
                            : nearest_code(Wc(r, i), cs[r], co[r], fi.code_min, fi.code_max);
      codes[r * cols + c] = static_cast<int8_t>(qv);
      deq[r] = cs[r] * static_cast<float>(values ? values[qv - fi.code_min] : qv) + co[r];
    }
  });
  for (int64_t r = 0; r < rows; ++r)
    fi.set_row_codes(q.codes.data() + r * q.row_bytes, codes.data() + r * cols, cols);
  return q;
}

}  // namespace lowbit::quant
