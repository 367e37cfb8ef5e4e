// AVX-512 fused dequantize-and-multiply kernels for quantized weights (compiled with -mavx512* -mavx512vnni;
// called only when the Avx512 tier is active, see dispatch.h).
//
//  nib:  4-bit codes through a 16-entry float LUT (INT4 sym: u-8, INT4 asym: u, NF4, E2M1) with vpermps.
//        Decode (T = 1..3, groups that tile 128-element chunks): nib_gemv_avx512, lane-major (see there).
//        Otherwise (nib_dot_avx512 / nib_deq_avx512): 16 code bytes -> 32 nibbles in element order
//        (and/shift/unpack) -> vpermps -> FMA with x; one scale multiply per group.
//  byte: 8-bit codes. INT8 via sign-extend/convert; FP8 E4M3FN/E5M2 by moving the bits into an IEEE half and
//        converting (E4M3FN: exact up to the 2^8 bias difference, folded into the group scale).
//  vnni: INT4/INT8 weight codes (unsigned, offset-binary) x INT8 activation codes with vpdpbusd; the zero
//  point
//        is removed exactly in int32 with per-lane activation sums; int32 -> float once per chunk.
//  q8:   GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 rows as stored x activations in Q8 blocks of 32 (llama.cpp's
//        vec_dot_q4_0_q8_0 scheme), for weights without a load-time pack (matmul_avx512_qblk.cpp).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "formats/ggml_types.h"
#include "kernels/kernel_plan.h"
#include "kernels/lane_avx512.h"
#include "kernels/prefetch.h"

namespace lowbit::kern {
namespace {

// 16 code bytes (n valid, <= 16) -> 32 floats in element order through the LUT.
inline void nib32(const uint8_t* p, int64_t nbytes, __m512 lut, __m512& w0, __m512& w1) {
  const __m128i b = nbytes >= 16 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))
                                 : _mm_maskz_loadu_epi8(mask16(nbytes), p);
  const __m128i m = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
  w0 = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)), lut);
  w1 = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpackhi_epi8(lo, hi)), lut);
}

// 16 FP8 codes -> their IEEE halves. E5M2 is the top byte of a half. E4M3FN: t = code << 7 puts the magnitude
// in the half's bits 7..13 and the sign in bit 14; adding bit 14 to itself carries it into bit 15 (3
// operations instead of and/shift/and/shift/or); the half is then the value times 2^-8 (exact, subnormals
// included) and its NaN codes (0x7F / 0xFF) come out as finite numbers (callers that can meet them mask
// them).
inline __m512 fp8x16(__m128i b, bool e4m3) {
  const __m256i h = _mm256_cvtepu8_epi16(b);
  if (!e4m3) return _mm512_cvtph_ps(_mm256_slli_epi16(h, 8));
  const __m256i t = _mm256_slli_epi16(h, 7);
  return _mm512_cvtph_ps(_mm256_add_epi16(t, _mm256_and_si256(t, _mm256_set1_epi16(0x4000))));
}

// 16 code bytes (n valid) -> 16 floats in element units (E4M3: times 2^-8, see byte_scale).
inline __m512 byte16(const uint8_t* p, int64_t n, ByteDec dec) {
  const __m128i b =
      n >= 16 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)) : _mm_maskz_loadu_epi8(mask16(n), p);
  switch (dec) {
    case ByteDec::Int8Sym:
      return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_xor_si128(b, _mm_set1_epi8(-128))));
    case ByteDec::Int8Asym:
      return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
    case ByteDec::E4M3:
      return fp8x16(b, true);
    case ByteDec::E5M2:
      return fp8x16(b, false);
  }
  return _mm512_setzero_ps();
}
inline float byte_scale(ByteDec dec, float s) {
  return dec == ByteDec::E4M3 ? s * 256.0f : s;
}

}  // namespace

void widen_fp8_avx512(const uint8_t* codes, bool e4m3, float scale, float* out, int64_t n) {
  const __m512 vs = _mm512_set1_ps(e4m3 ? scale * 256.0f : scale);  // E4M3 halves are the value times 2^-8
  const __m512 nan = _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN());
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = mask16(n - i);
    const __m128i b = _mm_maskz_loadu_epi8(m, codes + i);
    __m512 v = _mm512_mul_ps(fp8x16(b, e4m3), vs);
    if (e4m3)
      v = _mm512_mask_mov_ps(
          v, _mm_cmpeq_epi8_mask(_mm_and_si128(b, _mm_set1_epi8(0x7F)), _mm_set1_epi8(0x7F)), nan);
    _mm512_mask_storeu_ps(out + i, m, v);
  }
}

