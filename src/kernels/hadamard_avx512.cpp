// AVX-512 tier of the Hadamard transform (hadamard.h). Butterflies inside one 16-lane vector use
// y = partner + sign * x, which rounds exactly as the scalar a + b / a - b (the sign is +-1).
#include <immintrin.h>

#include <cmath>

#include "kernels/hadamard_simd.h"

namespace lowbit::kern {
namespace {

// Unnormalised FWHT of n = 2^k >= 16 floats.
void fwht_raw_avx512(float* x, int64_t n) {
  const __m512 s1 = _mm512_setr_ps(1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1);
  const __m512 s2 = _mm512_setr_ps(1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1);
  const __m512 s4 = _mm512_setr_ps(1, 1, 1, 1, -1, -1, -1, -1, 1, 1, 1, 1, -1, -1, -1, -1);
  const __m512 s8 = _mm512_setr_ps(1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1);
  for (int64_t i = 0; i < n; i += 16) {
    __m512 v = _mm512_loadu_ps(x + i);
    v = _mm512_fmadd_ps(s1, v, _mm512_permute_ps(v, 0xB1));        // len 1: swap neighbours
    v = _mm512_fmadd_ps(s2, v, _mm512_permute_ps(v, 0x4E));        // len 2: swap pairs
    v = _mm512_fmadd_ps(s4, v, _mm512_shuffle_f32x4(v, v, 0xB1));  // len 4: swap 128-bit lanes
    v = _mm512_fmadd_ps(s8, v, _mm512_shuffle_f32x4(v, v, 0x4E));  // len 8: swap 256-bit halves
    _mm512_storeu_ps(x + i, v);
  }
  for (int64_t len = 16; len < n; len <<= 1)
    for (int64_t i = 0; i < n; i += 2 * len)
      for (int64_t j = i; j < i + len; j += 16) {
        const __m512 a = _mm512_loadu_ps(x + j), b = _mm512_loadu_ps(x + j + len);
        _mm512_storeu_ps(x + j, _mm512_add_ps(a, b));
        _mm512_storeu_ps(x + j + len, _mm512_sub_ps(a, b));
      }
}

}  // namespace

void hadamard_one_avx512(const Hadamard& h, float* x, float* tmp) {
  const int64_t P = h.pow2, m = h.m;
  if (P < 16) return hadamard_one_avx2(h, x, tmp);
  const __m512 s = _mm512_set1_ps(static_cast<float>(1.0 / std::sqrt(static_cast<double>(h.n))));
  for (int64_t a = 0; a < m; ++a) fwht_raw_avx512(x + a * P, P);
  if (m == 1) {
    for (int64_t i = 0; i < P; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), s));
    return;
  }
  for (int64_t a = 0; a < m; ++a) {
    float* y = tmp + a * P;
    for (int64_t i = 0; i < P; i += 16) _mm512_storeu_ps(y + i, _mm512_setzero_ps());
    for (int64_t b = 0; b < m; ++b) {
      const float* xb = x + b * P;
      if (h.hm[a * m + b] > 0)
        for (int64_t i = 0; i < P; i += 16)
          _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(y + i), _mm512_loadu_ps(xb + i)));
      else
        for (int64_t i = 0; i < P; i += 16)
          _mm512_storeu_ps(y + i, _mm512_sub_ps(_mm512_loadu_ps(y + i), _mm512_loadu_ps(xb + i)));
    }
  }
  for (int64_t i = 0; i < h.n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(tmp + i), s));
}

}  // namespace lowbit::kern
