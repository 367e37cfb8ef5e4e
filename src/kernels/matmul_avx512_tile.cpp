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
//
// f4_block (INT4 codes with NVFP4 activations, decode and prefill): the same layout and products, with the
// activations as c = 2 * E2M1 value (signed bytes in [-12, 12]). Each 16-column activation block b has its
// own scale beta_b = s_b / 2, so per block (4 kq steps) the int32 sums I_b are converted and multiplied by
// beta_b (exact: |I_b| <= 2880 and beta has 4 significant bits), added in block order; per group
//   sum_c (u - z) x_hat = sum_b beta_b I_b - z * XZ_g          (XZ_g = sum_b beta_b C_b, C_b the block's code
//   sum)
// then the rows' scales. The order depends on nothing but the row and the token, so a token gets the same
// bits alone and in a batch.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/kernel_plan.h"
#include "kernels/lane_avx512.h"
#include "kernels/prefetch.h"
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

// acc[j] = the sum over kq steps [kq0, kq1) of the 16 rows' 4 codes (wb's [kq][16 rows][4 columns] layout)
// times token j's 4 activations, exact in int32.
template <int NT>
inline void dp_steps(const uint8_t* wb, int64_t kq0, int64_t kq1, const int8_t* xq, int64_t xstride,
                     __m512i* acc) {
  for (int j = 0; j < NT; ++j) acc[j] = _mm512_setzero_si512();
  for (int64_t kq = kq0; kq < kq1; ++kq) {
    const __m512i w = _mm512_load_si512(wb + 64 * kq);
    for (int j = 0; j < NT; ++j) {
      int32_t x4;
      std::memcpy(&x4, xq + j * xstride + 4 * kq, 4);
      acc[j] = _mm512_dpbusd_epi32(acc[j], w, _mm512_set1_epi32(x4));
    }
  }
}

template <int NT>
void block_tile(const uint8_t* wb, int64_t k4, int64_t gk, int64_t ng, const float* sv, const int32_t* zv,
                const int8_t* xq, int64_t xstride, const int32_t* xg, int64_t xgs, const float* sx,
                __m512* out) {
  __m512 accf[NT];
  for (int j = 0; j < NT; ++j) accf[j] = _mm512_setzero_ps();
  for (int64_t g = 0; g < ng; ++g) {
    __m512i acc[NT];
    dp_steps<NT>(wb, g * gk, std::min(k4, (g + 1) * gk), xq, xstride, acc);
    const __m512 s = _mm512_load_ps(sv + 16 * g);
    const __m512i z = _mm512_load_si512(zv + 16 * g);
    for (int j = 0; j < NT; ++j) {
      const __m512i v = _mm512_sub_epi32(acc[j], _mm512_mullo_epi32(z, _mm512_set1_epi32(xg[j * xgs + g])));
      accf[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(s, _mm512_set1_ps(sx[j])), accf[j]);
    }
  }
  for (int j = 0; j < NT; ++j) out[j] = accf[j];
}

template <int NT>
void f4_tile(const uint8_t* wb, int64_t k4, int64_t gk, int64_t ng, const float* sv, const float* zv,
             const int8_t* xq, int64_t xstride, const float* beta, int64_t bstride, const float* xz,
             __m512* out) {
  __m512 accf[NT];
  for (int j = 0; j < NT; ++j) accf[j] = _mm512_setzero_ps();
  for (int64_t g = 0; g < ng; ++g) {
    const int64_t kq1 = std::min(k4, (g + 1) * gk);
    __m512 accg[NT];
    for (int j = 0; j < NT; ++j) accg[j] = _mm512_setzero_ps();
    for (int64_t kb = g * gk; kb < kq1; kb += 4) {  // one activation block: 16 columns
      __m512i acc[NT];
      dp_steps<NT>(wb, kb, std::min(kq1, kb + 4), xq, xstride, acc);
      for (int j = 0; j < NT; ++j)
        accg[j] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[j]), _mm512_set1_ps(beta[j * bstride + kb / 4]), accg[j]);
    }
    const __m512 s = _mm512_load_ps(sv + 16 * g), z = _mm512_load_ps(zv + 16 * g);
    for (int j = 0; j < NT; ++j)
      accf[j] = _mm512_fmadd_ps(_mm512_fnmadd_ps(z, _mm512_set1_ps(xz[j * ng + g]), accg[j]), s, accf[j]);
  }
  for (int j = 0; j < NT; ++j) out[j] = accf[j];
}

