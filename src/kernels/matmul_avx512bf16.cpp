// 4-bit weight-only decode (T = 1..3) with BF16 activations: the nib route's kernel on the Avx512Bf16 tier
// (compiled with -mavx512bf16 -mavx512vbmi on top of the AVX-512 flags; called only on that tier).
//
// Why: the FP32 nib kernel spends, per 16 weights, a shift + a vpermps (LUT) + an FMA, and this CPU class
// issues about two 512-bit operations per cycle, so it decodes ~25 G weights/s per core: below the rate at
// which one core streams 4-bit codes from DRAM. Here, per 32 weights: one vpsrlw brings the next nibble of
// every 16-bit word to its low bits (none for the first), one vpermw maps the word's low 5 bits through a
// 32-entry BF16 table (the 16 values twice, so the stray fifth index bit is harmless), and one vdpbf16ps
// multiplies 32 weights by 32 BF16 activations and accumulates in FP32: under 3 operations per 32 weights
// instead of 6. On Zen 4 the shift issues beside vdpbf16ps (vpmultishiftqb, used before, shares its pipe:
// 1.5 instead of 2 operations per cycle, measured). R rows are decoded together (rows_tile).
//
// Long rows (one token, more than kSeqRowBytes of codes): the R-row tile would read R row streams at once;
// they are read one row at a time instead (the tile at R = 1: one stream).
//
// Numerics: the activations are rounded to BF16 once per token (W4A16 with BF16 activations), the products of
// two BF16 numbers are exact in FP32 and accumulate in FP32. Every 4-bit value table of the nib route (INT4
// sym/asym, E2M1 for FP4 / MXFP4 / NVFP4) is exact in BF16, so for them the only rounding beyond FP32
// accumulation is the activation's. NF4's 16 values are not: they are rounded to BF16 (relative error <=
// 2^-9, the activations' rounding; bitsandbytes rounds each dequantized weight to the BF16 compute type the
// same way) and the group scale is applied in FP32 (Nib16Lut, docs/kernels.md "Activation routes").
// vdpbf16ps treats BF16 subnormal inputs (|x| < 2^-126) as zero.
//
// Layout (nib16_layout): a 128-element chunk of codes is one zmm; 32-bit lane l holds elements 8l..8l+7
// (nibble j = element 8l+j), so its 16-bit words 2l and 2l+1 hold elements 8l..8l+3 and 8l+4..8l+7. Step k
// (0..3) shifts every word right by 4k: word 2l+e yields element 8l + 4e + k, so the activations of step k
// are xb[128c + 32k + 2l + e] = bf16(x[128c + 8l + 4e + k]). A lane stays inside one scale group (groups are
// multiples of 8), so the group scales are applied per lane once per chunk exactly as in the FP32 nib kernel.
//
// byte (INT8 sym/asym, FP8 E4M3FN / E5M2, decode T = 1..3): the FP32 byte kernel widens 16 codes with 3-5
// operations + an FMA (FP8 E4M3: 24 operations per 64 weights). Here the 256 code values are a BF16 table
// split into a low-byte and a high-byte plane (4 zmm each); per 64 codes two vpermi2b + a sign-bit blend per
// plane give both bytes of 64 BF16 weights, two vpunpck*bw interleave them into 2 x 32 words, two vdpbf16ps
// multiply: 11 operations per 64 weights. Every INT8 / FP8 value is exact in BF16 (|integers| <= 256, 3- and
// 2-bit mantissas), and the NaN codes of E4M3FN decode to NaN. Layout: the unpacks keep 128-bit lanes, so in
// a 64-code chunk c word m (0..7) of 128-bit lane L is element 16L + m (first zmm) or 16L + 8 + m (second);
// xb[64c + 32z + 8L + m] = bf16(x[64c + 16L + 8z + m]). A 32-bit lane holds two consecutive elements of one
// 16-element block, so groups of 16 / 32 / k*64 get one scale per lane per chunk.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/half.h"
#include "kernels/kernel_plan.h"
#include "kernels/lane_avx512.h"
#include "kernels/prefetch.h"

