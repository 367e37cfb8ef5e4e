// GGUF Q4_K (ggml type 12): 256 weights per 144-byte super-block, 4.5 bpw.
//
//   offset 0   2      4            16                          144
//          | d | dmin | scales[12] | qs[128]                    |
//   8 sub-blocks of 32, each with a 6-bit scale sc and 6-bit min m (packing: ggml_kquants.h k4_scale_min).
//   For chunk c = 0..3 (64 elements, qs[32c .. 32c+31]): element 64c + l = qs[32c+l] & 15 (sub-block 2c),
//   element 64c + 32 + l = qs[32c+l] >> 4 (sub-block 2c+1).   x = d * sc * q - dmin * m,  q in [0, 15].
//
// Quantization follows llama.cpp's reference (byte-compatible): per sub-block an importance-weighted
// scale/min search (weights av|x| + |x_i|, 21 candidate step sizes around (max-min)/15, least-squares refit
// of scale and min for each, keep the lowest weighted squared error); then the 8 scales and 8 mins are
// quantized to 6 bits against d = max_scale/63 and dmin = max_min/63 (fp16), and elements are re-quantized
// with the stored values.
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "formats/format_rows.h"
#include "formats/ggml_kquants.h"
#include "formats/ggml_types.h"

namespace lowbit::formats_detail {
namespace {
struct BlockQ4K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ4K) == 144, "Q4_K block is 144 bytes");

void deq(const void* src, float* y, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    BlockQ4K blk;
    std::memcpy(&blk, p + b * sizeof blk, sizeof blk);
    const float d = f16_to_f32(blk.d), dmin = f16_to_f32(blk.dmin);
    for (int c = 0; c < 4; ++c) {
      uint8_t sc, m;
      k4_scale_min(2 * c, blk.scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      k4_scale_min(2 * c + 1, blk.scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      const uint8_t* q = blk.qs + 32 * c;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

// Round to nearest, ties to even (llama.cpp's nearest_int for |v| < 2^22).
inline int rne(float v) {
  return static_cast<int>(std::nearbyint(v));
}
inline int clampi(int v, int lo, int hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

// Weighted affine fit of n values to codes in [0, nmax]: returns the step, *neg_min = -offset (>= 0).
// Tries step candidates (nmax + rmin + rdelta*k) / (max - min), k = 0..nstep, refits by least squares.
float fit_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min, float rmin,
                    float rdelta, int nstep) {
  float mn = x[0], mx = x[0], sum_w = w[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < mn) mn = x[i];
    if (x[i] > mx) mx = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (mn > 0) mn = 0;
  if (mx == mn) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *neg_min = -mn;
    return 0.0f;
  }
  float iscale = nmax / (mx - mn);
  float scale = 1 / iscale;
  float best = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(clampi(rne(iscale * (x[i] - mn)), 0, nmax));
    const float diff = scale * L[i] + mn - x[i];
    best += w[i] * (diff * diff);
  }
  uint8_t aux[32];
  for (int k = 0; k <= nstep; ++k) {
    iscale = (rmin + rdelta * k + nmax) / (mx - mn);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clampi(rne(iscale * (x[i] - mn)), 0, nmax);
      aux[i] = static_cast<uint8_t>(l);
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float err = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * aux[i] + this_min - x[i];
        err += w[i] * (diff * diff);
      }
      if (err < best) {
        std::memcpy(L, aux, static_cast<size_t>(n));
        best = err;
        scale = this_scale;
        mn = this_min;
      }
    }
  }
  *neg_min = -mn;
  return scale;
}

void quant(const float* x, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    uint8_t L[kQK_K];
    float w[32], mins[8], scales[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
      float sum_x2 = 0;
      for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
      const float av_x = std::sqrt(sum_x2 / 32);
      for (int l = 0; l < 32; ++l) w[l] = av_x + std::fabs(x[32 * j + l]);
      scales[j] = fit_scale_min(32, 15, x + 32 * j, w, L + 32 * j, &mins[j], -1.0f, 0.1f, 20);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    BlockQ4K blk{};
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    for (int j = 0; j < 8; ++j) {
      uint8_t ls = static_cast<uint8_t>(rne(inv_scale * scales[j]));
      uint8_t lm = static_cast<uint8_t>(rne(inv_min * mins[j]));
      if (ls > 63) ls = 63;
      if (lm > 63) lm = 63;
      if (j < 4) {
        blk.scales[j] = ls;
        blk.scales[j + 4] = lm;
      } else {
        blk.scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
        blk.scales[j - 4] = static_cast<uint8_t>(blk.scales[j - 4] | ((ls >> 4) << 6));
        blk.scales[j] = static_cast<uint8_t>(blk.scales[j] | ((lm >> 4) << 6));
      }
    }
    blk.d = f32_to_f16(max_scale / 63.0f);
    blk.dmin = f32_to_f16(max_min / 63.0f);
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      k4_scale_min(j, blk.scales, &sc, &m);
      const float d = f16_to_f32(blk.d) * sc;
      if (d == 0.0f) continue;  // keep the codes of the fit (they multiply a zero scale anyway)
      const float dm = f16_to_f32(blk.dmin) * m;
      for (int l = 0; l < 32; ++l)
        L[32 * j + l] = static_cast<uint8_t>(clampi(rne((x[32 * j + l] + dm) / d), 0, 15));
    }
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l)
        blk.qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + l + 32] << 4));
    std::memcpy(p + b * sizeof blk, &blk, sizeof blk);
  }
}
}  // namespace

FormatInfo row_q4_k() {
  return make_gguf_row(FormatId::Q4_K, "q4_k", ggml::Q4_K, 4,
                       "GGUF Q4_K: 256-superblock, 4-bit + 6-bit scales/mins (4.5 bpw)", deq, quant);
}
}  // namespace lowbit::formats_detail