float nib_dot_avx512(const uint8_t* row, int64_t cols, int64_t group, const float* s, const float* z,
                     const float* lut16, const float* x) {
  const __m512 lut = _mm512_loadu_ps(lut16);
  const int64_t G = std::min(group, cols);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t c0 = 0, j = 0; c0 < cols; c0 += G, ++j) {
    const int64_t c1 = std::min(cols, c0 + G);
    __m512 ga = _mm512_setzero_ps(), gb = _mm512_setzero_ps();
    const __m512 zv = _mm512_set1_ps(z ? z[j] : 0.0f);
    for (int64_t c = c0; c < c1; c += 32) {
      const int64_t n = std::min<int64_t>(32, c1 - c);
      __m512 w0, w1;
      nib32(row + c / 2, (n + 1) / 2, lut, w0, w1);
      if (z) {
        w0 = _mm512_sub_ps(w0, zv);
        w1 = _mm512_sub_ps(w1, zv);
      }
      if (n == 32) {
        ga = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + c), ga);
        gb = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + c + 16), gb);
      } else {
        ga = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(mask16(n), x + c), ga);
        if (n > 16) gb = _mm512_fmadd_ps(w1, _mm512_maskz_loadu_ps(mask16(n - 16), x + c + 16), gb);
      }
    }
    acc = _mm512_fmadd_ps(_mm512_set1_ps(s[j]), _mm512_add_ps(ga, gb), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

void nib_deq_avx512(const uint8_t* row, int64_t cols, int64_t group, const float* s, const float* z,
                    const float* lut16, float* out) {
  const __m512 lut = _mm512_loadu_ps(lut16);
  const int64_t G = std::min(group, cols);
  for (int64_t c0 = 0, j = 0; c0 < cols; c0 += G, ++j) {
    const int64_t c1 = std::min(cols, c0 + G);
    const __m512 sv = _mm512_set1_ps(s[j]), zv = _mm512_set1_ps(z ? z[j] : 0.0f);
    for (int64_t c = c0; c < c1; c += 32) {
      const int64_t n = std::min<int64_t>(32, c1 - c);
      __m512 w0, w1;
      nib32(row + c / 2, (n + 1) / 2, lut, w0, w1);
      if (z) {
        w0 = _mm512_sub_ps(w0, zv);
        w1 = _mm512_sub_ps(w1, zv);
      }
      _mm512_mask_storeu_ps(out + c, mask16(n), _mm512_mul_ps(w0, sv));
      if (n > 16) _mm512_mask_storeu_ps(out + c + 16, mask16(n - 16), _mm512_mul_ps(w1, sv));
    }
  }
}

// ---- nib GEMV (T = 1..3): lane-major nibble decode, several rows and tokens per call ----
//
// A 128-element chunk of a code row is 64 bytes = one zmm. Dword lane l holds the codes of elements 8l..8l+7,
// nibble k (bits 4k..4k+3) being element 8l+k. vpermps reads only the low 4 bits of each index, so
// (codes >> 4k) is directly the LUT index vector of elements {8l+k}: one shift + one vpermps per 16 weights,
// no unpack / zero-extend shuffles (nib32 needs three shuffles per 16). The activations are permuted once per
// token to match (nib_layout). A lane never straddles a scale group (groups are multiples of 8), so per chunk
// the 8 products are summed per lane and the lane's group scale is applied once: one vpermps of the chunk's
// scales (groups < 128) or a broadcast (groups of k*128 / per-channel). Asymmetric INT4: the LUT holds u and
// sum_i (u_i - z) s x_i = s sum_i u_i x_i - z s X_g with X_g the token's sum over the group (computed once
// per token), so the zero points cost one short loop over the row's groups, nothing per chunk. Rows share the
// activation loads; tokens share the decode.

namespace {

// R rows x T tokens. Every loop over r / t / p is unrolled so the arrays live in zmm registers (rolled, GCC
// kept them on the stack). Not inlined: one symbol per tile shape, so spills are easy to check in the object
// file.
template <int R, int T>
__attribute__((noinline)) void nib_tile(const LaneGeom& g, const uint8_t* const* rows, const float* const* s,
                                        const float* const* z, __m512 lut, const NibX* x, float* y,
                                        int64_t ystride) {
  constexpr int P = R * T <= 4 ? 2 : 1;  // partial sums per (row, token): enough independent FMA chains
  __m512 acc[R][T];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const bool l2 = prefetch_to_l2(R * g.rbytes, T * 8 * g.rbytes);  // FP32 activations: 8 bytes per code byte
  GroupWalk gw;
  for (int64_t c = 0; c < g.nch; ++c, gw.next(g)) {
    __m512i code[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      // DRAM streaming: prefetch 4 KiB ahead in each row (as the dense GEMV does); harmless past the end.
      prefetch_far(rows[r] + 64 * c + 4096, l2);
      code[r] = load_chunk(g, rows[r], c);
    }
    __m512 sum[P][R][T];
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p)
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) sum[p][r][t] = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      __m512 xv[T];
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) xv[t] = _mm512_loadu_ps(x[t].act + 128 * c + 16 * k);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512 w = _mm512_permutexvar_ps(_mm512_srli_epi32(code[r], 4 * k), lut);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) sum[k % P][r][t] = _mm512_fmadd_ps(w, xv[t], sum[k % P][r][t]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 sv = chunk_cells(g, s[r], c, gw);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t)
        acc[r][t] = _mm512_fmadd_ps(P == 2 ? _mm512_add_ps(sum[0][r][t], sum[P - 1][r][t]) : sum[0][r][t], sv,
                                    acc[r][t]);
    }
  }
  // Asymmetric: subtract sum_g z_g s_g X_g (X_g: the token's sum over group g), a short loop over the groups.
  if (z[0])
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) sub_zero_points<T>(g, s[r], z[r], x, acc[r]);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) y[t * ystride + r] = _mm512_reduce_add_ps(acc[r][t]);
}

