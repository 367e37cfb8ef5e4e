// Register-tiled INT8 x INT8 prefill (W8A8: per-channel symmetric INT8 weights, per-token INT8 activations) on
// AVX-512 VNNI.
//
// Why a separate layout: vpdpbusd multiplies 4 consecutive unsigned bytes by 4 signed bytes per 32-bit lane and
// adds them to the lane. With the weights of 16 output rows interleaved by 4 columns,
//   packed[rb][kq][lane][j] = w[rb*16 + lane][kq*4 + j]        (int8, rows padded to 16, columns to 4 with 0)
// one 64-byte load holds 4 columns of 16 rows, and one broadcast 32-bit word of a token's activations turns a
// single vpdpbusd into 64 multiply-adds for 16 outputs at once, with no horizontal reduction. A tile of 16 rows x 8
// tokens keeps 8 accumulators in registers and reuses each weight load 8 times.
//
// Signedness: vpdpbusd wants the unsigned operand first, so activations are stored as x + 128 (u8) and the
// result is corrected with 128 * sum_k w[r][k] (the row sums, computed at packing time):
//   sum_k w*x = sum_k w*(x + 128) - 128 * sum_k w.
// Everything is exact in int32 (|x|, |w| <= 127 and K < 2^17), so the result equals the reference product of the
// quantized operands up to the final float scaling.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/kernel_plan.h"
#include "kernels/with_nt.h"

namespace lowbit::kern {

void pack_int8_rows16(const uint8_t* codes, int64_t row_bytes, int64_t rows, int64_t cols, int8_t* out,
                      int32_t* rowsum) {
  const int64_t nrb = (rows + 15) / 16, k4 = (cols + 3) / 4;
  std::memset(out, 0, static_cast<size_t>(nrb * k4 * 64));
  std::fill(rowsum, rowsum + nrb * 16, 0);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = codes + r * row_bytes;
    int8_t* dst = out + (r / 16) * k4 * 64 + (r % 16) * 4;
    int32_t s = 0;
    for (int64_t c = 0; c < cols; ++c) {
      // Stored INT8 symmetric codes are offset binary (u = q + 128).
      const int8_t q = static_cast<int8_t>(src[c] ^ 0x80);
      dst[(c / 4) * 64 + c % 4] = q;
      s += q;
    }
    rowsum[r] = s;
  }
}

namespace {

template <int NT>
inline void tile16(const int8_t* wp, int64_t k4, const uint8_t* xu, int64_t xstride, __m512i (&acc)[8]) {
  for (int j = 0; j < NT; ++j) acc[j] = _mm512_setzero_si512();
  for (int64_t kq = 0; kq < k4; ++kq) {
    const __m512i w = _mm512_loadu_si512(wp + kq * 64);
    for (int j = 0; j < NT; ++j) {
      int32_t x4;
      std::memcpy(&x4, xu + j * xstride + kq * 4, 4);
      acc[j] = _mm512_dpbusd_epi32(acc[j], _mm512_set1_epi32(x4), w);
    }
  }
}

}  // namespace

void vnni_tile_int8_avx512(const int8_t* packed, const int32_t* rowsum, const float* wscale, int64_t r0, int64_t r1,
                           int64_t rows, int64_t cols, const uint8_t* xu, const float* sx, int64_t T, float* y) {
  const int64_t k4 = (cols + 3) / 4, xstride = k4 * 4;
  const __m512i c128 = _mm512_set1_epi32(128);
  for (int64_t r = r0; r < r1; r += 16) {
    const int64_t nr = std::min<int64_t>(16, r1 - r);
    const __mmask16 m = static_cast<__mmask16>((1u << nr) - 1);
    const int8_t* wp = packed + (r / 16) * k4 * 64;
    const __m512i corr = _mm512_mullo_epi32(_mm512_maskz_loadu_epi32(m, rowsum + r), c128);
    const __m512 ws = _mm512_maskz_loadu_ps(m, wscale + r);
    for (int64_t t0 = 0; t0 < T; t0 += 8) {
      const int nt = static_cast<int>(std::min<int64_t>(8, T - t0));
      __m512i acc[8];
      const uint8_t* xt = xu + t0 * xstride;
      with_nt(nt, [&](auto n) { tile16<decltype(n)::value>(wp, k4, xt, xstride, acc); });
      for (int j = 0; j < nt; ++j) {
        const __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[j], corr));
        const __m512 out = _mm512_mul_ps(_mm512_mul_ps(v, ws), _mm512_set1_ps(sx[t0 + j]));
        _mm512_mask_storeu_ps(y + (t0 + j) * rows + r, m, out);
      }
    }
  }
}

}  // namespace lowbit::kern
