// GPTQ with lazy block updates, act-order (static groups) and every code-based format (see gptq.h).
#include "quant/gptq.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "formats/codebook.h"
#include "quant/blas.h"

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
      return static_cast<uint32_t>(int_code(x, s, static_cast<float>(z), umax));
    }
    if (!(s > 0)) return elem->encode(0.0f, true);
    return elem->encode(x / s, true);
  }
  float value(uint32_t u, float s, int z) const {
    return is_int ? static_cast<float>(static_cast<int>(u) - z) * s : elem->decode(u) * s;
  }
};

// The upper Cholesky factor U of (H + damp I)^-1 in the column order perm (H^-1 = U^T U), without forming the
// inverse: with J the order reversal, J (H + damp I) J = L L^T gives (H + damp I)^-1 = A^T A for the upper
// triangular A = J L^-1 J, so U = A: one Cholesky and one triangular inverse (LAPACK potrf + trtri, n^3 / 3
// multiply-adds, where inverting and factorising again costs 8 n^3 / 3). Float32 first, as reference GPTQ
// factorises; double when float32 finds the damped matrix not positive definite; damping x10 when double does
// too (up to 6 times).
template <typename Scalar>
bool factor_in(const Eigen::MatrixXd& H, const std::vector<int64_t>& perm, double damp, Eigen::MatrixXf* U) {
  using Mat = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic>;
  const int64_t n = H.rows();
  Mat P(n, n);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t a = 0; a < n; ++a) P(a, b) = static_cast<Scalar>(H(perm[n - 1 - a], perm[n - 1 - b]));
  P.diagonal().array() += static_cast<Scalar>(damp);
  const auto ln = static_cast<lapack_int>(n);
  lapack_int info;
  if constexpr (std::is_same_v<Scalar, float>) {
    info = LAPACKE_spotrf(LAPACK_COL_MAJOR, 'L', ln, P.data(), ln);
    if (info == 0) info = LAPACKE_strtri(LAPACK_COL_MAJOR, 'L', 'N', ln, P.data(), ln);
  } else {
    info = LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'L', ln, P.data(), ln);
    if (info == 0) info = LAPACKE_dtrtri(LAPACK_COL_MAJOR, 'L', 'N', ln, P.data(), ln);
  }
  if (info != 0) return false;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(static_cast<double>(P(i, i))) || !(P(i, i) > 0)) return false;
  *U = Mat(P.template triangularView<Eigen::Lower>()).reverse().template cast<float>();
  return true;
}

}  // namespace

Eigen::MatrixXf gptq_inverse_hessian_factor(const Eigen::MatrixXd& H, const std::vector<int64_t>& perm,
                                            double damp_frac, double* damp_used) {
  double damp = damp_frac * H.diagonal().mean();
  Eigen::MatrixXf U;
  for (int attempt = 0;; ++attempt) {
    if (factor_in<float>(H, perm, damp, &U) || factor_in<double>(H, perm, damp, &U)) break;
    if (attempt >= 6)
      fail("quant", "GPTQ: the Hessian is not positive definite even with damping " + std::to_string(damp) +
                        "; use more calibration samples or rtn");
    damp = (damp > 0 ? damp : 1e-8) * 10;
  }
  if (damp_used) *damp_used = damp;
  return U;
}

double relative_frobenius(const float* w, const float* wq, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(w[i]) - wq[i];
    num += d * d;
    den += static_cast<double>(w[i]) * w[i];
  }
  return den > 0 ? std::sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
}

namespace {

// trace(A G A^T) for A [rows, cols] row-major and the symmetric G [cols, cols]: the row-major A is the
// column-major A^T, so one GEMM gives (A G)^T = G A^T in the same layout, summed against A elementwise.
double quadratic_trace(const float* a, int64_t rows, int64_t cols, const Eigen::MatrixXf& gram) {
  std::vector<float> m(static_cast<size_t>(rows * cols));
  const int n = static_cast<int>(cols), r = static_cast<int>(rows);
  cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, r, n, 1.0f, gram.data(), n, a, n, 0.0f, m.data(),
              n);
  double t = 0;
  for (size_t i = 0; i < m.size(); ++i) t += static_cast<double>(m[i]) * a[i];
  return t;
}

}  // namespace

