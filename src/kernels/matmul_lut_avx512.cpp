// LUT2/3/4 per-row codebooks on AVX-512 (kernel "lut", kernels/kernel_plan.h): each row's 2^b binary16 table
// widened once into one zmm register, then per 16 codes one vpermps looks the weights up in it, fused with
// the FMA against x. Code extraction for any b <= 4: the chunk's 2b bytes (16-byte broadcast to every 128-bit
// lane), vpshufb moves bytes (b*i)/8 and the next one into dword i, vpsrlvd by (b*i)%8, mask 2^b - 1.
#include <immintrin.h>

#include <cstring>

#include "kernels/kernel_plan.h"

namespace lowbit::kern {
namespace {

// The vpshufb / vpsrlvd operands for b = 2, 3, 4, built at compile time (a per-call build from scalar stores
// cost a store-forwarding stall per row, which dominated rows of 896 columns).
struct alignas(64) IdxTables {
  int8_t shuf[3][64];
  int32_t shift[3][16];
};
constexpr IdxTables make_idx_tables() {
  IdxTables t{};
  for (int b = 2; b <= 4; ++b)
    for (int i = 0; i < 16; ++i) {
      const int bit = b * i;
      t.shuf[b - 2][4 * i] = static_cast<int8_t>(bit >> 3);  // within the broadcast chunk of every lane
      t.shuf[b - 2][4 * i + 1] = static_cast<int8_t>((bit >> 3) + 1);
      t.shuf[b - 2][4 * i + 2] = t.shuf[b - 2][4 * i + 3] = static_cast<int8_t>(-128);  // zero
      t.shift[b - 2][i] = bit & 7;
    }
  return t;
}
constexpr IdxTables kIdx = make_idx_tables();

struct LutIdx {
  __m512i shuf, shift;
};

inline LutIdx lut_idx(int bits) {
  return {_mm512_load_si512(kIdx.shuf[bits - 2]), _mm512_load_si512(kIdx.shift[bits - 2])};
}

// Index i in the low b bits of dword i, the next code's bits above: vpermps reads only bits 3:0, and the
// table repeats every 2^b entries (table16), so no mask is needed.
inline __m512i codes16(const uint8_t* p, const LutIdx& k) {
  const __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm512_srlv_epi32(_mm512_shuffle_epi8(v, k.shuf), k.shift);
}

}  // namespace

// The row's 2^b entries repeated over 16 lanes (entry u at every lane u mod 2^b).
__m512 lut_table16(const uint16_t* t, int bits) {
  const __m512 v =
      _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << (1 << bits)) - 1), t));
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  return _mm512_permutexvar_ps(_mm512_and_si512(lane, _mm512_set1_epi32((1 << bits) - 1)), v);
}

namespace {
inline __m512 table16(const uint16_t* t, int bits) {
  return lut_table16(t, bits);
}

// The chunk of 16 codes at code c0 of a row (p = row + c0 * b / 8) through a zero-padded copy when its
// 16-byte load would leave the row.
inline __m512i codes16_tail(const uint8_t* row, int64_t row_bytes, const uint8_t* p, const LutIdx& k) {
  alignas(16) uint8_t buf[16] = {};
  const int64_t left = row_bytes - (p - row);
  std::memcpy(buf, p, static_cast<size_t>(left < 16 ? left : 16));
  return codes16(buf, k);
}

}  // namespace

void lut_dot4_avx512(const uint8_t* const* rows, int nr, int64_t cols, int bits,
                     const uint16_t* const* tables, const float* x, float* out) {
  const LutIdx k = lut_idx(bits);
  const int64_t row_bytes = (cols * bits + 7) / 8, step = 2 * bits;  // bytes per 16 codes
  __m512 t[4], acc[4];
  for (int r = 0; r < 4; ++r) {
    t[r] = r < nr ? table16(tables[r], bits) : _mm512_setzero_ps();
    acc[r] = _mm512_setzero_ps();
  }
  // Whole chunks whose 16-byte load stays inside the row: up to 4 rows share each load of x and give the core
  // independent FMA chains.
  int64_t c = 0, off = 0;
  for (; c + 16 <= cols && off + 16 <= row_bytes; c += 16, off += step) {
    const __m512 xv = _mm512_loadu_ps(x + c);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r)
      if (r < nr)
        acc[r] = _mm512_fmadd_ps(_mm512_permutexvar_ps(codes16(rows[r] + off, k), t[r]), xv, acc[r]);
  }
  // The rest through zero-padded copies of the rows' last bytes; x lanes past cols masked to 0.
  for (; c < cols; c += 16, off += step) {
    const int64_t n = cols - c < 16 ? cols - c : 16;
    const __m512 xv = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), x + c);
    for (int r = 0; r < nr; ++r)
      acc[r] = _mm512_fmadd_ps(
          _mm512_permutexvar_ps(codes16_tail(rows[r], row_bytes, rows[r] + off, k), t[r]), xv, acc[r]);
  }
  for (int r = 0; r < nr; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}

float lut_dot_avx512(const uint8_t* row, int64_t cols, int bits, const uint16_t* table, const float* x) {
  float y;
  lut_dot4_avx512(&row, 1, cols, bits, &table, x, &y);
  return y;
}

void lut_deq_avx512(const uint8_t* row, int64_t cols, int bits, const uint16_t* table, float* out) {
  const LutIdx k = lut_idx(bits);
  const __m512 t = table16(table, bits);
  const int64_t row_bytes = (cols * bits + 7) / 8, step = 2 * bits;
  int64_t c = 0, off = 0;
  for (; c + 16 <= cols && off + 16 <= row_bytes; c += 16, off += step)
    _mm512_storeu_ps(out + c, _mm512_permutexvar_ps(codes16(row + off, k), t));
  for (; c < cols; c += 16, off += step) {
    const int64_t n = cols - c < 16 ? cols - c : 16;
    _mm512_mask_storeu_ps(out + c, static_cast<__mmask16>((1u << n) - 1),
                          _mm512_permutexvar_ps(codes16_tail(row, row_bytes, row + off, k), t));
  }
}

}  // namespace lowbit::kern
