// Weight-only prefill (T >= 4) of the nib and byte routes with BF16 activations on the Avx512Bf16 tier: the
// `nib16` / `byte16` decode kernels' arithmetic (exact BF16 code values x BF16-rounded activations, FP32
// accumulation, group scales applied in FP32) on a register tile that serves many tokens per weight load.
//
// Why: the FP32 path dequantized a 16-row block and ran the float tile, 16 multiply-adds per FMA. vdpbf16ps
// does 32 per instruction at the same issue rate here (Zen 4: one 512-bit FMA-class operation per cycle), and
// the unscaled code values are exact in BF16, so the only rounding beyond FP32 accumulation is the
// activations' (the same contract as decode: matmul_rounds_to_bf16).
//
// Layout: a 16-row block is decoded once into pair-major BF16, wb[kp][i] = (value(row i, 2kp), value(row i,
// 2kp+1)) as one 32-bit word, so one 64-byte load holds pair kp of 16 rows and one broadcast 32-bit word of a
// token's BF16 activations (x[2kp], x[2kp+1]) turns a vdpbf16ps into 32 multiply-adds for 16 outputs, with no
// horizontal sum; 8 tokens share each weight load. Per scale group the 16 partial sums are multiplied by the
// 16 rows' scales (one FMA per token and group); asymmetric weights subtract z*s*X_g (X_g: the token's sum of
// its BF16 activations over the group) the way the decode kernels do. NF4's values, not exact in BF16, come
// rounded to BF16 from the table (Nib16Lut), as in nib16.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/kernel_plan.h"
#include "kernels/lane_avx512.h"
#include "kernels/with_nt.h"

namespace lowbit::kern {
namespace {

// 16 pairs (32 elements from element 2 * p0) of a 4-bit row as BF16 words: pair i is code byte p0 + i (low
// nibble first). Bytes past the row (rbytes) read as code 0; their activations are zero.
inline __m512i nib_pairs(const uint8_t* row, int64_t rbytes, int64_t p0, __m512i lut) {
  const int64_t left = rbytes - p0;
  const __m128i b =
      left >= 16 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + p0))
                 : _mm_maskz_loadu_epi8(static_cast<__mmask16>(left > 0 ? (1u << left) - 1 : 0), row + p0);
  const __m512i d = _mm512_cvtepu8_epi32(b);
  // Word 0 <- low nibble, word 1 <- high nibble (vpermw reads the low 5 bits of each word: the table is
  // twice).
  const __m512i idx = _mm512_or_si512(_mm512_and_si512(d, _mm512_set1_epi32(0x0F)),
                                      _mm512_slli_epi32(_mm512_and_si512(d, _mm512_set1_epi32(0xF0)), 12));
  return _mm512_permutexvar_epi16(idx, lut);
}

// 16 pairs (elements 2 * p0 ..) of an 8-bit row through the byte16 planes.
inline __m512i byte_pairs(const uint8_t* row, int64_t rbytes, int64_t p0, const Byte16Lut& t,
                          const __m512i* lo, const __m512i* hi) {
  const int64_t left = rbytes - 2 * p0;
  const __m512i b =
      _mm512_maskz_loadu_epi8(left >= 32 ? 0xFFFFFFFFull : (left > 0 ? (1ull << left) - 1 : 0), row + 2 * p0);
  __m512i lb, hb;
  if (t.sign_magnitude) {
    lb = _mm512_permutex2var_epi8(lo[0], b, lo[1]);
    hb =
        _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi[0], b, hi[1]), b, _mm512_set1_epi8(-128), 0xF8);
  } else {
    const __mmask64 top = _mm512_movepi8_mask(b);
    lb = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(lo[0], b, lo[1]),
                                _mm512_permutex2var_epi8(lo[2], b, lo[3]));
    hb = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(hi[0], b, hi[1]),
                                _mm512_permutex2var_epi8(hi[2], b, hi[3]));
  }
  // Within each 128-bit lane L, unpacklo gives elements 16L + 0..7 and unpackhi 16L + 8..15 (as 4 pairs
  // each); only lanes 0 and 1 carry the 32 elements: pairs 0-3 | 8-11 in lo, 4-7 | 12-15 in hi.
  const __m512i wl = _mm512_unpacklo_epi8(lb, hb), wh = _mm512_unpackhi_epi8(lb, hb);
  const __m512i order = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  return _mm512_permutex2var_epi32(wl, order, wh);
}

