// GGUF Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS products on the load-time KPack layout (kernel_plan.h) on
// the AVX2 tier, decode and prefill ("q8dot16", as the legacy types' matmul_avx2_qblk.cpp).
//
// Why: the AVX2 row kernel (matmul_avx2_q8.cpp) decodes a row's codes again for every token of a prefill or a
// batched decode step. In the pack, a 32-byte half of a 64-byte code vector holds 8 rows x 4 columns (one row
// per 32-bit lane) of one sub-block, so one broadcast activation word and one vpmaddubsw do 32 multiply-adds
// for 8 rows, and the float step (convert + FMA with d*sc[8 rows]*dx) comes once per sub-block and token.
//
// vpmaddubsw multiplies unsigned codes u by the signed Q8 activations q (|q| <= 127) into saturating int16
// pairs, so int16 sums are flushed to int32 (vpmaddwd) before they can reach 32767:
//   Q2_K u 0..3 and Q3_K u 0..7 (u - 4 its value): a 16-column sub-block is 4 products, at most 4 * 1778;
//   Q4_K u 0..15: a 32-column sub-block is 8 products, at most 8 * 3810 = 30480;
//   Q5_K u 0..31: flushed every 4 products (4 * 7874 = 31496), twice per sub-block;
//   Q6_K u 0..63 (u - 32 its value): flushed every 2 products (2 * 16002 = 32004), twice per sub-block.
//   IQ4_XS: the grid values g (-127..113, signed, from one vpshufb per 32 nibbles) as |g| times q with g's
//   sign, so a pair is at most 2 * 127 * 127 = 32258: every product is flushed at once.
// Offsets start the int32 sum (-4 / -32 times the sub-block's activation sum, exact); Q2_K / Q4_K / Q5_K's
// min is one FMA with dmin*m[8 rows] * dx * (activation sum). The result equals the scalar reference up to
// float summation order (tests/kernels/test_kernels.cpp: MatmulVsReference, GgmlRandomBlocks on the avx2
// tier).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "formats/ggml_iq4_grid.h"
#include "formats/ggml_types.h"
#include "kernels/kernel_plan.h"
#include "kernels/lane_avx2.h"
#include "kernels/with_nt.h"