// The scale and zero cells of a 16-row block per group: sv[16 g + i], zv[16 g + i] for row i (zoff where a
// row has no zero cells). Rows past nr repeat row 0's cells: their lanes are never stored. zc: ng floats of
// scratch. Group by group over an array of row pointers: filled row by row instead (each row's cells written
// 64 bytes apart), f4_rows_avx512 took 270 us instead of 90-100 on 896 x 4864 g128 (38 groups per row; one
// thread, build/bench/bench_kernels).
template <typename Z>
void gather_cells16(int nr, const float* const* s, const float* const* z, Z zoff, int64_t ng, float* zc,
                    float* sv, Z* zv) {
  std::fill(zc, zc + ng, static_cast<float>(zoff));
  const float* sp[16];
  const float* zp[16];
  for (int i = 0; i < 16; ++i) {
    const int r = i < nr ? i : 0;
    sp[i] = s[r];
    zp[i] = z[r] ? z[r] : zc;
  }
  for (int64_t g = 0; g < ng; ++g)
    for (int i = 0; i < 16; ++i) {
      sv[16 * g + i] = sp[i][g];
      zv[16 * g + i] = static_cast<Z>(zp[i][g]);
    }
}

// Rows [0, nr) of a 16-row block in the [kq][16 rows][4 columns] byte layout, plus the rows' scale and zero
// cells per group (gather_cells16, 16 floats / int32s per group after the codes). Returns the code lines.
template <typename Z>
uint8_t* layout_block16(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                        int bits, Z zoff, int64_t cols, int64_t ng, float** sv, Z** zv) {
  const int64_t nch = (cols + 63) / 64;
  struct alignas(64) Line {
    uint8_t v[64];
  };
  thread_local std::vector<Line> buf;
  thread_local std::vector<float> zc;
  buf.resize(static_cast<size_t>(16 * nch + 2 * ng));
  zc.resize(static_cast<size_t>(ng));
  uint8_t* wb = buf.data()->v;
  *sv = reinterpret_cast<float*>(buf[16 * nch].v);
  *zv = reinterpret_cast<Z*>(buf[16 * nch + ng].v);
  gather_cells16(nr, s, z, zoff, ng, zc.data(), *sv, *zv);
  for (int64_t ch = 0; ch < nch; ++ch) {
    __m512i v[16];
    for (int i = 0; i < 16; ++i) v[i] = i < nr ? code_chunk(rows[i], bits, cols, ch) : _mm512_setzero_si512();
    transpose16(v);  // v[j]: the 4 columns 64 ch + 4 j of the 16 rows
    for (int j = 0; j < 16; ++j) _mm512_store_si512(wb + 64 * (16 * ch + j), v[j]);
  }
  return wb;
}

// 128 columns (chunk ch) of a row of 4-bit codes as 64 bytes (low nibble: column 2i, high: 2i + 1); bytes
// past the row read as 0.
inline __m512i nib_bytes128(const uint8_t* row, int64_t cols, int64_t ch) {
  const int64_t bl = (cols - 128 * ch + 1) / 2;
  if (bl >= 64) return _mm512_loadu_si512(row + 64 * ch);
  return _mm512_maskz_loadu_epi8((__mmask64{1} << bl) - 1, row + 64 * ch);
}

// One row's 128-column chunk against a token's (xe: its 64 even columns, xo: the 64 odd ones): int32 lane L
// sums columns 8L .. 8L + 7; then each lane pair (a 16-column block) summed into both lanes. Exact.
inline __m512i pair_sums(__m512i v, __m512i xe, __m512i xo) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
  const __m512i a = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xe), hi, xo);
  return _mm512_add_epi32(a, _mm512_shuffle_epi32(a, _MM_PERM_CDAB));
}

