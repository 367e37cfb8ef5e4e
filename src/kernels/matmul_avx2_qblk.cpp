// GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL / MXFP4 products on the load-time QBlkPack layout
// (kernel_plan.h) on the AVX2 tier, decode and prefill ("q8dot16").
//
// Why: the row kernel (matmul_avx2_q8.cpp) decodes a row's nibbles once per token and ends every row with a
// horizontal sum, so a batch of 16 decode sequences costs ~16x one sequence and batching gains little. In the
// pack a 32-byte load holds 4 (Q8_0) or 8 (4-bit) columns of 8 rows, one row per 32-bit lane: with one
// broadcast 32-bit word of activations, vpmaddubsw + vpmaddwd give 8 output rows at once, no horizontal sum,
// and a tile of up to 8 tokens decodes each nibble vector once for all of them.
//
// Without VNNI the product is vpmaddubsw (unsigned x signed bytes -> int16 pairs, saturating), so the types
// take two shapes:
//   Q4_0 / Q4_1 / Q5_0 / Q5_1: unsigned codes u (0..15 / 0..31) x q (|q| <= 127). A pair is at most
//     2 * 31 * 127 = 7874, so the int16 pairs of a whole 32-column block (4-bit: 8 products, at most
//     8 * 3810 = 30480) or half a block (5-bit: 4 products, at most 31496) are summed before one vpmaddwd.
//     The offset is the pack's: the int32 sum starts at -offset * sum(q) (Q4_0 / Q5_0), the min adds
//     m * dx * sum(q) (Q4_1 / Q5_1).
//   Q8_0 / IQ4_NL / MXFP4: signed weights w (the pack's u ^ 0x80: Q8_0's code, the grid value of the others,
//     |w| <= 128) as |w| x sign(w) * q, at most 2 * 128 * 127 = 32512 per pair: one vpmaddwd per product, and
//     no offset (the pack's xo is not read).
// Each block adds d[8 rows] * dx * (int32 sums as float) per token, so the result equals the scalar reference
// up to float summation order (tests/kernels/test_q8_avx2.cpp, test_matmul.cpp).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "formats/ggml_types.h"
#include "kernels/kernel_plan.h"
#include "kernels/lane_avx2.h"
#include "kernels/with_nt.h"

