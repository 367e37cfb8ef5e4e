// Fake quantization for training: lowbit's own quantizers applied to float rows and decoded again, so that a
// training forward sees exactly the values the kernels and the KV cache compute. No torch here; the autograd
// wrappers (straight-through estimator) are in train/torch_decoder.h.
#pragma once
#include <cstdint>
#include <string>

#include "arch/config.h"
#include "kernels/weight.h"
#include "kv/kv_formats.h"

namespace lowbit::train {

// act=int4: every row of x [T, n] replaced in place by what matmul's INT4 activation route multiplies
// (quantize_activations: codes in [-7, 7] at scale clip * absmax / 7, per token).
void fake_quant_act_int4(float* x, int64_t T, int64_t n, float clip);
// act=nvfp4: the same for the NVFP4 route (quantize_activation_nvfp4: E2M1 codes in blocks of 16 under E4M3
// block scales and a per-token global scale from clip * absmax).
void fake_quant_act_nvfp4(float* x, int64_t T, int64_t n, float clip, ActScale scale);
// The NVFP4 route's gradient for one token (x, upstream g: [n]; gx receives it), straight through the
// rounding as fake_quant_act_int4's (train/torch_decoder.h): g_i where |x_i| <= 6 S_b (E2M1 does not
// saturate), 0 where it does, plus each block scale's path. S_b = s_b * global scale follows the block's
// largest |x| (S_b ~ bmax_b / 6) unless the E4M3 block scale saturates (bmax_b > clip * absmax of the token,
// only with clip < 1), where it follows the token's largest |x| (S_b = clip * absmax / 6):
//   gx[argmax of the block or token] += sign(x_m) * (1 / 6 or clip / 6) * sum_{i in b} g_i (c_i - [i inside]
//   x_i / S_b)
// with c_i = e2m1(code_i). The E4M3 rounding of the scale is passed straight through. With ActScale::Mse the
// block's chosen scale is taken as a fixed multiple of what it follows (S_b / |x_m|: the search's choice
// passed straight through like the rounding), which is 1 / 6 and clip / 6 again for the amax rule's scales.
void fake_quant_act_nvfp4_grad(const float* x, const float* g, int64_t n, float clip, ActScale scale,
                               float* gx);

// The KV cache of one `--kv-cache` spec as seen by attention after one prefill of a whole sequence: rows
// rotated per head when the spec has `rot` (R3), staged in F16, sealed into blocks of `block_tokens` when the
// keys are per channel (KIVI; the rows of the last partial block stay in F16), encoded and decoded by
// kv_encode_row / kv_encode_block / kv_decode_range, and rotated back.
struct KvFakeQuant {
  KvCacheSpec spec;
  KvSideLayout k, v;
  int64_t n_kv_heads = 0, head_dim = 0;
  bool enabled() const {
    return spec.k.format != KvFormat::F32 || spec.v.format != KvFormat::F32 || spec.rotate;
  }
};
// UsageError("train") for specs a single prefill cannot reproduce (windows, eviction, kept layers, FP8 /
// FP4 formats whose scales come from calibration or the first batch).
KvFakeQuant make_kv_fake_quant(const std::string& kv_cache, const ModelConfig& c);

// One sequence's K (key=true) or V rows x [S, kv_dim], positions 0..S-1, in place.
void fake_quant_kv(const KvFakeQuant& q, bool key, float* x, int64_t S);

}  // namespace lowbit::train
