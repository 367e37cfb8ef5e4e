// INT4 / INT8 weight codes x INT8 / INT4 activation codes on the AVX2 tier (W8A8, W4A8, W4A4): integer
// products on vpmaddubsw + vpmaddwd (no VNNI on this tier).
//
// Both kernels compute, for every row and token, the same numbers in the same order, so a token gives the
// same bits alone (decode, i8dot_rows_avx2) as inside a prefill batch (i8dot_block_avx2):
//   v_g = sum over the columns c of scale group g of (u_c - z_g) * x_c   (exact, int32)
//   y   = fma(v_{ng-1}, s_{ng-1} * sx, ... fma(v_1, s_1 * sx, fma(v_0, s_0 * sx, 0)))
// with u the stored code, z_g the stored zero point (asymmetric) or the code offset zoff (8 / 128,
// symmetric), s_g the group's scale and sx the token's activation scale: the formula of the AVX-512 VNNI
// kernels.
//
// vpmaddubsw multiplies unsigned bytes by signed bytes and adds pairs into saturating int16. 4-bit codes
// (0..15) go in as they are: a pair is at most 2 * 15 * 127 = 3810, so 8 products (30480) sum in int16 before
// one vpmaddwd widens them. 8-bit codes go in as v = u - 128 (signed) in the form |v| x sign(v) * x, a pair
// at most 2 * 128 * 127 = 32512, widened after every product; sum (u - z) x = sum v x + (128 - z) sum x.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "formats/minifloat.h"
#include "kernels/dispatch.h"
#include "kernels/kernel_plan.h"
#include "kernels/lane_avx2.h"
#include "kernels/matmul.h"
#include "kernels/with_nt.h"

namespace lowbit::kern {

namespace {

inline int32_t hsum_epi32(__m256i v) {
  __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
  return _mm_cvtsi128_si32(h);
}

// The last, partial chunk of a row (columns [c0, cols)), zero-padded; never reads past the row's last byte.
template <int BITS>
[[gnu::noinline]] __m256i load_tail(const uint8_t* row, int64_t cols, int64_t c0) {
  alignas(32) uint8_t t[32] = {};
  std::memcpy(t, row + c0 * BITS / 8, static_cast<size_t>((cols - c0) * BITS + 7) / 8);
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(t));
}

// Codes of columns [32 ch, 32 ch + 32) of a row, past `cols` read as 0. 4-bit: the 16 code bytes (low half);
// 8-bit: the 32.
template <int BITS>
inline __m256i load_chunk(const uint8_t* row, int64_t cols, int64_t ch) {
  const int64_t c0 = 32 * ch;
  if (c0 + 32 > cols) [[unlikely]]
    return load_tail<BITS>(row, cols, c0);
  const uint8_t* src = row + c0 * BITS / 8;
  if constexpr (BITS == 4)
    return _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
}

// A 4-bit chunk in the decode activation layout: the 16 even columns' codes, then the 16 odd ones'.
inline __m256i split_nibbles(__m256i b) {
  const __m128i lo = _mm256_castsi256_si128(b), m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(lo, 4), m), _mm_and_si128(lo, m));
}

// A 4-bit chunk as 32 code bytes in column order.
inline __m256i nibbles_in_order(__m256i b) {
  const __m128i lo = _mm256_castsi256_si128(b), m = _mm_set1_epi8(0x0F);
  const __m128i e = _mm_and_si128(lo, m), o = _mm_and_si128(_mm_srli_epi16(lo, 4), m);
  return _mm256_set_m128i(_mm_unpackhi_epi8(e, o), _mm_unpacklo_epi8(e, o));
}

// The 64 4-bit codes of columns [64 ch, 64 ch + 64) of a row (past `cols` read as 0) in the 64-column decode
// layout: lo = the 32 even columns' codes, hi = the 32 odd ones'.
inline void load_nib64(const uint8_t* row, int64_t cols, int64_t ch, __m256i* lo, __m256i* hi) {
  const int64_t c0 = 64 * ch;
  const __m256i b = c0 + 64 <= cols ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c0 / 2))
                                    : load_tail<4>(row, cols, c0);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  *lo = _mm256_and_si256(b, m4);
  *hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), m4);
}

// (A function, not a namespace-scope constant: that would run an AVX2 instruction at start-up on any CPU.)
inline __m256i flip() {
  return _mm256_set1_epi8(static_cast<char>(0x80));
}

// The group's int32 offset term: (u - z) = v + (128 - z) for 8-bit codes (v = u - 128), u - z for 4-bit.
template <int BITS>
inline int32_t group_offset(const float* z, int64_t g, int zoff) {
  const int32_t zq = z ? static_cast<int32_t>(z[g]) : zoff;
  return BITS == 8 ? 128 - zq : -zq;
}