// Rows in tiles of R, then the remainder in tiles of 2 and 1.
template <int R, int T>
void nib_rows(const LaneGeom& g, int nr, const uint8_t* const* rows, const float* const* s,
              const float* const* z, __m512 lut, const NibX* x, float* y, int64_t ystride) {
  int i = 0;
  for (; i + R <= nr; i += R) nib_tile<R, T>(g, rows + i, s + i, z + i, lut, x, y + i, ystride);
  if constexpr (R > 2)
    for (; i + 2 <= nr; i += 2) nib_tile<2, T>(g, rows + i, s + i, z + i, lut, x, y + i, ystride);
  for (; i < nr; ++i) nib_tile<1, T>(g, rows + i, s + i, z + i, lut, x, y + i, ystride);
}

}  // namespace

bool nib_lanes_ok(int64_t group, int64_t cols) {
  return group >= cols || group % 128 == 0 || (128 % group == 0 && group % 8 == 0);
}

int64_t nib_padded(int64_t cols) {
  return (cols + 127) / 128 * 128;
}

void nib_layout(const float* x, int64_t cols, int64_t group, float* xp, float* gsum) {
  const int64_t nch = nib_padded(cols) / 128;
  for (int64_t c = 0; c < nch; ++c)
    for (int64_t l = 0; l < 16; ++l)
      for (int64_t k = 0; k < 8; ++k) {
        const int64_t i = 128 * c + 8 * l + k;
        xp[128 * c + 16 * k + l] = i < cols ? x[i] : 0.0f;  // zero padding: the tail codes contribute 0
      }
  if (gsum) group_sums(x, cols, group, false, gsum);
}

void nib_gemv_avx512(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                     int64_t cols, int64_t group, const float* lut16, int T, const NibX* x, float* y,
                     int64_t ystride) {
  const LaneGeom g = nib_lane_geom(cols, group);
  const __m512 lut = _mm512_loadu_ps(lut16);
  switch (T) {
    case 1:
      return nib_rows<4, 1>(g, nr, rows, s, z, lut, x, y, ystride);
    case 2:
      return nib_rows<4, 2>(g, nr, rows, s, z, lut, x, y, ystride);
    case 3:
      return nib_rows<4, 3>(g, nr, rows, s, z, lut, x, y, ystride);
    default:
      for (int t = 0; t < T; t += 3)
        nib_gemv_avx512(nr, rows, s, z, cols, group, lut16, std::min(3, T - t), x + t, y + t * ystride,
                        ystride);
  }
}

