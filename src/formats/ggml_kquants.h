// Internal helpers shared by the GGUF k-quant files (256-element super-blocks).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/half.h"
#include "formats/format.h"
#include "formats/format_rows.h"

namespace lowbit::formats_detail {
constexpr int kQK_K = 256;

// Q4_K / Q5_K: 8 sub-blocks, each with a 6-bit scale and a 6-bit min, packed into 12 bytes:
//   j < 4:  scale = q[j] & 63,                         min = q[j+4] & 63
//   j >= 4: scale = (q[j+4] & 15) | (q[j-4] >> 6) << 4, min = (q[j+4] >> 4) | (q[j] >> 6) << 4
inline void k4_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q3_K: the 16 six-bit sub-block scales packed in 12 bytes (a = bytes 0..3, b = 4..7, c = 8..11 as
// little-endian words; formats/ggml_q3_k.cpp), unpacked and minus 32: out16[i] in [-32, 31].
inline void k3_scales(const uint8_t* s12, int8_t* out16) {
  uint32_t a, b, c;
  std::memcpy(&a, s12, 4);
  std::memcpy(&b, s12 + 4, 4);
  std::memcpy(&c, s12 + 8, 4);
  constexpr uint32_t k4 = 0x0F0F0F0Fu, k2 = 0x03030303u;
  const uint32_t w[4] = {(a & k4) | ((c >> 0) & k2) << 4, (b & k4) | ((c >> 2) & k2) << 4,
                         ((a >> 4) & k4) | ((c >> 4) & k2) << 4, ((b >> 4) & k4) | ((c >> 6) & k2) << 4};
  for (int i = 0; i < 16; ++i)
    out16[i] = static_cast<int8_t>(static_cast<int>((w[i / 4] >> (8 * (i % 4))) & 0xFF) - 32);
}
// ---- Encoding (Q2_K .. Q6_K). Each format file supplies a KQuantOps; kquant_quantize_row drives it. ----
//
// The encoder works in two steps so that every quantizer shares the second one:
//   1. choose the block header (super-block scales d / dmin and the sub-block scales / mins) from the
//      super-block's values and per-element weights (KQuantOps::choose);
//   2. read back the per-element grid the header defines (value = scale * q + offset, q in [qmin, qmax];
//      KQuantOps::grid) and round each element to its nearest code (KQuantOps::pack stores the codes).
// GPTQ reuses step 2 with its own rounding order (FormatInfo::row_grid / set_row_codes).

// Round to nearest, ties to even, clamped to [lo, hi] before the conversion (NaN -> lo): huge ratios cannot
// overflow the int.
inline int rne_clamp(float v, int lo, int hi) {
  if (!(v > static_cast<float>(lo))) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(std::nearbyint(v));
}

// f16 of a step size, saturated to the largest finite f16 (65504) instead of Inf: a block too large for the
// format clips its elements rather than decoding to Inf / NaN.
inline uint16_t f16_step(float d) {
  if (!(std::fabs(d) <= 65504.0f)) return f32_to_f16(d < 0 ? -65504.0f : 65504.0f);
  return f32_to_f16(d);
}

// Weighted affine fit of n values to codes in [0, nmax] (llama.cpp's make_qkx2_quants rule, written from its
// description): x ~ step * L + offset with offset <= 0. Tries steps (nmax + rmin + rdelta * k) / (max - min),
// k = 0..nstep, refits step and offset by weighted least squares for each, keeps the lowest weighted squared
// error (abs_error: the lowest weighted absolute error, llama.cpp's use_mad = true of Q2_K). Returns the
// step; *neg_min = -offset >= 0. n <= 32.
inline float fit_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min,
                           float rmin, float rdelta, int nstep, bool abs_error = false) {
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
    L[i] = static_cast<uint8_t>(rne_clamp(iscale * (x[i] - mn), 0, nmax));
    const float diff = scale * L[i] + mn - x[i];
    best += w[i] * (abs_error ? std::fabs(diff) : diff * diff);
  }
  uint8_t aux[32];
  for (int k = 0; k <= nstep; ++k) {
    iscale = (rmin + rdelta * k + nmax) / (mx - mn);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = rne_clamp(iscale * (x[i] - mn), 0, nmax);
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
        err += w[i] * (abs_error ? std::fabs(diff) : diff * diff);
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

// Weighted symmetric fit of n values to signed codes in [-nmax, nmax - 1]: x ~ scale * L. The value of
// largest magnitude goes to the -nmax end (the longer side of the range), so the scale takes the opposite
// sign of that value. Tries 19 inverse scales around -nmax / max, refits the scale by weighted least squares
// and keeps the best fit (largest (sum w x L)^2 / sum w L^2, i.e. lowest weighted error). Returns the scale;
// L (optional) receives the codes. Zero weights everywhere count as equal weights.
inline float fit_signed(int n, int nmax, const float* x, const float* w, int* L) {
  float amax = 0, max = 0, sum_w = 0;
  for (int i = 0; i < n; ++i) {
    sum_w += w[i];
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (!(amax > 0)) {
    if (L)
      for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  const bool flat = !(sum_w > 0);
  float best_score = -1, best_scale = -max / nmax;
  for (int is = -9; is <= 9; ++is) {
    const float iscale = -(nmax + 0.1f * is) / max;
    float sum_lx = 0, sum_l2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = rne_clamp(iscale * x[i], -nmax, nmax - 1);
      const float wi = flat ? 1.0f : w[i];
      sum_lx += wi * x[i] * l;
      sum_l2 += wi * l * l;
    }
    if (sum_l2 > 0 && sum_lx * sum_lx / sum_l2 > best_score) {
      best_score = sum_lx * sum_lx / sum_l2;
      best_scale = sum_lx / sum_l2;
    }
  }
  if (L)
    for (int i = 0; i < n; ++i) L[i] = rne_clamp(x[i] / best_scale, -nmax, nmax - 1);
  return best_scale;
}

// ---- llama.cpp's reference (no-importance) rules, bit for bit: quantize_row_q2_K_ref .. q6_K_ref. ----
// kquant_quantize_row runs them on the caller's values as given, so that every float operation is the
// reference's (and in power-of-two scaled units only where those sums overflow); `eps` is the reference's
// "all zero" threshold (GROUP_MAX_EPS = 1e-15) in the units of the values passed.
constexpr float kGroupMaxEps = 1e-15f;

// make_qx_quants with x_i^2 weights (rmse_type 1): the code range is [-nmax, nmax - 1] and the value of
// largest magnitude goes to -nmax; 18 inverse scales -(nmax + 0.1 k) / max, k = +-1..+-9, are tried against
// the first one by their least-squares fit, and the codes of the winner kept. Returns the least-squares
// scale; L receives signed codes. An all-zero group (max |x| < eps) gets scale 0 and codes -nmax (the
// reference's stored 0).
inline float ref_fit_signed_x2(int n, int nmax, const float* x, float eps, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  if (amax < eps) {
    for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(-nmax);
    return 0.0f;
  }
  float iscale = -nmax / max, sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = rne_clamp(iscale * x[i], -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = rne_clamp(iscale * x[i], -nmax, nmax - 1);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(rne_clamp(iscale * x[i], -nmax, nmax - 1));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// make_q3_quants with do_rmse: codes in [-nmax, nmax - 1] from -nmax / max, then up to 5 sweeps that move one
// code at a time to the value its least-squares fit (x_i^2 weights) asks for when that raises the fit.
// Returns sum(w x L) / sum(w L^2); L receives signed codes; all-zero groups as ref_fit_signed_x2.
inline float ref_fit_q3(int n, int nmax, const float* x, float eps, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  if (amax < eps) {
    for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(-nmax);
    return 0.0f;
  }
  const float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = rne_clamp(iscale * x[i], -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int sweep = 0; sweep < 5; ++sweep) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (!(slx > 0)) continue;
      float sl2 = suml2 - w * L[i] * L[i];
      const int nl = rne_clamp(x[i] * sl2 / slx, -nmax, nmax - 1);
      if (nl == L[i]) continue;
      slx += w * x[i] * nl;
      sl2 += w * nl * nl;
      if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<int8_t>(nl);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (!changed) break;
  }
  return sumlx / suml2;
}

// Second level for non-negative sub-block values v (scales or mins) under one f16 step: codes L in [0, K].
// Unweighted (sw == nullptr): step = max / K (llama.cpp's reference rule). Weighted: the step among
// (K + 0.1 k) / max candidates, refitted by least squares, with the lowest sum sw (v - step L)^2, and the
// codes re-rounded under the stored f16 step. Returns the f16 bits of the step.
inline uint16_t quantize_positive(int n, int K, const float* v, const float* sw, uint8_t* L) {
  float max = 0;
  for (int j = 0; j < n; ++j) max = std::fmax(max, v[j]);
  if (!(max > 0)) {
    for (int j = 0; j < n; ++j) L[j] = 0;
    return 0;
  }
  if (!sw) {
    const float inv = K / max;
    for (int j = 0; j < n; ++j) L[j] = static_cast<uint8_t>(rne_clamp(inv * v[j], 0, K));
    return f16_step(max / K);
  }
  float best_err = INFINITY, best_d = max / K;
  for (int k = -5; k <= 5; ++k) {
    const float inv = (K + 0.1f * k) / max;
    float sum_vl = 0, sum_l2 = 0;
    for (int j = 0; j < n; ++j) {
      const int l = rne_clamp(inv * v[j], 0, K);
      sum_vl += sw[j] * v[j] * l;
      sum_l2 += sw[j] * l * l;
    }
    if (!(sum_l2 > 0)) continue;
    const float d = sum_vl / sum_l2;
    float err = 0;
    for (int j = 0; j < n; ++j) {
      const float e = v[j] - d * rne_clamp(inv * v[j], 0, K);
      err += sw[j] * e * e;
    }
    if (err < best_err) {
      best_err = err;
      best_d = d;
    }
  }
  const uint16_t h = f16_step(best_d);
  const float d = f16_to_f32(h);
  for (int j = 0; j < n; ++j) L[j] = static_cast<uint8_t>(d > 0 ? rne_clamp(v[j] / d, 0, K) : 0);
  return h;
}

// Second level for signed sub-block scales under one f16 step: codes in [-K, K - 1], chosen by fit_signed
// weighted by sw and re-rounded under the stored f16 step. Returns the f16 bits of the step.
inline uint16_t quantize_signed(int n, int K, const float* v, const float* sw, int* L) {
  const uint16_t h = f16_step(fit_signed(n, K, v, sw, nullptr));
  const float d = f16_to_f32(h);
  for (int j = 0; j < n; ++j) L[j] = d != 0 ? rne_clamp(v[j] / d, -K, K - 1) : 0;
  return h;
}

// Q4_K / Q5_K: the inverse of k4_scale_min (6-bit scale and min of sub-block j into the 12 bytes q).
inline void k4_put_scale_min(int j, uint8_t sc, uint8_t m, uint8_t* q) {
  if (j < 4) {
    q[j] = static_cast<uint8_t>((q[j] & 0xC0) | sc);
    q[j + 4] = static_cast<uint8_t>((q[j + 4] & 0xC0) | m);
  } else {
    q[j + 4] = static_cast<uint8_t>((sc & 0xF) | ((m & 0xF) << 4));
    q[j - 4] = static_cast<uint8_t>((q[j - 4] & 0x3F) | ((sc >> 4) << 6));
    q[j] = static_cast<uint8_t>((q[j] & 0x3F) | ((m >> 4) << 6));
  }
}

// Q3_K / Q6_K header fit: per sub-block of 16 a weighted signed fit to codes -nmax..nmax-1 (unweighted:
// weights x_i^2), then the 16 signed scales to integers L[16] in -K..K-1 under the returned fp16 d
// (quantize_signed, weighted by each sub-block's total weight). The caller packs L its own way.
inline uint16_t k16_fit_signed_scales(const float* x, const float* w, float unit, int nmax, int K, int* L) {
  float ws[16], scales[16], sw[16];
  for (int j = 0; j < 16; ++j) {
    const float* xj = x + 16 * j;
    for (int l = 0; l < 16; ++l) ws[l] = w ? w[16 * j + l] : xj[l] * xj[l];
    sw[j] = 0;
    for (int l = 0; l < 16; ++l) sw[j] += ws[l];
    scales[j] = unit * fit_signed(16, nmax, xj, ws, nullptr);
  }
  return quantize_signed(16, K, scales, sw, L);
}

// Q3_K / Q6_K: 16 sub-blocks of 16 with signed scales sc16[j] under d, no offsets.
inline void k16_signed_grid(float d, const int8_t* sc16, float* scale, float* offset) {
  for (int j = 0; j < 16; ++j) {
    const float dl = d * sc16[j];
    for (int l = 0; l < 16; ++l) {
      scale[16 * j + l] = dl;
      offset[16 * j + l] = 0.0f;
    }
  }
}

// The header Q4_K and Q5_K share (their first 16 bytes: fp16 d, fp16 dmin, 12 bytes of 6-bit scales and
// mins): per sub-block of 32 a weighted scale/min fit to codes 0..nmax (unweighted: llama.cpp's weights
// av|x| + |x_i|; fit_scale_min's search from rmin in nstep steps of rdelta), then the 8 scales and 8 mins to
// 6 bits under d and dmin (quantize_positive, weighted by each sub-block's total weight when weights are
// given). fit_codes (optional, [256]) receives each sub-block's fitted codes.
inline void k4_choose_header(const float* x, const float* w, float unit, int nmax, float rmin, float rdelta,
                             int nstep, uint8_t* header, uint8_t* fit_codes = nullptr) {
  float ws[32], scales[8], mins[8], sw[8];
  uint8_t L[32], ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    const float* xj = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xj[l] * xj[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) ws[l] = w ? w[32 * j + l] : av_x + std::fabs(xj[l]);
    sw[j] = 0;
    for (int l = 0; l < 32; ++l) sw[j] += ws[l];
    scales[j] = unit * fit_scale_min(32, nmax, xj, ws, L, &mins[j], rmin, rdelta, nstep);
    mins[j] *= unit;
    if (fit_codes) std::memcpy(fit_codes + 32 * j, L, 32);
  }
  const uint16_t d = quantize_positive(8, 63, scales, w ? sw : nullptr, ls);
  const uint16_t dmin = quantize_positive(8, 63, mins, w ? sw : nullptr, lm);
  std::memcpy(header, &d, 2);
  std::memcpy(header + 2, &dmin, 2);
  std::memset(header + 4, 0, 12);
  for (int j = 0; j < 8; ++j) k4_put_scale_min(j, ls[j], lm[j], header + 4);
}

inline void k4_header_grid(const uint8_t* header, float* scale, float* offset);

// llama.cpp's quantize_row_q4_K_ref / q5_K_ref (KQuantOps::reference): the unweighted header, then each
// element rounded under the stored scale and min; a sub-block whose stored scale is 0 keeps its fitted codes.
inline void k4_reference(const float* x, const float* xs, float unit, int nmax, float rmin, float rdelta,
                         int nstep, int8_t* q, uint8_t* header) {
  uint8_t L[256];
  float scale[256], offset[256];
  k4_choose_header(xs, nullptr, unit, nmax, rmin, rdelta, nstep, header, L);
  k4_header_grid(header, scale, offset);
  for (int i = 0; i < 256; ++i)
    q[i] = static_cast<int8_t>(scale[i] != 0 ? rne_clamp((x[i] - offset[i]) / scale[i], 0, nmax) : L[i]);
}

// Per element of a Q4_K / Q5_K block the step and offset of its header (value = code * scale + offset).
inline void k4_header_grid(const uint8_t* header, float* scale, float* offset) {
  uint16_t dh, mh;
  std::memcpy(&dh, header, 2);
  std::memcpy(&mh, header + 2, 2);
  const float d = f16_to_f32(dh), dmin = f16_to_f32(mh);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    k4_scale_min(j, header + 4, &sc, &m);
    const float dl = d * sc, ml = dmin * m;
    for (int l = 0; l < 32; ++l) {
      scale[32 * j + l] = dl;
      offset[32 * j + l] = -ml;
    }
  }
}

struct KQuantOps {
  int block_bytes;
  int qmin, qmax;  // code range of the grid
  // Header (scales, mins, d, dmin) of one super-block from x[256] (finite, scaled so that max |x| is in
  // [1, 2)) and the per-element weights w[256] (nullptr: the format's unweighted rule). `unit` multiplies the
  // fitted scales back to the caller's units (a power of two, so the scaling is exact).
  void (*choose)(const float* x, const float* w, float unit, uint8_t* blk);
  // Per-element grid of one encoded block: value = scale[i] * q + offset[i] for codes q in [qmin, qmax].
  void (*grid)(const uint8_t* blk, float* scale, float* offset);
  // Stores the codes q[256] (in [qmin, qmax]) into the block, keeping its header.
  void (*pack)(uint8_t* blk, const int8_t* q);
  // Optional: llama.cpp's reference encoder of one super-block (quantize_row_*_K_ref), used when there is no
  // importance: header into blk, codes q[256] (in [qmin, qmax]) for pack. xs = x / unit (unit a power of
  // two; xs == x with unit 1 reproduces the reference bit for bit), eps = 1e-15 / unit; the element codes
  // are rounded from the unscaled x under the stored header.
  void (*reference)(const float* x, const float* xs, float unit, float eps, int8_t* q,
                    uint8_t* blk) = nullptr;
};

// Nearest code of x on one grid point set (scale, offset); a zero or non-finite scale keeps code 0's value.
inline int kquant_nearest(float x, float scale, float offset, int qmin, int qmax) {
  const int q0 = qmin > 0 ? qmin : qmax < 0 ? qmax : 0;
  if (!(std::fabs(scale) > 0) || !std::isfinite(scale)) return q0;
  return rne_clamp((x - offset) / scale, qmin, qmax);
}

// Encodes n / 256 super-blocks. importance: optional per-element weights (the imatrix: mean x^2 of each
// input column; entries <= 0 or non-finite count as 0); values (optional) receives the value of every encoded
// element as the encoder computes it, which the decoder must reproduce bit for bit. Non-finite inputs encode
// as 0 (quantize_matrix rejects them before this; the encoder only has to stay defined).
inline void kquant_quantize_row(const KQuantOps& op, const float* src, void* dst, int64_t n,
                                const float* importance, float* values) {
  auto* out = static_cast<uint8_t*>(dst);
  float x[kQK_K], w[kQK_K], sc[kQK_K], off[kQK_K];
  int8_t q[kQK_K];
  for (int64_t b = 0; b < n / kQK_K; ++b, src += kQK_K, out += op.block_bytes) {
    float amax = 0;
    for (int i = 0; i < kQK_K; ++i) {
      x[i] = std::isfinite(src[i]) ? src[i] : 0.0f;
      amax = std::fmax(amax, std::fabs(x[i]));
    }
    // Fit in units where max |x| is in [1, 2): sums of squares neither overflow nor underflow.
    int e = 0;
    if (amax > 0) std::frexp(amax, &e);
    const float unit = std::ldexp(1.0f, e - 1);
    float xs[kQK_K], sum_x2 = 0, imax = 0;
    for (int i = 0; i < kQK_K; ++i) {
      xs[i] = amax > 0 ? std::ldexp(x[i], 1 - e) : 0.0f;
      sum_x2 += xs[i] * xs[i];
    }
    const float* wp = nullptr;
    if (importance) {
      const float* imp = importance + b * kQK_K;
      for (int i = 0; i < kQK_K; ++i)
        if (std::isfinite(imp[i]) && imp[i] > imax) imax = imp[i];
      // llama.cpp's imatrix weighting: w_i = imp_i * sqrt(sigma^2 + x_i^2), sigma^2 = 2 mean(x^2).
      const float sigma2 = 2 * sum_x2 / kQK_K;
      for (int i = 0; i < kQK_K; ++i) {
        const float v = std::isfinite(imp[i]) && imp[i] > 0 && imax > 0 ? imp[i] / imax : 0.0f;
        w[i] = v * std::sqrt(sigma2 + xs[i] * xs[i]);
      }
      wp = w;
    }
    std::memset(out, 0, static_cast<size_t>(op.block_bytes));
    if (!wp && op.reference) {
      // The reference rule on the values as given, bit-compatible with llama.cpp; where its sums overflow
      // (a non-finite header) the same rule again in the scaled units.
      op.reference(x, x, 1.0f, kGroupMaxEps, q, out);
      op.grid(out, sc, off);
      bool finite = true;
      for (int i = 0; i < kQK_K; ++i) finite = finite && std::isfinite(sc[i]) && std::isfinite(off[i]);
      if (!finite) {
        std::memset(out, 0, static_cast<size_t>(op.block_bytes));
        op.reference(x, xs, unit, std::ldexp(kGroupMaxEps, 1 - e), q, out);
        op.grid(out, sc, off);
      }
    } else {
      op.choose(xs, wp, unit, out);
      op.grid(out, sc, off);
      for (int i = 0; i < kQK_K; ++i)
        q[i] = static_cast<int8_t>(kquant_nearest(x[i], sc[i], off[i], op.qmin, op.qmax));
    }
    if (values)
      for (int i = 0; i < kQK_K; ++i) values[b * kQK_K + i] = sc[i] * static_cast<float>(q[i]) + off[i];
    op.pack(out, q);
  }
}

// Row-level grid / code access for a row of n / 256 blocks (FormatInfo::row_grid / set_row_codes).
inline void kquant_row_grid(const KQuantOps& op, const void* row, float* scale, float* offset, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(row);
  for (int64_t b = 0; b < n / kQK_K; ++b)
    op.grid(p + b * op.block_bytes, scale + b * kQK_K, offset + b * kQK_K);
}
inline void kquant_set_row_codes(const KQuantOps& op, void* row, const int8_t* q, int64_t n) {
  auto* p = static_cast<uint8_t*>(row);
  for (int64_t b = 0; b < n / kQK_K; ++b) op.pack(p + b * op.block_bytes, q + b * kQK_K);
}
// The table row of a k-quant: make_gguf_row plus the importance-weighted encoder and the grid access, all
// driven by the format's KQuantOps.
template <const KQuantOps& Op>
struct KQuantCodec {
  static void quant(const float* x, void* dst, int64_t n) {
    kquant_quantize_row(Op, x, dst, n, nullptr, nullptr);
  }
  static void weighted(const float* x, void* dst, int64_t n, const float* importance, float* values) {
    kquant_quantize_row(Op, x, dst, n, importance, values);
  }
  static void grid(const void* row, float* scale, float* offset, int64_t n) {
    kquant_row_grid(Op, row, scale, offset, n);
  }
  static void set_codes(void* row, const int8_t* q, int64_t n) { kquant_set_row_codes(Op, row, q, n); }
};
template <const KQuantOps& Op>
FormatInfo make_kquant_row(FormatId id, const char* name, int ggml_type, int bits, const char* description,
                           void (*deq)(const void*, float*, int64_t)) {
  FormatInfo r = make_gguf_row(id, name, ggml_type, bits, description, deq, KQuantCodec<Op>::quant);
  r.quantize_row_weighted = KQuantCodec<Op>::weighted;
  r.row_grid = KQuantCodec<Op>::grid;
  r.set_row_codes = KQuantCodec<Op>::set_codes;
  r.code_min = Op.qmin;
  r.code_max = Op.qmax;
  return r;
}
}  // namespace lowbit::formats_detail