double output_error(const float* w, const float* wq, int64_t rows, int64_t cols, const Eigen::MatrixXf& gram,
                    double* base) {
  Eigen::Map<const RowMajorF> W(w, rows, cols), Q(wq, rows, cols);
  const RowMajorF D = W - Q;
  const double err = quadratic_trace(D.data(), rows, cols, gram);
  if (base) *base = quadratic_trace(w, rows, cols, gram);
  return err;
}

namespace {

// The report's rows: every row up to 2^31 multiply-adds for the exact error (rows x cols^2), else every k-th,
// k = ceil(cost / 2^31), copied out of w and wq. Returns false (nothing copied) when every row is used.
bool report_rows(const float* w, const float* wq, int64_t rows, int64_t cols, std::vector<float>* ws,
                 std::vector<float>* qs) {
  constexpr double kExactCost = 2147483648.0;
  const double cost = static_cast<double>(rows) * static_cast<double>(cols) * static_cast<double>(cols);
  if (cost <= kExactCost) return false;
  const int64_t stride = static_cast<int64_t>(std::ceil(cost / kExactCost));
  for (int64_t r = 0; r < rows; r += stride) {
    ws->insert(ws->end(), w + r * cols, w + (r + 1) * cols);
    qs->insert(qs->end(), wq + r * cols, wq + (r + 1) * cols);
  }
  return true;
}

// sum over tokens of |A x_t|^2 for A [rows, cols] and x [T, cols], both row-major: A X^T in chunks of tokens.
double token_space_sq(const float* a, int64_t rows, int64_t cols, const float* x, int64_t T) {
  constexpr int64_t kChunk = 1024;
  std::vector<float> y(static_cast<size_t>(rows * std::min(T, kChunk)));
  double t = 0;
  for (int64_t t0 = 0; t0 < T; t0 += kChunk) {
    const int64_t n = std::min(kChunk, T - t0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(n),
                static_cast<int>(cols), 1.0f, a, static_cast<int>(cols), x + t0 * cols,
                static_cast<int>(cols), 0.0f, y.data(), static_cast<int>(n));
    for (int64_t i = 0; i < rows * n; ++i) t += static_cast<double>(y[i]) * y[i];
  }
  return t;
}

}  // namespace

double output_error_rows(const float* w, const float* wq, int64_t rows, int64_t cols,
                         const Eigen::MatrixXf& gram, double* base, int64_t* rows_used) {
  std::vector<float> ws, qs;
  if (!report_rows(w, wq, rows, cols, &ws, &qs)) {
    if (rows_used) *rows_used = rows;
    return output_error(w, wq, rows, cols, gram, base);
  }
  const int64_t n = static_cast<int64_t>(ws.size()) / cols;
  if (rows_used) *rows_used = n;
  return output_error(ws.data(), qs.data(), n, cols, gram, base);
}

double output_error_acts(const float* w, const float* wq, int64_t rows, int64_t cols, const float* x,
                         int64_t T, double* base) {
  std::vector<float> d(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < d.size(); ++i) d[i] = w[i] - wq[i];
  const double err = token_space_sq(d.data(), rows, cols, x, T);
  if (base) *base = token_space_sq(w, rows, cols, x, T);
  return err;
}

double output_error_rows_acts(const float* w, const float* wq, int64_t rows, int64_t cols, const float* x,
                              int64_t T, double* base, int64_t* rows_used) {
  std::vector<float> ws, qs;
  if (!report_rows(w, wq, rows, cols, &ws, &qs)) {
    if (rows_used) *rows_used = rows;
    return output_error_acts(w, wq, rows, cols, x, T, base);
  }
  const int64_t n = static_cast<int64_t>(ws.size()) / cols;
  if (rows_used) *rows_used = n;
  return output_error_acts(ws.data(), qs.data(), n, cols, x, T, base);
}

