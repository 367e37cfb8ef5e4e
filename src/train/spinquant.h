// SpinQuant (Liu et al. 2024): the residual-stream rotation R1 and the per-head rotation R2 learned by Cayley
// SGD on the Stiefel manifold, starting from QuaRot's random Hadamard, minimising a loss of the network on
// calibration text with its activations and KV cache fake-quantized (weights stay float; straight-through
// gradients): SpinQuant's next-token cross-entropy, or the KL divergence from the float model.
// quant/rotate.cpp then fuses the learned matrices into the weights exactly as it fuses QuaRot's, so a
// SpinQuant checkpoint loads and runs like a QuaRot one.
//
// The backward pass is libtorch's (train/torch_decoder.h); this header includes no torch.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "formats/format.h"
#include "kernels/hadamard.h"
#include "model/model.h"

namespace lowbit::train {

struct SpinOptions {
  int steps = 0;         // Cayley SGD steps (full batch: every step sees all `tokens`)
  double lr = 0;         // Cayley step size
  int64_t tokens = 0;    // calibration tokens trained on: the first ceil(tokens / window) windows
  bool learn_r1 = true;  // false: R1 stays at its start (or is absent when r1 is empty)
  bool learn_r2 = true;
  FormatId act = FormatId::F32;  // fake-quantize every linear's input as act=int4 / act=nvfp4 (F32: no)
  float act_clip = 1.0f;
  ActScale act_scale = ActScale::Amax;  // NVFP4: the block-scale rule
  std::string kv_cache;                 // fake-quantize K and V as this --kv-cache spec ("" = float)
  // What the steps minimise on the calibration tokens: "ce", the next-token cross-entropy (SpinQuant's
  // loss), or "kl", the KL divergence from the float model's next-token distribution (no rotation, no fake
  // quantization) to the fake-quantized one.
  std::string loss = "kl";
};

struct SpinResult {
  std::vector<double> r1, r2;  // [dim, dim], [head_dim, head_dim] row-major (x <- R x); empty when not given
  double loss_before = 0;      // the loss (nats per token, SpinOptions::loss) with the starting matrices
  double loss_after = 0;       // ... with the learned ones
  std::vector<double> losses;  // per step, before its update
  int64_t tokens = 0;          // tokens per step
  int windows = 0;
  double seconds = 0;
  double orthogonality_error = 0;  // max |R R^T - I| over the learned matrices
  bool learned_r1 = false, learned_r2 = false;
  nlohmann::json to_json(const SpinOptions& o) const;  // the manifest's "spinquant" record
};

// Learns R1 / R2 for `m` (16-bit weights, not rotated yet; its RMSNorm gammas are folded in the torch copy)
// by minimising o.loss
// from the calibration windows (equal lengths, token ids), starting from r1 [dim*dim] and r2
// [head_dim*head_dim] (row-major; an empty one is left out: identity, not trained). `r4`, when given, is the
// online Hadamard the rotated model will apply to down_proj's input, modelled in training.
// UsageError("train") for no windows, mismatched sizes or a KV spec fake quantization cannot reproduce.
SpinResult learn_rotations(const Model& m, const std::vector<std::vector<int32_t>>& windows,
                           std::vector<double> r1, std::vector<double> r2, const Hadamard* r4,
                           const SpinOptions& o);

// What quant calls through the library it opens at run time (src/train/CMakeLists.txt): learn_rotations,
// and the manifest record (SpinResult::to_json) in `record`.
using LearnRotationsFn = SpinResult (*)(const Model& m, const std::vector<std::vector<int32_t>>& windows,
                                        std::vector<double> r1, std::vector<double> r2, const Hadamard* r4,
                                        const SpinOptions& o, nlohmann::json* record);

}  // namespace lowbit::train

// The library's one entry symbol (dlsym): returns the function above.
extern "C" lowbit::train::LearnRotationsFn lowbit_train_entry();

namespace lowbit::train {}  // namespace lowbit::train