// v[k]: 128-bit lane k of each of a[0..3], i.e. a 4 x 4 transpose of 128-bit lanes.
inline void transpose_lanes4(const __m512i (&a)[4], __m512i (&v)[4]) {
  const __m512i p0 = _mm512_shuffle_i32x4(a[0], a[1], _MM_SHUFFLE(1, 0, 1, 0));
  const __m512i p1 = _mm512_shuffle_i32x4(a[0], a[1], _MM_SHUFFLE(3, 2, 3, 2));
  const __m512i p2 = _mm512_shuffle_i32x4(a[2], a[3], _MM_SHUFFLE(1, 0, 1, 0));
  const __m512i p3 = _mm512_shuffle_i32x4(a[2], a[3], _MM_SHUFFLE(3, 2, 3, 2));
  v[0] = _mm512_shuffle_i32x4(p0, p2, _MM_SHUFFLE(2, 0, 2, 0));
  v[1] = _mm512_shuffle_i32x4(p0, p2, _MM_SHUFFLE(3, 1, 3, 1));
  v[2] = _mm512_shuffle_i32x4(p1, p3, _MM_SHUFFLE(2, 0, 2, 0));
  v[3] = _mm512_shuffle_i32x4(p1, p3, _MM_SHUFFLE(3, 1, 3, 1));
}

}  // namespace

// Decode: f4_block_avx512's sums by rows instead of a transposed block. The token's codes are laid out per
// 128 columns as the 64 even ones, then the 64 odd ones (f4_rows_layout), so a row's nibbles multiply them
// without being put back in column order: two vpdpbusd per row and 128 columns. Four rows at a time, each
// read from start to end, their block sums are gathered as E (blocks 0, 2, 4, 6 of the chunk, one per
// 128-bit lane, lane 4k + r = row r) and O (blocks 1, 3, 5, 7); then, chunk by chunk, a transpose of
// 128-bit lanes gives the 16 rows' int32 sums of each block, and the float steps are the tile's, in its
// order.
void f4_rows_layout(const int8_t* c, int64_t xs, int8_t* out) {
  for (int64_t k = 0; k < xs; k += 128)
    for (int64_t i = 0; i < 64; ++i) {
      out[k + i] = c[k + 2 * i];
      out[k + 64 + i] = c[k + 2 * i + 1];
    }
}

void f4_rows_avx512(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                    int zoff, int64_t cols, int64_t group, int64_t ng, const int8_t* xq, int64_t xstride,
                    const float* beta, int64_t bstride, const float* xz, int T, float* y, int64_t ystride) {
  const int64_t nch = (cols + 127) / 128, nb = (cols + 15) / 16;
  const int64_t gb = ng == 1 ? nb : group / 16;  // blocks per scale group
  thread_local std::vector<float> cells;
  cells.resize(static_cast<size_t>(33 * ng));
  float *sv = cells.data(), *zv = sv + 16 * ng;
  gather_cells16(nr, s, z, static_cast<float>(zoff), ng, zv + 16 * ng, sv, zv);
  struct alignas(64) Line {
    __m512i v;
  };
  thread_local std::vector<Line> quad_sums;  // [nch][E, O][4 quads]
  quad_sums.resize(static_cast<size_t>(8 * nch));
  Line* qs = quad_sums.data();
  const int nq = (nr + 3) / 4;  // quads holding a row; the others stay zero
  for (int q = nq; q < 4; ++q)
    for (int64_t ch = 0; ch < nch; ++ch) qs[8 * ch + q].v = qs[8 * ch + 4 + q].v = _mm512_setzero_si512();
  const __mmask16 m = static_cast<__mmask16>((1u << nr) - 1);
  const bool l2 = prefetch_to_l2(4 * (cols + 1) / 2, cols);
  for (int t = 0; t < T; ++t) {
    const int8_t* xt = xq + t * xstride;
    const float* bt = beta + t * bstride;
    for (int q = 0; q < nq; ++q) {
      for (int64_t ch = 0; ch < nch; ++ch) {
        // The quad's rows are consecutive in memory, read interleaved: prefetch their region in address order
        // 4 KiB ahead (as vnni_rows does; harmless past the end).
        const uint8_t* ahead = rows[4 * q] + 256 * ch + 4096;
        for (int k = 0; k < 4; ++k) prefetch_far(ahead + 64 * k, l2);
        const __m512i xe = _mm512_loadu_si512(xt + 128 * ch), xo = _mm512_loadu_si512(xt + 128 * ch + 64);
        __m512i p[4];
        for (int i = 0; i < 4; ++i) {
          const int row = 4 * q + i;
          p[i] = row < nr ? pair_sums(nib_bytes128(rows[row], cols, ch), xe, xo) : _mm512_setzero_si512();
        }
        // [row 0, row 1, row 0, row 1] per 128-bit lane: (block 2k, block 2k) then (2k + 1, 2k + 1).
        const __m512i ab = _mm512_mask_blend_epi32(0xAAAA, p[0], p[1]);
        const __m512i cd = _mm512_mask_blend_epi32(0xAAAA, p[2], p[3]);
        qs[8 * ch + q].v = _mm512_unpacklo_epi64(ab, cd);
        qs[8 * ch + 4 + q].v = _mm512_unpackhi_epi64(ab, cd);
      }
    }
    __m512 accf = _mm512_setzero_ps(), accg = _mm512_setzero_ps();
    int64_t g = 0, left = gb;  // the current group, its blocks still to add
    for (int64_t ch = 0; ch < nch; ++ch) {
      const __m512i e[4] = {qs[8 * ch].v, qs[8 * ch + 1].v, qs[8 * ch + 2].v, qs[8 * ch + 3].v};
      const __m512i o[4] = {qs[8 * ch + 4].v, qs[8 * ch + 5].v, qs[8 * ch + 6].v, qs[8 * ch + 7].v};
      __m512i ve[4], vo[4];
      transpose_lanes4(e, ve);
      transpose_lanes4(o, vo);
      for (int b = 0; b < 8; ++b) {
        const int64_t blk = 8 * ch + b;
        if (blk >= nb) break;
        const __m512i v = b % 2 ? vo[b / 2] : ve[b / 2];
        accg = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_set1_ps(bt[blk]), accg);
        if (--left == 0 || blk + 1 == nb) {  // the group's last block
          const __m512 zz = _mm512_loadu_ps(zv + 16 * g);
          accf = _mm512_fmadd_ps(_mm512_fnmadd_ps(zz, _mm512_set1_ps(xz[t * ng + g]), accg),
                                 _mm512_loadu_ps(sv + 16 * g), accf);
          accg = _mm512_setzero_ps();
          ++g, left = gb;
        }
      }
    }
    _mm512_mask_storeu_ps(y + t * ystride, m, accf);
  }
}

