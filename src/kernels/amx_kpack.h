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

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "formats/ggml_iq4_grid.h"
#include "formats/ggml_types.h"
#include "kernels/amx_tiles.h"
#include "kernels/kernel_plan.h"

namespace lowbit::kern {
namespace {

inline bool amx_k_wide(int type) {  // sub-blocks of 32 columns
  return type == ggml::Q4_K || type == ggml::Q5_K || type == ggml::IQ4_XS;
}
inline bool amx_k_min(int type) {
  return type == ggml::Q2_K || type == ggml::Q4_K || type == ggml::Q5_K;
}

// Tiles 0 / 1: C; 4 / 5: A (16 tokens x kw bytes); 6 / 7: B (kw / 4 rows x 64 bytes).
inline AmxTileCfg amx_k_cfg(int kw) {
  AmxTileCfg c;
  for (int i : {0, 1}) c.colsb[i] = 64, c.rows[i] = 16;
  for (int i : {4, 5}) c.colsb[i] = static_cast<uint16_t>(kw), c.rows[i] = 16;
  for (int i : {6, 7}) c.colsb[i] = 64, c.rows[i] = static_cast<uint8_t>(kw / 4);
  return c;
}

inline __m512 amx_k_u8x16(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline __m512 amx_k_i8x16(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline __m512 amx_k_f16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// One super-block region -> its sub-blocks' B tiles (bt: 4096 bytes) and float steps ds / dm (16 per
// sub-block), exactly the vectors and products of matmul_avx512_kpack.cpp.
inline void amx_k_unpack(int type, const uint8_t* reg, int8_t* bt, float* ds, float* dm) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30), m3 = _mm512_set1_epi8(3);
  auto put = [&](int row, __m512i v) { _mm512_store_si512(bt + 64 * row, v); };
  if (type == ggml::Q2_K || type == ggml::Q3_K) {
    const __m512 d = amx_k_f16x16(reg);
    const __m512 dmin = type == ggml::Q2_K ? amx_k_f16x16(reg + 32) : _mm512_setzero_ps();
    for (int i = 0; i < 16; ++i) {
      const uint8_t* v = reg + (type == ggml::Q2_K ? 320 + 64 * i : 288 + 96 * i);
      if (type == ggml::Q2_K) {
        const __m512i scm =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(reg + 64 + 16 * i)));
        _mm512_store_ps(ds + 16 * i,
                        _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_and_si512(scm, _mm512_set1_epi32(15)))));
        _mm512_store_ps(dm + 16 * i, _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_srli_epi32(scm, 4))));
      } else {
        _mm512_store_ps(ds + 16 * i, _mm512_mul_ps(d, amx_k_i8x16(reg + 32 + 16 * i)));
      }
      const __m512i c = _mm512_loadu_si512(v);
      for (int q = 0; q < 4; ++q) {
        __m512i u = _mm512_and_si512(_mm512_srli_epi16(c, 2 * q), m3);
        if (type == ggml::Q3_K) {  // the third bit, then u - 4
          uint64_t mq;
          std::memcpy(&mq, v + 64 + 8 * q, 8);
          u = _mm512_or_si512(u, _mm512_maskz_mov_epi8(_cvtu64_mask64(mq), _mm512_set1_epi8(4)));
          u = _mm512_sub_epi8(u, _mm512_set1_epi8(4));
        }
        put(4 * i + q, u);
      }
    }
  } else if (type == ggml::IQ4_XS) {
    const __m512 d = amx_k_f16x16(reg);
    const __m512i lut =
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(formats_detail::kIq4Grid)));
    for (int sb = 0; sb < 8; ++sb) {
      _mm512_store_ps(ds + 16 * sb, _mm512_mul_ps(d, amx_k_i8x16(reg + 32 + 16 * sb)));
      for (int k = 0; k < 4; ++k) {
        const __m512i v = _mm512_load_si512(reg + 192 + 64 * (4 * sb + k));
        put(8 * sb + 2 * k, _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m4)));
        put(8 * sb + 2 * k + 1, _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4)));
      }
    }
  } else if (type == ggml::Q4_K || type == ggml::Q5_K) {
    const __m512 d = amx_k_f16x16(reg), dmin = amx_k_f16x16(reg + 32);
    for (int sb = 0; sb < 8; ++sb) {
      _mm512_store_ps(ds + 16 * sb, _mm512_mul_ps(d, amx_k_u8x16(reg + 64 + 16 * sb)));
      _mm512_store_ps(dm + 16 * sb, _mm512_mul_ps(dmin, amx_k_u8x16(reg + 192 + 16 * sb)));
      for (int k = 0; k < 4; ++k) {
        const int chunk = 4 * sb + k;
        const __m512i v = _mm512_load_si512(
            reg + (type == ggml::Q4_K ? 320 + 64 * chunk : 320 + 320 * (chunk / 4) + 64 * (chunk % 4)));
        __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if (type == ggml::Q5_K) {
          uint64_t ml, mh;
          const uint8_t* hb = reg + 320 + 320 * sb + 256 + 16 * k;
          std::memcpy(&ml, hb, 8);
          std::memcpy(&mh, hb + 8, 8);
          lo = _mm512_or_si512(lo, _mm512_maskz_mov_epi8(_cvtu64_mask64(ml), _mm512_set1_epi8(0x10)));
          hi = _mm512_or_si512(hi, _mm512_maskz_mov_epi8(_cvtu64_mask64(mh), _mm512_set1_epi8(0x10)));
        }
        put(8 * sb + 2 * k, lo);
        put(8 * sb + 2 * k + 1, hi);
      }
    }
  } else {  // Q6_K: u = low nibble | (two high bits) << 4, per quarter of a 16-column sub-block; u - 32
    const __m512 d = amx_k_f16x16(reg);
    const __m512i o32 = _mm512_set1_epi8(32);
    for (int i = 0; i < 16; ++i) {
      const uint8_t* g = reg + 64 + (i / 4) * 832;
      _mm512_store_ps(ds + 16 * i, _mm512_mul_ps(d, amx_k_i8x16(g + 768 + 16 * (i % 4))));
      const __m512i h = _mm512_load_si512(g + 512 + 64 * (i % 4));
      const __m512i a = _mm512_load_si512(g + 128 * (i % 4)), b = _mm512_load_si512(g + 128 * (i % 4) + 64);
      put(4 * i,
          _mm512_sub_epi8(
              _mm512_or_si512(_mm512_and_si512(a, m4), _mm512_and_si512(_mm512_slli_epi16(h, 4), m30)), o32));
      put(4 * i + 1, _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a, 4), m4),
                                                     _mm512_and_si512(_mm512_slli_epi16(h, 2), m30)),
                                     o32));
      put(4 * i + 2,
          _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(b, m4), _mm512_and_si512(h, m30)), o32));
      put(4 * i + 3, _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(b, 4), m4),
                                                     _mm512_and_si512(_mm512_srli_epi16(h, 2), m30)),
                                     o32));
    }
  }
}