// Columns per decode chunk: 4-bit codes take 64 (one 32-byte load: low nibbles = the even columns, high = the
// odd ones) where the groups are whole 64-column chunks, else 32 (a 16-byte load split into two halves).
int decode_chunk(int bits, int64_t group, int64_t ng) {
  return bits == 4 && (ng == 1 || group % 64 == 0) ? 64 : 32;
}

template <int BITS, int W, int NT>
void rows_nt(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z, int zoff,
             int64_t cols, int64_t group, int64_t ng, const int8_t* xl, int64_t xstride, const int32_t* xg,
             const float* sx, float* y, int64_t ystride) {
  const int64_t nch = (cols + W - 1) / W, gch = ng == 1 ? nch : group / W;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int i = 0; i < nr; ++i) {
    float acc[NT] = {};
    for (int64_t g = 0; g < ng; ++g) {
      __m256i a32[NT];
      for (int j = 0; j < NT; ++j) a32[j] = _mm256_setzero_si256();
      const int64_t c1 = std::min(nch, (g + 1) * gch);
      for (int64_t ch = g * gch; ch < c1;) {
        if constexpr (W == 64) {
          // Two products per chunk (at most 2 * 3810 per int16 lane): 4 chunks per widening.
          __m256i a16[NT];
          for (int j = 0; j < NT; ++j) a16[j] = _mm256_setzero_si256();
          for (const int64_t e = std::min(c1, ch + 4); ch < e; ++ch) {
            __m256i lo, hi;
            load_nib64(rows[i], cols, ch, &lo, &hi);
            for (int j = 0; j < NT; ++j) {
              const int8_t* xc = xl + j * xstride + 64 * ch;
              const __m256i xe = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc));
              const __m256i xo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc + 32));
              a16[j] = _mm256_adds_epi16(a16[j], _mm256_maddubs_epi16(lo, xe));
              a16[j] = pin(_mm256_adds_epi16(a16[j], _mm256_maddubs_epi16(hi, xo)));
            }
          }
          for (int j = 0; j < NT; ++j)
            a32[j] = pin(_mm256_add_epi32(a32[j], _mm256_madd_epi16(a16[j], ones)));
        } else if constexpr (BITS == 4) {
          __m256i a16[NT];
          for (int j = 0; j < NT; ++j) a16[j] = _mm256_setzero_si256();
          for (const int64_t e = std::min(c1, ch + 8); ch < e; ++ch) {
            const __m256i w = split_nibbles(load_chunk<4>(rows[i], cols, ch));
            for (int j = 0; j < NT; ++j) {
              const __m256i xv =
                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xl + j * xstride + 32 * ch));
              a16[j] = pin(_mm256_adds_epi16(a16[j], _mm256_maddubs_epi16(w, xv)));
            }
          }
          for (int j = 0; j < NT; ++j)
            a32[j] = pin(_mm256_add_epi32(a32[j], _mm256_madd_epi16(a16[j], ones)));
        } else {
          const __m256i v = _mm256_xor_si256(load_chunk<8>(rows[i], cols, ch), flip()),
                        av = _mm256_abs_epi8(v);
          for (int j = 0; j < NT; ++j) {
            const __m256i xv =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xl + j * xstride + 32 * ch));
            const __m256i p = _mm256_maddubs_epi16(av, _mm256_sign_epi8(xv, v));
            a32[j] = pin(_mm256_add_epi32(a32[j], _mm256_madd_epi16(p, ones)));
          }
          ++ch;
        }
      }
      const int32_t off = group_offset<BITS>(z[i], g, zoff);
      for (int j = 0; j < NT; ++j) {
        const int32_t v = hsum_epi32(a32[j]) + off * xg[j * ng + g];
        acc[j] = std::fma(static_cast<float>(v), s[i][g] * sx[j], acc[j]);
      }
    }
    for (int j = 0; j < NT; ++j) y[j * ystride + i] = acc[j];
  }
}

// The int32 products of one chunk of one row with one token's codes (the chunk's part of v_g, unwidened
// pairs summed in int32 at once: one chunk of the group at a time).
template <int BITS, int W>
inline __m256i chunk_dot(const uint8_t* row, int64_t cols, int64_t ch, const int8_t* xc) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (W == 64) {
    __m256i lo, hi;
    load_nib64(row, cols, ch, &lo, &hi);
    const __m256i xe = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc));
    const __m256i xo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc + 32));
    return _mm256_madd_epi16(_mm256_adds_epi16(_mm256_maddubs_epi16(lo, xe), _mm256_maddubs_epi16(hi, xo)),
                             ones);
  } else if constexpr (BITS == 4) {
    const __m256i w = split_nibbles(load_chunk<4>(row, cols, ch));
    return _mm256_madd_epi16(
        _mm256_maddubs_epi16(w, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc))), ones);
  } else {
    const __m256i v = _mm256_xor_si256(load_chunk<8>(row, cols, ch), flip()), av = _mm256_abs_epi8(v);
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc));
    return _mm256_madd_epi16(_mm256_maddubs_epi16(av, _mm256_sign_epi8(xv, v)), ones);
  }
}

