// Pieces shared by the AVX2 tier's kernels (matmul_avx2.cpp, matmul_avx2_q8.cpp).
//
// Only for AVX2 translation units; internal linkage on purpose (as lane_avx512.h): files compiled with other
// ISA flags must not share an inline definition.
#pragma once
#include <immintrin.h>

namespace lowbit::kern {
namespace {

// The sum of the 8 lanes.
inline float hsum8(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

}  // namespace
}  // namespace lowbit::kern