namespace lowbit::kern {
namespace {

// vpermb / vpmultishiftqb controls: qword j of the result <- source bytes bpq*j .. bpq*j + bpq - 1, and
// output byte k of each qword <- its bits bpq*k .. bpq*k + 7 (INT2: bpq 4, two codes per byte; INT3 and FP6:
// bpq 6, two 3-bit codes or one 6-bit code per byte).
struct alignas(64) ShiftTables {
  uint8_t perm[64], ctrl[64];
};
template <int bpq>
const ShiftTables& shift_tables() {
  static const ShiftTables t = [] {
    ShiftTables r{};
    for (int q = 0; q < 8; ++q)
      for (int k = 0; k < 8; ++k) {
        r.perm[8 * q + k] = static_cast<uint8_t>(k < bpq ? bpq * q + k : 0);
        r.ctrl[8 * q + k] = static_cast<uint8_t>(bpq * k);
      }
    return r;
  }();
  return t;
}

// The 64 bytes of bit fields (shift_tables) of the `bytes` (capped at 8 * bpq) source bytes at p.
template <int bpq>
inline __m512i shift_fields(const uint8_t* p, int64_t bytes) {
  const ShiftTables& t = shift_tables<bpq>();
  const __m512i src = _mm512_maskz_loadu_epi8(mask64(std::min<int64_t>(bytes, 8 * bpq)), p);
  const __m512i v = _mm512_permutexvar_epi8(_mm512_load_si512(t.perm), src);
  return _mm512_multishift_epi64_epi8(_mm512_load_si512(t.ctrl), v);
}

// INT2 / INT3 (B bits, codes packed as one little-endian bit stream, tensor/qtensor.h): 128 codes are 16 B
// bytes; they are widened in registers to the 4-bit nib layout (byte m = code 2m | code 2m + 1 << 4, so the
// nib16 steps below serve them unchanged): vpermb gives qword j the 2B source bytes of its 16 codes,
// vpmultishiftqb moves the 2B-bit field of output byte m (8 bytes per qword) to its low bits, and one shift +
// mask + ternary logic spreads the two B-bit codes to nibbles: 6 operations per 128 codes before the 12 of
// nib16. B = 4 is the stored nib layout itself.
template <int B>
inline __m512i load_codes(const LaneGeom& g, int64_t rbytes, const uint8_t* row, int64_t c) {
  if constexpr (B == 4) {
    return load_chunk(g, row, c);
  } else {
    constexpr int bpc = 16 * B;  // source bytes per 128 codes
    const __m512i t = shift_fields<2 * B>(row + bpc * c, rbytes - bpc * c);
    constexpr int lo = (1 << B) - 1;
    const __m512i hi =
        _mm512_and_si512(_mm512_slli_epi16(t, 4 - B), _mm512_set1_epi8(static_cast<char>(lo << 4)));
    return _mm512_ternarylogic_epi32(t, _mm512_set1_epi8(static_cast<char>(lo)), hi, 0xEA);  // (t & lo) | hi
  }
}

// R rows x T tokens. The R rows share each activation load and give
// the core R independent dependency chains (one row alone was latency-bound: ~2x below the issue rate of its
// vpmultishiftqb / vpermw / vdpbf16ps mix); their rows lie one after another in memory, one stream.
// S, Z: the scale and zero cells, the plan's FP32 tables (float, float) or the stored cells (lane_avx512.h,
// cells16).
template <int T, int R, int B, typename S, typename Z>
__attribute__((noinline)) void rows_tile(const LaneGeom& g, int64_t rbytes, const uint8_t* const* row,
                                         const S* const* s, const Z* const* z, __m512i lut, const Bf16X* x,
                                         float* y, int64_t ystride) {
  __m512 acc[R][T];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  // BF16 activations: 2 bytes per column of the padded row (kernels/prefetch.h).
  const bool l2 = prefetch_to_l2(R * rbytes, T * 2 * 128 * g.nch);
  GroupWalk gw;
  for (int64_t c = 0; c < g.nch; ++c, gw.next(g)) {
    __m512i code[R];
    __m512 s0[R][T], s1[R][T];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      // DRAM streaming: the tile's rows are consecutive in memory, so prefetch in address order 4 KiB ahead
      // of the tile (a hint: harmless past the end or for rows that are not consecutive).
      prefetch_far(row[0] + 16 * B * (R * c + r) + 4096, l2);
      code[r] = load_codes<B>(g, rbytes, row[r], c);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) s0[r][t] = s1[r][t] = _mm512_setzero_ps();
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      __m512i idx[R];
      __m512bh wh[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        idx[r] = k == 0 ? code[r] : _mm512_srli_epi16(code[r], 4 * k);
        wh[r] = (__m512bh)_mm512_permutexvar_epi16(idx[r], lut);
      }
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const __m512bh xv = (__m512bh)_mm512_loadu_si512(x[t].act + 128 * c + 32 * k);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          __m512& sk = (k & 1) ? s1[r][t] : s0[r][t];
          sk = _mm512_dpbf16_ps(sk, wh[r], xv);
        }
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 sv = chunk_cells(g, s[r], c, gw);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t)
        acc[r][t] = _mm512_fmadd_ps(_mm512_add_ps(s0[r][t], s1[r][t]), sv, acc[r][t]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    // Asymmetric: the table holds u (X_g: the token's sum of its BF16 activations over group g).
    if (z[r]) sub_zero_points<T>(g, s[r], z[r], x, acc[r]);
  }
  store_tile_sums<T, R>(acc, y, ystride);
}

