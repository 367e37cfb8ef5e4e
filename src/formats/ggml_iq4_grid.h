// The IQ4_NL / IQ4_XS non-linear 4-bit grid: a 4-bit index selects one of these 16 int8 values, scaled by the
// block's (IQ4_NL) or sub-block's (IQ4_XS) step, and the step search both encoders share (llama.cpp's rule,
// kept in its order of operations so that the bytes match llama-quantize). Internal to src/formats and
// the kernels' load-time packers.
#pragma once
#include <cmath>
#include <cstdint>

namespace lowbit::formats_detail {
inline constexpr int8_t kIq4Grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                        1,    13,   25,  38,  53,  69,  89,  113};

// Index of the grid value nearest to v (binary search, ties to the upper one; 0 -> index 8, the +1).
inline int iq4_nearest_index(float v) {
  if (v <= kIq4Grid[0]) return 0;
  if (v >= kIq4Grid[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (v < kIq4Grid[mid])
      hi = mid;
    else
      lo = mid;
  }
  return v - kIq4Grid[hi - 1] < kIq4Grid[hi] - v ? hi - 1 : hi;
}

// The weighted least-squares step of one block of 32 values x with weights w (>= 0, not all 0): start
// from d = m / 127 (m the element of largest |x|, sign kept, toward the grid's -127 end), map x / d to the
// nearest grid values, fit d; then try the 15 inverse steps (k - 127) / m, k = -7..7, keeping the fit with
// the largest (sum w g x)^2 / sum w g^2. Returns 0 for a block with max |x| < 1e-15 (and for it, or when the
// sums overflow, the caller decides what to store). The codes are not returned: both encoders re-map every
// element under the step they finally store.
inline float iq4_block_step(const float* x, const float* w) {
  float amax = 0, mx = 0;
  for (int j = 0; j < 32; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      mx = x[j];
    }
  if (amax < 1e-15f) return 0.0f;
  float d = -mx / static_cast<float>(kIq4Grid[0]);
  float id = 1 / d, sumqx = 0, sumq2 = 0;
  for (int j = 0; j < 32; ++j) {
    const float q = kIq4Grid[iq4_nearest_index(id * x[j])];
    sumqx += w[j] * q * x[j];
    sumq2 += w[j] * q * q;
  }
  d = sumqx / sumq2;
  float best = d * sumqx;
  for (int k = -7; k <= 7; ++k) {
    id = static_cast<float>(k + kIq4Grid[0]) / mx;
    sumqx = sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const float q = kIq4Grid[iq4_nearest_index(id * x[j])];
      sumqx += w[j] * q * x[j];
      sumq2 += w[j] * q * q;
    }
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

// The weights of one block of 32: imp_i * sqrt(sigma2 + x_i^2) with an importance vector (negative or
// non-finite entries count as 0), x_i^2 without one or when every weight would be 0.
inline void iq4_block_weights(const float* x, const float* imp, float sigma2, float* w) {
  bool weighted = false;
  if (imp) {
    for (int j = 0; j < 32; ++j) {
      const float v = std::isfinite(imp[j]) && imp[j] > 0 ? imp[j] : 0.0f;
      w[j] = v * std::sqrt(sigma2 + x[j] * x[j]);
      weighted = weighted || w[j] > 0;
    }
  }
  if (!weighted)
    for (int j = 0; j < 32; ++j) w[j] = x[j] * x[j];
}
}  // namespace lowbit::formats_detail