std::vector<float> fit_float_target(const float* w, int64_t rows, int64_t cols, const Eigen::MatrixXf& gram,
                                    const Eigen::MatrixXf& cross, double damp_frac) {
  if (gram.rows() != cols || gram.cols() != cols || cross.rows() != cols || cross.cols() != cols)
    fail("quant", "fit_float_target: statistics of " + std::to_string(gram.rows()) + " / " +
                      std::to_string(cross.rows()) + " channels for a matrix of " + std::to_string(cols) +
                      " columns");
  // Double precision on LAPACK / BLAS (all cores): down_proj of a 0.5B model is a 4864-wide system.
  const int64_t n = cols;
  const lapack_int ln = static_cast<lapack_int>(n);
  double mean_diag = 0;
  for (int64_t i = 0; i < n; ++i) mean_diag += gram(i, i);
  mean_diag = std::max(mean_diag / static_cast<double>(n), 1e-30);
  double lambda = std::max(damp_frac, 1e-8) * mean_diag;
  std::vector<double> A(static_cast<size_t>(n * n));  // H + l I, column-major, then its Cholesky factor
  for (int tries = 0;; ++tries) {
    for (int64_t k = 0; k < n * n; ++k) A[static_cast<size_t>(k)] = gram.data()[k];
    for (int64_t i = 0; i < n; ++i) A[static_cast<size_t>(i * n + i)] += lambda;
    if (LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'L', ln, A.data(), ln) == 0) break;
    if (tries == 8)
      fail("quant", "fit_float_target: the Gram matrix is not positive definite at any damping");
    lambda *= 10;
  }
  // W'^T = (H + l I)^-1 (cross + l I)^T W^T; w row-major [rows, cols] is the column-major W^T.
  std::vector<double> C(cross.data(), cross.data() + n * n), wt(w, w + rows * cols),
      rhs(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < n; ++i) C[static_cast<size_t>(i * n + i)] += lambda;
  cblas_dgemm(CblasColMajor, CblasTrans, CblasNoTrans, ln, static_cast<int>(rows), ln, 1.0, C.data(), ln,
              wt.data(), ln, 0.0, rhs.data(), ln);
  if (LAPACKE_dpotrs(LAPACK_COL_MAJOR, 'L', ln, static_cast<lapack_int>(rows), A.data(), ln, rhs.data(),
                     ln) != 0)
    fail("quant", "fit_float_target: the triangular solves failed");
  return std::vector<float>(rhs.begin(), rhs.end());
}

GptqProblem gptq_problem(const float* w, int64_t rows, int64_t cols, const Eigen::MatrixXf& gram) {
  if (gram.rows() != cols || gram.cols() != cols)
    fail("quant", "GPTQ: Hessian is " + std::to_string(gram.rows()) + "x" + std::to_string(gram.cols()) +
                      " but the layer has " + std::to_string(cols) + " inputs");
  GptqProblem p;
  p.H = gram.cast<double>();
  p.W = Eigen::Map<const RowMajorF>(w, rows, cols);  // column-major working copy
  for (int64_t i = 0; i < cols; ++i)
    if (!(p.H(i, i) > 0)) {  // a dead input: its weights cannot matter, quantize them as zeros
      p.H(i, i) = 1.0;
      p.W.col(i).setZero();
    }
  p.importance.resize(static_cast<size_t>(cols));
  for (int64_t i = 0; i < cols; ++i) p.importance[i] = static_cast<float>(p.H(i, i));
  return p;
}

std::vector<int64_t> gptq_column_order(const Eigen::MatrixXd& H, bool act_order) {
  std::vector<int64_t> perm(static_cast<size_t>(H.cols()));
  std::iota(perm.begin(), perm.end(), 0);
  if (act_order)
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return H(a, a) > H(b, b); });
  return perm;
}