// Lane i = the sum of the 8 lanes of r[i] (exact int32).
inline __m256i reduce8(const __m256i* r) {
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(r[0], r[1]), _mm256_hadd_epi32(r[2], r[3]));
  const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(r[4], r[5]), _mm256_hadd_epi32(r[6], r[7]));
  // a: rows 0..3 (low 128-bit half: lanes 0-3 of each row, high half: lanes 4-7), b: rows 4..7.
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

// Decode of grouped weights, one token, 8 rows at a time: each group's 8 row sums reduced together (reduce8)
// and the float step done as the tile does it (lane = row), instead of one horizontal sum per row and group.
template <int BITS, int W>
void rows8_grouped(const uint8_t* const* rows, const float* const* s, const float* const* z, int zoff,
                   int64_t cols, int64_t group, int64_t ng, const int8_t* xl, const int32_t* xg, float sx,
                   float* y) {
  const int64_t nch = (cols + W - 1) / W, gch = group / W;
  __m256 accf = _mm256_setzero_ps();
  const __m256 sxv = _mm256_set1_ps(sx);
  for (int64_t g = 0; g < ng; ++g) {
    __m256i a[8];
    for (int i = 0; i < 8; ++i) a[i] = _mm256_setzero_si256();
    for (int64_t ch = g * gch, c1 = std::min(nch, (g + 1) * gch); ch < c1; ++ch)
      for (int i = 0; i < 8; ++i)
        a[i] = _mm256_add_epi32(a[i], chunk_dot<BITS, W>(rows[i], cols, ch, xl + W * ch));
    alignas(32) float sg[8];
    alignas(32) int32_t og[8];
    for (int i = 0; i < 8; ++i) sg[i] = s[i][g], og[i] = group_offset<BITS>(z[i], g, zoff);
    const __m256i v = _mm256_add_epi32(
        reduce8(a), _mm256_mullo_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(og)),
                                       _mm256_set1_epi32(xg[g])));
    accf = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_mul_ps(_mm256_load_ps(sg), sxv), accf);
  }
  _mm256_storeu_ps(y, accf);
}

// 8 x 8 transpose of 32-bit words: out[k] = word k of r[0..7].
inline void transpose8(const __m256i* r, __m256i* out) {
  __m256i t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int k = 0; k < 4; ++k) {
    out[k] = _mm256_permute2x128_si256(u[k], u[k + 4], 0x20);
    out[k + 4] = _mm256_permute2x128_si256(u[k], u[k + 4], 0x31);
  }
}

// Rows [0, n) (n <= 8) of a half block as the tile reads them: entry kq (32 bytes) holds columns 4 kq .. 4 kq
// + 3 of row i in its 32-bit lane i; 4-bit codes u as bytes, 8-bit ones as v = u - 128. nch chunks of 32
// columns (8 entries each); rows past n are 0.
template <int BITS>
void pack_half(const uint8_t* const* rows, int n, int64_t cols, int64_t nch, uint8_t* out) {
  for (int64_t ch = 0; ch < nch; ++ch) {
    __m256i r[8], t[8];
    for (int i = 0; i < 8; ++i) {
      if (i >= n) {
        r[i] = _mm256_setzero_si256();
        continue;
      }
      const __m256i b = load_chunk<BITS>(rows[i], cols, ch);
      r[i] = BITS == 4 ? nibbles_in_order(b) : _mm256_xor_si256(b, flip());
    }
    transpose8(r, t);
    for (int k = 0; k < 8; ++k) _mm256_store_si256(reinterpret_cast<__m256i*>(out + 32 * (8 * ch + k)), t[k]);
  }
}

