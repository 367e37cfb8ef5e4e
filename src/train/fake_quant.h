// Fake quantization for training: lowbit's own quantizers applied to float rows and decoded again, so that a
// training forward sees exactly the values the kernels and the KV cache compute. No torch here; the autograd
// wrappers (straight-through estimator) are in train/torch_decoder.h.
#pragma once
#include <cstdint>
#include <string>

#include "arch/config.h"
#include "kv/kv_formats.h"

namespace lowbit::train {

// act=int4: every row of x [T, n] replaced in place by what matmul's INT4 activation route multiplies
// (quantize_activations: codes in [-7, 7] at scale clip * absmax / 7, per token).
void fake_quant_act_int4(float* x, int64_t T, int64_t n, float clip);

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
