// Internal to src/kernels (AVX-512 translation units only): 16 stored values widened to a float vector, as
// the k-quant pack kernels read their per-row scales (matmul_avx512_kpack.cpp, amx_kpack.h).
#pragma once
#if defined(__AVX512F__)
#include <immintrin.h>

#include <cstdint>

namespace lowbit::kern {
namespace {

inline __m512 cvt_u8x16(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline __m512 cvt_i8x16(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline __m512 cvt_f16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

}  // namespace
}  // namespace lowbit::kern
#endif