// One token tile: y[t][16 rows] for NT tokens. wb: the block's pairs.
template <int NT>
void tile(const uint32_t* wb, int64_t npairs, int64_t gpairs, const float* sv, const float* zs,
          const uint16_t* xb, int64_t xstride, const float* gsum, int64_t ng, __m512* out) {
  __m512 acc[NT];
  for (int j = 0; j < NT; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t g = 0, p0 = 0; p0 < npairs; ++g, p0 += gpairs) {
    const int64_t p1 = std::min(npairs, p0 + gpairs);
    __m512 part[NT];
    for (int j = 0; j < NT; ++j) part[j] = _mm512_setzero_ps();
    for (int64_t kp = p0; kp < p1; ++kp) {
      const __m512bh w = (__m512bh)_mm512_load_si512(wb + kp * 16);
      for (int j = 0; j < NT; ++j) {
        int32_t x2;
        std::memcpy(&x2, xb + j * xstride + 2 * kp, 4);
        const __m512bh xv = (__m512bh)_mm512_set1_epi32(x2);
        part[j] = _mm512_dpbf16_ps(part[j], w, xv);
      }
    }
    const __m512 s = _mm512_load_ps(sv + g * 16);
    for (int j = 0; j < NT; ++j) {
      acc[j] = _mm512_fmadd_ps(part[j], s, acc[j]);
      if (zs)
        acc[j] = _mm512_fnmadd_ps(_mm512_load_ps(zs + g * 16), _mm512_set1_ps(gsum[j * ng + g]), acc[j]);
    }
  }
  for (int j = 0; j < NT; ++j) out[j] = acc[j];
}

}  // namespace

int amx_bf16_pairs(int64_t group, int64_t cols) {
  if (group >= cols || group % 32 == 0) return 16;
  return group % 2 == 0 && 32 % group == 0 ? static_cast<int>(group / 2) : 0;
}

int64_t bf16_block_layout(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                          int64_t cols, int64_t group, const Nib16Lut* nib, const Byte16Lut* byte,
                          const uint32_t** wbp, const float** svp, const float** zsp) {
  const int64_t npairs = (cols + 1) / 2, nblk = (npairs + 15) / 16;
  // Groups hold whole pairs (even groups; the caller checks) or the group is the whole row.
  const int64_t grp = std::min(group, cols), ng = (cols + grp - 1) / grp;
  const bool asym = z[0] != nullptr;
  // Scratch per thread, in 64-byte lines: the block's pairs, its scales and z * s per group.
  struct alignas(64) Line {
    uint32_t v[16];
  };
  thread_local std::vector<Line> buf;
  const size_t wvec = static_cast<size_t>(nblk * 16), svec = static_cast<size_t>(ng);
  buf.resize(wvec + svec * 2);
  uint32_t* wb = buf.data()->v;
  float* sv = reinterpret_cast<float*>(buf[wvec].v);
  float* zs = sv + svec * 16;
  for (int64_t g = 0; g < ng; ++g)
    for (int i = 0; i < 16; ++i) {
      sv[g * 16 + i] = i < nr ? s[i][g] : 0.0f;
      zs[g * 16 + i] = i < nr && asym ? z[i][g] * s[i][g] : 0.0f;
    }

  // Decode: 16 rows x 16 pairs at a time, transposed to pair-major.
  __m512i lo[4], hi[4], lut = _mm512_setzero_si512();
  if (nib) {
    lut = _mm512_loadu_si512(nib->v);
  } else {
    for (int i = 0; i < 4; ++i) {
      lo[i] = _mm512_loadu_si512(byte->lo + 64 * i);
      hi[i] = _mm512_loadu_si512(byte->hi + 64 * i);
    }
  }
  const int64_t rbytes = nib ? (cols + 1) / 2 : cols;
  for (int64_t b = 0; b < nblk; ++b) {
    __m512i v[16];
    for (int i = 0; i < 16; ++i)
      v[i] = i >= nr ? _mm512_setzero_si512()
             : nib   ? nib_pairs(rows[i], rbytes, 16 * b, lut)
                     : byte_pairs(rows[i], rbytes, 16 * b, *byte, lo, hi);
    transpose16(v);
    for (int j = 0; j < 16; ++j) _mm512_store_si512(wb + (16 * b + j) * 16, v[j]);
  }
  *wbp = wb;
  *svp = sv;
  *zsp = asym ? zs : nullptr;
  return ng;
}

void bf16_tile_avx512bf16(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                          int64_t cols, int64_t group, const Nib16Lut* nib, const Byte16Lut* byte,
                          const uint16_t* xb, int64_t xstride, const float* gsum, int T, float* y,
                          int64_t ystride) {
  const int64_t npairs = (cols + 1) / 2;
  const uint32_t* wb;
  const float *sv, *zs;
  const int64_t ng = bf16_block_layout(nr, rows, s, z, cols, group, nib, byte, &wb, &sv, &zs);
  const int64_t gpairs = ng == 1 ? npairs : std::min(group, cols) / 2;
  const bool asym = zs != nullptr;
  const __mmask16 m = static_cast<__mmask16>((1u << nr) - 1);
  for (int t0 = 0; t0 < T; t0 += 8) {
    const int nt = std::min(8, T - t0);
    __m512 out[8];
    const uint16_t* xt = xb + t0 * xstride;
    const float* gt = asym ? gsum + t0 * ng : nullptr;
    with_nt(nt, [&](auto n) {
      tile<decltype(n)::value>(wb, npairs, gpairs, sv, asym ? zs : nullptr, xt, xstride, gt, ng, out);
    });
    for (int j = 0; j < nt; ++j) _mm512_mask_storeu_ps(y + (t0 + j) * ystride, m, out[j]);
  }
}

}  // namespace lowbit::kern