namespace lowbit::kern {
namespace {

constexpr int kMaxTokens = 8;  // tokens per register tile (8 float accumulators + 8 int16 sums, one half)

inline __m256i load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// The 16-bit scales of 8 rows as floats (f16, or MXFP4's bf16).
template <int TY>
inline __m256 scales8(const uint8_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (TY == ggml::MXFP4)
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  else
    return _mm256_cvtph_ps(h);
}

// int32 sums of the 8 rows (half h of the 16-row block) over column block b for tokens t0..t0+NT-1.
template <int TY, int NT>
inline void block_sums(const QBlkPack& p, const uint8_t* base, int64_t b, int64_t nb, int h, const int8_t* xb,
                       int64_t cols, __m256i* acc) {
  const uint8_t* cb = base + p.code_off(b) + 32 * h;
  const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  for (int j = 0; j < NT; ++j) acc[j] = _mm256_setzero_si256();
  if constexpr (TY == ggml::Q8_0) {
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
    for (int k = 0; k < 8; ++k) {
      const __m256i w = _mm256_xor_si256(load32(cb + 64 * k), flip), aw = _mm256_sign_epi8(w, w);
      for (int j = 0; j < NT; ++j) {
        const __m256i x = _mm256_sign_epi8(bcast4(xb + j * cols + 4 * k), w);
        acc[j] = pin(_mm256_add_epi32(acc[j], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, x), ones)));
      }
    }
  } else if constexpr (TY == ggml::IQ4_NL || TY == ggml::MXFP4) {
    // The grid value (lut[u] - 128) per nibble.
    const __m256i lut = _mm256_xor_si256(
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p.lut.data()))),
        _mm256_set1_epi8(static_cast<char>(0x80)));
    for (int k = 0; k < 4; ++k) {
      const __m256i v = load32(cb + 64 * k);
      const __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m4));
      const __m256i hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
      const __m256i alo = _mm256_sign_epi8(lo, lo), ahi = _mm256_sign_epi8(hi, hi);
      for (int j = 0; j < NT; ++j) {
        const int8_t* x = xb + j * cols + 8 * k;
        const __m256i pl = _mm256_maddubs_epi16(alo, _mm256_sign_epi8(bcast4(x), lo));
        const __m256i ph = _mm256_maddubs_epi16(ahi, _mm256_sign_epi8(bcast4(x + 4), hi));
        acc[j] = pin(_mm256_add_epi32(acc[j], _mm256_madd_epi16(pl, ones)));
        acc[j] = pin(_mm256_add_epi32(acc[j], _mm256_madd_epi16(ph, ones)));
      }
    }
  } else {
    constexpr bool kFive = TY == ggml::Q5_0 || TY == ggml::Q5_1;
    __m256i s16[NT];
    for (int j = 0; j < NT; ++j) s16[j] = _mm256_setzero_si256();
    for (int k = 0; k < 4; ++k) {
      const __m256i v = load32(cb + 64 * k);
      __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      if constexpr (kFive) {
        // The chunk's two uint64 masks (low / high nibbles), bit 4r + j: this half's rows are bits
        // 32h..32h+31.
        uint32_t ml, mh;
        const uint8_t* hb = base + p.hbit_off(b, nb) + 16 * k + 4 * h;
        std::memcpy(&ml, hb, 4);
        std::memcpy(&mh, hb + 8, 4);
        lo = _mm256_or_si256(lo, bits_to_bytes(ml, 0x10));
        hi = _mm256_or_si256(hi, bits_to_bytes(mh, 0x10));
      }
      // Saturating adds that never saturate (the bounds above): unlike vpaddw's plain vector `+` the
      // compiler does not reassociate them, which had it compute all 32 products of a block first and spill.
      for (int j = 0; j < NT; ++j) {
        const int8_t* x = xb + j * cols + 8 * k;
        s16[j] = _mm256_adds_epi16(s16[j], _mm256_maddubs_epi16(lo, bcast4(x)));
        s16[j] = _mm256_adds_epi16(s16[j], _mm256_maddubs_epi16(hi, bcast4(x + 4)));
      }
      if (!kFive ? k == 3 : (k & 1) == 1)
        for (int j = 0; j < NT; ++j) {
          acc[j] = pin(_mm256_add_epi32(acc[j], _mm256_madd_epi16(s16[j], ones)));
          s16[j] = _mm256_setzero_si256();
        }
    }
  }
}

// Rows [r + 8h0, r + 8h0 + 8NH) of the 16-row block (nr of its rows exist) x tokens [t0, t0 + NT); base = the
// row block's region. NH = 1: one 8-row half per pass over all column blocks, so that the tiles of several
// tokens keep their accumulators in registers (with both halves in one pass the compiler keeps every
// activation broadcast of a block live across them and spills: 2 x 8 tokens x 8 words); the second pass
// reads the region from L1 / L2. NH = 2 (one token): both halves in one pass, the stream read once.
template <int TY, int NT, int NH>
void qblk_rows(const QBlkPack& p, const uint8_t* base, int64_t nb, int64_t cols, const int8_t* q,
               const float* dx, const int32_t* xo, int64_t t0, float* y, int64_t ystride, int64_t r, int h0,
               int nr) {
  constexpr bool kMin = TY == ggml::Q4_1 || TY == ggml::Q5_1;
  constexpr bool kOffset = TY == ggml::Q4_0 || TY == ggml::Q5_0;
  __m256 accf[NH][NT];
  for (int hh = 0; hh < NH; ++hh)
    for (int j = 0; j < NT; ++j) accf[hh][j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    // As in the AVX-512 kernel: with several tokens the tile is compute-bound and the hardware prefetcher
    // lets the stream fall behind; prefetch the block pair 8 blocks ahead (the first pass streams it).
    if (NT > 1 && h0 == 0 && (b & 1) == 0) {
      const char* pf = reinterpret_cast<const char*>(base + (b + 8) * p.block_bytes);
      for (int64_t o = 0; o < 2 * p.block_bytes; o += 64) _mm_prefetch(pf + o, _MM_HINT_T0);
    }
    for (int hh = 0; hh < NH; ++hh) {
      const int h = h0 + hh;
      __m256i acc[NT];
      block_sums<TY, NT>(p, base, b, nb, h, q + t0 * cols + 32 * b, cols, acc);
      const __m256 d = scales8<TY>(base + p.scale_off(b, nb) + 16 * h);
      for (int j = 0; j < NT; ++j) {
        const int64_t tb = (t0 + j) * nb + b;
        __m256i a = acc[j];
        if constexpr (kOffset) a = _mm256_add_epi32(a, _mm256_set1_epi32(xo[tb]));
        accf[hh][j] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(a), _mm256_mul_ps(d, _mm256_set1_ps(dx[tb])), accf[hh][j]);
        if constexpr (kMin) {
          const __m256 mn = _mm256_cvtph_ps(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + p.min_off(b, nb) + 16 * h)));
          accf[hh][j] = _mm256_fmadd_ps(mn, _mm256_set1_ps(dx[tb] * static_cast<float>(xo[tb])), accf[hh][j]);
        }
      }
    }
  }
  for (int hh = 0; hh < NH; ++hh)
    for (int j = 0; j < NT; ++j)
      store_lanes(y + (t0 + j) * ystride + r + 8 * (h0 + hh), accf[hh][j], std::min(8, nr - 8 * (h0 + hh)));
}

