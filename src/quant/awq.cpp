// AWQ scale search, SmoothQuant scales and exact scale folding (see awq.h).
#include "quant/awq.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/parallel.h"
#include "kernels/matmul.h"
#include "quant/blas.h"
#include "quant/gptq.h"
#include "tensor/qtensor.h"

namespace lowbit::quant {

void scale_columns(float* w, int64_t rows, int64_t cols, const std::vector<float>& s) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) w[r * cols + j] *= s[j];
}

void divide_rows(float* w, int64_t rows, int64_t cols, const std::vector<float>& s) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) w[r * cols + j] /= s[r];
}

void divide_elements(std::vector<float>& v, const std::vector<float>& s) {
  for (size_t j = 0; j < v.size(); ++j) v[j] /= s[j];
}

namespace {

// trace(D G D^T) for the many candidate weights of one search, D = W - Wq [rows, cols] row-major: with the
// Cholesky factor G = L L^T it is ||L^T D^T||_F^2, one triangular product (rows x cols^2 / 2 multiply-adds)
// instead of a GEMM against G. The row-major D is the column-major D^T, so strmm works on it in place. G gets
// a tiny diagonal (1e-6 of its mean: dead inputs have G_ii = 0) so that it factorises; if it still does not,
// the GEMM form (output_error) is used.
// Given the inputs x [T, cols] instead of a Gram matrix (AWQ's down_proj), the error is summed in token
// space: T x rows x cols per candidate, with no cols^2 Gram matrix to build and factorise.
class OutputErrorMetric {
 public:
  OutputErrorMetric(const Eigen::MatrixXf& gram, const std::vector<float>* acts, int64_t cols)
      : gram_(gram), n_(cols) {
    if (gram.size() == 0 && acts && !acts->empty()) {
      x_ = acts->data();
      T_ = static_cast<int64_t>(acts->size()) / cols;
      return;
    }
    L_ = gram;
    L_.diagonal().array() += 1e-6f * std::max(1e-30f, gram.diagonal().mean());
    chol_ = LAPACKE_spotrf(LAPACK_COL_MAJOR, 'L', static_cast<lapack_int>(n_), L_.data(),
                           static_cast<lapack_int>(n_)) == 0;
  }
  double operator()(const float* w, const float* wq, int64_t rows, std::vector<float>& d) const {
    if (x_) return output_error_acts(w, wq, rows, n_, x_, T_);
    if (!chol_) return output_error(w, wq, rows, n_, gram_);
    d.resize(static_cast<size_t>(rows * n_));
    for (size_t i = 0; i < d.size(); ++i) d[i] = w[i] - wq[i];
    cblas_strmm(CblasColMajor, CblasLeft, CblasLower, CblasTrans, CblasNonUnit, static_cast<int>(n_),
                static_cast<int>(rows), 1.0f, L_.data(), static_cast<int>(n_), d.data(),
                static_cast<int>(n_));
    double t = 0;
    for (float v : d) t += static_cast<double>(v) * v;
    return t;
  }

 private:
  const Eigen::MatrixXf& gram_;
  int64_t n_;
  Eigen::MatrixXf L_;  // [cols, cols] lower triangle: G's Cholesky factor
  bool chol_ = false;
  const float* x_ = nullptr;  // [T_, cols] the inputs, when scoring in token space
  int64_t T_ = 0;
};

constexpr double kExactCost = 1073741824.0;  // multiply-adds of one exact loss (2^30)

// 1 below kExactCost, else the k of "every k-th row" for a matrix of rows x cols with per-row scale cells.
int64_t row_stride(int64_t rows, int64_t cols) {
  const double cost = static_cast<double>(rows) * static_cast<double>(cols) * static_cast<double>(cols);
  return cost <= kExactCost ? 1 : static_cast<int64_t>(std::ceil(cost / kExactCost));
}
}  // namespace

