// GGUF Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS products on the load-time KPack layout (kernel_plan.h),
// AVX-512 VNNI, decode and prefill.
//
// Why: the row-at-a-time k-quant kernels (matmul_avx512_k.cpp) spend per 64 weights a vpdpbusd, a convert, a
// vpermps and an FMA, because every int32 lane mixes sub-blocks with different scales; for prefill that is no
// fewer operations than the FP32 tile, so k-quant prefill ran dequantize + FP32 tile (at llama.cpp's speed,
// not ahead). In the pack the 16 int32 lanes are 16 rows of one sub-block: a broadcast 32-bit word of Q8
// activations makes one vpdpbusd do 64 multiply-adds for 16 rows, and the float step (convert + FMA with
// d*sc[16 rows]*dx) comes once per sub-block (Q4_K 32 columns: 8 vpdpbusd; Q6_K 16 columns: 4) instead of
// once per 64 weights of a row. A 16-row x up to 8-token tile keeps its accumulators in registers, so prefill
// decodes every code vector once per 8 tokens.
//   Q4_K, Q5_K: y += (d*sc_j)[16] * dx * <u, q> - (dmin*m_j)[16] * dx * sum(q)   over sub-block j (32
//   columns);
//         Q5_K's fifth bit ORed into the nibbles from two 64-bit masks per code chunk
//   Q6_K: y += (d*sc_i)[16] * dx * (<u, q> - 32 * sum(q))                  over sub-block i (16 columns); the
//         -32 * sum(q) starts the int32 accumulator, exactly.
//   Q3_K: the same with u - 4 (2-bit fields plus a third bit from 64-bit masks); Q2_K: y += (d*sc_i)[16] * dx
//   *
//         <u, q> - (dmin*m_i)[16] * dx * sum(q) over sub-block i. The row kernels decode these at ~12 GB/s
//         per core (compute-bound: 17-21 GB/s from DRAM at 2 threads against Q4_K's pack at 29).
//   IQ4_XS: y += (d*sc_j)[16] * dx * (<u, q> - 128 * sum(q)) over sub-block j (32 columns), u = the grid
//         value + 128 from one vpshufb per 64 nibbles (vpdpbusd's unsigned operand); -128 * sum(q) starts
//         the int32 accumulator, exactly.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "formats/ggml_iq4_grid.h"
#include "formats/ggml_types.h"
#include "kernels/kernel_plan.h"
#include "kernels/pack_decode_avx512.h"
#include "kernels/with_nt.h"

