// LUT2/3/4 per-row codebooks on the Avx512Bf16 tier, which has VBMI (kernel "lut"): the code extraction of
// the AVX-512 kernel (matmul_lut_avx512.cpp: vpshufb + vpsrlvd per 16 codes) becomes one vpmultishiftqb: the
// chunk's 2b bytes are broadcast as one qword to every lane, and the low byte of dword i takes the 8 bits
// from bit b*i, i.e. code i in its low b bits and the next codes' bits above them, which vpermps ignores
// (it reads bits 3:0; the table repeats every 2^b entries). Per 16 weights: a broadcast load, vpmultishiftqb,
// vpermps, FMA.
#include <immintrin.h>

#include <cstring>

#include "kernels/kernel_plan.h"

namespace lowbit::kern {

__m512 lut_table16(const uint16_t* t, int bits);  // matmul_lut_avx512.cpp

namespace {

// vpmultishiftqb control: byte 4j of qword lane q (dword i = 2q + j) starts at bit b*i; the other bytes are
// don't-care (0).
__m512i shift_ctrl(int bits) {
  alignas(64) uint8_t c[64] = {};
  for (int i = 0; i < 16; ++i) c[4 * i] = static_cast<uint8_t>(bits * i);
  return _mm512_load_si512(c);
}

inline __m512i codes16(const uint8_t* p, __m512i ctrl) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return _mm512_multishift_epi64_epi8(ctrl, _mm512_set1_epi64(v));
}

inline __m512i codes16_tail(const uint8_t* row, int64_t row_bytes, const uint8_t* p, __m512i ctrl) {
  alignas(8) uint8_t buf[8] = {};
  const int64_t left = row_bytes - (p - row);
  std::memcpy(buf, p, static_cast<size_t>(left < 8 ? left : 8));
  return codes16(buf, ctrl);
}

}  // namespace

void lut_deq_vbmi(const uint8_t* row, int64_t cols, int bits, const uint16_t* table, float* out) {
  const __m512i ctrl = shift_ctrl(bits);
  const __m512 t = lut_table16(table, bits);
  const int64_t row_bytes = (cols * bits + 7) / 8, step = 2 * bits;
  int64_t c = 0, off = 0;
  for (; c + 16 <= cols && off + 8 <= row_bytes; c += 16, off += step)
    _mm512_storeu_ps(out + c, _mm512_permutexvar_ps(codes16(row + off, ctrl), t));
  for (; c < cols; c += 16, off += step) {
    const int64_t n = cols - c < 16 ? cols - c : 16;
    _mm512_mask_storeu_ps(out + c, static_cast<__mmask16>((1u << n) - 1),
                          _mm512_permutexvar_ps(codes16_tail(row, row_bytes, row + off, ctrl), t));
  }
}

}  // namespace lowbit::kern

// ---- BF16 form (decode, T <= 3): 32 weights per vpermw + vdpbf16ps against BF16 activations ----
//
// Per 32 codes (4b bytes, loaded as 16): vpermb gives qword lane q (words 4q..4q+3) the 8 source bytes from
// byte floor(4bq / 8), vpmultishiftqb puts code i at the low bits of word i (offset b*i - 8*floor(4bq / 8)),
// vpermw (reads bits 4:0) looks it up in the row's table of 32 BF16 words repeating every 2^b, and vdpbf16ps
// multiplies 32 weights by 32 activations into 16 FP32 sums. The table's f16 values are rounded to BF16
// (matmul_weight_row gives the test oracle the same rows).
namespace lowbit::kern {
namespace {

struct alignas(64) Bf16Idx {
  uint8_t perm[3][64];
  uint8_t ctrl[3][64];
};
constexpr Bf16Idx make_bf16_idx() {
  Bf16Idx t{};
  for (int b = 2; b <= 4; ++b)
    for (int q = 0; q < 8; ++q) {
      const int base = (4 * b * q) / 8;
      for (int k = 0; k < 8; ++k)
        t.perm[b - 2][8 * q + k] = static_cast<uint8_t>(base + k < 63 ? base + k : 63);
      for (int j = 0; j < 4; ++j) {
        const int off = b * (4 * q + j) - 8 * base;
        t.ctrl[b - 2][8 * q + 2 * j] = t.ctrl[b - 2][8 * q + 2 * j + 1] = static_cast<uint8_t>(off);
      }
    }
  return t;
}
constexpr Bf16Idx kBf16Idx = make_bf16_idx();

inline __m512i words32(const uint8_t* p, __m512i perm, __m512i ctrl) {
  const __m512i src = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm512_multishift_epi64_epi8(ctrl, _mm512_permutexvar_epi8(perm, src));
}

}  // namespace

void lut_dot4_bf16(const uint8_t* const* rows, int nr, int64_t cols, int bits, const uint16_t* const* tables,
                   const uint16_t* xb, float* out) {
  const __m512i perm = _mm512_load_si512(kBf16Idx.perm[bits - 2]);
  const __m512i ctrl = _mm512_load_si512(kBf16Idx.ctrl[bits - 2]);
  const int64_t row_bytes = (cols * bits + 7) / 8, step = 4 * bits;  // bytes per 32 codes
  __m512i t[4];
  __m512 acc[4];
  for (int r = 0; r < 4; ++r) {
    if (r < nr) {
      const __m512 f = lut_table16(tables[r], bits);
      t[r] = (__m512i)_mm512_cvtne2ps_pbh(f, f);
    } else {
      t[r] = _mm512_setzero_si512();
    }
    acc[r] = _mm512_setzero_ps();
  }
  int64_t c = 0, off = 0;
  for (; c + 32 <= cols && off + 16 <= row_bytes; c += 32, off += step) {
    const __m512bh xv = (__m512bh)_mm512_loadu_si512(xb + c);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r)
      if (r < nr) {
        const __m512i w = _mm512_permutexvar_epi16(words32(rows[r] + off, perm, ctrl), t[r]);
        acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)w, xv);
      }
  }
  // The rest through zero-padded copies of the rows' last bytes; xb is zero past cols (lut_bf16_activations).
  for (; c < cols; c += 32, off += step) {
    const __m512bh xv = (__m512bh)_mm512_loadu_si512(xb + c);
    for (int r = 0; r < nr; ++r) {
      alignas(16) uint8_t buf[16] = {};
      const int64_t left = row_bytes - off;
      std::memcpy(buf, rows[r] + off, static_cast<size_t>(left < 16 ? left : 16));
      const __m512i w = _mm512_permutexvar_epi16(words32(buf, perm, ctrl), t[r]);
      acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)w, xv);
    }
  }
  for (int r = 0; r < nr; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}

void lut_bf16_activations(const float* x, int64_t cols, uint16_t* xb) {
  const int64_t padded = (cols + 31) / 32 * 32;
  for (int64_t c = 0; c < padded; c += 32) {
    const int64_t n0 = cols - c < 0 ? 0 : (cols - c < 16 ? cols - c : 16);
    const int64_t n1 = cols - c - 16 < 0 ? 0 : (cols - c - 16 < 16 ? cols - c - 16 : 16);
    const __m512 lo = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n0) - 1), x + c);
    const __m512 hi = n1 > 0 ? _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n1) - 1), x + c + 16)
                             : _mm512_setzero_ps();
    _mm512_storeu_si512(xb + c, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  }
}

}  // namespace lowbit::kern