bool awq_token_space_cheaper(int64_t rows, int64_t cols, int64_t tokens, int grid) {
  const int64_t stride = row_stride(rows, cols);
  const double r = static_cast<double>((rows + stride - 1) / stride);  // rows scored
  const double c = static_cast<double>(cols), t = static_cast<double>(tokens), a = grid + 1.0;
  const double gram = c * c * t / 2 + c * c * c / 6 + a * r * c * c / 2;  // build, factorise, 21 products
  return a * r * t * c < gram;
}

AwqResult awq_search(const std::vector<AwqTarget>& targets, int64_t cols, const std::vector<float>& mean_abs,
                     const Eigen::MatrixXf& gram, int grid, const std::vector<float>* acts) {
  if (gram.size() == 0 && (!acts || acts->empty() || static_cast<int64_t>(acts->size()) % cols != 0))
    fail("quant", "AWQ: the search needs the inputs' Gram matrix or the inputs themselves");
  // The alphas run one after another: each candidate's quantize_matrix and triangular product use every core
  // (the product through OpenBLAS, which would contend with itself if called from parallel tasks).
  std::vector<std::vector<float>> scales(static_cast<size_t>(grid + 1));
  std::vector<double> losses(static_cast<size_t>(grid + 1), 0.0);
  const OutputErrorMetric metric(gram, acts, cols);
  // The loss of a large matrix is estimated from every k-th row: its exact value costs rows x cols^2 / 2 per
  // alpha (down_proj of a 0.5B model: 896 x 4864^2 / 2), and the search only compares alphas, which every row
  // ranks alike. Only per-row scale cells (group / channel) allow it: a row's codes then do not depend on the
  // other rows. Matrices up to kExactCost keep every row (kjv-brown-6M's largest is 256 x 768^2); a 0.5B
  // model's down_proj is scored on 45 of its 896 rows, gate / up on every 4th, q / k / v and o on all.
  std::vector<AwqTarget> eval = targets;
  std::vector<std::vector<float>> subsets(targets.size());
  std::vector<double> weight(targets.size(), 1.0);
  for (size_t i = 0; i < targets.size(); ++i) {
    const AwqTarget& t = targets[i];
    const bool per_row = (t.scheme.gran == Granularity::Group || t.scheme.gran == Granularity::Channel) &&
                         t.scheme.format != FormatId::NVFP4;
    const int64_t stride = row_stride(t.rows, cols);
    if (!per_row || stride == 1) continue;
    std::vector<float>& sub = subsets[i];
    for (int64_t r = 0; r < t.rows; r += stride) sub.insert(sub.end(), t.w + r * cols, t.w + (r + 1) * cols);
    eval[i].w = sub.data();
    eval[i].rows = static_cast<int64_t>(sub.size()) / cols;
    weight[i] = static_cast<double>(t.rows) / static_cast<double>(eval[i].rows);
  }
  {
    std::vector<float> ws, wq, d;
    for (int64_t k = 0; k <= grid; ++k) {
      const float alpha = static_cast<float>(k) / static_cast<float>(grid);
      std::vector<float>& s = scales[k];
      s.assign(static_cast<size_t>(cols), 1.0f);
      if (k > 0) {
        float mx = 0, mn = INFINITY;
        for (int64_t j = 0; j < cols; ++j) {
          s[j] = std::max(1e-4f, std::pow(std::max(mean_abs[j], 0.0f), alpha));
          mx = std::max(mx, s[j]);
          mn = std::min(mn, s[j]);
        }
        const float norm = std::sqrt(mx * mn);
        for (auto& v : s) v /= norm;
      }
      double loss = 0;
      for (size_t ti = 0; ti < eval.size(); ++ti) {
        const AwqTarget& t = eval[ti];
        const int64_t n = t.rows * cols;
        ws.assign(t.w, t.w + n);
        scale_columns(ws.data(), t.rows, cols, s);
        QuantizedMatrix q = quantize_matrix(ws.data(), t.rows, cols, t.scheme);
        wq.resize(static_cast<size_t>(n));
        dequantize_matrix(q, wq.data());
        for (int64_t r = 0; r < t.rows; ++r)
          for (int64_t j = 0; j < cols; ++j) wq[r * cols + j] /= s[j];
        loss += weight[ti] * metric(t.w, wq.data(), t.rows, d);
      }
      losses[k] = loss;
    }
  }
  AwqResult best;
  best.loss = INFINITY;
  best.loss_plain = losses[0];
  for (int k = 0; k <= grid; ++k)
    if (losses[k] < best.loss) {
      best.loss = losses[k];
      best.alpha = static_cast<float>(k) / static_cast<float>(grid);
      best.scales = scales[k];
    }
  return best;
}