bool f4_block_avx512_ok(int64_t group, int64_t gcols) {
  return gcols == 1 || group % 16 == 0;
}

void f4_block_avx512(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                     int zoff, int64_t cols, int64_t group, int64_t ng, const int8_t* xq, int64_t xstride,
                     const float* beta, int64_t bstride, const float* xz, int T, float* y, int64_t ystride) {
  const int64_t k4 = (cols + 3) / 4;
  const int64_t gk = ng == 1 ? k4 : group / 4;  // kq steps per scale group (a multiple of 4)
  float *sv, *zv;
  const uint8_t* wb = layout_block16<float>(nr, rows, s, z, 4, static_cast<float>(zoff), cols, ng, &sv, &zv);
  const __mmask16 m = static_cast<__mmask16>((1u << nr) - 1);
  for (int t0 = 0; t0 < T; t0 += 8) {
    __m512 out[8];
    const int nt = std::min(8, T - t0);
    with_nt(nt, [&](auto n) {
      f4_tile<decltype(n)::value>(wb, k4, gk, ng, sv, zv, xq + t0 * xstride, xstride, beta + t0 * bstride,
                                  bstride, xz + t0 * ng, out);
    });
    for (int j = 0; j < nt; ++j) _mm512_mask_storeu_ps(y + (t0 + j) * ystride, m, out[j]);
  }
}

int amx_block_kw(int64_t group, int64_t gcols, int64_t cols) {
  if (gcols == 1) return 64;  // one group: 64-column tiles over the zero-padded row
  if (group % 4 != 0 || cols % group != 0) return 0;
  for (int kw = 64; kw >= 4; kw -= 4)
    if (group % kw == 0) return kw;
  return 0;
}

const uint8_t* vnni_block_layout(int nr, const uint8_t* const* rows, const float* const* s,
                                 const float* const* z, int bits, int zoff, int64_t cols, int64_t ng,
                                 float** sv, int32_t** zv) {
  return layout_block16<int32_t>(nr, rows, s, z, bits, zoff, cols, ng, sv, zv);
}

void vnni_block_avx512(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                       int bits, int zoff, int64_t cols, int64_t group, const int8_t* xq, int64_t xstride,
                       const int32_t* xg, int64_t ng, const float* sx, int T, float* y, int64_t ystride) {
  const int64_t k4 = (cols + 3) / 4;
  const int64_t gk = ng == 1 ? k4 : group / 4;  // kq steps per scale group
  float* sv;
  int32_t* zv;
  const uint8_t* wb = layout_block16<int32_t>(nr, rows, s, z, bits, zoff, cols, ng, &sv, &zv);
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
