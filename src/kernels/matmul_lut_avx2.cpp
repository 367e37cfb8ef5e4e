// LUT2/3/4 per-row codebooks on AVX2 (kernel "lut"): the row's table in two ymm registers (entries 0-7 and
// 8-15), per 8 codes two vpermps and a blend on bit 3 of the code (one vpermps for tables of <= 8 entries),
// fused with the FMA against x. Codes as in the AVX-512 kernel, 8 at a time: the chunk's b bytes broadcast
// to both 128-bit lanes, vpshufb, vpsrlvd, mask.
#include <immintrin.h>

#include <cstring>

#include "kernels/kernel_plan.h"

namespace lowbit::kern {
namespace {

struct LutIdx8 {
  __m256i shuf, shift, mask;
};

LutIdx8 lut_idx8(int bits) {
  alignas(32) int8_t sh[32];
  alignas(32) int32_t sr[8];
  for (int i = 0; i < 8; ++i) {
    const int bit = bits * i;
    sh[4 * i] = static_cast<int8_t>(bit >> 3);
    sh[4 * i + 1] = static_cast<int8_t>((bit >> 3) + 1);
    sh[4 * i + 2] = sh[4 * i + 3] = static_cast<int8_t>(0x80);
    sr[i] = bit & 7;
  }
  return {_mm256_load_si256(reinterpret_cast<const __m256i*>(sh)),
          _mm256_load_si256(reinterpret_cast<const __m256i*>(sr)), _mm256_set1_epi32((1 << bits) - 1)};
}

struct Table8 {
  __m256 lo, hi;
  bool wide;  // 16 entries
};

Table8 table8(const uint16_t* t, int bits) {
  alignas(32) uint16_t h[16] = {};
  std::memcpy(h, t, sizeof(uint16_t) << bits);
  return {_mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h))),
          _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h + 8))), bits == 4};
}

// 8 codes from p[0 .. 8): reads 8 bytes (the callers keep that inside the row).
inline __m256 weights8(const uint8_t* p, const LutIdx8& k, const Table8& t) {
  const __m256i v = _mm256_broadcastsi128_si256(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(v, k.shuf), k.shift), k.mask);
  const __m256 lo = _mm256_permutevar8x32_ps(t.lo, idx);
  if (!t.wide) return lo;
  return _mm256_blendv_ps(lo, _mm256_permutevar8x32_ps(t.hi, idx),
                          _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

}  // namespace

float lut_dot_avx2(const uint8_t* row, int64_t cols, int bits, const uint16_t* table, const float* x) {
  const LutIdx8 k = lut_idx8(bits);
  const Table8 t = table8(table, bits);
  const int64_t row_bytes = (cols * bits + 7) / 8;
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t c = 0;
  const uint8_t* p = row;
  for (; c + 16 <= cols && (p - row) + bits + 8 <= row_bytes; c += 16, p += 2 * bits) {
    a0 = _mm256_fmadd_ps(weights8(p, k, t), _mm256_loadu_ps(x + c), a0);
    a1 = _mm256_fmadd_ps(weights8(p + bits, k, t), _mm256_loadu_ps(x + c + 8), a1);
  }
  __m256 s = _mm256_add_ps(a0, a1);
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  float r = _mm_cvtss_f32(h);
  // The rest (under 16 + 8 codes) through a zero-padded copy of the row's last bytes and of x.
  for (; c < cols; c += 8, p += bits) {
    alignas(16) uint8_t buf[8] = {};
    alignas(32) float xb[8] = {};
    const int64_t left = row_bytes - (p - row), n = cols - c < 8 ? cols - c : 8;
    std::memcpy(buf, p, static_cast<size_t>(left < 8 ? left : 8));
    std::memcpy(xb, x + c, static_cast<size_t>(n) * sizeof(float));
    alignas(32) float prod[8];
    _mm256_store_ps(prod, _mm256_mul_ps(weights8(buf, k, t), _mm256_load_ps(xb)));
    for (int i = 0; i < 8; ++i) r += prod[i];
  }
  return r;
}

void lut_deq_avx2(const uint8_t* row, int64_t cols, int bits, const uint16_t* table, float* out) {
  const LutIdx8 k = lut_idx8(bits);
  const Table8 t = table8(table, bits);
  const int64_t row_bytes = (cols * bits + 7) / 8;
  int64_t c = 0;
  const uint8_t* p = row;
  for (; c + 8 <= cols && (p - row) + 8 <= row_bytes; c += 8, p += bits)
    _mm256_storeu_ps(out + c, weights8(p, k, t));
  for (; c < cols; c += 8, p += bits) {
    alignas(16) uint8_t buf[8] = {};
    alignas(32) float o[8];
    const int64_t left = row_bytes - (p - row), n = cols - c < 8 ? cols - c : 8;
    std::memcpy(buf, p, static_cast<size_t>(left < 8 ? left : 8));
    _mm256_store_ps(o, weights8(buf, k, t));
    std::memcpy(out + c, o, static_cast<size_t>(n) * sizeof(float));
  }
}

}  // namespace lowbit::kern