void gptq_column_loop(
    Eigen::MatrixXf& Wp, const Eigen::MatrixXf& U, int block,
    const std::function<void(int64_t i, const Eigen::MatrixXf& Wp, float* deq)>& round_column) {
  // The column loop is cheap (rows x cols codes, rank-1 updates inside a block); the update of the columns
  // after each block is one GEMM, which OpenBLAS runs on every core.
  const int64_t rows = Wp.rows(), cols = Wp.cols();
  const int64_t B = std::max(1, block);
  Eigen::MatrixXf Err(rows, B);
  std::vector<float> deq(static_cast<size_t>(rows));
  for (int64_t i1 = 0; i1 < cols; i1 += B) {
    const int64_t i2 = std::min(cols, i1 + B);
    for (int64_t i = i1; i < i2; ++i) {
      round_column(i, Wp, deq.data());
      const float d = U(i, i);
      for (int64_t r = 0; r < rows; ++r) Err(r, i - i1) = (Wp(r, i) - deq[static_cast<size_t>(r)]) / d;
      if (i + 1 < i2)
        Wp.block(0, i + 1, rows, i2 - i - 1).noalias() -= Err.col(i - i1) * U.block(i, i + 1, 1, i2 - i - 1);
    }
    if (i2 < cols)  // Wp[:, i2:] -= Err[:, :i2-i1] U[i1:i2, i2:] (all column-major)
      cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows),
                  static_cast<int>(cols - i2), static_cast<int>(i2 - i1), -1.0f, Err.data(),
                  static_cast<int>(rows), U.data() + i1 + i2 * cols, static_cast<int>(cols), 1.0f,
                  Wp.data() + i2 * rows, static_cast<int>(rows));
  }
}

QuantizedMatrix gptq_quantize(const float* w, int64_t rows, int64_t cols, const Eigen::MatrixXf& gram,
                              const QuantScheme& s, const GptqOptions& o, double* damp_used) {
  validate(s, rows, cols);
  const FormatInfo& fi = s.info();
  if (fi.is_gguf() && fi.row_grid) return gptq_quantize_kquant(w, rows, cols, gram, s, o, damp_used);
  if (fi.is_gguf() || s.gran == Granularity::Native)
    throw UsageError(
        "quant",
        std::string("GPTQ needs a code-based scheme (int*, nf4, fp8, fp4, mx*, nvfp4) or a k-quant; '") +
            fi.name + "' is not one");
  GptqProblem pr = gptq_problem(w, rows, cols, gram);
  const Eigen::MatrixXd& H = pr.H;
  const Eigen::MatrixXf& W = pr.W;
  const std::vector<float>& importance = pr.importance;

  // Static cell parameters from the (dead-zeroed) original weights; lazy groups overwrite them per group.
  // Per-row codebooks (LUT2/3/4) are fixed here too, by k-means weighted with the Hessian diagonal; the
  // column loop then rounds each error-updated weight to the nearest entry of its row's table.
  RowMajorF W0 = W;
  const bool codebook = fi.kind == FormatKind::Codebook;
  QuantizedMatrix q =
      quantize_matrix(W0.data(), rows, cols, s,
                      s.search == ScaleSearch::Mse || codebook ? importance.data() : nullptr, o.nvfp4_amax);
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

  const std::vector<int64_t> perm = gptq_column_order(H, o.act_order);
  const Eigen::MatrixXf U = gptq_inverse_hessian_factor(H, perm, o.damp, damp_used);
  Eigen::MatrixXf Wp(rows, cols);
  for (int64_t i = 0; i < cols; ++i) Wp.col(i) = W.col(perm[i]);
  std::vector<float> sub;
  gptq_column_loop(Wp, U, o.block, [&](int64_t i, const Eigen::MatrixXf& Wc, float* deq) {
    const int64_t c = perm[i];
    const int64_t cj = c / g.col_block;
    if (lazy && c % g.col_block == 0) {
      // Group scales from the error-updated weights of this group (identity order: columns i .. i+gsz).
      const int64_t gsz = std::min<int64_t>(g.col_block, cols - c);
      sub.assign(static_cast<size_t>(rows * gsz), 0.0f);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < gsz; ++k) sub[r * gsz + k] = Wc(r, i + k);
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
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t k = (r / g.row_block) * g.cols + cj;
      const float x = Wc(r, i);
      const float* table = cell_s.data() + r * g.cols;  // codebook: row r's table (cells (r, 0 .. 2^b-1))
      const uint32_t u = codebook ? codebook_encode(table, static_cast<int>(g.cols), x)
                                  : coder.encode(x, cell_s[k], cell_z[k]);
      pack_code(q.codes.data() + r * q.row_bytes, c, q.bits, u);
      deq[r] = codebook ? table[u] : coder.value(u, cell_s[k], cell_z[k]);
    }
  });
  return q;
}

}  // namespace lowbit::quant
