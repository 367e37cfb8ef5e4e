// AVX2 versions of kernels/reduce.h (same results as the generic definitions, bit for bit).
#include <immintrin.h>

#include <limits>

#include "kernels/reduce.h"

namespace lowbit::kern {

double sum_squares_f64_avx2(const float* x, int64_t n) {
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();  // lanes 0-3 and 4-7 of the definition's 8
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(x + i)), b = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
    s0 = _mm256_fmadd_pd(a, a, s0);
    s1 = _mm256_fmadd_pd(b, b, s1);
  }
  alignas(32) double p[4];
  _mm256_store_pd(p, _mm256_add_pd(s0, s1));
  double r = (p[0] + p[1]) + (p[2] + p[3]);
  for (; i < n; ++i) r += static_cast<double>(x[i]) * x[i];
  return r;
}

bool all_finite_f32_avx2(const float* x, int64_t n) {
  const __m256i e = _mm256_set1_epi32(0x7F800000);
  __m256i bad = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i b = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), e);
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(b, e));
  }
  return _mm256_testz_si256(bad, bad) && all_finite_f32_generic(x + i, n - i);
}

int64_t argmax_f32_avx2(const float* x, int64_t n) {
  const __m256 lo = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 m0 = lo, m1 = lo, m2 = lo, m3 = lo, nan = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    const __m256 c = _mm256_loadu_ps(x + i + 16), d = _mm256_loadu_ps(x + i + 24);
    nan =
        _mm256_or_ps(nan, _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_UNORD_Q), _mm256_cmp_ps(c, d, _CMP_UNORD_Q)));
    m0 = _mm256_max_ps(m0, a), m1 = _mm256_max_ps(m1, b), m2 = _mm256_max_ps(m2, c),
    m3 = _mm256_max_ps(m3, d);
  }
  if (!_mm256_testz_ps(nan, nan)) return argmax_f32_generic(x, n);
  alignas(32) float v[8];
  _mm256_store_ps(v, _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
  float m = v[0];
  for (int j = 1; j < 8; ++j) m = v[j] > m ? v[j] : m;
  for (int64_t j = i; j < n; ++j) {
    if (x[j] != x[j]) return argmax_f32_generic(x, n);
    m = x[j] > m ? x[j] : m;
  }
  const __m256 vm = _mm256_set1_ps(m);
  for (i = 0; i + 8 <= n; i += 8) {
    const int eq = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vm, _CMP_EQ_OQ));
    if (eq) return i + __builtin_ctz(static_cast<unsigned>(eq));
  }
  for (; i < n; ++i)
    if (x[i] == m) return i;
  return 0;  // not reached: m is one of the x_i
}

}  // namespace lowbit::kern
