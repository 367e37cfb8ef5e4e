// Per-input-channel scale migration: AWQ (activation-aware weight quantization, Lin et al. 2023) and
// SmoothQuant (Xiao et al. 2022), plus the exact folding of such scales into the preceding RMSNorm or linear
// layer.
//
// A scale vector s [cols] on the inputs of a linear layer is applied as W' = W diag(s), x' = x / s, which
// leaves W x unchanged. x / s is folded into what produces x:
//   - the RMSNorm in front of q/k/v (attn_norm) or gate/up (ffn_norm): norm_j /= s_j
//   - v in front of o (only without GQA, when every o input channel is one v output row): v rows /= s
//   - up in front of down (down's input is silu(gate) * up, linear in up): up rows /= s
// All folds are exact in real arithmetic; in float32 the model output changes by rounding only.
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <vector>

#include "formats/scheme.h"
#include "model/model.h"

namespace lowbit::quant {

struct AwqTarget {
  const float* w;  // [rows, cols] row-major
  int64_t rows;
  QuantScheme scheme;
};

struct AwqResult {
  std::vector<float> scales;  // [cols]; all ones when alpha = 0 won
  float alpha = 0.0f;
  double loss = 0, loss_plain = 0;  // sum of output errors trace(D G D^T) at the best alpha and at alpha = 0
};

// Grid search over alpha in {0, 1/grid, ..., 1}: s = mean|x|^alpha (clamped at 1e-4, normalised so that
// sqrt(max(s) min(s)) = 1); picks the alpha minimising the summed output error of the targets, each quantized
// (RTN under its scheme) as Q(W diag(s)) diag(s)^-1, on inputs with Gram matrix `gram`, or, when gram is
// empty, on the inputs themselves (`acts` [T, cols], scored in token space). A target whose exact error costs
// over 2^30 multiply-adds (rows x cols^2) and whose scheme has per-row scale cells is scored on every k-th
// row, the sum scaled by k (the 0.5B fixture's down_proj and gate/up; no kjv-brown-6M matrix).
AwqResult awq_search(const std::vector<AwqTarget>& targets, int64_t cols, const std::vector<float>& mean_abs,
                     const Eigen::MatrixXf& gram, int grid, const std::vector<float>* acts = nullptr);

// Whether scoring a search over `rows` x `cols` on `tokens` inputs themselves (T x rows x cols per alpha, on
// the rows awq_search samples) costs less than building, factorising and using their Gram matrix: true for a
// 0.5B model's down_proj (cols 4864 on 8,192 tokens: ~38 G against ~127 G multiply-adds), false for
// kjv-brown-6M's.
bool awq_token_space_cheaper(int64_t rows, int64_t cols, int64_t tokens, int grid);

// SmoothQuant: s_j = max|X_j|^alpha / max_i |W_ij|^(1-alpha) over all the matrices sharing the input (s_j = 1
// where either maximum is 0), clamped to [1e-5, 1e5].
std::vector<float> smoothquant_scales(const std::vector<float>& act_max,
                                      const std::vector<AwqTarget>& targets, int64_t cols, float alpha);

void scale_columns(float* w, int64_t rows, int64_t cols, const std::vector<float>& s);  // W[:, j] *= s_j
void divide_rows(float* w, int64_t rows, int64_t cols, const std::vector<float>& s);    // W[j, :] /= s_j
void divide_elements(std::vector<float>& v, const std::vector<float>& s);               // v_j /= s_j

// Scales for one layer; an empty vector means "no scale at that site".
struct LayerScales {
  std::vector<float> attn;  // [dim]      q/k/v inputs, folded into attn_norm
  std::vector<float> o;     // [q_dim]    o inputs, folded into v (needs n_heads == n_kv_heads)
  std::vector<float> mlp;   // [dim]      gate/up inputs, folded into ffn_norm
  std::vector<float> down;  // [ffn_dim]  down inputs, folded into up
};
// Folds the scales into layer `layer` of a model with dense weights (touched matrices become F32). Throws
// UsageError when a site cannot be folded (o with GQA, quantized weights).
void fold_layer_scales(Model& m, int layer, const LayerScales& s);

}  // namespace lowbit::quant
