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

void lut_dot4_vbmi(const uint8_t* const* rows, int nr, int64_t cols, int bits, const uint16_t* const* tables,
                   const float* x, float* out) {
  const __m512i ctrl = shift_ctrl(bits);
  const int64_t row_bytes = (cols * bits + 7) / 8, step = 2 * bits;  // bytes per 16 codes
  __m512 t[4], acc[4];
  for (int r = 0; r < 4; ++r) {
    t[r] = r < nr ? lut_table16(tables[r], bits) : _mm512_setzero_ps();
    acc[r] = _mm512_setzero_ps();
  }
  int64_t c = 0, off = 0;
  for (; c + 16 <= cols && off + 8 <= row_bytes; c += 16, off += step) {
    const __m512 xv = _mm512_loadu_ps(x + c);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r)
      if (r < nr)
        acc[r] = _mm512_fmadd_ps(_mm512_permutexvar_ps(codes16(rows[r] + off, ctrl), t[r]), xv, acc[r]);
  }
  for (; c < cols; c += 16, off += step) {
    const int64_t n = cols - c < 16 ? cols - c : 16;
    const __m512 xv = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), x + c);
    for (int r = 0; r < nr; ++r)
      acc[r] = _mm512_fmadd_ps(
          _mm512_permutexvar_ps(codes16_tail(rows[r], row_bytes, rows[r] + off, ctrl), t[r]), xv, acc[r]);
  }
  for (int r = 0; r < nr; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}

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