namespace lowbit::kern {
namespace {

// Q4_K / Q5_K region offsets (kernel_plan.h): the 320-byte scale block leads, then code chunk k.
template <int TY>
constexpr int64_t k45_chunk(int k) {
  return TY == ggml::Q4_K ? 320 + 64 * k : 320 + 320 * (k / 4) + 64 * (k % 4);
}

// Software prefetch, kPrefetchAhead bytes ahead, of the 1/n of a region that inner step k reads. Why: in the
// Q5_K / Q6_K regions the high bits and scales sit behind the codes of a group, so each step reads two or
// three places 256-768 bytes apart and the hardware prefetchers fall behind; covering the region line by line
// read 0.70-0.94 of the time from DRAM (2 threads, docs/kernels.md, "k-quant prefetch"). Q4_K reads its
// region front to back and measured 1.04 with it, so it keeps one line per region; Q2_K / Q3_K (short
// regions, a scale load per 64 or 96 bytes of codes) measured 0.91-0.98 / 0.80-0.93 with it.
constexpr int64_t kPrefetchAhead = 2048;
template <int n>
inline void prefetch_step(const uint8_t* reg, int64_t sb_bytes, int k) {
  const int64_t step = (sb_bytes + n - 1) / n;
  const char* p = reinterpret_cast<const char*>(reg + kPrefetchAhead + k * step);
  for (int64_t o = 0; o <= step; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
}

// IQ4_XS's grid as vpdpbusd's unsigned operand: value + 128.
struct Iq4U {
  alignas(16) uint8_t v[16];
};
constexpr Iq4U make_iq4_u() {
  Iq4U u{};
  for (int c = 0; c < 16; ++c) u.v[c] = static_cast<uint8_t>(formats_detail::kIq4Grid[c] + 128);
  return u;
}
constexpr Iq4U kIq4U = make_iq4_u();

inline __m512i bcast32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Rows [r, r + 16) x tokens [t0, t0 + NT). reg0: the row block's first super-block region.
template <int TY, int NT>
void kpack_tile(const KPack& p, const uint8_t* reg0, int64_t nsb, const int8_t* q, const float* dx,
                const int32_t* s16, int64_t t0, float* y, int64_t r, __mmask16 m) {
  const int64_t cols = p.cols, n32 = cols / 32, n16 = cols / 16;
  __m512 accf[NT];
  for (int j = 0; j < NT; ++j) accf[j] = _mm512_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    const uint8_t* reg = reg0 + s * p.sb_bytes;
    // DRAM streaming: 4 KiB ahead (the regions of a row block are one sequential stream; harmless past the
    // end).
    if constexpr (TY == ggml::Q4_K || TY == ggml::IQ4_XS)
      _mm_prefetch(reinterpret_cast<const char*>(reg + 4096), _MM_HINT_T0);
    if constexpr (TY == ggml::Q2_K || TY == ggml::Q3_K) {
      // 16 sub-blocks of 16 columns; u_q = the 2-bit field q of every byte (columns 16i + 4q + j of row r in
      // byte 4r + j), Q3_K's third bit ORed in from mask q.
      const __m512 d = cvt_f16x16(reg);
      const __m512 dmin = TY == ggml::Q2_K ? cvt_f16x16(reg + 32) : _mm512_setzero_ps();
      for (int i = 0; i < 16; ++i) {
        prefetch_step<16>(reg, p.sb_bytes, i);
        __m512 ds, dm = _mm512_setzero_ps();
        const uint8_t* v = reg + (TY == ggml::Q2_K ? 320 + 64 * i : 288 + 96 * i);
        if constexpr (TY == ggml::Q2_K) {
          const __m512i scm =
              _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(reg + 64 + 16 * i)));
          ds = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_and_si512(scm, _mm512_set1_epi32(15))));
          dm = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_srli_epi32(scm, 4)));
        } else {
          ds = _mm512_mul_ps(d, cvt_i8x16(reg + 32 + 16 * i));
        }
        __m512i u[4];
        k23_codes(v, TY == ggml::Q3_K, u);
        for (int j = 0; j < NT; ++j) {
          const int8_t* xb = q + (t0 + j) * cols + 256 * s + 16 * i;
          const int32_t s16i = s16[(t0 + j) * n16 + 16 * s + i];
          // Q3_K: the value is u - 4; -4 * sum(q) starts the int32 accumulator, exactly.
          __m512i acc = TY == ggml::Q3_K ? _mm512_set1_epi32(-4 * s16i) : _mm512_setzero_si512();
          for (int k = 0; k < 4; ++k) acc = _mm512_dpbusd_epi32(acc, u[k], bcast32(xb + 4 * k));
          const float xd = dx[(t0 + j) * n32 + 8 * s + i / 2];
          accf[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(ds, _mm512_set1_ps(xd)), accf[j]);
          if constexpr (TY == ggml::Q2_K)  // - dmin * m * dx * sum(q)
            accf[j] = _mm512_fnmadd_ps(dm, _mm512_set1_ps(xd * static_cast<float>(s16i)), accf[j]);
        }
      }
    } else if constexpr (TY == ggml::IQ4_XS) {
      const __m512 d = cvt_f16x16(reg);
      const __m512i lut = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kIq4U.v)));
      for (int sb = 0; sb < 8; ++sb) {
        const __m512 ds = _mm512_mul_ps(d, cvt_i8x16(reg + 32 + 16 * sb));
        __m512i acc[NT];
        for (int j = 0; j < NT; ++j) {
          const int64_t t16 = (t0 + j) * n16 + 16 * s + 2 * sb;
          acc[j] = _mm512_set1_epi32(-128 * (s16[t16] + s16[t16 + 1]));
        }
        for (int k = 0; k < 4; ++k) {
          const __m512i v = _mm512_load_si512(reg + 192 + 64 * (4 * sb + k));
          __m512i lo, hi;
          split_nibbles(v, lo, hi);
          lo = _mm512_shuffle_epi8(lut, lo);
          hi = _mm512_shuffle_epi8(lut, hi);
          for (int j = 0; j < NT; ++j) {
            const int8_t* xb = q + (t0 + j) * cols + 256 * s + 32 * sb + 8 * k;
            acc[j] = _mm512_dpbusd_epi32(acc[j], lo, bcast32(xb));
            acc[j] = _mm512_dpbusd_epi32(acc[j], hi, bcast32(xb + 4));
          }
        }
        for (int j = 0; j < NT; ++j) {
          const float xd = dx[(t0 + j) * n32 + 8 * s + sb];
          accf[j] =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[j]), _mm512_mul_ps(ds, _mm512_set1_ps(xd)), accf[j]);
        }
      }
    } else if constexpr (TY != ggml::Q6_K) {
      const uint8_t* sc = reg;  // the scale block
      const __m512 d = cvt_f16x16(sc), dmin = cvt_f16x16(sc + 32);
      for (int sb = 0; sb < 8; ++sb) {
        if constexpr (TY == ggml::Q5_K) prefetch_step<8>(reg, p.sb_bytes, sb);
        const __m512 ds = _mm512_mul_ps(d, cvt_u8x16(sc + 64 + 16 * sb));
        const __m512 dm = _mm512_mul_ps(dmin, cvt_u8x16(sc + 192 + 16 * sb));
        __m512i acc[NT];
        for (int j = 0; j < NT; ++j) acc[j] = _mm512_setzero_si512();
        for (int k = 0; k < 4; ++k) {
          const __m512i v = _mm512_load_si512(reg + k45_chunk<TY>(4 * sb + k));
          __m512i lo, hi;
          split_nibbles(v, lo, hi);
          if constexpr (TY == ggml::Q5_K) or_fifth_bits(reg + 320 + 320 * sb + 256 + 16 * k, lo, hi);
          for (int j = 0; j < NT; ++j) {
            const int8_t* xb = q + (t0 + j) * cols + 256 * s + 32 * sb + 8 * k;
            acc[j] = _mm512_dpbusd_epi32(acc[j], lo, bcast32(xb));
            acc[j] = _mm512_dpbusd_epi32(acc[j], hi, bcast32(xb + 4));
          }
        }
        for (int j = 0; j < NT; ++j) {
          const int64_t tb = (t0 + j) * n32 + 8 * s + sb, t16 = (t0 + j) * n16 + 16 * s + 2 * sb;
          const float xd = dx[tb];
          accf[j] =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[j]), _mm512_mul_ps(ds, _mm512_set1_ps(xd)), accf[j]);
          accf[j] =
              _mm512_fnmadd_ps(dm, _mm512_set1_ps(xd * static_cast<float>(s16[t16] + s16[t16 + 1])), accf[j]);
        }
      }
    } else {
      const __m512 d = cvt_f16x16(reg);
      for (int i = 0; i < 16; ++i) {
        prefetch_step<16>(reg, p.sb_bytes, i);
        const uint8_t* g = reg + 64 + (i / 4) * 832;  // the group of sub-blocks 4(i/4)..+3 (kernel_plan.h)
        const __m512 ds = _mm512_mul_ps(d, cvt_i8x16(g + 768 + 16 * (i % 4)));
        const __m512i h = _mm512_load_si512(g + 512 + 64 * (i % 4));
        const __m512i a = _mm512_load_si512(g + 128 * (i % 4)), b = _mm512_load_si512(g + 128 * (i % 4) + 64);
        __m512i u[4];
        q6k_codes(a, b, h, u);
        for (int j = 0; j < NT; ++j) {
          const int8_t* xb = q + (t0 + j) * cols + 256 * s + 16 * i;
          __m512i acc = _mm512_set1_epi32(-32 * s16[(t0 + j) * n16 + 16 * s + i]);
          for (int k = 0; k < 4; ++k) acc = _mm512_dpbusd_epi32(acc, u[k], bcast32(xb + 4 * k));
          const float xd = dx[(t0 + j) * n32 + 8 * s + i / 2];
          accf[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(ds, _mm512_set1_ps(xd)), accf[j]);
        }
      }
    }
  }
  for (int j = 0; j < NT; ++j) _mm512_mask_storeu_ps(y + (t0 + j) * p.rows + r, m, accf[j]);
}

}  // namespace

