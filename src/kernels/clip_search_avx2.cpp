// AVX2 form of the INT clip search's error sums (see clip_search.h). Built with -ffp-contract=off: the
// compiler fuses no multiply and add, so every lane rounds exactly as the scalar reference does.
#include <immintrin.h>

#include <algorithm>

#include "kernels/clip_search.h"

namespace lowbit {

void int_cells_error_avx2(const float* x, const float* w, int64_t n, const float* div, const float* scale,
                          const float* zero, int K, float umax, double* err) {
  const __m256 magic = _mm256_set1_ps(12582912.0f);  // round_for_clamp's 1.5 * 2^23
  const __m256 lo = _mm256_setzero_ps(), hi = _mm256_set1_ps(umax);
  for (int k0 = 0; k0 < K; k0 += 8) {
    const int m = std::min(8, K - k0);
    // A short last block repeats its last candidate in the spare lanes (computed, never stored).
    alignas(32) float dv[8], sv[8], zv[8];
    for (int j = 0; j < 8; ++j) {
      const int k = k0 + std::min(j, m - 1);
      dv[j] = div[k];
      sv[j] = scale[k];
      zv[j] = zero[k];
    }
    const __m256 d8 = _mm256_load_ps(dv), s8 = _mm256_load_ps(sv), z8 = _mm256_load_ps(zv);
    __m256d e_lo = _mm256_setzero_pd(), e_hi = _mm256_setzero_pd();
    for (int64_t i = 0; i < n; ++i) {
      const __m256 xv = _mm256_set1_ps(x[i]);
      // int_code: round(x / div) + zero, then max with 0 (a NaN becomes 0, as the scalar comparison does)
      // and min with umax.
      __m256 v = _mm256_sub_ps(_mm256_add_ps(_mm256_div_ps(xv, d8), magic), magic);
      v = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(v, z8), lo), hi);
      // (code - zero) * scale: code and zero are small integers, so the float difference is the int one.
      const __m256 val = _mm256_mul_ps(_mm256_sub_ps(v, z8), s8);
      const __m256d xd = _mm256_set1_pd(static_cast<double>(x[i]));
      const __m256d d_lo = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(val)), xd);
      const __m256d d_hi = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(val, 1)), xd);
      if (w) {  // (w * d) * d, the scalar's order
        const __m256d wd = _mm256_set1_pd(static_cast<double>(w[i]));
        e_lo = _mm256_add_pd(e_lo, _mm256_mul_pd(_mm256_mul_pd(wd, d_lo), d_lo));
        e_hi = _mm256_add_pd(e_hi, _mm256_mul_pd(_mm256_mul_pd(wd, d_hi), d_hi));
      } else {  // 1.0 * d is d exactly
        e_lo = _mm256_add_pd(e_lo, _mm256_mul_pd(d_lo, d_lo));
        e_hi = _mm256_add_pd(e_hi, _mm256_mul_pd(d_hi, d_hi));
      }
    }
    alignas(32) double out[8];
    _mm256_store_pd(out, e_lo);
    _mm256_store_pd(out + 4, e_hi);
    for (int j = 0; j < m; ++j) err[k0 + j] = out[j];
  }
}

}  // namespace lowbit