float byte_dot_avx512(const uint8_t* row, int64_t cols, int64_t group, const float* s, const float* z,
                      ByteDec dec, const float* x) {
  const int64_t G = std::min(group, cols);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t c0 = 0, j = 0; c0 < cols; c0 += G, ++j) {
    const int64_t c1 = std::min(cols, c0 + G);
    __m512 ga = _mm512_setzero_ps(), gb = _mm512_setzero_ps();
    const __m512 zv = _mm512_set1_ps(z ? z[j] : 0.0f);
    int64_t c = c0;
    for (; c + 32 <= c1; c += 32) {
      __m512 w0 = byte16(row + c, 16, dec), w1 = byte16(row + c + 16, 16, dec);
      if (z) {
        w0 = _mm512_sub_ps(w0, zv);
        w1 = _mm512_sub_ps(w1, zv);
      }
      ga = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + c), ga);
      gb = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + c + 16), gb);
    }
    for (; c < c1; c += 16) {
      const int64_t n = std::min<int64_t>(16, c1 - c);
      __m512 w0 = byte16(row + c, n, dec);
      if (z) w0 = _mm512_sub_ps(w0, zv);
      ga = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(mask16(n), x + c), ga);
    }
    acc = _mm512_fmadd_ps(_mm512_set1_ps(byte_scale(dec, s[j])), _mm512_add_ps(ga, gb), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

void byte_deq_avx512(const uint8_t* row, int64_t cols, int64_t group, const float* s, const float* z,
                     ByteDec dec, float* out) {
  const int64_t G = std::min(group, cols);
  for (int64_t c0 = 0, j = 0; c0 < cols; c0 += G, ++j) {
    const int64_t c1 = std::min(cols, c0 + G);
    const __m512 sv = _mm512_set1_ps(byte_scale(dec, s[j])), zv = _mm512_set1_ps(z ? z[j] : 0.0f);
    for (int64_t c = c0; c < c1; c += 16) {
      const int64_t n = std::min<int64_t>(16, c1 - c);
      __m512 w0 = byte16(row + c, n, dec);
      if (z) w0 = _mm512_sub_ps(w0, zv);
      _mm512_mask_storeu_ps(out + c, mask16(n), _mm512_mul_ps(w0, sv));
    }
  }
}

// ---- INT8 activations (VNNI) ----

int64_t qx_padded(int bits, int64_t cols) {
  const int64_t ch = bits == 4 ? 128 : 64;
  return (cols + ch - 1) / ch * ch;
}
int64_t qx_chunks(int bits, int64_t cols) {
  return qx_padded(bits, cols) / (bits == 4 ? 128 : 64);
}

// INT8 activation codes with AVX-512, the scalar definitions' float operations lane by lane
// (quantize_activation_row: nearbyint(x / s) clamped to +-127, NaN -> 0, +-inf -> +-127), so bit-identical to
// them (tested). The decode quantizes one token per call on the calling thread: per 4864 columns ~26 us
// through libm's fmax / nearbyint, ~13 % of a W8A8 ffn_down call in cache (perf).
namespace {
// Codes nearbyint(x / s) clamped to +-qmax (127: INT8, 7: INT4), NaN -> 0.
void int_act_codes(const float* x, int64_t n, float s, float qmax, int8_t* codes) {
  const __m512 sv = _mm512_set1_ps(s), lo = _mm512_set1_ps(-qmax), hi = _mm512_set1_ps(qmax);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = mask16(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    __m512 q = _mm512_roundscale_ps(_mm512_div_ps(v, sv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm512_min_ps(_mm512_max_ps(q, lo), hi);
    q = _mm512_mask_mov_ps(q, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_setzero_ps());  // NaN -> 0
    _mm_mask_storeu_epi8(codes + i, m, _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(q)));
  }
}

// max |x_i| over the finite x_i; *nan: whether some x_i is NaN.
float finite_absmax(const float* x, int64_t n, bool* has_nan) {
  const __m512i abs_bits = _mm512_set1_epi32(0x7FFFFFFF), inf_bits = _mm512_set1_epi32(0x7F800000);
  __m512 amax = _mm512_setzero_ps();
  __mmask16 nan = 0;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = mask16(n - i);
    const __m512i a = _mm512_and_si512(_mm512_castps_si512(_mm512_maskz_loadu_ps(m, x + i)), abs_bits);
    nan |= _mm512_mask_cmpgt_epi32_mask(m, a, inf_bits);
    amax =
        _mm512_mask_max_ps(amax, _mm512_mask_cmplt_epi32_mask(m, a, inf_bits), amax, _mm512_castsi512_ps(a));
  }
  *has_nan = nan != 0;
  return _mm512_reduce_max_ps(amax);
}

// The per-token codes for scale s (see quantize_activation_row / quantize_activation_int4).
void act_codes_for_scale(const float* x, int64_t n, float s, float qmax, int8_t* codes) {
  if (s > 0) return int_act_codes(x, n, s, qmax, codes);
  const auto q = static_cast<int8_t>(qmax);
  for (int64_t i = 0; i < n; ++i)  // no finite non-zero value: infinities saturate, the rest is 0
    codes[i] = std::isinf(x[i]) ? (x[i] > 0 ? q : static_cast<int8_t>(-q)) : int8_t{0};
}
}  // namespace

void int8_act_codes_avx512(const float* x, int64_t n, float s, int8_t* codes) {
  int_act_codes(x, n, s, 127.0f, codes);
}

void quantize_activation_int8_avx512(const float* x, int64_t n, int8_t* codes, float* scale) {
  bool nan = false;
  const float s = finite_absmax(x, n, &nan) / 127.0f;
  *scale = nan ? std::numeric_limits<float>::quiet_NaN() : s;
  act_codes_for_scale(x, n, s, 127.0f, codes);
}

// The same float operations as quantize_activation_int4 (amax * clip / 7, then nearbyint(x / s) clamped).
void quantize_activation_int4_avx512(const float* x, int64_t n, float clip, int8_t* codes, float* scale) {
  bool nan = false;
  const float s = finite_absmax(x, n, &nan) * clip / 7.0f;
  *scale = nan ? std::numeric_limits<float>::quiet_NaN() : s;
  act_codes_for_scale(x, n, s, 7.0f, codes);
}

void qx_layout_avx512(int bits, const int8_t* nat, int64_t cols, int8_t* q, int32_t* lanesum) {
  const int64_t pad = qx_padded(bits, cols), nch = qx_chunks(bits, cols);
  auto at = [&](int64_t i) -> int8_t { return i < cols ? nat[i] : int8_t{0}; };
  if (bits == 4) {
    for (int64_t c = 0; c < nch; ++c)
      for (int64_t k = 0; k < 64; ++k) {
        q[128 * c + k] = at(128 * c + 2 * k);
        q[128 * c + 64 + k] = at(128 * c + 2 * k + 1);
      }
  } else {
    for (int64_t i = 0; i < pad; ++i) q[i] = at(i);
  }
  const int64_t le = bits == 4 ? 8 : 4;
  for (int64_t c = 0; c < nch; ++c)
    for (int64_t l = 0; l < 16; ++l) {
      int32_t sum = 0;
      for (int64_t e = 0; e < le; ++e) sum += at(c * 16 * le + l * le + e);
      lanesum[c * 16 + l] = sum;
    }
}

namespace {

// R rows at once (R = 4: the rows share each activation load and lane-sum load, give the core four
// independent chains, and are prefetched in address order: the rows are consecutive in memory, and read
// interleaved they defeat the hardware prefetcher). Each row's sum is formed in the same order for any R.
template <int R>
void vnni_rows_r(int bits, const uint8_t* const* rows, int64_t cols, int64_t group, const float* const* s,
                 const float* const* z, const QxRow& x, float* out) {
  // Chunks of 128 (INT4) / 64 (INT8) codes; lane l covers 8 / 4 consecutive elements (qx_layout).
  const int64_t le = bits == 4 ? 8 : 4;
  const LaneGeom g = lane_geom(cols, group, 16 * le, [le](int l) { return l * le; });
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const int zshift = bits == 4 ? 3 : 7;
  __m512 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  const bool l2 = prefetch_to_l2(R * g.rbytes, cols);  // INT8 activations (the lane sums are 1/8 of that)
  GroupWalk gw;
  for (int64_t c = 0; c < g.nch; ++c, gw.next(g)) {
    if constexpr (R == 1) prefetch_far(rows[0] + 64 * c + 4096, l2);
    if constexpr (R > 1) {
      const uint8_t* ahead = rows[0] + 64 * R * c + 4096;
      for (int k = 0; k < R; ++k) prefetch_far(ahead + 64 * k, l2);
    }
    const __m512i ls = _mm512_loadu_si512(x.lanesum + 16 * c);
    const __m512i x0 = _mm512_loadu_si512(x.q + (bits == 4 ? 128 : 64) * c);
    const __m512i x1 = bits == 4 ? _mm512_loadu_si512(x.q + 128 * c + 64) : x0;
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const __m512i b = load_chunk(g, rows[i], c);
      __m512i isum;
      if (bits == 4) {
        isum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(b, m4), x0);
        isum = _mm512_dpbusd_epi32(isum, _mm512_and_si512(_mm512_srli_epi16(b, 4), m4), x1);
      } else {
        isum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), b, x0);
      }
      // Remove the zero point (stored zero, or the 2^(bits-1) offset of symmetric codes) exactly in int32.
      if (z[i])
        isum =
            _mm512_sub_epi32(isum, _mm512_mullo_epi32(_mm512_cvtps_epi32(chunk_cells(g, z[i], c, gw)), ls));
      else
        isum = _mm512_sub_epi32(isum, _mm512_slli_epi32(ls, zshift));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), chunk_cells(g, s[i], c, gw), acc[i]);
    }
  }
  for (int i = 0; i < R; ++i) out[i] = x.scale * _mm512_reduce_add_ps(acc[i]);
}

}  // namespace

