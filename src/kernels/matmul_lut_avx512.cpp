// LUT2/3/4 per-row codebooks on AVX-512 (kernel "lut", kernels/kernel_plan.h): the row's 2^b binary16 table
// widened once into one zmm register, then per 16 codes one vpermps looks the weights up in it, fused with
// the FMA against x. Code extraction for any b <= 4: the chunk's 2b bytes (16-byte broadcast to every 128-bit
// lane), vpshufb moves bytes (b*i)/8 and the next one into dword i, vpsrlvd by (b*i)%8, mask 2^b - 1.
#include <immintrin.h>

#include <cstring>

#include "kernels/kernel_plan.h"

namespace lowbit::kern {
namespace {

struct LutIdx {
  __m512i shuf, shift, mask;
};

LutIdx lut_idx(int bits) {
  alignas(64) int8_t sh[64];
  alignas(64) int32_t sr[16];
  for (int i = 0; i < 16; ++i) {
    const int bit = bits * i;
    sh[4 * i] = static_cast<int8_t>(bit >> 3);  // within the broadcast 16-byte chunk of every lane
    sh[4 * i + 1] = static_cast<int8_t>((bit >> 3) + 1);
    sh[4 * i + 2] = sh[4 * i + 3] = static_cast<int8_t>(0x80);  // zero
    sr[i] = bit & 7;
  }
  return {_mm512_load_si512(sh), _mm512_load_si512(sr), _mm512_set1_epi32((1 << bits) - 1)};
}

inline __m512i codes16(const uint8_t* p, const LutIdx& k) {
  const __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm512_and_si512(_mm512_srlv_epi32(_mm512_shuffle_epi8(v, k.shuf), k.shift), k.mask);
}

inline __m512 table16(const uint16_t* t, int bits) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << (1 << bits)) - 1), t));
}

}  // namespace

float lut_dot_avx512(const uint8_t* row, int64_t cols, int bits, const uint16_t* table, const float* x) {
  const LutIdx k = lut_idx(bits);
  const __m512 t = table16(table, bits);
  const int64_t row_bytes = (cols * bits + 7) / 8, step = 2 * bits;  // bytes per 16 codes
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t c = 0;
  const uint8_t* p = row;
  // Whole chunks whose 16-byte load stays inside the row.
  for (; c + 32 <= cols && (p - row) + step + 16 <= row_bytes; c += 32, p += 2 * step) {
    a0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(codes16(p, k), t), _mm512_loadu_ps(x + c), a0);
    a1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(codes16(p + step, k), t), _mm512_loadu_ps(x + c + 16), a1);
  }
  // The rest through a zero-padded copy of the row's last bytes; x lanes past cols masked to 0.
  for (; c < cols; c += 16, p += step) {
    alignas(16) uint8_t buf[16] = {};
    const int64_t left = row_bytes - (p - row);
    std::memcpy(buf, p, static_cast<size_t>(left < 16 ? left : 16));
    const int64_t n = cols - c < 16 ? cols - c : 16;
    const __m512 xv = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), x + c);
    a0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(codes16(buf, k), t), xv, a0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

void lut_deq_avx512(const uint8_t* row, int64_t cols, int bits, const uint16_t* table, float* out) {
  const LutIdx k = lut_idx(bits);
  const __m512 t = table16(table, bits);
  const int64_t row_bytes = (cols * bits + 7) / 8, step = 2 * bits;
  int64_t c = 0;
  const uint8_t* p = row;
  for (; c + 16 <= cols && (p - row) + 16 <= row_bytes; c += 16, p += step)
    _mm512_storeu_ps(out + c, _mm512_permutexvar_ps(codes16(p, k), t));
  for (; c < cols; c += 16, p += step) {
    alignas(16) uint8_t buf[16] = {};
    const int64_t left = row_bytes - (p - row);
    std::memcpy(buf, p, static_cast<size_t>(left < 16 ? left : 16));
    const int64_t n = cols - c < 16 ? cols - c : 16;
    _mm512_mask_storeu_ps(out + c, static_cast<__mmask16>((1u << n) - 1),
                          _mm512_permutexvar_ps(codes16(buf, k), t));
  }
}

}  // namespace lowbit::kern