// One half block (8 rows) x NT tokens: out[j] lane i = y of row i, token j. Groups are whole chunks of 32
// columns (8 entries), each chunk's 8 steps unrolled: the int16 sums of a 4-bit chunk (8 products, at most
// 30480) widen once per chunk, 8-bit products once each.
template <int BITS, int NT>
void half_tile(const uint8_t* wb, int64_t nch, int64_t gch, int64_t ng, const float* sv, const int32_t* ov,
               const int8_t* xq, int64_t xstride, const int32_t* xg, int64_t xgs, const float* sx,
               __m256* out) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 accf[NT];
  for (int j = 0; j < NT; ++j) accf[j] = _mm256_setzero_ps();
  for (int64_t g = 0; g < ng; ++g) {
    __m256i a32[NT];
    for (int j = 0; j < NT; ++j) a32[j] = _mm256_setzero_si256();
    for (int64_t ch = g * gch, c1 = std::min(nch, (g + 1) * gch); ch < c1; ++ch) {
      const uint8_t* wc = wb + 256 * ch;
      const int8_t* xc = xq + 32 * ch;
      if constexpr (BITS == 4) {
        __m256i s16[NT];
        for (int j = 0; j < NT; ++j) s16[j] = _mm256_setzero_si256();
        for (int k = 0; k < 8; ++k) {
          const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(wc + 32 * k));
          for (int j = 0; j < NT; ++j)
            s16[j] = _mm256_adds_epi16(s16[j], _mm256_maddubs_epi16(w, bcast4(xc + j * xstride + 4 * k)));
        }
        for (int j = 0; j < NT; ++j) a32[j] = pin(_mm256_add_epi32(a32[j], _mm256_madd_epi16(s16[j], ones)));
      } else {
        for (int k = 0; k < 8; ++k) {
          const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(wc + 32 * k));
          const __m256i av = _mm256_abs_epi8(v);
          for (int j = 0; j < NT; ++j) {
            const __m256i p = _mm256_maddubs_epi16(av, _mm256_sign_epi8(bcast4(xc + j * xstride + 4 * k), v));
            a32[j] = pin(_mm256_add_epi32(a32[j], _mm256_madd_epi16(p, ones)));
          }
        }
      }
    }
    const __m256 sg = _mm256_load_ps(sv + 8 * g);
    const __m256i og = _mm256_load_si256(reinterpret_cast<const __m256i*>(ov + 8 * g));
    for (int j = 0; j < NT; ++j) {
      const __m256i v = _mm256_add_epi32(a32[j], _mm256_mullo_epi32(og, _mm256_set1_epi32(xg[j * xgs + g])));
      accf[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_mul_ps(sg, _mm256_set1_ps(sx[j])), accf[j]);
    }
  }
  for (int j = 0; j < NT; ++j) out[j] = accf[j];
}

// The prefill driver of the tiles: per 8-row half of the block its cells (cells(g, r, &scale, &offset) for
// the half's rows, 0 past them; [ng][8] each), its rows laid out (pack_half), then the tokens kTile at a time
// through tile(integral_constant nt, wb, scales, offsets, t0, out[nt]).
template <int BITS, int kTile, typename O, typename CellFn, typename TileFn>
void tile_halves(int nr, const uint8_t* const* rows, int64_t cols, int64_t ng, int T, float* y,
                 int64_t ystride, CellFn&& cells, TileFn&& tile) {
  const int64_t nch = (cols + 31) / 32, k4 = 8 * nch;
  struct alignas(32) Line {
    uint8_t v[32];
  };
  thread_local std::vector<Line> buf;
  buf.resize(static_cast<size_t>(k4 + 2 * ng));
  uint8_t* wb = buf.data()->v;
  float* sv = reinterpret_cast<float*>(buf[k4].v);
  O* ov = reinterpret_cast<O*>(buf[k4 + ng].v);
  for (int h = 0; h * 8 < nr; ++h) {
    const int n = std::min(8, nr - 8 * h);
    for (int64_t g = 0; g < ng; ++g)
      for (int i = 0; i < 8; ++i) {
        sv[8 * g + i] = 0.0f;
        ov[8 * g + i] = O{0};
        if (i < n) cells(g, 8 * h + i, &sv[8 * g + i], &ov[8 * g + i]);
      }
    pack_half<BITS>(rows + 8 * h, n, cols, nch, wb);
    for (int t0 = 0; t0 < T; t0 += kTile) {
      __m256 out[kTile];
      const int nt = std::min(kTile, T - t0);
      with_nt(nt, [&](auto c) {
        if constexpr (decltype(c)::value <= kTile) tile(c, wb, sv, ov, t0, out);
      });
      for (int j = 0; j < nt; ++j) store_lanes(y + (t0 + j) * ystride + 8 * h, out[j], n);
    }
  }
}

template <int BITS>
void block_bits(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z, int zoff,
                int64_t cols, int64_t group, const int8_t* xq, int64_t xstride, const int32_t* xg, int64_t ng,
                const float* sx, int T, float* y, int64_t ystride) {
  const int64_t nch = (cols + 31) / 32;
  const int64_t gch = ng == 1 ? nch : group / 32;  // chunks per scale group
  // Tokens per register tile, measured (bench_kernels, 4864 x 896, T = 64, one thread): 4-bit keeps int16,
  // int32 and float accumulators per token and is fastest at 4 (6: 16 % slower, 8: 15 %); 8-bit at 6 or 8.
  constexpr int kTile = BITS == 4 ? 4 : 8;
  tile_halves<BITS, kTile, int32_t>(
      nr, rows, cols, ng, T, y, ystride,
      [&](int64_t g, int r, float* sc, int32_t* off) {
        *sc = s[r][g];
        *off = group_offset<BITS>(z[r], g, zoff);
      },
      [&](auto c, const uint8_t* wb, const float* sv, const int32_t* ov, int t0, __m256* out) {
        half_tile<BITS, decltype(c)::value>(wb, nch, gch, ng, sv, ov, xq + t0 * xstride, xstride,
                                            xg + t0 * ng, ng, sx + t0, out);
      });
}