namespace lowbit::kern {
namespace {

constexpr int kMaxTokens = 8;

inline __m256i load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

inline __m256 f16x8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 u8x8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256 i8x8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline __m256i flush(__m256i acc, __m256i& s16) {
  acc = pin(_mm256_add_epi32(acc, _mm256_madd_epi16(s16, _mm256_set1_epi16(1))));
  s16 = _mm256_setzero_si256();
  return acc;
}

// Q4_K / Q5_K region offsets (kernel_plan.h): the 320-byte scale block leads, then code chunk k.
template <int TY>
constexpr int64_t k45_chunk(int k) {
  return TY == ggml::Q4_K ? 320 + 64 * k : 320 + 320 * (k / 4) + 64 * (k % 4);
}

// Super-block s (region reg) of half h for tokens [t0, t0 + NT), added to accf. Always inlined: the float
// accumulators stay in registers.
template <int TY, int NT>
[[gnu::always_inline]] inline void sb_half(const KPack& p, const uint8_t* reg, int64_t s, int h,
                                           const int8_t* q, const float* dx, const int32_t* s16s, int64_t t0,
                                           __m256* accf) {
  const int64_t cols = p.cols, n32 = cols / 32, n16 = cols / 16;
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  {
    if constexpr (TY == ggml::Q2_K || TY == ggml::Q3_K) {
      const __m256 d = f16x8(reg + 16 * h);
      const __m256 dmin = TY == ggml::Q2_K ? f16x8(reg + 32 + 16 * h) : _mm256_setzero_ps();
      const __m256i m3 = _mm256_set1_epi8(3);
      for (int i = 0; i < 16; ++i) {
        __m256 ds, dm = _mm256_setzero_ps();
        const uint8_t* v = reg + (TY == ggml::Q2_K ? 320 + 64 * i : 288 + 96 * i);
        if constexpr (TY == ggml::Q2_K) {
          const __m256i scm = _mm256_cvtepu8_epi32(
              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(reg + 64 + 16 * i + 8 * h)));
          ds = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_and_si256(scm, _mm256_set1_epi32(15))));
          dm = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_srli_epi32(scm, 4)));
        } else {
          ds = _mm256_mul_ps(d, i8x8(reg + 32 + 16 * i + 8 * h));
        }
        const __m256i c = load32(v + 32 * h);
        __m256i u[4] = {_mm256_and_si256(c, m3), _mm256_and_si256(_mm256_srli_epi16(c, 2), m3),
                        _mm256_and_si256(_mm256_srli_epi16(c, 4), m3),
                        _mm256_and_si256(_mm256_srli_epi16(c, 6), m3)};
        if constexpr (TY == ggml::Q3_K)
          for (int k = 0; k < 4; ++k)
            u[k] = _mm256_or_si256(u[k], bits_to_bytes(u32_at(v + 64 + 8 * k + 4 * h), 4));
        for (int j = 0; j < NT; ++j) {
          const int8_t* xb = q + (t0 + j) * cols + 256 * s + 16 * i;
          const int32_t s16i = s16s[(t0 + j) * n16 + 16 * s + i];
          __m256i s16 = _mm256_maddubs_epi16(u[0], bcast4(xb));
          for (int k = 1; k < 4; ++k)
            s16 = _mm256_adds_epi16(s16, _mm256_maddubs_epi16(u[k], bcast4(xb + 4 * k)));
          __m256i acc = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
          if constexpr (TY == ggml::Q3_K) acc = _mm256_add_epi32(acc, _mm256_set1_epi32(-4 * s16i));
          const float xd = dx[(t0 + j) * n32 + 8 * s + i / 2];
          accf[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), _mm256_mul_ps(ds, _mm256_set1_ps(xd)), accf[j]);
          if constexpr (TY == ggml::Q2_K)
            accf[j] = _mm256_fnmadd_ps(dm, _mm256_set1_ps(xd * static_cast<float>(s16i)), accf[j]);
        }
      }
    } else if constexpr (TY == ggml::IQ4_XS) {
      const __m256 d = f16x8(reg + 16 * h);
      const __m256i lut = _mm256_broadcastsi128_si256(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(formats_detail::kIq4Grid)));
      const __m256i ones = _mm256_set1_epi16(1);
      for (int sb = 0; sb < 8; ++sb) {
        const __m256 ds = _mm256_mul_ps(d, i8x8(reg + 32 + 16 * sb + 8 * h));
        __m256i acc[NT];
        for (int j = 0; j < NT; ++j) acc[j] = _mm256_setzero_si256();
        for (int k = 0; k < 4; ++k) {
          const __m256i v = load32(reg + 192 + 64 * (4 * sb + k) + 32 * h);
          const __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m4));
          const __m256i hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
          const __m256i alo = _mm256_abs_epi8(lo), ahi = _mm256_abs_epi8(hi);
          for (int j = 0; j < NT; ++j) {
            const int8_t* xb = q + (t0 + j) * cols + 256 * s + 32 * sb + 8 * k;
            const __m256i pl = _mm256_maddubs_epi16(alo, _mm256_sign_epi8(bcast4(xb), lo));
            const __m256i ph = _mm256_maddubs_epi16(ahi, _mm256_sign_epi8(bcast4(xb + 4), hi));
            acc[j] = pin(_mm256_add_epi32(
                acc[j], _mm256_add_epi32(_mm256_madd_epi16(pl, ones), _mm256_madd_epi16(ph, ones))));
          }
        }
        for (int j = 0; j < NT; ++j) {
          const float xd = dx[(t0 + j) * n32 + 8 * s + sb];
          accf[j] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[j]), _mm256_mul_ps(ds, _mm256_set1_ps(xd)), accf[j]);
        }
      }
    } else if constexpr (TY == ggml::Q4_K || TY == ggml::Q5_K) {
      const __m256 d = f16x8(reg + 16 * h), dmin = f16x8(reg + 32 + 16 * h);
      for (int sb = 0; sb < 8; ++sb) {
        const __m256 ds = _mm256_mul_ps(d, u8x8(reg + 64 + 16 * sb + 8 * h));
        const __m256 dm = _mm256_mul_ps(dmin, u8x8(reg + 192 + 16 * sb + 8 * h));
        __m256i acc[NT], s16[NT];
        for (int j = 0; j < NT; ++j) acc[j] = s16[j] = _mm256_setzero_si256();
        for (int k = 0; k < 4; ++k) {
          const __m256i v = load32(reg + k45_chunk<TY>(4 * sb + k) + 32 * h);
          __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
          if constexpr (TY == ggml::Q5_K) {
            const uint8_t* hb = reg + 320 + 320 * sb + 256 + 16 * k + 4 * h;
            lo = _mm256_or_si256(lo, bits_to_bytes(u32_at(hb), 0x10));
            hi = _mm256_or_si256(hi, bits_to_bytes(u32_at(hb + 8), 0x10));
          }
          for (int j = 0; j < NT; ++j) {
            const int8_t* xb = q + (t0 + j) * cols + 256 * s + 32 * sb + 8 * k;
            s16[j] = _mm256_adds_epi16(s16[j], _mm256_maddubs_epi16(lo, bcast4(xb)));
            s16[j] = _mm256_adds_epi16(s16[j], _mm256_maddubs_epi16(hi, bcast4(xb + 4)));
          }
          if (TY == ggml::Q4_K ? k == 3 : (k & 1) == 1)
            for (int j = 0; j < NT; ++j) acc[j] = flush(acc[j], s16[j]);
        }
        for (int j = 0; j < NT; ++j) {
          const int64_t tb = (t0 + j) * n32 + 8 * s + sb, t16 = (t0 + j) * n16 + 16 * s + 2 * sb;
          const float xd = dx[tb];
          accf[j] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[j]), _mm256_mul_ps(ds, _mm256_set1_ps(xd)), accf[j]);
          accf[j] = _mm256_fnmadd_ps(dm, _mm256_set1_ps(xd * static_cast<float>(s16s[t16] + s16s[t16 + 1])),
                                     accf[j]);
        }
      }
    } else {  // Q6_K
      const __m256 d = f16x8(reg + 16 * h);
      for (int i = 0; i < 16; ++i) {
        const uint8_t* g = reg + 64 + (i / 4) * 832;  // the group of sub-blocks 4(i/4)..+3 (kernel_plan.h)
        const __m256 ds = _mm256_mul_ps(d, i8x8(g + 768 + 16 * (i % 4) + 8 * h));
        const __m256i hb = load32(g + 512 + 64 * (i % 4) + 32 * h);
        const __m256i a = load32(g + 128 * (i % 4) + 32 * h), b = load32(g + 128 * (i % 4) + 64 + 32 * h);
        // u = low nibble | (two high bits) << 4, per quarter of the sub-block (kernel_plan.h).
        const __m256i u[4] = {
            _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4),
                            _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30)),
            _mm256_or_si256(_mm256_and_si256(b, m4), _mm256_and_si256(hb, m30)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4),
                            _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30))};
        for (int j = 0; j < NT; ++j) {
          const int8_t* xb = q + (t0 + j) * cols + 256 * s + 16 * i;
          __m256i acc = _mm256_set1_epi32(-32 * s16s[(t0 + j) * n16 + 16 * s + i]);
          for (int k = 0; k < 4; k += 2) {
            __m256i s16 = _mm256_adds_epi16(_mm256_maddubs_epi16(u[k], bcast4(xb + 4 * k)),
                                            _mm256_maddubs_epi16(u[k + 1], bcast4(xb + 4 * k + 4)));
            acc = flush(acc, s16);
          }
          const float xd = dx[(t0 + j) * n32 + 8 * s + i / 2];
          accf[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), _mm256_mul_ps(ds, _mm256_set1_ps(xd)), accf[j]);
        }
      }
    }
  }
}

