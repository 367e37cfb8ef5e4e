// GPTQ with lazy block updates, act-order (static groups) and every code-based format (see gptq.h).
#include "quant/gptq.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace lowbit::quant {
namespace {

using RowMajorF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// One element under a fixed cell scale s (and INT zero point z): the same rule quantize_matrix applies.
struct ElemCoder {
  const FormatInfo* elem;
  bool is_int;
  float umax;
  uint32_t encode(float x, float s, int z) const {
    if (is_int) {
      if (!(s > 0)) return static_cast<uint32_t>(z);
      const float q = std::nearbyint(x / s);
      return static_cast<uint32_t>(std::fmin(umax, std::fmax(0.0f, q + static_cast<float>(z))));
    }
    if (!(s > 0)) return elem->encode(0.0f, true);
    return elem->encode(x / s, true);
  }
  float value(uint32_t u, float s, int z) const {
    return is_int ? static_cast<float>(static_cast<int>(u) - z) * s : elem->decode(u) * s;
  }
};

}  // namespace

double relative_frobenius(const float* w, const float* wq, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(w[i]) - wq[i];
    num += d * d;
    den += static_cast<double>(w[i]) * w[i];
  }
  return den > 0 ? std::sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
}

double output_error(const float* w, const float* wq, int64_t rows, int64_t cols, const Eigen::MatrixXf& gram,
                    double* base) {
  Eigen::Map<const RowMajorF> W(w, rows, cols), Q(wq, rows, cols);
  RowMajorF D = W - Q;
  const double err = static_cast<double>(((D * gram).cwiseProduct(D)).sum());
  if (base) *base = static_cast<double>(((W * gram).cwiseProduct(W)).sum());
  return err;
}