// Codes nearbyint(x / s) clamped to +-qmax for s > 0, NaN -> 0, 8 at a time; the tail through the same scalar
// operations (quantize_activation_row / quantize_activation_int4 lane by lane: bit-identical).
void int_act_codes(const float* x, int64_t n, float s, float qmax, int8_t* codes) {
  const __m256 sv = _mm256_set1_ps(s), lo = _mm256_set1_ps(-qmax), hi = _mm256_set1_ps(qmax);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    __m256 q = _mm256_round_ps(_mm256_div_ps(v, sv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm256_min_ps(_mm256_max_ps(q, lo), hi);
    q = _mm256_andnot_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), q);  // NaN -> 0
    const __m256i q32 = _mm256_cvtps_epi32(q);
    const __m128i q16 = _mm_packs_epi32(_mm256_castsi256_si128(q32), _mm256_extracti128_si256(q32, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + i), _mm_packs_epi16(q16, q16));
  }
  for (; i < n; ++i)
    codes[i] =
        std::isnan(x[i]) ? int8_t{0} : static_cast<int8_t>(std::clamp(std::nearbyint(x[i] / s), -qmax, qmax));
}

void act_codes_for_scale(const float* x, int64_t n, float s, float qmax, int8_t* codes) {
  if (s > 0) return int_act_codes(x, n, s, qmax, codes);
  const auto q = static_cast<int8_t>(qmax);
  for (int64_t i = 0; i < n; ++i)  // no finite non-zero value: infinities saturate, the rest is 0
    codes[i] = std::isinf(x[i]) ? (x[i] > 0 ? q : static_cast<int8_t>(-q)) : int8_t{0};
}

// max |x_i| over the finite x_i; *nan: whether some x_i is NaN (finite_absmax, vectorized; max is exact).
float finite_absmax_avx2(const float* x, int64_t n, bool* has_nan) {
  const __m256i abs_bits = _mm256_set1_epi32(0x7FFFFFFF), inf_bits = _mm256_set1_epi32(0x7F800000);
  __m256 amax = _mm256_setzero_ps();
  __m256i nan = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i a = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), abs_bits);
    nan = _mm256_or_si256(nan, _mm256_cmpgt_epi32(a, inf_bits));
    const __m256i finite = _mm256_cmpgt_epi32(inf_bits, a);
    amax = _mm256_max_ps(amax, _mm256_castsi256_ps(_mm256_and_si256(a, finite)));
  }
  alignas(32) float m[8];
  _mm256_store_ps(m, amax);
  float r = *std::max_element(m, m + 8);
  bool any_nan = !_mm256_testz_si256(nan, nan);
  for (; i < n; ++i) {
    if (std::isnan(x[i]))
      any_nan = true;
    else if (std::isfinite(x[i]))
      r = std::fmax(r, std::fabs(x[i]));
  }
  *has_nan = any_nan;
  return r;
}

// ---- INT4 codes x NVFP4 activations (f4dot / f4dot16) ----
// The activations come as c = 2 * (E2M1 value), an integer in [-12, 12], with beta_b = s_b / 2 per 16-column
// block b (s_b the E4M3 block scale) and the token's global scale g applied by the caller. Per block the
// integer U_b = sum u * c (exact; at most 16 * 15 * 12) times beta_b is exact in float (12 + 4 significant
// bits), so only the sums over blocks round:
//   y / g = sum_groups s_g * (sum_{b in g} beta_b U_b - z_g * xz_g),   xz_g = sum_{b in g} beta_b C_b,
// C_b the block's code sum, z_g the zero point (or the code offset 8).

// Decode, one row at a time against the tokens' codes in the 64-column decode layout (even, then odd columns)
// and bv [T][chunks * 8]: per 64-column chunk beta of its blocks 0, 0, 1, 1, 2, 2, 3, 3 (after vpmaddwd,
// int32 lane n holds block n / 2's columns of the chunk).
template <int NT>
void f4_rows_nt(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z, int zoff,
                int64_t cols, int64_t group, int64_t ng, const int8_t* xl, int64_t xstride, const float* bv,
                int64_t bstride, const float* xz, float* y, int64_t ystride) {
  const int64_t nch = (cols + 63) / 64, gch = ng == 1 ? nch : group / 64;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int i = 0; i < nr; ++i) {
    float acc[NT] = {};
    for (int64_t g = 0; g < ng; ++g) {
      __m256 ag[NT];
      for (int j = 0; j < NT; ++j) ag[j] = _mm256_setzero_ps();
      for (int64_t ch = g * gch, c1 = std::min(nch, (g + 1) * gch); ch < c1; ++ch) {
        __m256i lo, hi;
        load_nib64(rows[i], cols, ch, &lo, &hi);
        for (int j = 0; j < NT; ++j) {
          const int8_t* xc = xl + j * xstride + 64 * ch;
          const __m256i p = _mm256_adds_epi16(
              _mm256_maddubs_epi16(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc))),
              _mm256_maddubs_epi16(hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc + 32))));
          ag[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones)),
                                  _mm256_loadu_ps(bv + j * bstride + 8 * ch), ag[j]);
        }
      }
      const float zq = z[i] ? z[i][g] : static_cast<float>(zoff);
      for (int j = 0; j < NT; ++j) acc[j] += s[i][g] * (hsum8(ag[j]) - zq * xz[j * ng + g]);
    }
    for (int j = 0; j < NT; ++j) y[j * ystride + i] = acc[j];
  }
}

