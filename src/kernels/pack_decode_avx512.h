// Internal to src/kernels (AVX-512 translation units only): the decode steps of the load-time packs
// (kernel_plan.h: QBlkPack, KPack) shared by their VNNI kernels (matmul_avx512_qblk.cpp,
// matmul_avx512_kpack.cpp) and AMX kernels (amx_qblk.h, amx_kpack.h): each returns the unsigned codes u of
// one 64-byte code vector (byte 4r + j: row r, column j of a 4-column group), or 16 stored values as floats.
#pragma once
#if defined(__AVX512F__)
#include <immintrin.h>

#include <cstdint>
#include <cstring>

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

// A 4-bit chunk: the low nibbles (columns 8k..8k+3) and the high nibbles (8k+4..8k+7).
inline void split_nibbles(__m512i v, __m512i& lo, __m512i& hi) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  lo = _mm512_and_si512(v, m4);
  hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
}

// Q5_0 / Q5_1 / Q5_K: the fifth bits of a chunk's low and high nibbles from two uint64 masks at `masks`.
inline void or_fifth_bits(const uint8_t* masks, __m512i& lo, __m512i& hi) {
  uint64_t ml, mh;
  std::memcpy(&ml, masks, 8);
  std::memcpy(&mh, masks + 8, 8);
  const __m512i h16 = _mm512_set1_epi8(0x10);
  lo = _mm512_or_si512(lo, _mm512_maskz_mov_epi8(_cvtu64_mask64(ml), h16));
  hi = _mm512_or_si512(hi, _mm512_maskz_mov_epi8(_cvtu64_mask64(mh), h16));
}

// Q2_K / Q3_K sub-block at v: u[q] = the 2-bit field q of every byte (columns 4q..4q+3), with Q3_K's third
// bit (value 4) from the mask q at v + 64 + 8q.
inline void k23_codes(const uint8_t* v, bool third_bit, __m512i (&u)[4]) {
  const __m512i m3 = _mm512_set1_epi8(3), b2 = _mm512_set1_epi8(4);
  const __m512i c = _mm512_loadu_si512(v);  // Q3_K sub-blocks are 96 bytes apart: not 64-byte aligned
  for (int q = 0; q < 4; ++q) {
    u[q] = _mm512_and_si512(_mm512_srli_epi16(c, 2 * q), m3);
    if (third_bit) {
      uint64_t mq;
      std::memcpy(&mq, v + 64 + 8 * q, 8);
      u[q] = _mm512_or_si512(u[q], _mm512_maskz_mov_epi8(_cvtu64_mask64(mq), b2));
    }
  }
}

// Q6_K sub-block: u = low nibble | (two high bits) << 4 per quarter, from its code vectors a, b and high
// bits h (kernel_plan.h).
inline void q6k_codes(__m512i a, __m512i b, __m512i h, __m512i (&u)[4]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  u[0] = _mm512_or_si512(_mm512_and_si512(a, m4), _mm512_and_si512(_mm512_slli_epi16(h, 4), m30));
  u[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a, 4), m4),
                         _mm512_and_si512(_mm512_slli_epi16(h, 2), m30));
  u[2] = _mm512_or_si512(_mm512_and_si512(b, m4), _mm512_and_si512(h, m30));
  u[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(b, 4), m4),
                         _mm512_and_si512(_mm512_srli_epi16(h, 2), m30));
}

}  // namespace
}  // namespace lowbit::kern
#endif
