// KV-cache head-row decoders on AVX-512 (kv_rows.h). Compiled with the AVX-512 flags
// (kernels/CMakeLists.txt); called only on the Avx512 tier and above.
#include <immintrin.h>

#include <cstring>

#include "core/half.h"
#include "kernels/kv_rows.h"

namespace lowbit::kern {

void kv_int8_row_avx512(const int8_t* src, int64_t n, float s, float* out) {
  const __m512 vs = _mm512_set1_ps(s);
  for (int64_t i = 0; i < n; i += 16) {
    __m512i x = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_cvtepi32_ps(x), vs));
  }
}

// INT4 per-token asymmetric groups (groups a multiple of 16): x = m + u * s, element c the low (even c) or
// high nibble of byte c / 2. Multiply then add, as the scalar loop, so equal bit for bit.
void kv_int4tok_row_avx512(const uint8_t* codes, const uint8_t* sc, int64_t ng, int64_t G, int64_t off,
                           int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += 32) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + (off + i) / 2));
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(b, m4), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m4);
    const __m128i e[2] = {_mm_unpacklo_epi8(lo, hi), _mm_unpackhi_epi8(lo, hi)};
    for (int k = 0; k < 2; ++k) {
      const int64_t c = off + i + 16 * k;
      if (i + 16 * k >= n) break;
      const int64_t g = c / G;
      const float sg = f16_to_f32(ld16(sc + 2 * g)), mg = f16_to_f32(ld16(sc + 2 * (ng + g)));
      const __m512 u = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(e[k]));
      _mm512_storeu_ps(out + i + 16 * k,
                       _mm512_add_ps(_mm512_mul_ps(u, _mm512_set1_ps(sg)), _mm512_set1_ps(mg)));
    }
  }
}

// INT4 / INT2 per-channel keys (KIVI): codes packed low bits first from element `off` (a multiple of 16), F16
// scale per channel, and for asymmetric keys an F16 minimum per channel: x = (u - 2^(b-1)) * s or min + u *
// s.
void kv_intch_row_avx512(const uint8_t* codes, int bits, const uint16_t* scales, const uint16_t* mins,
                         int64_t n, float* out) {
  const __m512i mask = _mm512_set1_epi32((1 << bits) - 1), half = _mm512_set1_epi32(1 << (bits - 1));
  // Lane i takes code i of 16: byte i*bits/8, shifted right by (i*bits) % 8.
  const __m512i shifts = bits == 4 ? _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0)
                                   : _mm512_set_epi32(6, 4, 2, 0, 6, 4, 2, 0, 6, 4, 2, 0, 6, 4, 2, 0);
  const __m128i spread = bits == 4 ? _mm_set_epi8(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0)
                                   : _mm_set_epi8(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  const int64_t step_bytes = 16 * bits / 8;
  for (int64_t i = 0; i < n; i += 16) {
    __m128i raw = bits == 4
                      ? _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i / 16 * step_bytes))
                      : _mm_cvtsi32_si128(*reinterpret_cast<const int32_t*>(codes + i / 16 * step_bytes));
    __m512i bytes = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(raw, spread));
    __m512i u = _mm512_and_si512(_mm512_srlv_epi32(bytes, shifts), mask);
    __m512 sc = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + i)));
    if (mins) {
      __m512 mn = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(mins + i)));
      _mm512_storeu_ps(out + i, _mm512_fmadd_ps(_mm512_cvtepi32_ps(u), sc, mn));
    } else {
      _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(u, half)), sc));
    }
  }
}

}  // namespace lowbit::kern
