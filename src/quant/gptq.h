// GPTQ (Frantar et al. 2022): quantize the columns of W one at a time and push each column's rounding error
// onto the columns not yet quantized, weighted by the inverse Hessian H = 2 X^T X of the layer's calibration
// inputs, so the layer OUTPUT error ||X W^T - X Q^T|| is minimised rather than the weight error.
//
//   damping      H += damp * mean(diag H) * I (dead inputs with H_ii = 0 get H_ii = 1 and W[:, i] = 0)
//   lazy blocks  columns in blocks of `block` (128): the error is propagated inside the block column by
//   column,
//                and to the rest of the matrix once per block (one GEMM)
//   Cholesky     the upper Cholesky factor U of H^-1 gives the update rows (U_ii the denominators)
//   act-order    columns in order of decreasing H_ii, with STATIC groups: every scale is computed up front
//   from
//                the original W, so the group of column c stays c / group_size (no g_idx needed)
//   scales       without act-order, per-group INT/FP scales are computed when the group's first column is
//                reached, from the error-updated weights (as reference GPTQ); channel / tensor / block /
//                NVFP4 / NF4 double-quant scales are fixed up front. Non-uniform grids (NF4, FP4, FP8)
//                quantize each element to the nearest grid point under the fixed group scale.
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <functional>
#include <vector>

#include "tensor/qtensor.h"

namespace lowbit::quant {

struct GptqOptions {
  int block = 128;
  float damp = 0.01f;
  bool act_order = true;
  float nvfp4_amax = 0.0f;  // NVFP4: the fused group's largest |w| for the global scale (quantize_matrix)
};

// w: [rows, cols] row-major; gram: [cols, cols] symmetric, sum over calibration tokens of x x^T (any positive
// multiple works: GPTQ is invariant to the scale of H). The scheme must be code-based or a GGUF k-quant (not
// another GGUF block type or a plain one).
// damp_used (optional) receives the damping actually applied (it grows x10 if H + damp is not positive
// definite).
QuantizedMatrix gptq_quantize(const float* w, int64_t rows, int64_t cols, const Eigen::MatrixXf& gram,
                              const QuantScheme& s, const GptqOptions& o, double* damp_used = nullptr);

// GPTQ's float target (asymmetric calibration, as GPTAQ, Li et al. 2025): the quantized layer gets inputs
// x~ (through the quantized layers before it and the activation route) where the float model has x, and
// should reproduce W x, not W x~. With H = sum x~ x~^T and cross = sum x x~^T (SiteStats::cross),
//   sum ||W x - Q x~||^2 = sum ||W' x~ - Q x~||^2 + const   for W' = W cross H^-1
// (the residual of the least-squares fit is orthogonal to the x~), so GPTQ of W' on H minimises the float
// target. Regularised toward W, not toward 0: W' = W (cross + l I)(H + l I)^-1 with l = damp_frac * mean(diag
// H), which is W itself when x~ = x. Returns W' [rows, cols] row-major (double inside; l grows x10 while H +
// l I is not positive definite). Error("quant") when the matrices do not match cols.
std::vector<float> fit_float_target(const float* w, int64_t rows, int64_t cols, const Eigen::MatrixXf& gram,
                                    const Eigen::MatrixXf& cross, double damp_frac);

// GPTQ on a GGUF k-quant grid (q2_k .. q6_k; gptq_quantize forwards these schemes here): block scales and
// mins chosen up front by the format's encoder weighted by diag H, then the column loop rounds each weight to
// its sub-block's grid (gptq_kquant.cpp). The result is in the ggml block layout.
QuantizedMatrix gptq_quantize_kquant(const float* w, int64_t rows, int64_t cols, const Eigen::MatrixXf& gram,
                                     const QuantScheme& s, const GptqOptions& o, double* damp_used = nullptr);

// The upper Cholesky factor U of (H + damp I)^-1 with H in the column order perm (U^T U = the inverse), damp
// = damp_frac * mean(diag H), grown x10 while the matrix is not positive definite (damp_used receives it).
// GPTQ's column loop, shared by every grid. Wp [rows, cols] holds the weights with their columns in the
// processing order (act-order or identity) and U the upper Cholesky factor of H^-1 in that order. Column i is
// rounded by round_column(i, Wp, deq), which reads the error-updated Wp (its group's later columns too, for
// scales chosen when a group starts) and writes the dequantized values it chose to deq[rows]; the loop then
// spreads the error over the remaining columns: rank-1 updates inside a lazy block of `block` columns, one
// GEMM for the columns after it. Wp is consumed.
void gptq_column_loop(
    Eigen::MatrixXf& Wp, const Eigen::MatrixXf& U, int block,
    const std::function<void(int64_t i, const Eigen::MatrixXf& Wp, float* deq)>& round_column);
// GPTQ's inputs for one matrix: H = the Gram matrix in double, W a column-major float copy of w [rows, cols]
// and the importance (diag H as floats) that chooses fixed scales. A dead input (H_ii = 0) gets H_ii = 1 and
// zero weights: they cannot matter. Error("quant") when the Gram matrix does not match cols.
struct GptqProblem {
  Eigen::MatrixXd H;
  Eigen::MatrixXf W;
  std::vector<float> importance;
};
GptqProblem gptq_problem(const float* w, int64_t rows, int64_t cols, const Eigen::MatrixXf& gram);
// The processing order: columns by decreasing Hessian diagonal with act-order (stable), else identity.
std::vector<int64_t> gptq_column_order(const Eigen::MatrixXd& H, bool act_order);

Eigen::MatrixXf gptq_inverse_hessian_factor(const Eigen::MatrixXd& H, const std::vector<int64_t>& perm,
                                            double damp_frac, double* damp_used);

// Output error of replacing w by wq on inputs with Gram matrix `gram`: trace((W-Wq) G (W-Wq)^T); `base`
// (optional) receives trace(W G W^T), so err/base is the relative squared output error.
double output_error(const float* w, const float* wq, int64_t rows, int64_t cols, const Eigen::MatrixXf& gram,
                    double* base = nullptr);
// output_error for reports: above 2^31 multiply-adds (rows x cols^2; down_proj of a 0.5B model costs 21 G,
// and GPTQ's report took three per matrix, a third of a GPTQ run) measured on every k-th row, k = ceil(cost /
// 2^31), as AWQ's search scores large matrices. The error and base are sums over the rows measured: compare
// them with each other (a relative error), not with a full output_error. rows_used (optional) receives them.
double output_error_rows(const float* w, const float* wq, int64_t rows, int64_t cols,
                         const Eigen::MatrixXf& gram, double* base = nullptr, int64_t* rows_used = nullptr);
// The same two errors in token space, on the inputs themselves x [T, cols] (row-major) instead of their Gram
// matrix: sum over tokens of |(W - Wq) x_t|^2 (T x rows x cols multiply-adds). output_error_rows_acts scores
// the rows output_error_rows would (its stride from rows x cols^2), so the two agree up to rounding.
double output_error_acts(const float* w, const float* wq, int64_t rows, int64_t cols, const float* x,
                         int64_t T, double* base = nullptr);
double output_error_rows_acts(const float* w, const float* wq, int64_t rows, int64_t cols, const float* x,
                              int64_t T, double* base = nullptr, int64_t* rows_used = nullptr);
// ||w - wq||_F / ||w||_F.
double relative_frobenius(const float* w, const float* wq, int64_t n);

}  // namespace lowbit::quant
