// QuaRot-style rotation of a dense model before quantization ("rotate first, then GPTQ"). For an orthogonal
// R, x W^T = (x R^T)(W R^T)^T: rotating the residual stream and every linear that touches it leaves the
// network's function unchanged while spreading activation outliers over all channels, so weights and
// activations quantize with less error.
//
// Steps (each on float32 weights; rotated matrices become F32):
//   1. every RMSNorm gamma folded into the linears that read it (attn norm -> q/k/v, ffn norm -> gate/up,
//      final norm -> lm_head) and set to 1: rotation commutes with RMSNorm only without gamma;
//   2. R1 (order dim): x' = Q x on the residual stream, Q = H diag(+-1) (a randomized normalised Hadamard)
//      when dim has a known Hadamard factor, else a seeded random orthogonal matrix (QR of a Gaussian).
//      Embedding rows, the input side of q/k/v/gate/up/lm_head and the output side of o/down absorb it;
//      tied embeddings are untied (E Q^T and W_head diag(gamma) Q^T differ);
//   3. R2 (order head_dim): v' = P v per KV head (rows of v_proj and its bias) and o_proj's columns of every
//      query head by P^T: one shared P, so grouped-query heads need nothing more;
//   4. R4 (order ffn_dim): down_proj's input is Hadamard-transformed online by the decoder
//      (ModelWeights::down_rotation) and W_down <- W_down H^T offline.
// R3 (an online Hadamard of q and k after RoPE) is the KV cache's `+rot` option (kv/kv_rotation.h), chosen at
// run time with --kv-cache; the rotation step leaves it alone.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/hadamard.h"
#include "model/model.h"
#include "quant/recipe.h"

namespace lowbit::quant {

// Hadamard factors by order from a safetensors file laid out like
// ../shared/data/hadamard/hadamards.safetensors (keys "1", "2", "4", ..., each an [n, n] tensor of +-1 in any
// element dtype); UsageError("quant") for a file that is not such a table.
HadamardFactors load_hadamard_factors(const std::string& path);

// Rotates `m` in place under `s` (s.enabled()). Returns the record the manifest and config.json keep:
// {"method", "seed", "norms_folded", "untied_embeddings", "r1": {...}, "r2": {...}, "r4": {...}, "r3"}.
// UsageError("quant") when an order has no Hadamard (naming the order and the factor file to pass), or the
// model is rotated already.
// Explicit matrices in s (r1_matrix / r2_matrix) replace the generated R1 / R2 and are recorded as "learned".
nlohmann::json rotate_model(Model& m, const RotationSpec& s);

// SpinQuant (s->method "spinquant"): learns R1 / R2 on the calibration windows starting from QuaRot's
// matrices of s->seed (train/spinquant.h), with the recipe's int4 activations and KV format fake-quantized,
// and stores them in s->r1_matrix / r2_matrix for rotate_model. Returns the training record (steps, lr,
// tokens, loss before and after) that the manifest keeps under rotation.spinquant.
nlohmann::json learn_spinquant(const Model& m, const Recipe& r,
                               const std::vector<std::vector<int32_t>>& windows, RotationSpec* s);

}  // namespace lowbit::quant