// Rows [r + 8h0, r + 8h0 + 8NH) of the 16-row block (nr of its rows exist) x tokens [t0, t0 + NT); reg0: the
// row block's first super-block region. NH = 1: one half per pass, as in matmul_avx2_qblk.cpp (registers: NT
// float accumulators and NT int16 sums); NH = 2 (one token): both halves in one pass, the stream read once.
template <int TY, int NT, int NH>
void kpack_rows(const KPack& p, const uint8_t* reg0, int64_t nsb, const int8_t* q, const float* dx,
                const int32_t* s16s, int64_t t0, float* y, int64_t r, int h0, int nr) {
  __m256 accf[NH][NT];
  for (int hh = 0; hh < NH; ++hh)
    for (int j = 0; j < NT; ++j) accf[hh][j] = _mm256_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    const uint8_t* reg = reg0 + s * p.sb_bytes;
    if (h0 == 0) _mm_prefetch(reinterpret_cast<const char*>(reg + 4096), _MM_HINT_T0);
    for (int hh = 0; hh < NH; ++hh) sb_half<TY, NT>(p, reg, s, h0 + hh, q, dx, s16s, t0, accf[hh]);
  }
  for (int hh = 0; hh < NH; ++hh)
    for (int j = 0; j < NT; ++j)
      store_lanes(y + (t0 + j) * p.rows + r + 8 * (h0 + hh), accf[hh][j], std::min(8, nr - 8 * (h0 + hh)));
}