QuantizedMatrix gptq_quantize(const float* w, int64_t rows, int64_t cols, const Eigen::MatrixXf& gram,
                              const QuantScheme& s, const GptqOptions& o, double* damp_used) {
  validate(s, rows, cols);
  const FormatInfo& fi = s.info();
  if (fi.is_gguf() || s.gran == Granularity::Native)
    throw UsageError("quant",
                     std::string("GPTQ needs a code-based scheme (int*, nf4, fp8, fp4, mx*, nvfp4); '") +
                         fi.name + "' is not one");
  if (gram.rows() != cols || gram.cols() != cols)
    fail("quant", "GPTQ: Hessian is " + std::to_string(gram.rows()) + "x" + std::to_string(gram.cols()) +
                      " but the layer has " + std::to_string(cols) + " inputs");
  Eigen::MatrixXd H = gram.cast<double>();
  Eigen::MatrixXf W = Eigen::Map<const RowMajorF>(w, rows, cols);  // column-major working copy
  for (int64_t i = 0; i < cols; ++i)
    if (!(H(i, i) > 0)) {
      H(i, i) = 1.0;
      W.col(i).setZero();
    }
  std::vector<float> importance(static_cast<size_t>(cols));
  for (int64_t i = 0; i < cols; ++i) importance[i] = static_cast<float>(H(i, i));

  // Static cell parameters from the (dead-zeroed) original weights; lazy groups overwrite them per group.
  RowMajorF W0 = W;
  QuantizedMatrix q =
      quantize_matrix(W0.data(), rows, cols, s, s.search == ScaleSearch::Mse ? importance.data() : nullptr);
  const bool lazy =
      s.gran == Granularity::Group && !o.act_order && s.format != FormatId::NVFP4 && !s.double_quant;
  const ScaleGrid g = q.grid;
  std::vector<float> cell_s(static_cast<size_t>(g.cells()));
  std::vector<int> cell_z(static_cast<size_t>(g.cells()));
  for (int64_t i = 0; i < g.rows; ++i)
    for (int64_t j = 0; j < g.cols; ++j) {
      cell_s[i * g.cols + j] = q.scale(i, j);
      cell_z[i * g.cols + j] = q.zero_point(i, j);
    }
  std::fill(q.codes.begin(), q.codes.end(), 0);
  const FormatInfo& ei = format_info(q.elem);
  ElemCoder coder{&ei, ei.kind == FormatKind::Int, static_cast<float>((1 << q.bits) - 1)};
  const int sb =
      s.double_quant ? 1 : scale_type_bits(s.format == FormatId::NVFP4 ? ScaleType::E4M3 : s.scale_type) / 8;

  std::vector<int64_t> perm(static_cast<size_t>(cols));
  std::iota(perm.begin(), perm.end(), 0);
  if (o.act_order)
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return H(a, a) > H(b, b); });

  // Damped inverse Hessian in permuted order, and its upper Cholesky factor.
  const double mean_diag = H.diagonal().mean();
  double damp = o.damp * mean_diag;
  Eigen::MatrixXd Hp(cols, cols);
  for (int64_t a = 0; a < cols; ++a)
    for (int64_t b = 0; b < cols; ++b) Hp(a, b) = H(perm[a], perm[b]);
  Eigen::MatrixXf U;
  for (int attempt = 0;; ++attempt) {
    Eigen::MatrixXd Hd = Hp;
    Hd.diagonal().array() += damp;
    Eigen::LLT<Eigen::MatrixXd> llt(Hd);
    if (llt.info() == Eigen::Success) {
      Eigen::MatrixXd Hinv = llt.solve(Eigen::MatrixXd::Identity(cols, cols));
      Eigen::LLT<Eigen::MatrixXd> llt2(Hinv);
      if (llt2.info() == Eigen::Success) {
        U = Eigen::MatrixXd(llt2.matrixU()).cast<float>();
        break;
      }
    }
    if (attempt >= 6)
      fail("quant", "GPTQ: the Hessian is not positive definite even with damping " + std::to_string(damp) +
                        "; use more calibration samples or rtn");
    damp = (damp > 0 ? damp : 1e-8) * 10;
  }
  if (damp_used) *damp_used = damp;

  Eigen::MatrixXf Wp(rows, cols);
  for (int64_t i = 0; i < cols; ++i) Wp.col(i) = W.col(perm[i]);
  const int64_t B = std::max(1, o.block);
  Eigen::MatrixXf Err(rows, B);
  std::vector<float> sub;
  for (int64_t i1 = 0; i1 < cols; i1 += B) {
    const int64_t i2 = std::min(cols, i1 + B);
    for (int64_t i = i1; i < i2; ++i) {
      const int64_t c = perm[i];
      const int64_t cj = c / g.col_block;
      if (lazy && c % g.col_block == 0) {
        // Group scales from the error-updated weights of this group (identity order: columns i .. i+gsz).
        const int64_t gsz = std::min<int64_t>(g.col_block, cols - c);
        sub.assign(static_cast<size_t>(rows * gsz), 0.0f);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t k = 0; k < gsz; ++k) sub[r * gsz + k] = Wp(r, i + k);
        QuantScheme ss = s;
        ss.group_size = static_cast<int>(gsz);
        QuantizedMatrix qs = quantize_matrix(sub.data(), rows, gsz, ss,
                                             s.search == ScaleSearch::Mse ? importance.data() + c : nullptr);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t k = r * g.cols + cj;
          std::copy(qs.scales.begin() + r * sb, qs.scales.begin() + (r + 1) * sb, q.scales.begin() + k * sb);
          if (!q.zeros.empty()) q.zeros[k] = qs.zeros[r];
          cell_s[k] = qs.scale(r, 0);
          cell_z[k] = qs.zero_point(r, 0);
        }
      }
      const float d = U(i, i);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t k = (r / g.row_block) * g.cols + cj;
        const float x = Wp(r, i);
        const uint32_t u = coder.encode(x, cell_s[k], cell_z[k]);
        pack_code(q.codes.data() + r * q.row_bytes, c, q.bits, u);
        Err(r, i - i1) = (x - coder.value(u, cell_s[k], cell_z[k])) / d;
      }
      if (i + 1 < i2)
        Wp.block(0, i + 1, rows, i2 - i - 1).noalias() -= Err.col(i - i1) * U.block(i, i + 1, 1, i2 - i - 1);
    }
    if (i2 < cols)
      Wp.rightCols(cols - i2).noalias() -= Err.leftCols(i2 - i1) * U.block(i1, i2, i2 - i1, cols - i2);
  }
  return q;
}

}  // namespace lowbit::quant
