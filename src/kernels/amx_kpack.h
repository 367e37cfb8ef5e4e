// Internal to src/kernels: GGUF Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS prefill on AMX-INT8 tiles over the
// load-time KPack (kernel_plan.h), the k-quant counterpart of amx_qblk.h, over the same tile-unit policies
// (AmxHw in matmul_amx.cpp, AmxEmu from amx_emu.h in matmul_avx512_amx_emu.cpp; both AVX-512 units).
//
// The VNNI kernel (matmul_avx512_kpack.cpp) sums each sub-block of a super-block exactly in int32 and takes
// one float step per sub-block: acc = fma(float(S), d*sc[16 rows] * dx, acc) (- dmin*m[16 rows] * (dx * sum
// q) for the types with a min). Here S comes from one tile product per 16 tokens and sub-block, with the same
// float steps in the same order: the same bits.
//   sub-blocks of 32 columns (Q4_K, Q5_K, IQ4_XS): B tile 8 x 64 bytes, A 16 tokens x 32 bytes;
//   sub-blocks of 16 columns (Q2_K, Q3_K, Q6_K):   B tile 4 x 64 bytes, A 16 tokens x 16 bytes.
// B[kk][4n + i] = w[n][sub-block column 4kk + i]: the pack's 64-byte code vectors are already in that order
// (kernel_plan.h); the codes become signed values (Q3_K u - 4, Q6_K u - 32, IQ4_XS the grid value) for
// TDPBSSD, or stay unsigned with a min (Q2_K, Q4_K, Q5_K) for TDPBSUD. Each 16-row block's super-blocks are
// unpacked once per call into B tiles and float step vectors.
#pragma once
#if defined(__AVX512F__)
#include <immintrin.h>

#include <cstdint>

#include "formats/ggml_iq4_grid.h"
#include "formats/ggml_types.h"
#include "kernels/amx_tiles.h"
#include "kernels/kernel_plan.h"
#include "kernels/pack_decode_avx512.h"

