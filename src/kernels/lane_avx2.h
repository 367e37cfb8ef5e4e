// Pieces shared by the AVX2 tier's kernels (matmul_avx2*.cpp).
//
// Only for AVX2 translation units; internal linkage on purpose (as lane_avx512.h): files compiled with other
// ISA flags must not share an inline definition.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace lowbit::kern {
namespace {

// The sum of the 8 lanes.
inline float hsum8(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// The 32-bit word at p (4 int8 activation codes) in all 8 lanes.
inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// An empty asm that pins v in a register at this point: GCC 12 otherwise reassociates a chain of int32 adds
// (plain vector `+`) into one tree at its end and spills the values it keeps live (the pack tiles).
inline __m256i pin(__m256i v) {
  asm("" : "+x"(v));
  return v;
}

// Byte i = v where bit i of h is set, else 0 (fifth / third bits of the GGUF packs for 8 rows x 4 columns).
inline __m256i bits_to_bytes(uint32_t h, char v) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(h)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(v));
}

// The first n (<= 8) lanes of v stored at out.
inline void store_lanes(float* out, __m256 v, int n) {
  if (n == 8) {
    _mm256_storeu_ps(out, v);
    return;
  }
  alignas(32) float tmp[8];
  _mm256_store_ps(tmp, v);
  std::copy(tmp, tmp + n, out);
}

}  // namespace
}  // namespace lowbit::kern