void vnni_rows_avx512(int bits, int nr, const uint8_t* const* rows, int64_t cols, int64_t group,
                      const float* const* s, const float* const* z, const QxRow& x, float* out) {
  int i = 0;
  // Long rows one after another (kSeqRowBytes); one accumulator chain per row either way, so the sums are the
  // same.
  if (cols * bits / 8 <= kSeqRowBytes)
    for (; i + 4 <= nr; i += 4) vnni_rows_r<4>(bits, rows + i, cols, group, s + i, z + i, x, out + i);
  for (; i < nr; ++i) vnni_rows_r<1>(bits, rows + i, cols, group, s + i, z + i, x, out + i);
}

// ---- GGUF Q4_0 / Q8_0 x Q8 activations ----

float ggml_q8_dot_avx512(int ggml_type, const uint8_t* row, int64_t cols, const int8_t* qx, const float* dx) {
  const int64_t nb = cols / 32;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const __m256i zero = _mm256_setzero_si256();
  if (ggml_type == ggml::Q4_0) {  //: d (f16), qs[16]; x = d * (q - 8)
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m256i eight = _mm256_set1_epi8(8);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* p = row + 18 * b;
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
      const __m128i lo = _mm_and_si128(v, m4), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
      const __m256i wq = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx + 32 * b));
      const __m256i is =
          _mm256_sub_epi32(_mm256_dpbusd_epi32(zero, wq, xq), _mm256_dpbusd_epi32(zero, eight, xq));
      uint16_t h;
      std::memcpy(&h, p, 2);
      const __m256 d = _mm256_set1_ps(_cvtsh_ss(h) * dx[b]);
      if (b & 1)
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), d, acc1);
      else
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), d, acc0);
    }
  } else if (ggml_type == ggml::Q4_1 || ggml_type == ggml::Q5_0 || ggml_type == ggml::Q5_1) {
    // Q4_1: d, m (f16), qs[16]           x = d * q + m,        q = nibble
    // Q5_0: d (f16), qh[4], qs[16]       x = d * (q - 16),     q = nibble | high bit << 4
    // Q5_1: d, m (f16), qh[4], qs[16]    x = d * q + m
    // Element j < 16 is the low nibble of qs[j], element j + 16 its high nibble; bit j of qh is element j's
    // 5th bit. With x = dx * xq per block: sum_j w_j x_j = dx * (d * sum q*xq + m * sum xq)   (Q5_0: m = -16
    // d).
    const bool has_m = ggml_type != ggml::Q5_0, has_h = ggml_type != ggml::Q4_1;
    const int64_t bs = ggml_type == ggml::Q4_1 ? 20 : ggml_type == ggml::Q5_0 ? 22 : 24;
    const int64_t qs_off = (has_m ? 4 : 2) + (has_h ? 4 : 0);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m256i ones = _mm256_set1_epi8(1), h16 = _mm256_set1_epi8(0x10);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* p = row + bs * b;
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + qs_off));
      const __m128i lo = _mm_and_si128(v, m4), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
      __m256i wq = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
      if (has_h) {
        uint32_t qh;
        std::memcpy(&qh, p + (has_m ? 4 : 2), 4);
        wq = _mm256_or_si256(wq, _mm256_maskz_mov_epi8(static_cast<__mmask32>(qh), h16));
      }
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx + 32 * b));
      const __m256 qdot = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(zero, wq, xq));
      const __m256 xsum = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(zero, ones, xq));
      uint16_t hd, hm = 0;
      std::memcpy(&hd, p, 2);
      if (has_m) std::memcpy(&hm, p + 2, 2);
      const float d = _cvtsh_ss(hd), m = has_m ? _cvtsh_ss(hm) : -16.0f * d;
      __m256 t =
          _mm256_fmadd_ps(qdot, _mm256_set1_ps(d * dx[b]), _mm256_mul_ps(xsum, _mm256_set1_ps(m * dx[b])));
      if (b & 1)
        acc1 = _mm256_add_ps(acc1, t);
      else
        acc0 = _mm256_add_ps(acc0, t);
    }
  } else {  // Q8_0: d (f16), qs[32] int8
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* p = row + 34 * b;
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx + 32 * b));
      const __m256i is = _mm256_dpbusd_epi32(zero, _mm256_abs_epi8(w), _mm256_sign_epi8(xq, w));
      uint16_t h;
      std::memcpy(&h, p, 2);
      const __m256 d = _mm256_set1_ps(_cvtsh_ss(h) * dx[b]);
      if (b & 1)
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), d, acc1);
      else
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), d, acc0);
    }
  }
  const __m256 a = _mm256_add_ps(acc0, acc1);
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