// Prefill: one half block (pack_half<4>) x NT tokens; codes natural order, beta [T][blocks].
template <int NT>
void f4_half_tile(const uint8_t* wb, int64_t nch, int64_t gch, int64_t ng, const float* sv, const float* zv,
                  const int8_t* xq, int64_t xstride, const float* beta, int64_t bstride, const float* xz,
                  __m256* out) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 accf[NT];
  for (int j = 0; j < NT; ++j) accf[j] = _mm256_setzero_ps();
  for (int64_t g = 0; g < ng; ++g) {
    __m256 ag[NT];
    for (int j = 0; j < NT; ++j) ag[j] = _mm256_setzero_ps();
    for (int64_t blk = 2 * g * gch, b1 = 2 * std::min(nch, (g + 1) * gch); blk < b1; ++blk) {
      __m256i s16[NT];
      for (int j = 0; j < NT; ++j) s16[j] = _mm256_setzero_si256();
      for (int k = 0; k < 4; ++k) {
        const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(wb + 32 * (4 * blk + k)));
        for (int j = 0; j < NT; ++j)
          s16[j] =
              _mm256_adds_epi16(s16[j], _mm256_maddubs_epi16(w, bcast4(xq + j * xstride + 16 * blk + 4 * k)));
      }
      for (int j = 0; j < NT; ++j)
        ag[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(s16[j], ones)),
                                _mm256_set1_ps(beta[j * bstride + blk]), ag[j]);
    }
    const __m256 sg = _mm256_load_ps(sv + 8 * g), zg = _mm256_load_ps(zv + 8 * g);
    for (int j = 0; j < NT; ++j)
      accf[j] = _mm256_fmadd_ps(sg, _mm256_fnmadd_ps(zg, _mm256_set1_ps(xz[j * ng + g]), ag[j]), accf[j]);
  }
  for (int j = 0; j < NT; ++j) out[j] = accf[j];
}

}  // namespace

namespace {

// E2M1 codes of q (8 lanes; the route's x / d, the search's x * (1 / d)) with round-to-nearest-even and
// saturation as counts of thresholds passed: |q| > 0.25, >= 0.75, > 1.25, >= 1.75, > 2.5, >= 3.5, > 5 (the
// ties go to the even code: 0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4); *mag
// the magnitude index 0..7, the result with the sign bit kept (-0 -> 0x8); NaN lanes are the caller's.
inline __m256i e2m1_codes_avx2(__m256 q, __m256i* mag) {
  const __m256 a = _mm256_and_ps(q, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)));
  auto gt = [&](float t) { return _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(t), _CMP_GT_OQ)); };
  auto ge = [&](float t) { return _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(t), _CMP_GE_OQ)); };
  __m256i c =
      _mm256_add_epi32(_mm256_add_epi32(gt(0.25f), ge(0.75f)), _mm256_add_epi32(gt(1.25f), ge(1.75f)));
  c = _mm256_add_epi32(c, _mm256_add_epi32(_mm256_add_epi32(gt(2.5f), ge(3.5f)), gt(5.0f)));
  c = _mm256_sub_epi32(_mm256_setzero_si256(), c);  // the compares are -1 each
  *mag = c;
  return _mm256_or_si256(c, _mm256_slli_epi32(_mm256_srli_epi32(_mm256_castps_si256(q), 31), 3));
}

}  // namespace

// nvfp4_block_errors of a full block of 16 finite values, one step per lane: per element the broadcast
// x_i's code at 8 steps, the same e_i (the code's value with x's sign, one fnmadd) and one fma into each
// lane's even or odd sum, so every lane adds its terms in the scalar order.
void nvfp4_block_errors_avx2(const float* x, int64_t n, const float* d, int nd, float* err) {
  if (n != 16) return nvfp4_block_errors(x, n, d, nd, err);
  const __m256 table = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int k0 = 0; k0 < nd; k0 += 8) {
    alignas(32) float dl[8], out[8];
    for (int k = 0; k < 8; ++k) dl[k] = d[std::min(nd - 1, k0 + k)];  // spare lanes repeat the last step
    const __m256 dv = _mm256_load_ps(dl), rv = _mm256_div_ps(_mm256_set1_ps(1.0f), dv);
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int i = 0; i < 16; ++i) {
      const __m256 v = _mm256_set1_ps(x[i]);
      __m256i mag;
      (void)e2m1_codes_avx2(_mm256_mul_ps(v, rv), &mag);
      const __m256 val = _mm256_or_ps(_mm256_permutevar8x32_ps(table, mag), _mm256_and_ps(v, sign));
      const __m256 e = _mm256_fnmadd_ps(val, dv, v);
      acc[i & 1] = _mm256_fmadd_ps(e, e, acc[i & 1]);
    }
    _mm256_store_ps(out, _mm256_add_ps(acc[0], acc[1]));
    for (int k = 0; k < 8 && k0 + k < nd; ++k) err[k0 + k] = out[k];
  }
}