// Rows in tiles of R (decode: R * T partial sums fit the 32 registers), the tail one row at a time; long rows
// at T = 1 all one at a time (kSeqRowBytes).
template <int T, int B, typename S, typename Z>
void rows_t(const LaneGeom& g, int64_t rbytes, int nr, const uint8_t* const* rows, const S* const* s,
            const Z* const* z, const Nib16Lut& lut, const Bf16X* x, float* y, int64_t ystride) {
  const __m512i v = _mm512_loadu_si512(lut.v);
  constexpr int R = T == 1 ? 4 : 2;
  int i = 0;
  if (T > 1 || rbytes <= kSeqRowBytes)
    for (; i + R <= nr; i += R) rows_tile<T, R, B>(g, rbytes, rows + i, s + i, z + i, v, x, y + i, ystride);
  for (; i < nr; ++i) rows_tile<T, 1, B>(g, rbytes, rows + i, s + i, z + i, v, x, y + i, ystride);
}

// byte16: chunks of 64 codes; lane 4L + j holds two elements of the 16-element block L.
LaneGeom byte_lane_geom(int64_t cols, int64_t group) {
  return lane_geom(cols, group, 64, [](int l) { return 16 * (l / 4); });
}

// byte: R rows x T tokens (R rows for the same reasons as rows_tile).
template <int T, int R, bool SM>
__attribute__((noinline)) void byte_rows(const LaneGeom& g, const uint8_t* const* row, const float* const* s,
                                         const float* const* z, const __m512i* lo, const __m512i* hi,
                                         const Bf16X* x, float* y, int64_t ystride) {
  __m512 acc[R][T];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const bool l2 = prefetch_to_l2(R * g.rbytes, T * 2 * g.rbytes);  // BF16 activations, 2 bytes per code
  GroupWalk gw;
  for (int64_t c = 0; c < g.nch; ++c, gw.next(g)) {
    __m512bh w0[R], w1[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      prefetch_far(row[0] + 64 * (R * c + r) + 4096, l2);
      const __m512i b = load_chunk(g, row[r], c);
      __m512i lb, hb;
      if constexpr (SM) {
        // Sign-magnitude codes (FP8): 128-entry tables (vpermi2b reads 7 index bits), the sign bit ORed in.
        lb = _mm512_permutex2var_epi8(lo[0], b, lo[1]);
        hb = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi[0], b, hi[1]), b, _mm512_set1_epi8(-128),
                                       0xF8);
      } else {
        const __mmask64 top = _mm512_movepi8_mask(b);  // codes 128..255: the second half of each table
        lb = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(lo[0], b, lo[1]),
                                    _mm512_permutex2var_epi8(lo[2], b, lo[3]));
        hb = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(hi[0], b, hi[1]),
                                    _mm512_permutex2var_epi8(hi[2], b, hi[3]));
      }
      w0[r] = (__m512bh)_mm512_unpacklo_epi8(lb, hb);
      w1[r] = (__m512bh)_mm512_unpackhi_epi8(lb, hb);
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const uint16_t* xb = x[t].act + 64 * c;
      const __m512bh x0 = (__m512bh)_mm512_loadu_si512(xb), x1 = (__m512bh)_mm512_loadu_si512(xb + 32);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512 p = _mm512_dpbf16_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), w0[r], x0), w1[r], x1);
        acc[r][t] = _mm512_fmadd_ps(p, chunk_cells(g, s[r], c, gw), acc[r][t]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
    if (z[r]) sub_zero_points<T>(g, s[r], z[r], x, acc[r]);
  store_tile_sums<T, R>(acc, y, ystride);
}

