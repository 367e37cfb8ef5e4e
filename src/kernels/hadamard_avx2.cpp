// AVX2 tier of the Hadamard transform (hadamard.h). Butterflies inside one 8-lane vector use
// y = partner + sign * x, which rounds exactly as the scalar a + b / a - b (the sign is +-1).
#include <immintrin.h>

#include <cmath>

#include "kernels/hadamard_simd.h"

namespace lowbit::kern {
namespace {

// Unnormalised FWHT of n = 2^k >= 8 floats.
void fwht_raw_avx2(float* x, int64_t n) {
  const __m256 s1 = _mm256_setr_ps(1, -1, 1, -1, 1, -1, 1, -1);
  const __m256 s2 = _mm256_setr_ps(1, 1, -1, -1, 1, 1, -1, -1);
  const __m256 s4 = _mm256_setr_ps(1, 1, 1, 1, -1, -1, -1, -1);
  for (int64_t i = 0; i < n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    v = _mm256_fmadd_ps(s1, v, _mm256_permute_ps(v, 0xB1));       // len 1: swap neighbours
    v = _mm256_fmadd_ps(s2, v, _mm256_permute_ps(v, 0x4E));       // len 2: swap pairs
    v = _mm256_fmadd_ps(s4, v, _mm256_permute2f128_ps(v, v, 1));  // len 4: swap halves
    _mm256_storeu_ps(x + i, v);
  }
  for (int64_t len = 8; len < n; len <<= 1)
    for (int64_t i = 0; i < n; i += 2 * len)
      for (int64_t j = i; j < i + len; j += 8) {
        const __m256 a = _mm256_loadu_ps(x + j), b = _mm256_loadu_ps(x + j + len);
        _mm256_storeu_ps(x + j, _mm256_add_ps(a, b));
        _mm256_storeu_ps(x + j + len, _mm256_sub_ps(a, b));
      }
}

}  // namespace

void hadamard_one_avx2(const Hadamard& h, float* x, float* tmp) {
  const int64_t P = h.pow2, m = h.m;
  if (P < 8) return hadamard_one_generic(h, x, tmp);
  const __m256 s = _mm256_set1_ps(static_cast<float>(1.0 / std::sqrt(static_cast<double>(h.n))));
  for (int64_t a = 0; a < m; ++a) fwht_raw_avx2(x + a * P, P);
  if (m == 1) {
    for (int64_t i = 0; i < P; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), s));
    return;
  }
  for (int64_t a = 0; a < m; ++a) {
    float* y = tmp + a * P;
    for (int64_t i = 0; i < P; i += 8) _mm256_storeu_ps(y + i, _mm256_setzero_ps());
    for (int64_t b = 0; b < m; ++b) {
      const float* xb = x + b * P;
      if (h.hm[a * m + b] > 0)
        for (int64_t i = 0; i < P; i += 8)
          _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(xb + i)));
      else
        for (int64_t i = 0; i < P; i += 8)
          _mm256_storeu_ps(y + i, _mm256_sub_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(xb + i)));
    }
  }
  for (int64_t i = 0; i < h.n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(tmp + i), s));
}

}  // namespace lowbit::kern