// acc[t] = fma(float(C[t]), ds * dx[t], acc[t]) (then - dm * (dx[t] * s[t]) with a min) for 16 token rows;
// dx / s: the sub-block's 16 token scales and code sums, contiguous.
template <bool kMin>
inline void amx_k_epilogue(const int32_t (&c)[16][16], const float* ds, const float* dm, const float* dx,
                           const int32_t* s, __m512 (&acc)[16]) {
  const __m512 d = _mm512_load_ps(ds);
#pragma GCC unroll 16
  for (int m = 0; m < 16; ++m) {
    acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[m])),
                             _mm512_mul_ps(d, _mm512_set1_ps(dx[m])), acc[m]);
    if constexpr (kMin)
      acc[m] = _mm512_fnmadd_ps(_mm512_load_ps(dm), _mm512_set1_ps(dx[m] * static_cast<float>(s[m])), acc[m]);
  }
}

// Rows [r0, r1) (r0 a multiple of 16), all T tokens. q [Tp, cols] Q8 activation codes; dx [cols/32, Tp] their
// block scales; s [nsub, Tp] the code sums of each sub-block (nsub = cols/32 or cols/16 by the type's
// sub-block); Tp = T rounded up to 16 with zero padding; y [T, p.rows].
template <class Ops, bool kMin>
void amx_kpack_rows_t(const KPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                      const int32_t* s, int64_t T, float* y) {
  const int kw = amx_k_wide(p.ggml_type) ? 32 : 16, per_sb = 256 / kw;
  const int64_t nsb = p.cols / 256, cols = p.cols, tp = (T + 15) / 16 * 16, region = nsb * p.sb_bytes;
  thread_local std::vector<int8_t> bt_buf;
  thread_local std::vector<float> ds_buf, dm_buf;
  bt_buf.resize(static_cast<size_t>(nsb * 4096 + 64));
  ds_buf.resize(static_cast<size_t>(nsb * per_sb * 16 + 16));
  dm_buf.resize(static_cast<size_t>(nsb * per_sb * 16 + 16));
  auto align64 = [](auto* ptr) {
    return reinterpret_cast<decltype(ptr)>((reinterpret_cast<uintptr_t>(ptr) + 63) & ~uintptr_t{63});
  };
  int8_t* bt = align64(bt_buf.data());
  float* ds = align64(ds_buf.data());
  float* dm = align64(dm_buf.data());
  const int64_t nsub = nsb * per_sb, bbytes = 16 * kw;  // B tile bytes: kw / 4 rows x 64
  alignas(64) int32_t c[2][16][16];
  Ops::config(amx_k_cfg(kw));
  for (int64_t rb = r0 / 16; rb * 16 < r1; ++rb) {
    for (int64_t sb = 0; sb < nsb; ++sb)
      amx_k_unpack(p.ggml_type, p.data.get() + rb * region + sb * p.sb_bytes, bt + sb * 4096,
                   ds + sb * per_sb * 16, dm + sb * per_sb * 16);
    const int64_t r = rb * 16;
    const auto mask = static_cast<__mmask16>((1u << std::min<int64_t>(16, std::min(r1, p.rows) - r)) - 1);
    for (int64_t t0 = 0; t0 < T; t0 += 16) {
      __m512 acc[16];
      for (auto& a : acc) a = _mm512_setzero_ps();
      const int8_t* a = q + t0 * cols;
      // Sub-block j covers columns kw * j; its activation scale is that of the 32-column block kw * j / 32.
      auto dxj = [&](int64_t j) { return dx + (kw * j / 32) * tp + t0; };
      for (int64_t j = 0; j < nsub; j += 2) {  // nsub is even (8 or 16 per super-block)
        Ops::template load<4>(a + kw * j, cols);
        Ops::template load<6>(bt + bbytes * j, 64);
        Ops::template zero<0>();
        Ops::template load<5>(a + kw * (j + 1), cols);
        Ops::template load<7>(bt + bbytes * (j + 1), 64);
        Ops::template zero<1>();
        if constexpr (kMin) {
          Ops::template dpbsud<0, 4, 6>();
          Ops::template dpbsud<1, 5, 7>();
        } else {
          Ops::template dpbssd<0, 4, 6>();
          Ops::template dpbssd<1, 5, 7>();
        }
        Ops::template store<0>(c[0], 64);
        amx_k_epilogue<kMin>(c[0], ds + 16 * j, dm + 16 * j, dxj(j), s + j * tp + t0, acc);
        Ops::template store<1>(c[1], 64);
        amx_k_epilogue<kMin>(c[1], ds + 16 * (j + 1), dm + 16 * (j + 1), dxj(j + 1), s + (j + 1) * tp + t0,
                             acc);
      }
#pragma GCC unroll 16
      for (int m = 0; m < 16; ++m)
        if (t0 + m < T) _mm512_mask_storeu_ps(y + (t0 + m) * p.rows + r, mask, acc[m]);
    }
  }
  Ops::release();
}

template <class Ops>
void amx_kpack_rows(const KPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                    const int32_t* s, int64_t T, float* y) {
  if (amx_k_min(p.ggml_type))
    amx_kpack_rows_t<Ops, true>(p, r0, r1, q, dx, s, T, y);
  else
    amx_kpack_rows_t<Ops, false>(p, r0, r1, q, dx, s, T, y);
}

}  // namespace
}  // namespace lowbit::kern
#endif