void quantize_activation_nvfp4_avx2(const float* x, int64_t n, float clip, ActScale rule, uint8_t* codes,
                                    uint8_t* block_scales, float* global_scale) {
  bool has_nan = false;
  const float amax = finite_absmax_avx2(x, n, &has_nan);
  const float g = amax * clip / (6.0f * 448.0f);
  *global_scale = has_nan ? std::numeric_limits<float>::quiet_NaN() : g;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)),
               inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  // The search's errors: an even and an odd input per AVX-512 register where the tier has them.
  const Nvfp4BlockErrors fast =
      kernel_isa() >= Isa::Avx512 ? nvfp4_block_errors_avx512 : nvfp4_block_errors_avx2;
  for (int64_t b0 = 0; b0 < n; b0 += 16) {
    const int64_t b1 = std::min(n, b0 + 16);
    bool block_nan = false;  // already in has_nan
    const float bmax = finite_absmax_avx2(x + b0, b1 - b0, &block_nan);
    // The vectorized error takes full blocks of finite values; others get the scalar one (the same bits).
    bool finite = rule == ActScale::Mse && b1 - b0 == 16;
    for (int k = 0; finite && k < 16; k += 8) {
      const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + b0 + k), abs_mask);
      finite = _mm256_movemask_ps(_mm256_cmp_ps(a, inf, _CMP_NLT_UQ)) == 0;  // no Inf, no NaN
    }
    const uint8_t sc =
        nvfp4_act_block_scale(x + b0, b1 - b0, g, bmax, rule, finite ? fast : nvfp4_block_errors);
    block_scales[b0 / 16] = sc;
    const float d = fp8_e4m3fn_to_f32(sc) * g;
    if (!(d > 0) || b1 - b0 < 16) {  // the scalar definition (a zero block, the ragged last block)
      for (int64_t i = b0; i < b1; ++i) {
        const float v = x[i];
        if (std::isnan(v))
          codes[i] = 0;
        else if (!(d > 0))
          codes[i] = std::isinf(v) ? (v > 0 ? 0x7 : 0xF) : 0;
        else
          codes[i] = f32_to_fp4_e2m1(v / d);
      }
      continue;
    }
    const __m256 dv = _mm256_set1_ps(d);
    for (int k = 0; k < 16; k += 8) {
      const __m256 v = _mm256_loadu_ps(x + b0 + k);
      __m256i mag;
      __m256i c = e2m1_codes_avx2(_mm256_div_ps(v, dv), &mag);
      c = _mm256_andnot_si256(_mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)), c);  // NaN -> 0
      const __m128i c16 = _mm_packs_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + b0 + k), _mm_packus_epi16(c16, c16));
    }
  }
}

void quantize_activation_int8_avx2(const float* x, int64_t n, int8_t* codes, float* scale) {
  bool nan = false;
  const float s = finite_absmax_avx2(x, n, &nan) / 127.0f;
  *scale = nan ? std::numeric_limits<float>::quiet_NaN() : s;
  act_codes_for_scale(x, n, s, 127.0f, codes);
}

void int8_act_codes_avx2(const float* x, int64_t n, float s, int8_t* codes) {
  int_act_codes(x, n, s, 127.0f, codes);
}

void quantize_activation_int4_avx2(const float* x, int64_t n, float clip, int8_t* codes, float* scale) {
  bool nan = false;
  const float s = finite_absmax_avx2(x, n, &nan) * clip / 7.0f;
  *scale = nan ? std::numeric_limits<float>::quiet_NaN() : s;
  act_codes_for_scale(x, n, s, 7.0f, codes);
}

bool i8dot_avx2_ok(int64_t group, int64_t gcols) {
  return gcols == 1 || group % 32 == 0;
}

int64_t i8x_padded(int64_t cols) {
  return (cols + 63) / 64 * 64;
}

void i8x_layout_avx2(int bits, int64_t group, int64_t ng, const int8_t* natural, int64_t cols, int8_t* out) {
  const int64_t pad = i8x_padded(cols);
  std::memset(out, 0, static_cast<size_t>(pad));
  if (bits == 8) {
    std::memcpy(out, natural, static_cast<size_t>(cols));
    return;
  }
  const int64_t w = decode_chunk(bits, group, ng), half = w / 2;
  for (int64_t c = 0; c < cols; ++c) out[c / w * w + (c & 1) * half + (c % w) / 2] = natural[c];
}

