// Register-tiled INT8 x INT8 prefill (W8A8: per-channel symmetric INT8 weights, per-token INT8 activations)
// on AVX-512 VNNI.
//
// Why a separate layout: vpdpbusd multiplies 4 consecutive unsigned bytes by 4 signed bytes per 32-bit lane
// and adds them to the lane. With the weights of 16 output rows interleaved by 4 columns,
//   packed[rb][kq][lane][j] = w[rb*16 + lane][kq*4 + j]        (int8, rows padded to 16, columns to 4 with 0)
// one 64-byte load holds 4 columns of 16 rows, and one broadcast 32-bit word of a token's activations turns a
// single vpdpbusd into 64 multiply-adds for 16 outputs at once, with no horizontal reduction. A tile of 16
// rows x 8 tokens keeps 8 accumulators in registers and reuses each weight load 8 times.
//
// Signedness: vpdpbusd wants the unsigned operand first, so activations are stored as x + 128 (u8) and the
// result is corrected with 128 * sum_k w[r][k] (the row sums, computed at packing time):
//   sum_k w*x = sum_k w*(x + 128) - 128 * sum_k w.
// Everything is exact in int32 (|x|, |w| <= 127 and K < 2^17), so the result equals the reference product of
// the quantized operands up to the final float scaling.
//
// vnni_block (INT4 and grouped / asymmetric INT8 weights with INT8 activations, e.g. the W4A8 preset): no
// resident copy; per call each 16-row block is decoded once into the same [kq][16 rows][4 columns] layout, as
// the unsigned stored codes u (INT4 nibbles widened to bytes, 16 x 64 columns per 32-bit transpose), and the
// activations stay signed: vpdpbusd(u, x) sums u * x exactly, and per scale group g
//   sum_c (u - z) x = <u, x>_g - z * X_g          (X_g: the token's sum of its INT8 activations over the
//   group)
// so the zero point (stored, or 2^(bits-1) for symmetric codes) costs one vpmulld per group and token. Per
// group the int32 sums are converted and multiplied by the 16 rows' scales and the token's scale (one FMA).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/kernel_plan.h"
#include "kernels/lane_avx512.h"
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

void vnni_tile_int8_avx512(const int8_t* packed, const int32_t* rowsum, const float* wscale, int64_t r0,
                           int64_t r1, int64_t rows, int64_t cols, const uint8_t* xu, const float* sx,
                           int64_t T, float* y) {
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

namespace {

// 64 columns (chunk ch) of a row as bytes u in column order; columns past `cols` read as 0.
inline __m512i code_chunk(const uint8_t* row, int bits, int64_t cols, int64_t ch) {
  const int64_t c0 = 64 * ch, left = cols - c0;
  if (bits == 8) {
    const __mmask64 m = left >= 64 ? ~__mmask64{0} : (__mmask64{1} << left) - 1;
    return _mm512_maskz_loadu_epi8(m, row + c0);
  }
  const int64_t bl = (left + 1) / 2;  // code bytes left in the row
  const __mmask32 m = bl >= 32 ? ~__mmask32{0} : (__mmask32{1} << bl) - 1;
  const __m512i w = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m, row + c0 / 2));
  // Word i = code byte i: low nibble (column 2i) to its low byte, high nibble (column 2i + 1) to its high
  // byte.
  return _mm512_or_si512(_mm512_and_si512(w, _mm512_set1_epi16(0x000F)),
                         _mm512_slli_epi16(_mm512_and_si512(w, _mm512_set1_epi16(0x00F0)), 4));
}

template <int NT>
void block_tile(const uint8_t* wb, int64_t k4, int64_t gk, int64_t ng, const float* sv, const int32_t* zv,
                const int8_t* xq, int64_t xstride, const int32_t* xg, int64_t xgs, const float* sx,
                __m512* out) {
  __m512 accf[NT];
  for (int j = 0; j < NT; ++j) accf[j] = _mm512_setzero_ps();
  for (int64_t g = 0; g < ng; ++g) {
    const int64_t kq1 = std::min(k4, (g + 1) * gk);
    __m512i acc[NT];
    for (int j = 0; j < NT; ++j) acc[j] = _mm512_setzero_si512();
    for (int64_t kq = g * gk; kq < kq1; ++kq) {
      const __m512i w = _mm512_load_si512(wb + 64 * kq);
      for (int j = 0; j < NT; ++j) {
        int32_t x4;
        std::memcpy(&x4, xq + j * xstride + 4 * kq, 4);
        acc[j] = _mm512_dpbusd_epi32(acc[j], w, _mm512_set1_epi32(x4));
      }
    }
    const __m512 s = _mm512_load_ps(sv + 16 * g);
    const __m512i z = _mm512_load_si512(zv + 16 * g);
    for (int j = 0; j < NT; ++j) {
      const __m512i v = _mm512_sub_epi32(acc[j], _mm512_mullo_epi32(z, _mm512_set1_epi32(xg[j * xgs + g])));
      accf[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(s, _mm512_set1_ps(sx[j])), accf[j]);
    }
  }
  for (int j = 0; j < NT; ++j) out[j] = accf[j];
}

}  // namespace

void vnni_block_avx512(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                       int bits, int zoff, int64_t cols, int64_t group, const int8_t* xq, int64_t xstride,
                       const int32_t* xg, int64_t ng, const float* sx, int T, float* y, int64_t ystride) {
  const int64_t k4 = (cols + 3) / 4, nch = (cols + 63) / 64;
  const int64_t gk = ng == 1 ? k4 : group / 4;  // kq steps per scale group
  struct alignas(64) Line {
    uint8_t v[64];
  };
  thread_local std::vector<Line> buf;
  buf.resize(static_cast<size_t>(16 * nch + 2 * ng));
  uint8_t* wb = buf.data()->v;
  float* sv = reinterpret_cast<float*>(buf[16 * nch].v);
  int32_t* zv = reinterpret_cast<int32_t*>(buf[16 * nch + ng].v);
  for (int64_t g = 0; g < ng; ++g)
    for (int i = 0; i < 16; ++i) {
      sv[16 * g + i] = i < nr ? s[i][g] : 0.0f;
      zv[16 * g + i] = i >= nr ? 0 : z[i] ? static_cast<int32_t>(z[i][g]) : zoff;
    }
  for (int64_t ch = 0; ch < nch; ++ch) {
    __m512i v[16];
    for (int i = 0; i < 16; ++i) v[i] = i < nr ? code_chunk(rows[i], bits, cols, ch) : _mm512_setzero_si512();
    transpose16(v);  // v[j]: the 4 columns 64 ch + 4 j of the 16 rows
    for (int j = 0; j < 16; ++j) _mm512_store_si512(wb + 64 * (16 * ch + j), v[j]);
  }
  const __mmask16 m = static_cast<__mmask16>((1u << nr) - 1);
  for (int t0 = 0; t0 < T; t0 += 8) {
    __m512 out[8];
    const int nt = std::min(8, T - t0);
    with_nt(nt, [&](auto n) {
      block_tile<decltype(n)::value>(wb, k4, gk, ng, sv, zv, xq + t0 * xstride, xstride, xg + t0 * ng, ng,
                                     sx + t0, out);
    });
    for (int j = 0; j < nt; ++j) _mm512_mask_storeu_ps(y + (t0 + j) * ystride, m, out[j]);
  }
}

}  // namespace lowbit::kern