namespace {
// Four Q4_0 blocks in one zmm (128-bit lane i: block i's 16 code bytes) against their activations' low (xl)
// and high (xh) 16 elements: lane i's four partial sums of (q - 8) x as floats (the offset 8 * sum(x) removed
// in int32).
inline __m512 q4_0_lane_sums(__m512i v, __m512i xl, __m512i xh) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
  const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
  const __m512i dot = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xl), hi, xh);
  const __m512i off = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), eight, xl), eight, xh);
  return _mm512_cvtepi32_ps(_mm512_sub_epi32(dot, off));
}

// The four blocks' codes (blk[i] + 2) as one zmm, and their f16 scales (blk[i]) times dx4 spread over each
// block's lane (scalar loads: the integer ports are otherwise idle).
inline __m512i q4_0_lane_codes(const uint8_t* const* blk) {
  auto codes = [&](int i) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[i] + 2)); };
  __m512i v = _mm512_castsi128_si512(codes(0));
  v = _mm512_inserti32x4(v, codes(1), 1);  // the lane index is an immediate
  v = _mm512_inserti32x4(v, codes(2), 2);
  return _mm512_inserti32x4(v, codes(3), 3);
}
inline __m512 q4_0_lane_scales(const uint8_t* const* blk, __m128 dx4) {
  uint16_t h[4];
  for (int i = 0; i < 4; ++i) std::memcpy(&h[i], blk[i], 2);
  const uint64_t packed = uint64_t{h[0]} | uint64_t{h[1]} << 16 | uint64_t{h[2]} << 32 | uint64_t{h[3]} << 48;
  const __m128 d4 = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(packed))), dx4);
  const __m512i lane_of_block = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  return _mm512_permutexvar_ps(lane_of_block, _mm512_castps128_ps512(d4));
}

