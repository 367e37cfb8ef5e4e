// Internal to src/kernels: GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL / MXFP4 prefill on AMX-INT8 tiles,
// over the load-time QBlkPack (kernel_plan.h), written once over a tile-unit policy as amx_tiles.h:
//   AmxHw  (matmul_amx.cpp, -mamx-tile -mamx-int8): the tile instructions;
//   AmxEmu (amx_emu.h, instantiated in matmul_avx512_amx_emu.cpp): the scalar model of them.
// Both translation units are compiled for AVX-512 (the unpack and the epilogue below), so the emulated kernel
// runs exactly the code of the hardware one but for the tile instructions.
//
// Why tiles: one TDPBSSD multiplies 16 tokens x 16 rows x 32 columns (a whole Q8 activation block against a
// whole weight block) in one instruction; the VNNI register tile (matmul_avx512_qblk.cpp) needs 8 vpdpbusd
// per token for the same block, so its prefill is bound by the multiplies where this one is bound by the
// per-block float epilogue.
//
// Per 16-row block: every column block b is unpacked once into a B tile of 8 rows x 64 bytes (B[kk][4n + i]
// = w[n][32b + 4kk + i]: the pack's 64-byte chunks are already in that order, a 4-bit chunk k holding rows
// 2k (low nibbles) and 2k + 1 (high nibbles)) as signed codes u - offset, or for the types with a min (Q4_1,
// Q5_1) the unsigned codes u (TDPBSUD), plus the 16 row scales (and mins) as floats. Then per 16 tokens and
// block: C = A x B (A: the tokens' 32 int8 activation codes of the block), and per token row
//   acc[t] = fma(float(C[t]), d[16 rows] * dx[t][b], acc[t])   (+ fma(m[16 rows], dx[t][b] * sum q, ...))
// the VNNI tile's operations in its order: the same bits, as C is the same exact int32 sum.
// Two C / A / B tile sets alternate between even and odd blocks, so the hardware can run the next block's
// product while the epilogue reads the last one.
#pragma once
#if defined(__AVX512F__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "formats/ggml_types.h"
#include "kernels/amx_tiles.h"
#include "kernels/kernel_plan.h"

namespace lowbit::kern {
namespace {

// Tiles 0 / 1: C (16 x 64 bytes of int32); 4 / 5: A (16 tokens x 32 bytes); 6 / 7: B (8 x 64 bytes).
inline AmxTileCfg amx_qblk_cfg() {
  AmxTileCfg c;
  for (int i : {0, 1}) c.colsb[i] = 64, c.rows[i] = 16;
  for (int i : {4, 5}) c.colsb[i] = 32, c.rows[i] = 16;
  for (int i : {6, 7}) c.colsb[i] = 64, c.rows[i] = 8;
  return c;
}

// One 16-row block region of the pack -> nb B tiles (512 bytes each) and nb x 16 float scales / mins.
inline void amx_qblk_unpack(const QBlkPack& p, const uint8_t* base, int64_t nb, int8_t* bt, float* ds,
                            float* mn) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), h16 = _mm512_set1_epi8(0x10);
  const __m512i off = _mm512_set1_epi8(static_cast<char>(p.min_bytes ? 0 : p.offset));
  const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p.lut.data())));
  const bool q5 = p.hbit_bytes != 0;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* cb = base + p.code_off(b);
    int8_t* out = bt + 512 * b;
    if (p.ggml_type == ggml::Q8_0) {
      for (int k = 0; k < 8; ++k)
        _mm512_store_si512(out + 64 * k, _mm512_sub_epi8(_mm512_loadu_si512(cb + 64 * k), off));
    } else {
      for (int k = 0; k < 4; ++k) {
        const __m512i v = _mm512_loadu_si512(cb + 64 * k);
        __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if (q5) {
          uint64_t ml, mh;
          const uint8_t* hb = base + p.hbit_off(b, nb);
          std::memcpy(&ml, hb + 16 * k, 8);
          std::memcpy(&mh, hb + 16 * k + 8, 8);
          lo = _mm512_or_si512(lo, _mm512_maskz_mov_epi8(_cvtu64_mask64(ml), h16));
          hi = _mm512_or_si512(hi, _mm512_maskz_mov_epi8(_cvtu64_mask64(mh), h16));
        }
        if (p.has_lut) {
          lo = _mm512_shuffle_epi8(lut, lo);
          hi = _mm512_shuffle_epi8(lut, hi);
        }
        _mm512_store_si512(out + 128 * k, _mm512_sub_epi8(lo, off));
        _mm512_store_si512(out + 128 * k + 64, _mm512_sub_epi8(hi, off));
      }
    }
    const __m256i sh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + p.scale_off(b, nb)));
    _mm512_store_ps(ds + 16 * b, p.bf16_scales
                                     ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(sh), 16))
                                     : _mm512_cvtph_ps(sh));
    if (p.min_bytes)
      _mm512_store_ps(
          mn + 16 * b,
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + p.min_off(b, nb)))));
  }
}

