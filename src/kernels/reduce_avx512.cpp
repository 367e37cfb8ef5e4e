// AVX-512 versions of kernels/reduce.h (same results as the generic definitions, bit for bit).
#include <immintrin.h>

#include <limits>

#include "kernels/reduce.h"

namespace lowbit::kern {

double sum_squares_f64_avx512(const float* x, int64_t n) {
  __m512d s = _mm512_setzero_pd();  // lane j: x_i for i = j (mod 8), in index order
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
    s = _mm512_fmadd_pd(v, v, s);
  }
  alignas(32) double p[4];
  _mm256_store_pd(p, _mm256_add_pd(_mm512_castpd512_pd256(s), _mm512_extractf64x4_pd(s, 1)));
  double r = (p[0] + p[1]) + (p[2] + p[3]);
  for (; i < n; ++i) r += static_cast<double>(x[i]) * x[i];
  return r;
}

bool all_finite_f32_avx512(const float* x, int64_t n) {
  constexpr int kNonFinite = 0x01 | 0x80 | 0x08 | 0x10;  // QNaN, SNaN, +Inf, -Inf
  __mmask16 bad = 0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) bad |= _mm512_fpclass_ps_mask(_mm512_loadu_ps(x + i), kNonFinite);
  if (i < n) {
    const __mmask16 k = static_cast<__mmask16>((1u << (n - i)) - 1);
    bad |= _mm512_mask_fpclass_ps_mask(k, _mm512_maskz_loadu_ps(k, x + i), kNonFinite);
  }
  return bad == 0;
}

int64_t argmax_f32_avx512(const float* x, int64_t n) {
  // The largest value (four running maxima; NaN sends the answer to the definition), then its first index.
  const __m512 lo = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 m0 = lo, m1 = lo, m2 = lo, m3 = lo;
  __mmask16 nan = 0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
    const __m512 c = _mm512_loadu_ps(x + i + 32), d = _mm512_loadu_ps(x + i + 48);
    nan |= _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(c, d, _CMP_UNORD_Q);
    m0 = _mm512_max_ps(m0, a), m1 = _mm512_max_ps(m1, b), m2 = _mm512_max_ps(m2, c),
    m3 = _mm512_max_ps(m3, d);
  }
  for (; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 a = _mm512_mask_loadu_ps(lo, k, x + i);
    nan |= _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
    m0 = _mm512_max_ps(m0, a);
  }
  if (nan) return argmax_f32_generic(x, n);
  const float m = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
  const __m512 vm = _mm512_set1_ps(m);
  for (i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __mmask16 eq = _mm512_mask_cmp_ps_mask(k, _mm512_maskz_loadu_ps(k, x + i), vm, _CMP_EQ_OQ);
    if (eq) return i + __builtin_ctz(eq);
  }
  return 0;  // not reached: m is one of the x_i
}

}  // namespace lowbit::kern