template <int TY, int NT>
void qblk_tile(const QBlkPack& p, const uint8_t* base, int64_t nb, int64_t cols, const int8_t* q,
               const float* dx, const int32_t* xo, int64_t t0, float* y, int64_t ystride, int64_t r, int nr) {
  if (NT == 1 && nr > 8 && TY != ggml::Q5_0 && TY != ggml::Q5_1)
    return qblk_rows<TY, 1, 2>(p, base, nb, cols, q, dx, xo, t0, y, ystride, r, 0, nr);
  for (int h = 0; h < 2 && 8 * h < nr; ++h)
    qblk_rows<TY, NT, 1>(p, base, nb, cols, q, dx, xo, t0, y, ystride, r, h, nr);
}

template <int NT>
void tile_dispatch(const QBlkPack& p, const uint8_t* base, int64_t nb, const int8_t* q, const float* dx,
                   const int32_t* xo, int64_t t0, float* y, int64_t ystride, int64_t r, int nr) {
  switch (p.ggml_type) {
    case ggml::Q4_0:
      return qblk_tile<ggml::Q4_0, NT>(p, base, nb, p.cols, q, dx, xo, t0, y, ystride, r, nr);
    case ggml::Q4_1:
      return qblk_tile<ggml::Q4_1, NT>(p, base, nb, p.cols, q, dx, xo, t0, y, ystride, r, nr);
    case ggml::Q5_0:
      return qblk_tile<ggml::Q5_0, NT>(p, base, nb, p.cols, q, dx, xo, t0, y, ystride, r, nr);
    case ggml::Q5_1:
      return qblk_tile<ggml::Q5_1, NT>(p, base, nb, p.cols, q, dx, xo, t0, y, ystride, r, nr);
    case ggml::IQ4_NL:
      return qblk_tile<ggml::IQ4_NL, NT>(p, base, nb, p.cols, q, dx, xo, t0, y, ystride, r, nr);
    case ggml::MXFP4:
      return qblk_tile<ggml::MXFP4, NT>(p, base, nb, p.cols, q, dx, xo, t0, y, ystride, r, nr);
    default:
      return qblk_tile<ggml::Q8_0, NT>(p, base, nb, p.cols, q, dx, xo, t0, y, ystride, r, nr);
  }
}

}  // namespace

void qblk_block_gemm_avx2(const QBlkPack& p, const uint8_t* base, int64_t r, int nr, const int8_t* q,
                          const float* dx, const int32_t* xo, int64_t T, float* y, int64_t ystride) {
  const int64_t nb = p.cols / 32;
  for (int64_t t0 = 0; t0 < T; t0 += kMaxTokens)
    with_nt(static_cast<int>(std::min<int64_t>(kMaxTokens, T - t0)), [&](auto n) {
      tile_dispatch<decltype(n)::value>(p, base, nb, q, dx, xo, t0, y, ystride, r, nr);
    });
}

void qblk_gemm_avx2(const QBlkPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                    const int32_t* xo, int64_t T, float* y) {
  const int64_t region = p.cols / 32 * p.block_bytes;
  for (int64_t r = r0; r < r1; r += 16)
    qblk_block_gemm_avx2(p, p.data.get() + (r / 16) * region, r,
                         static_cast<int>(std::min<int64_t>(16, r1 - r)), q, dx, xo, T, y, p.rows);
}

}  // namespace lowbit::kern
