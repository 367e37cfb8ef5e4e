// The Llama-family decoder in torch (libtorch), for training rotations with a backward pass. It computes
// lowbit's Decoder (model/decoder.cpp) on float weights: RMSNorm (gammas folded into the linears that read
// them), RoPE in the source's pairing with lowbit's angles, grouped-query attention, SwiGLU / GeLU-tanh, the
// online R4 Hadamard of a rotated model, untied head. R1 (the residual stream) and R2 (per head on V / O)
// enter as matrices, so gradients reach them; activations and the KV cache can be fake-quantized with
// lowbit's own quantizers and straight-through gradients.
//
// Only the train rung includes this header (torch headers are slow to compile): the rest of lowbit uses
// train/spinquant.h.
#pragma once
#include <torch/csrc/autograd/custom_function.h>
#include <torch/types.h>

#include <vector>

#include "formats/format.h"
#include "kernels/hadamard.h"
#include "model/model.h"
#include "train/fake_quant.h"

namespace lowbit::train {

struct TorchLayer {
  torch::Tensor wq, wk, wv, wo, gate, up, down;  // [out, in]; attn / ffn gammas folded into q,k,v / gate,up
  torch::Tensor bq, bk, bv;                      // [q_dim] / [kv_dim]; undefined without QKV bias
  torch::Tensor q_norm, k_norm;                  // [head_dim]; undefined without q/k norm
  // [dim] each: the RMSNorm gammas applied to the normalised input before the activation route, as the
  // engine does, when the model was built with fold_norms = false; undefined = folded into the linears
  torch::Tensor attn_gamma, ffn_gamma;
};

struct TorchModel {
  ModelConfig c;
  torch::Tensor embed;  // [vocab, dim]
  torch::Tensor head;   // [vocab, dim], the final norm's gamma folded in (unless final_gamma is defined)
  torch::Tensor final_gamma;  // [dim] with fold_norms = false, else undefined
  std::vector<TorchLayer> layers;
  torch::Tensor down_h;    // [ffn_dim, ffn_dim]: h <- h down_h is the online R4 (H^T); undefined = none
  torch::Tensor cos, sin;  // [max_seq_len, head_dim / 2]: lowbit's RoPE angles, rounded to float
};

// Float copies of m's weights (dequantized if quantized) in dtype dt (kFloat or kDouble for gradient checks).
// `r4`, when given, is an online Hadamard on the down_proj input to model (the model's own down_rotation is
// used when it has one). fold_norms = false keeps the RMSNorm gammas as tensors of their own (attn_gamma,
// ffn_gamma, final_gamma) and the linears as stored, so the gammas can be trained and an activation route
// sees the normalised input times gamma, as the engine's kernels do.
TorchModel torch_model(const Model& m, torch::ScalarType dt, const Hadamard* r4 = nullptr,
                       bool fold_norms = true);

struct FakeQuantOptions {
  // the activation route on every linear's input except lm_head: F32 (none), INT4 or NVFP4
  FormatId act = FormatId::F32;
  float act_clip = 1.0f;                // act_clip of the recipe
  ActScale act_scale = ActScale::Amax;  // NVFP4: the recipe's block-scale rule (act_scale)
  const KvFakeQuant* kv = nullptr;      // the KV cache's quantizer on K (after RoPE) and V; null = float
};

// Straight-through fake quantization (float tensors only). fake_quant_act: x [..., n] rows through
// fake_quant_act_int4 (format INT4) or fake_quant_act_nvfp4 (NVFP4); backward is straight through the
// rounding: the gradient passes where the value does not saturate, is 0 where it does, and the scales keep
// their derivative, which reaches the largest value they follow (INT4: the per-token scale clip * absmax / 7,
// the formula at ActFq::backward; NVFP4: each block's scale, fake_quant_act_nvfp4_grad). fake_quant_kv:
// x [B, S, kv_dim] sequences through fake_quant_kv; the gradient passes unchanged.
torch::Tensor fake_quant_act(const torch::Tensor& x, FormatId format, float clip,
                             ActScale scale = ActScale::Amax);
torch::Tensor fake_quant_kv(const torch::Tensor& x, const KvFakeQuant& q, bool key);

// Logits [B, S, vocab] of tokens [B, S] (int64, every sequence at positions 0..S-1) for the model rotated by
// r1 [dim, dim] (x <- r1 x on the residual stream) and r2 [head_dim, head_dim] (v <- r2 v per head); an
// undefined tensor is the identity.
torch::Tensor forward_logits(const TorchModel& m, const torch::Tensor& tokens, const torch::Tensor& r1,
                             const torch::Tensor& r2, const FakeQuantOptions& fq = {});

// The first n calibration windows (n <= windows.size(), the first one not empty) as token ids [n, S]
// (int64), S = the first window's length. UsageError("train") when one of them has another length.
torch::Tensor window_tokens(const std::vector<std::vector<int32_t>>& windows, int64_t n);

// Mean next-token cross-entropy of logits [B, S, vocab] over tokens [B, S] (positions 0..S-2 predict 1..S-1).
torch::Tensor next_token_loss(const torch::Tensor& logits, const torch::Tensor& tokens);
// Mean KL(teacher || model) per position: teacher_logp [B, S, vocab] log-probabilities, logits [B, S, vocab].
torch::Tensor kl_to_teacher(const torch::Tensor& teacher_logp, const torch::Tensor& logits);

}  // namespace lowbit::train