void i8dot_rows_avx2(int bits, int nr, const uint8_t* const* rows, const float* const* s,
                     const float* const* z, int zoff, int64_t cols, int64_t group, int64_t ng,
                     const int8_t* xl, int64_t xstride, const int32_t* xg, const float* sx, int T, float* y,
                     int64_t ystride) {
  const int wch = decode_chunk(bits, group, ng);
  // Grouped weights, one token: 8 rows at a time (rows8_grouped), the rest below.
  int r8 = 0;
  if (T == 1 && ng > 1) {
    for (; r8 + 8 <= nr; r8 += 8) {
      if (wch == 64)
        rows8_grouped<4, 64>(rows + r8, s + r8, z + r8, zoff, cols, group, ng, xl, xg, sx[0], y + r8);
      else if (bits == 4)
        rows8_grouped<4, 32>(rows + r8, s + r8, z + r8, zoff, cols, group, ng, xl, xg, sx[0], y + r8);
      else
        rows8_grouped<8, 32>(rows + r8, s + r8, z + r8, zoff, cols, group, ng, xl, xg, sx[0], y + r8);
    }
    rows += r8, s += r8, z += r8, y += r8, nr -= r8;
  }
  for (int t0 = 0; t0 < T; t0 += 3) {
    const int nt = std::min(3, T - t0);
    with_nt(nt, [&](auto c) {
      constexpr int kNt = decltype(c)::value;
      if constexpr (kNt <= 3) {
        if (wch == 64)
          rows_nt<4, 64, kNt>(nr, rows, s, z, zoff, cols, group, ng, xl + t0 * xstride, xstride, xg + t0 * ng,
                              sx + t0, y + t0 * ystride, ystride);
        else if (bits == 4)
          rows_nt<4, 32, kNt>(nr, rows, s, z, zoff, cols, group, ng, xl + t0 * xstride, xstride, xg + t0 * ng,
                              sx + t0, y + t0 * ystride, ystride);
        else
          rows_nt<8, 32, kNt>(nr, rows, s, z, zoff, cols, group, ng, xl + t0 * xstride, xstride, xg + t0 * ng,
                              sx + t0, y + t0 * ystride, ystride);
      }
    });
  }
}

void i8dot_block_avx2(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                      int bits, int zoff, int64_t cols, int64_t group, const int8_t* xq, int64_t xstride,
                      const int32_t* xg, int64_t ng, const float* sx, int T, float* y, int64_t ystride) {
  if (bits == 4)
    block_bits<4>(nr, rows, s, z, zoff, cols, group, xq, xstride, xg, ng, sx, T, y, ystride);
  else
    block_bits<8>(nr, rows, s, z, zoff, cols, group, xq, xstride, xg, ng, sx, T, y, ystride);
}

bool f4dot_avx2_ok(int64_t group, int64_t gcols) {
  return gcols == 1 || group % 64 == 0;
}

void f4dot_rows_avx2(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                     int zoff, int64_t cols, int64_t group, int64_t ng, const int8_t* xl, int64_t xstride,
                     const float* bv, int64_t bstride, const float* xz, int T, float* y, int64_t ystride) {
  for (int t0 = 0; t0 < T; t0 += 3) {
    const int nt = std::min(3, T - t0);
    with_nt(nt, [&](auto c) {
      constexpr int kNt = decltype(c)::value;
      if constexpr (kNt <= 3)
        f4_rows_nt<kNt>(nr, rows, s, z, zoff, cols, group, ng, xl + t0 * xstride, xstride, bv + t0 * bstride,
                        bstride, xz + t0 * ng, y + t0 * ystride, ystride);
    });
  }
}

void f4dot_block_avx2(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                      int zoff, int64_t cols, int64_t group, int64_t ng, const int8_t* xq, int64_t xstride,
                      const float* beta, int64_t bstride, const float* xz, int T, float* y, int64_t ystride) {
  const int64_t nch = (cols + 31) / 32, gch = ng == 1 ? nch : group / 32;
  tile_halves<4, 4, float>(  // 4 tokens: int16, block and group accumulators per token, as the INT4 tile
      nr, rows, cols, ng, T, y, ystride,
      [&](int64_t g, int r, float* sc, float* zp) {
        *sc = s[r][g];
        *zp = z[r] ? z[r][g] : static_cast<float>(zoff);
      },
      [&](auto c, const uint8_t* wb, const float* sv, const float* zv, int t0, __m256* out) {
        f4_half_tile<decltype(c)::value>(wb, nch, gch, ng, sv, zv, xq + t0 * xstride, xstride,
                                         beta + t0 * bstride, bstride, xz + t0 * ng, out);
      });
}

}  // namespace lowbit::kern