template <int TY, int NT>
void kpack_tile(const KPack& p, const uint8_t* reg0, int64_t nsb, const int8_t* q, const float* dx,
                const int32_t* s16, int64_t t0, float* y, int64_t r, int nr) {
  if (NT == 1 && nr > 8) return kpack_rows<TY, 1, 2>(p, reg0, nsb, q, dx, s16, t0, y, r, 0, nr);
  for (int h = 0; h < 2 && 8 * h < nr; ++h) kpack_rows<TY, NT, 1>(p, reg0, nsb, q, dx, s16, t0, y, r, h, nr);
}

template <int NT>
void tile(const KPack& p, const uint8_t* reg0, int64_t nsb, const int8_t* q, const float* dx,
          const int32_t* s16, int64_t t0, float* y, int64_t r, int nr) {
  switch (p.ggml_type) {
    case ggml::Q2_K:
      return kpack_tile<ggml::Q2_K, NT>(p, reg0, nsb, q, dx, s16, t0, y, r, nr);
    case ggml::Q3_K:
      return kpack_tile<ggml::Q3_K, NT>(p, reg0, nsb, q, dx, s16, t0, y, r, nr);
    case ggml::Q4_K:
      return kpack_tile<ggml::Q4_K, NT>(p, reg0, nsb, q, dx, s16, t0, y, r, nr);
    case ggml::Q5_K:
      return kpack_tile<ggml::Q5_K, NT>(p, reg0, nsb, q, dx, s16, t0, y, r, nr);
    case ggml::IQ4_XS:
      return kpack_tile<ggml::IQ4_XS, NT>(p, reg0, nsb, q, dx, s16, t0, y, r, nr);
    default:
      return kpack_tile<ggml::Q6_K, NT>(p, reg0, nsb, q, dx, s16, t0, y, r, nr);
  }
}

}  // namespace

void kpack_gemm_avx2(const KPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                     const int32_t* s16, int64_t T, float* y) {
  const int64_t nsb = p.cols / 256, region = nsb * p.sb_bytes;
  for (int64_t r = r0; r < r1; r += 16) {
    const uint8_t* reg0 = p.data.get() + (r / 16) * region;
    const int nr = static_cast<int>(std::min<int64_t>(16, r1 - r));
    for (int64_t t0 = 0; t0 < T; t0 += kMaxTokens)
      with_nt(static_cast<int>(std::min<int64_t>(kMaxTokens, T - t0)),
              [&](auto n) { tile<decltype(n)::value>(p, reg0, nsb, q, dx, s16, t0, y, r, nr); });
  }
}

}  // namespace lowbit::kern