// acc[t] += float(C[t]) * (d * dx[t]) (+ m * (dx[t] * xs[t])) for the 16 token rows of one block's C tile.
// dx / xs: the block's 16 token scales and code sums, contiguous (the transposed tables of amx_qblk_rows).
template <bool kMin>
inline void amx_qblk_epilogue(const int32_t (&c)[16][16], const float* ds, const float* mn, const float* dx,
                              const int32_t* xs, __m512 (&acc)[16]) {
  const __m512 d = _mm512_load_ps(ds);
#pragma GCC unroll 16
  for (int m = 0; m < 16; ++m) {
    acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[m])),
                             _mm512_mul_ps(d, _mm512_set1_ps(dx[m])), acc[m]);
    if constexpr (kMin)
      acc[m] = _mm512_fmadd_ps(_mm512_load_ps(mn), _mm512_set1_ps(dx[m] * static_cast<float>(xs[m])), acc[m]);
  }
}

// Rows [r0, r1) (r0 a multiple of 16), all T tokens. q [Tp, cols] int8 activation codes, dx / xs [nb, Tp]
// their block scales and code sums, transposed so that a block's 16 tokens are contiguous (Tp = T rounded
// up to 16; the padding is 0); y [T, p.rows].
template <class Ops, bool kMin>
void amx_qblk_rows_t(const QBlkPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                     const int32_t* xs, int64_t T, float* y) {
  const int64_t nb = p.cols / 32, cols = p.cols, region = nb * p.block_bytes;
  thread_local std::vector<int8_t> bt_buf;
  thread_local std::vector<float> ds_buf, mn_buf;
  bt_buf.resize(static_cast<size_t>(nb * 512 + 64));
  ds_buf.resize(static_cast<size_t>(nb * 16 + 16));
  mn_buf.resize(kMin ? static_cast<size_t>(nb * 16 + 16) : 16);
  auto align64 = [](auto* ptr) {
    return reinterpret_cast<decltype(ptr)>((reinterpret_cast<uintptr_t>(ptr) + 63) & ~uintptr_t{63});
  };
  int8_t* bt = align64(bt_buf.data());
  float* ds = align64(ds_buf.data());
  float* mn = kMin ? align64(mn_buf.data()) : nullptr;
  alignas(64) int32_t c[2][16][16];
  Ops::config(amx_qblk_cfg());
  for (int64_t rb = r0 / 16; rb * 16 < r1; ++rb) {
    amx_qblk_unpack(p, p.data.get() + rb * region, nb, bt, ds, mn);
    const int64_t r = rb * 16;
    const auto mask = static_cast<__mmask16>((1u << std::min<int64_t>(16, std::min(r1, p.rows) - r)) - 1);
    for (int64_t t0 = 0; t0 < T; t0 += 16) {
      __m512 acc[16];
      for (auto& a : acc) a = _mm512_setzero_ps();
      const int8_t* a = q + t0 * cols;
      const int64_t tp = (T + 15) / 16 * 16;
      for (int64_t b = 0; b < nb; b += 2) {
        const bool two = b + 1 < nb;
        Ops::template load<4>(a + 32 * b, cols);
        Ops::template load<6>(bt + 512 * b, 64);
        Ops::template zero<0>();
        if (two) {
          Ops::template load<5>(a + 32 * (b + 1), cols);
          Ops::template load<7>(bt + 512 * (b + 1), 64);
          Ops::template zero<1>();
        }
        if constexpr (kMin) {
          Ops::template dpbsud<0, 4, 6>();
          if (two) Ops::template dpbsud<1, 5, 7>();
        } else {
          Ops::template dpbssd<0, 4, 6>();
          if (two) Ops::template dpbssd<1, 5, 7>();
        }
        Ops::template store<0>(c[0], 64);
        amx_qblk_epilogue<kMin>(c[0], ds + 16 * b, kMin ? mn + 16 * b : nullptr, dx + b * tp + t0,
                                xs + b * tp + t0, acc);
        if (two) {
          Ops::template store<1>(c[1], 64);
          amx_qblk_epilogue<kMin>(c[1], ds + 16 * (b + 1), kMin ? mn + 16 * (b + 1) : nullptr,
                                  dx + (b + 1) * tp + t0, xs + (b + 1) * tp + t0, acc);
        }
      }
      // Constant indices (acc stays in registers through the block loop); tokens past T are padding.
#pragma GCC unroll 16
      for (int m = 0; m < 16; ++m)
        if (t0 + m < T) _mm512_mask_storeu_ps(y + (t0 + m) * p.rows + r, mask, acc[m]);
    }
  }
  Ops::release();
}

template <class Ops>
void amx_qblk_rows(const QBlkPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                   const int32_t* xs, int64_t T, float* y) {
  if (p.min_bytes)
    amx_qblk_rows_t<Ops, true>(p, r0, r1, q, dx, xs, T, y);
  else
    amx_qblk_rows_t<Ops, false>(p, r0, r1, q, dx, xs, T, y);
}

}  // namespace
}  // namespace lowbit::kern
#endif