void kpack_block_gemm_avx512(const KPack& p, const uint8_t* base, int64_t r, int nr, const int8_t* q,
                             const float* dx, const int32_t* s16, int64_t T, float* y) {
  const int64_t nsb = p.cols / 256;
  const auto m = static_cast<uint16_t>((1u << nr) - 1);
  for (int64_t t0 = 0; t0 < T; t0 += 8)
    with_nt(static_cast<int>(std::min<int64_t>(8, T - t0)), [&](auto n) {
      constexpr int NT = decltype(n)::value;
      switch (p.ggml_type) {
        case ggml::Q2_K:
          return kpack_tile<ggml::Q2_K, NT>(p, base, nsb, q, dx, s16, t0, y, r, m);
        case ggml::Q3_K:
          return kpack_tile<ggml::Q3_K, NT>(p, base, nsb, q, dx, s16, t0, y, r, m);
        case ggml::Q4_K:
          return kpack_tile<ggml::Q4_K, NT>(p, base, nsb, q, dx, s16, t0, y, r, m);
        case ggml::Q5_K:
          return kpack_tile<ggml::Q5_K, NT>(p, base, nsb, q, dx, s16, t0, y, r, m);
        case ggml::IQ4_XS:
          return kpack_tile<ggml::IQ4_XS, NT>(p, base, nsb, q, dx, s16, t0, y, r, m);
        default:
          return kpack_tile<ggml::Q6_K, NT>(p, base, nsb, q, dx, s16, t0, y, r, m);
      }
    });
}

void kpack_gemm_avx512(const KPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                       const int32_t* s16, int64_t T, float* y) {
  const int64_t region = p.cols / 256 * p.sb_bytes;
  for (int64_t r = r0; r < r1; r += 16)
    kpack_block_gemm_avx512(p, p.data.get() + (r / 16) * region, r,
                            static_cast<int>(std::min<int64_t>(16, r1 - r)), q, dx, s16, T, y);
}

}  // namespace lowbit::kern
