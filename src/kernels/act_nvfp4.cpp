// The NVFP4 activation route (WeightMatrix::act_format == NVFP4): per token, blocks of 16 E2M1 codes with
// an E4M3 block scale under an FP32 per-token global scale. The scalar definition is in matmul.h; the element
// and block-scale casts are the formats library's (f32_to_fp4_e2m1, f32_to_fp8_e4m3fn), the same ones the
// NVFP4 weight format quantizes with.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/parallel.h"
#include "formats/minifloat.h"
#include "kernels/dispatch.h"
#include "kernels/kernel_plan.h"
#include "kernels/matmul.h"

namespace lowbit {

const char* act_scale_name(ActScale s) {
  return s == ActScale::Mse ? "mse" : "amax";
}

void nvfp4_block_errors(const float* x, int64_t n, const float* d, int nd, float* err) {
  for (int k = 0; k < nd; ++k) {
    float e2[2] = {0.0f, 0.0f};  // even and odd inputs
    const float r = 1.0f / d[k];
    for (int64_t i = 0; i < n; ++i) {
      // an infinity saturates whatever the scale; a NaN poisons the token
      if (!std::isfinite(x[i])) continue;
      const float e = std::fma(-fp4_e2m1_to_f32(f32_to_fp4_e2m1(x[i] * r)), d[k], x[i]);
      e2[i & 1] = std::fma(e, e, e2[i & 1]);
    }
    err[k] = e2[0] + e2[1];
  }
}

uint8_t nvfp4_act_block_scale(const float* x, int64_t n, float g, float bmax, ActScale rule,
                              Nvfp4BlockErrors errs) {
  const uint8_t c6 = g > 0 ? f32_to_fp8_e4m3fn(bmax / 6.0f / g, true) : 0;
  if (rule == ActScale::Amax || c6 == 0) return c6;
  // Codes are monotone in the value they encode (sign 0, 0x7E = 448 the largest finite), so the candidates
  // are a range of codes: two steps of 1/8 octave below c6 clip the block's largest values, the steps up to
  // c4 (bmax -> 4, four or five codes) leave them E2M1's finer steps below 4. At most 8 in all (c4 is at
  // most 5 codes above c6), one AVX2 register of steps.
  const int c4 = f32_to_fp8_e4m3fn(bmax / 4.0f / g, true);
  uint8_t code[16];
  float d[16], err[16];
  int nd = 0;
  code[nd++] = c6;
  for (int c = std::max(1, c6 - 2); c <= std::min(0x7E, c4) && nd < 16; ++c)
    if (c != c6) code[nd++] = static_cast<uint8_t>(c);
  for (int k = 0; k < nd; ++k) d[k] = fp8_e4m3fn_to_f32(code[k]) * g;
  errs(x, n, d, nd, err);
  int best = 0;
  for (int k = 1; k < nd; ++k)
    if (err[k] < err[best]) best = k;
  return code[best];
}

void quantize_activation_nvfp4(const float* x, int64_t n, float clip, ActScale rule, uint8_t* codes,
                               uint8_t* block_scales, float* global_scale) {
  bool has_nan = false;
  const float amax = finite_absmax(x, n, &has_nan);
  // 6 * 448: the largest E2M1 value times the largest E4M3 value, so the token's largest block gets the top
  // of E4M3's range and the smaller blocks keep its 2^-9 .. 448 dynamic range below it.
  const float g = amax * clip / (6.0f * 448.0f);
  // A NaN poisons the token's scale (its code is 0) so the whole token dequantizes to NaN, as the INT4 route.
  *global_scale = has_nan ? std::numeric_limits<float>::quiet_NaN() : g;
  for (int64_t b0 = 0; b0 < n; b0 += kNvfp4ActBlock) {
    const int64_t b1 = std::min(n, b0 + kNvfp4ActBlock);
    float bmax = 0.0f;
    for (int64_t i = b0; i < b1; ++i)
      if (std::isfinite(x[i])) bmax = std::fmax(bmax, std::fabs(x[i]));
    const uint8_t sc = nvfp4_act_block_scale(x + b0, b1 - b0, g, bmax, rule);
    block_scales[b0 / kNvfp4ActBlock] = sc;
    const float d = fp8_e4m3fn_to_f32(sc) * g;
    for (int64_t i = b0; i < b1; ++i) {
      const float v = x[i];
      if (std::isnan(v))
        codes[i] = 0;
      else if (!(d > 0))
        codes[i] = std::isinf(v) ? (v > 0 ? 0x7 : 0xF) : 0;  // +-6: infinities saturate even in a zero block
      else
        codes[i] = f32_to_fp4_e2m1(v / d);  // RNE, saturating at +-6 (+-Inf too)
    }
  }
}

void dequantize_activation_nvfp4(const uint8_t* codes, const uint8_t* block_scales, float global_scale,
                                 int64_t n, float* out) {
  for (int64_t b0 = 0; b0 < n; b0 += kNvfp4ActBlock) {
    const float sb = fp8_e4m3fn_to_f32(block_scales[b0 / kNvfp4ActBlock]);
    const int64_t b1 = std::min(n, b0 + kNvfp4ActBlock);
    // e2m1 * s_b is exact in float (2 + 4 significant bits); the one rounding is the product with g.
    for (int64_t i = b0; i < b1; ++i) out[i] = fp4_e2m1_to_f32(codes[i]) * sb * global_scale;
  }
}

void quantize_activations_nvfp4(const WeightMatrix& w, const float* x, int64_t T, float* xq, float* g) {
  const int64_t n = w.cols;
  const int64_t nb = (n + kNvfp4ActBlock - 1) / kNvfp4ActBlock;
  // Tokens are independent; the casts are scalar, so prefill spreads them over the pool.
  parallel_for(T, 1, [&](int64_t t0, int64_t t1) {
    std::vector<uint8_t> codes(static_cast<size_t>(n)), scales(static_cast<size_t>(nb));
    for (int64_t t = t0; t < t1; ++t) {
      float gt = 0.0f;
      if (kernel_isa() >= Isa::Avx2)  // bit-identical to the scalar definition
        kern::quantize_activation_nvfp4_avx2(x + t * n, n, w.act_clip, w.act_scale, codes.data(),
                                             scales.data(), &gt);
      else
        quantize_activation_nvfp4(x + t * n, n, w.act_clip, w.act_scale, codes.data(), scales.data(), &gt);
      if (g) {
        g[t] = gt;
        dequantize_activation_nvfp4(codes.data(), scales.data(), 1.0f, n, xq + t * n);
      } else {
        dequantize_activation_nvfp4(codes.data(), scales.data(), gt, n, xq + t * n);
      }
    }
  });
}

}  // namespace lowbit