// Q4_0, four rows at once in one zmm: 128-bit lane i holds row i's 16 code bytes of block b, so one and /
// shift / and yields the four rows' low (elements 0-15) and high (16-31) nibbles against a broadcast of the
// block's activations; lane i's four int32 partial sums are row i's. ~32 operations per 4 rows x 32 weights
// against ~55 for four ymm rows side by side: the ymm kernel was compute-bound below the memory rate.
void q4_0_dot4_zmm(const uint8_t* const* rows, int64_t nb, const int8_t* qx, const float* dx, float* out) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    // The four rows are consecutive in memory: prefetch their region in address order 4 KiB ahead (a hint).
    const char* ahead = reinterpret_cast<const char*>(rows[0]) + 4 * 18 * b + 4096;
    _mm_prefetch(ahead, _MM_HINT_T0);
    _mm_prefetch(ahead + 64, _MM_HINT_T0);
    const int64_t o = 18 * b;
    const uint8_t* blk[4] = {rows[0] + o, rows[1] + o, rows[2] + o, rows[3] + o};
    const __m512i xl = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qx + 32 * b)));
    const __m512i xh =
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qx + 32 * b + 16)));
    const __m512 f = q4_0_lane_sums(q4_0_lane_codes(blk), xl, xh);
    const __m512 d = q4_0_lane_scales(blk, _mm_set1_ps(dx[b]));
    if (b & 1)
      acc1 = _mm512_fmadd_ps(f, d, acc1);
    else
      acc0 = _mm512_fmadd_ps(f, d, acc0);
  }
  // Each 128-bit lane's four floats summed, the lane sums gathered into out[0..3].
  __m512 a = _mm512_add_ps(acc0, acc1);
  a = _mm512_add_ps(a, _mm512_permute_ps(a, 0xB1));  // swap neighbours
  a = _mm512_add_ps(a, _mm512_permute_ps(a, 0x4E));  // swap pairs: every element holds its lane's sum
  const __m512 first =
      _mm512_permutexvar_ps(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), a);
  _mm_storeu_ps(out, _mm512_castps512_ps128(first));
}
// Q4_0, one row, four consecutive blocks in one zmm (128-bit lane i: block b + i), so the row is read as one
// stream (long rows; see ggml_q8_dot4_avx512). The activations of the four blocks are regrouped into their
// low and high 16 elements with two lane shuffles.
float q4_0_dot1_zmm(const uint8_t* row, int64_t nb, const int8_t* qx, const float* dx) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    const uint8_t* p = row + 18 * b;
    _mm_prefetch(reinterpret_cast<const char*>(p) + 4096, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p) + 4096 + 64, _MM_HINT_T0);
    const uint8_t* blk[4] = {p, p + 18, p + 36, p + 54};
    const __m512i x01 = _mm512_loadu_si512(qx + 32 * b), x23 = _mm512_loadu_si512(qx + 32 * b + 64);
    const __m512i xl = _mm512_shuffle_i32x4(x01, x23, 0x88), xh = _mm512_shuffle_i32x4(x01, x23, 0xDD);
    const __m512 f = q4_0_lane_sums(q4_0_lane_codes(blk), xl, xh);
    const __m512 d = q4_0_lane_scales(blk, _mm_loadu_ps(dx + b));
    if (b & 4)
      acc1 = _mm512_fmadd_ps(f, d, acc1);
    else
      acc0 = _mm512_fmadd_ps(f, d, acc0);
  }
  float s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
  if (b < nb) s += ggml_q8_dot_avx512(2, row + 18 * b, 32 * (nb - b), qx + 32 * b, dx + b);
  return s;
}
}  // namespace