namespace lowbit::kern {
namespace {

inline bool amx_k_min(int type) {
  return type == ggml::Q2_K || type == ggml::Q4_K || type == ggml::Q5_K;
}

// -v exactly (the sign bit flipped, -0 for +0): fma(-dm, b, acc) is then the VNNI kernel's fnmadd(dm, b,
// acc).
inline __m512 amx_k_neg(__m512 v) {
  return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN)));
}
// One super-block region -> its sub-blocks' B tiles (bt: 4096 bytes) and float steps ds / dm (16 per
// sub-block; dm negated), exactly the vectors and products of matmul_avx512_kpack.cpp.
inline void amx_k_unpack(int type, const uint8_t* reg, int8_t* bt, float* ds, float* dm) {
  auto put = [&](int row, __m512i v) { _mm512_store_si512(bt + 64 * row, v); };
  if (type == ggml::Q2_K || type == ggml::Q3_K) {
    const __m512 d = cvt_f16x16(reg);
    const __m512 dmin = type == ggml::Q2_K ? cvt_f16x16(reg + 32) : _mm512_setzero_ps();
    for (int i = 0; i < 16; ++i) {
      const uint8_t* v = reg + (type == ggml::Q2_K ? 320 + 64 * i : 288 + 96 * i);
      if (type == ggml::Q2_K) {
        const __m512i scm =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(reg + 64 + 16 * i)));
        _mm512_store_ps(ds + 16 * i,
                        _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_and_si512(scm, _mm512_set1_epi32(15)))));
        _mm512_store_ps(dm + 16 * i,
                        amx_k_neg(_mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_srli_epi32(scm, 4)))));
      } else {
        _mm512_store_ps(ds + 16 * i, _mm512_mul_ps(d, cvt_i8x16(reg + 32 + 16 * i)));
      }
      __m512i u[4];
      k23_codes(v, type == ggml::Q3_K, u);
      for (int q = 0; q < 4; ++q)  // Q3_K: u - 4
        put(4 * i + q, type == ggml::Q3_K ? _mm512_sub_epi8(u[q], _mm512_set1_epi8(4)) : u[q]);
    }
  } else if (type == ggml::IQ4_XS) {
    const __m512 d = cvt_f16x16(reg);
    const __m512i lut =
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(formats_detail::kIq4Grid)));
    for (int sb = 0; sb < 8; ++sb) {
      _mm512_store_ps(ds + 16 * sb, _mm512_mul_ps(d, cvt_i8x16(reg + 32 + 16 * sb)));
      for (int k = 0; k < 4; ++k) {
        const __m512i v = _mm512_load_si512(reg + 192 + 64 * (4 * sb + k));
        __m512i lo, hi;
        split_nibbles(v, lo, hi);
        put(8 * sb + 2 * k, _mm512_shuffle_epi8(lut, lo));
        put(8 * sb + 2 * k + 1, _mm512_shuffle_epi8(lut, hi));
      }
    }
  } else if (type == ggml::Q4_K || type == ggml::Q5_K) {
    const __m512 d = cvt_f16x16(reg), dmin = cvt_f16x16(reg + 32);
    for (int sb = 0; sb < 8; ++sb) {
      _mm512_store_ps(ds + 16 * sb, _mm512_mul_ps(d, cvt_u8x16(reg + 64 + 16 * sb)));
      _mm512_store_ps(dm + 16 * sb, amx_k_neg(_mm512_mul_ps(dmin, cvt_u8x16(reg + 192 + 16 * sb))));
      for (int k = 0; k < 4; ++k) {
        const int chunk = 4 * sb + k;
        const __m512i v = _mm512_load_si512(
            reg + (type == ggml::Q4_K ? 320 + 64 * chunk : 320 + 320 * (chunk / 4) + 64 * (chunk % 4)));
        __m512i lo, hi;
        split_nibbles(v, lo, hi);
        if (type == ggml::Q5_K) or_fifth_bits(reg + 320 + 320 * sb + 256 + 16 * k, lo, hi);
        put(8 * sb + 2 * k, lo);
        put(8 * sb + 2 * k + 1, hi);
      }
    }
  } else {  // Q6_K: u - 32
    const __m512 d = cvt_f16x16(reg);
    const __m512i o32 = _mm512_set1_epi8(32);
    for (int i = 0; i < 16; ++i) {
      const uint8_t* g = reg + 64 + (i / 4) * 832;
      _mm512_store_ps(ds + 16 * i, _mm512_mul_ps(d, cvt_i8x16(g + 768 + 16 * (i % 4))));
      const __m512i h = _mm512_load_si512(g + 512 + 64 * (i % 4));
      const __m512i a = _mm512_load_si512(g + 128 * (i % 4)), b = _mm512_load_si512(g + 128 * (i % 4) + 64);
      __m512i u[4];
      q6k_codes(a, b, h, u);
      for (int q = 0; q < 4; ++q) put(4 * i + q, _mm512_sub_epi8(u[q], o32));
    }
  }
}

// Rows [r0, r1) (r0 a multiple of 16), all T tokens; q, dx, s (each sub-block's code sums) and y as
// amx_unit_rows reads them, one unit per sub-block. block: one 16-row block packed per call, read instead of
// the load-time pack's data.
template <class Ops>
void amx_kpack_rows(const KPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                    const int32_t* s, int64_t T, float* y, const uint8_t* block) {
  const int kw = kpack_sub_block_cols(p.ggml_type);
  const int64_t nsb = p.cols / 256, per_sb = 256 / kw, region = nsb * p.sb_bytes;
  auto unpack = [&](int64_t rb, int8_t* bt, float* ds, float* nm) {
    const uint8_t* src = block ? block : p.data.get() + rb * region;
    for (int64_t sb = 0; sb < nsb; ++sb)
      amx_k_unpack(p.ggml_type, src + sb * p.sb_bytes, bt + sb * 4096, ds + sb * per_sb * 16,
                   nm ? nm + sb * per_sb * 16 : nullptr);
  };
  if (amx_k_min(p.ggml_type))
    amx_unit_rows<Ops, true>(kw, nsb * per_sb, p.rows, p.cols, r0, r1, q, dx, s, T, y, unpack);
  else
    amx_unit_rows<Ops, false>(kw, nsb * per_sb, p.rows, p.cols, r0, r1, q, dx, s, T, y, unpack);
}

}  // namespace
}  // namespace lowbit::kern
#endif