template <int T, bool SM>
void byte_rows_t(const LaneGeom& g, int nr, const uint8_t* const* rows, const float* const* s,
                 const float* const* z, const __m512i* lo, const __m512i* hi, const Bf16X* x, float* y,
                 int64_t ystride) {
  constexpr int R = T == 1 ? 4 : 2;
  int i = 0;
  if (T > 1 || g.rbytes <= kSeqRowBytes)  // long rows at T = 1 one at a time (kSeqRowBytes)
    for (; i + R <= nr; i += R) byte_rows<T, R, SM>(g, rows + i, s + i, z + i, lo, hi, x, y + i, ystride);
  for (; i < nr; ++i) byte_rows<T, 1, SM>(g, rows + i, s + i, z + i, lo, hi, x, y + i, ystride);
}

// f(n, t0) for the tokens [0, T) in runs of three (the last run 1, 2 or 3), n a compile-time
// std::integral_constant: the decode tiles hold R x n partial sums in registers.
template <typename F>
void for_token_runs3(int T, F&& f) {
  for (int t0 = 0; t0 < T; t0 += 3) {
    const int n = std::min(3, T - t0);
    if (n == 1)
      f(std::integral_constant<int, 1>{}, t0);
    else if (n == 2)
      f(std::integral_constant<int, 2>{}, t0);
    else
      f(std::integral_constant<int, 3>{}, t0);
  }
}

template <bool SM>
void byte_rows_any(const LaneGeom& g, int nr, const uint8_t* const* rows, const float* const* s,
                   const float* const* z, const __m512i* lo, const __m512i* hi, int T, const Bf16X* x,
                   float* y, int64_t ystride) {
  for_token_runs3(T, [&](auto n, int t0) {
    byte_rows_t<decltype(n)::value, SM>(g, nr, rows, s, z, lo, hi, x + t0, y + t0 * ystride, ystride);
  });
}

// 16 floats rounded to BF16 (nearest-even, NaN kept quiet): f32_to_bf16 lane by lane. Not vcvtneps2bf16,
// which flushes subnormal inputs to zero.
inline __m256i bf16_round16(__m512 v) {
  const __m512i b = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(0x40)));
  return _mm512_cvtepi32_epi16(r);
}

// A lane layout of C (64 or 128) elements per chunk as word permutations: output word p of a chunk is element
// src(p); idx[p] = src(p) % 64 indexes a register pair, and bit p of hi is set when src(p) >= 64 (second
// pair).
template <int C>
struct LanePerm {
  alignas(64) uint16_t idx[C];
  uint32_t hi[C / 32] = {};
  template <typename Dst>
  explicit LanePerm(Dst dst) {
    for (int o = 0; o < C; ++o) {
      const int p = static_cast<int>(dst(o));
      idx[p] = static_cast<uint16_t>(o % 64);
      if (o >= 64) hi[p / 32] |= 1u << (p % 32);
    }
  }
};

// Activations of one token rounded to BF16 and placed by the kernel's lane layout: element o of each chunk
// goes to position dst(o) of that chunk (perm holds the inverse); zero padding to whole chunks; group sums of
// the BF16 values. Per chunk: C / 16 roundings, then one vpermt2w per 32 output words (two and a blend for C
// = 128).
template <int C>
void bf16_lane_layout(const float* x, int64_t cols, int64_t group, const LanePerm<C>& perm, uint16_t* xb,
                      float* gsum) {
  constexpr int kRegs = C / 32;
  for (int64_t c0 = 0; c0 < cols; c0 += C) {
    __m512i a[kRegs];
    for (int q = 0; q < kRegs; ++q) {
      __m256i h[2];
      for (int e = 0; e < 2; ++e) {
        const int64_t i = c0 + 32 * q + 16 * e;
        const int64_t left = std::clamp<int64_t>(cols - i, 0, 16);
        const __mmask16 m = left == 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
        h[e] = bf16_round16(_mm512_maskz_loadu_ps(m, x + std::min(i, cols)));
      }
      a[q] = _mm512_inserti64x4(_mm512_castsi256_si512(h[0]), h[1], 1);
    }
    for (int j = 0; j < kRegs; ++j) {
      const __m512i idx = _mm512_load_si512(perm.idx + 32 * j);
      __m512i v = _mm512_permutex2var_epi16(a[0], idx, a[1]);
      if constexpr (C == 128)
        v = _mm512_mask_blend_epi16(perm.hi[j], v, _mm512_permutex2var_epi16(a[2], idx, a[3]));
      _mm512_storeu_si512(xb + c0 + 32 * j, v);
    }
  }
  if (gsum) group_sums(x, cols, group, true, gsum);
}

}  // namespace