float ggml_q8_dot1_avx512(int ggml_type, const uint8_t* row, int64_t cols, const int8_t* qx,
                          const float* dx) {
  if (ggml_type == ggml::Q4_0) return q4_0_dot1_zmm(row, cols / 32, qx, dx);
  return ggml_q8_dot_avx512(ggml_type, row, cols, qx, dx);
}

// Four rows of Q4_0 or Q8_0 against one token: the rows share each activation load and the block's activation
// sum (the weight offset: Q4_0's 8, Q8_0's 128 after storing w + 128 as the unsigned operand, exact in
// int32), and give the core four independent chains (one row alone is latency-bound, as nib16 was).
void ggml_q8_dot4_avx512(int ggml_type, const uint8_t* const* rows, int64_t cols, const int8_t* qx,
                         const float* dx, float* out) {
  const int64_t nb = cols / 32;
  if (ggml_type == ggml::Q4_0) return q4_0_dot4_zmm(rows, nb, qx, dx, out);
  // Q8_0: four ymm rows side by side (a two-zmm version measured +8 % in cache, nothing from DRAM: not kept).
  const __m256i zero = _mm256_setzero_si256();
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t b = 0; b < nb; ++b) {
    // DRAM streaming: the four rows are consecutive in memory (one region of 4 * 34 * nb bytes), read here in
    // an interleaved order the hardware prefetcher does not follow; prefetch the region in address order 4
    // KiB ahead at the rate it is consumed (4 * 34 bytes per block). A hint: harmless past the end.
    const char* ahead = reinterpret_cast<const char*>(rows[0]) + 4 * 34 * b + 4096;
    _mm_prefetch(ahead, _MM_HINT_T0);
    _mm_prefetch(ahead + 64, _MM_HINT_T0);
    _mm_prefetch(ahead + 128, _MM_HINT_T0);
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx + 32 * b));
    // 128 * sum(x) per 32-bit lane (vpdpbusd reads 0x80 as the unsigned 128): the offset of storing w + 128.
    const __m256i xo = _mm256_dpbusd_epi32(zero, flip, xq);
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const uint8_t* p = rows[i] + 34 * b;
      const __m256i wq = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2)), flip);
      const __m256i is = _mm256_sub_epi32(_mm256_dpbusd_epi32(zero, wq, xq), xo);
      uint16_t h;
      std::memcpy(&h, p, 2);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_set1_ps(_cvtsh_ss(h) * dx[b]), acc[i]);
    }
  }
  for (int i = 0; i < 4; ++i) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc[i]), _mm256_extractf128_ps(acc[i], 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    out[i] = _mm_cvtss_f32(h);
  }
}

}  // namespace lowbit::kern