std::vector<float> smoothquant_scales(const std::vector<float>& act_max,
                                      const std::vector<AwqTarget>& targets, int64_t cols, float alpha) {
  std::vector<float> wmax(static_cast<size_t>(cols), 0.0f), s(static_cast<size_t>(cols), 1.0f);
  for (const auto& t : targets)
    for (int64_t r = 0; r < t.rows; ++r)
      for (int64_t j = 0; j < cols; ++j) wmax[j] = std::max(wmax[j], std::fabs(t.w[r * cols + j]));
  for (int64_t j = 0; j < cols; ++j) {
    if (!(act_max[j] > 0) || !(wmax[j] > 0)) continue;
    const double v = std::pow(static_cast<double>(act_max[j]), alpha) /
                     std::pow(static_cast<double>(wmax[j]), 1.0 - alpha);
    s[j] = static_cast<float>(std::clamp(v, 1e-5, 1e5));
  }
  return s;
}

namespace {

// Dense float copy of a weight, or UsageError if it is quantized (scales must be folded before quantizing).
std::vector<float> dense_copy(const WeightMatrix& w, const std::string& what) {
  if (w.kind == WeightKind::Quant || w.kind == WeightKind::Ggml)
    throw UsageError("quant", "cannot fold scales into " + what + ": it is already quantized");
  std::vector<float> out(static_cast<size_t>(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) weight_row_f32(w, r, out.data() + r * w.cols);
  return out;
}

void scale_cols_of(WeightMatrix& w, const std::vector<float>& s, const std::string& what) {
  auto f = dense_copy(w, what);
  scale_columns(f.data(), w.rows, w.cols, s);
  w = make_f32_weight(f.data(), w.rows, w.cols);
}

void divide_rows_of(WeightMatrix& w, const std::vector<float>& s, const std::string& what) {
  auto f = dense_copy(w, what);
  divide_rows(f.data(), w.rows, w.cols, s);
  w = make_f32_weight(f.data(), w.rows, w.cols);
}

}  // namespace

void fold_layer_scales(Model& m, int layer, const LayerScales& s) {
  if (layer < 0 || layer >= m.config.n_layers)
    fail("quant", "fold_layer_scales: no layer " + std::to_string(layer));
  LayerWeights& L = m.weights.layers[layer];
  const std::string p = "layers." + std::to_string(layer) + ".";
  if (!s.attn.empty()) {
    divide_elements(L.attn_norm, s.attn);
    scale_cols_of(L.wq, s.attn, p + "wq");
    scale_cols_of(L.wk, s.attn, p + "wk");
    scale_cols_of(L.wv, s.attn, p + "wv");
  }
  if (!s.o.empty()) {
    if (m.config.n_heads != m.config.n_kv_heads || m.config.qkv_bias)
      throw UsageError("quant",
                       "o_proj scales cannot be folded into v_proj with grouped-query attention or a "
                       "v bias (" +
                           p + "wo)");
    divide_rows_of(L.wv, s.o, p + "wv");
    scale_cols_of(L.wo, s.o, p + "wo");
  }
  if (!s.mlp.empty()) {
    divide_elements(L.ffn_norm, s.mlp);
    scale_cols_of(L.w_gate, s.mlp, p + "w_gate");
    scale_cols_of(L.w_up, s.mlp, p + "w_up");
  }
  if (!s.down.empty()) {
    divide_rows_of(L.w_up, s.down, p + "w_up");
    scale_cols_of(L.w_down, s.down, p + "w_down");
  }
}

}  // namespace lowbit::quant