int64_t byte16_padded(int64_t cols) {
  return (cols + 63) / 64 * 64;
}

bool byte16_lanes_ok(int64_t group, int64_t cols) {
  return group >= cols || group % 64 == 0 || group == 16 || group == 32;
}

void byte16_layout(const float* x, int64_t cols, int64_t group, uint16_t* xb, float* gsum) {
  // o = 16L + 8z + m -> 32z + 8L + m
  static const LanePerm<64> perm([](int64_t o) { return 32 * (o / 8 % 2) + 8 * (o / 16) + o % 8; });
  bf16_lane_layout(x, cols, group, perm, xb, gsum);
}

void byte16_gemv_avx512bf16(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                            int64_t cols, int64_t group, const Byte16Lut& lut, int T, const Bf16X* x,
                            float* y, int64_t ystride) {
  const LaneGeom g = byte_lane_geom(cols, group);
  __m512i lo[4], hi[4];
  for (int i = 0; i < 4; ++i) {
    lo[i] = _mm512_loadu_si512(lut.lo + 64 * i);
    hi[i] = _mm512_loadu_si512(lut.hi + 64 * i);
  }
  if (lut.sign_magnitude)
    byte_rows_any<true>(g, nr, rows, s, z, lo, hi, T, x, y, ystride);
  else
    byte_rows_any<false>(g, nr, rows, s, z, lo, hi, T, x, y, ystride);
}

void nib16_layout(const float* x, int64_t cols, int64_t group, uint16_t* xb, float* gsum) {
  // o = 8l + 4e + k -> 32k + 2l + e
  static const LanePerm<128> perm([](int64_t o) { return 32 * (o % 4) + 2 * (o / 8) + o / 4 % 2; });
  bf16_lane_layout(x, cols, group, perm, xb, gsum);
}

template <typename S, typename Z>
void nib16_gemv_avx512bf16(int nr, const uint8_t* const* rows, const S* const* s, const Z* const* z,
                           int64_t cols, int64_t group, int bits, const Nib16Lut& lut, int T, const Bf16X* x,
                           float* y, int64_t ystride) {
  const LaneGeom g = nib_lane_geom(cols, group);
  const int64_t rbytes = (cols * bits + 7) / 8;
  for_token_runs3(T, [&](auto n, int t0) {
    constexpr int TN = decltype(n)::value;
    if (bits == 2)
      rows_t<TN, 2>(g, rbytes, nr, rows, s, z, lut, x + t0, y + t0 * ystride, ystride);
    else if (bits == 3)
      rows_t<TN, 3>(g, rbytes, nr, rows, s, z, lut, x + t0, y + t0 * ystride, ystride);
    else
      rows_t<TN, 4>(g, rbytes, nr, rows, s, z, lut, x + t0, y + t0 * ystride, ystride);
  });
}

void widen_codes_avx512bf16(const uint8_t* row, int64_t cols, int bits, uint8_t* out) {
  const int64_t rbytes = (cols * bits + 7) / 8;
  if (bits == 6) {  // 64 codes = 48 bytes -> one code per byte
    for (int64_t c = 0; c < (cols + 63) / 64; ++c)
      _mm512_storeu_si512(out + 64 * c, _mm512_and_si512(shift_fields<6>(row + 48 * c, rbytes - 48 * c),
                                                         _mm512_set1_epi8(0x3F)));
    return;
  }
  const int64_t nch = (cols + 127) / 128;
  const LaneGeom g{};  // load_codes reads it for bits = 4 only
  for (int64_t c = 0; c < nch; ++c)
    _mm512_storeu_si512(out + 64 * c,
                        bits == 2 ? load_codes<2>(g, rbytes, row, c) : load_codes<3>(g, rbytes, row, c));
}

#define LOWBIT_NIB16_GEMV(S, Z)                                                                           \
  template void nib16_gemv_avx512bf16<S, Z>(int, const uint8_t* const*, const S* const*, const Z* const*, \
                                            int64_t, int64_t, int, const Nib16Lut&, int, const Bf16X*,    \
                                            float*, int64_t);
LOWBIT_NIB16_GEMV(float, float)
LOWBIT_NIB16_GEMV(uint16_t, uint8_t)
LOWBIT_NIB16_GEMV(E8m0Cell, float)
LOWBIT_NIB16_GEMV(E4m3Cell, float)
#undef LOWBIT_NIB16_GEMV

}  // namespace lowbit::kern
