// Internal to src/kernels: the W8A8 prefill kernel on AMX-INT8 tiles, written once over a tile-unit policy:
//   AmxHw  (matmul_amx.cpp, compiled with -mamx-tile -mamx-int8): the tile instructions themselves;
//   AmxEmu (amx_emu.h, plain C++): a scalar model of the same instructions, as the Intel SDM defines them
//          (LDTILECFG palette 1, TILELOADD, TILESTORED, TILEZERO, TDPBSSD), so the packing, the loop over K
//          and the tails are tested on CPUs without AMX (set_amx_emulation in kernels/matmul.h).
// Both include this header; internal linkage on purpose (the two files are compiled with different ISA
// flags).
//
// The product, per 16 tokens x 16 rows: C[t][n] (int32) += sum_k x[t][k] * w[n][k] over K in tiles of 64:
//   A tile (16 x 64 bytes): 16 tokens' int8 activations, row stride = the padded K of the activation buffer;
//   B tile (16 x 64 bytes): B[kk][4n + i] = w[n][64 kt + 4 kk + i], the AmxInt8Pack layout (kernel_plan.h),
//   one
//          contiguous 1 KiB block per (row block, K tile);
// TDPBSSD: C[m][n] += sum_{kk < 16} sum_{i < 4} A[m][4 kk + i] * B[kk][4 n + i], signed x signed, exact in
// int32. Two row blocks x two token blocks share each A / B load (tiles 0-3 accumulate, 4-5 hold A, 6-7 hold
// B).
#pragma once
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/kernel_plan.h"

namespace lowbit::kern {
namespace {

// LDTILECFG's 64-byte operand.
struct alignas(64) AmxTileCfg {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(AmxTileCfg) == 64, "LDTILECFG operand is 64 bytes");

// Every tile used here is 16 rows x 64 bytes.
inline AmxTileCfg amx_full_cfg() {
  AmxTileCfg c;
  for (int i = 0; i < 8; ++i) {
    c.colsb[i] = 64;
    c.rows[i] = 16;
  }
  return c;
}

// y[tt + m][rr + n] = (float(c[m][n]) * ws[rr + n]) * sx[tt + m] for m < nm, n < nn.
inline void amx_scale_out(const int32_t (&c)[16][16], int64_t rr, int64_t nn, int64_t tt, int64_t nm,
                          const float* ws, const float* sx, int64_t rows, float* y) {
#if defined(__AVX512F__)
  const __mmask16 k = static_cast<__mmask16>((1u << nn) - 1);
  const __m512 w = _mm512_maskz_loadu_ps(k, ws + rr);
  for (int64_t m = 0; m < nm; ++m) {
    const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[m])), w);
    _mm512_mask_storeu_ps(y + (tt + m) * rows + rr, k, _mm512_mul_ps(v, _mm512_set1_ps(sx[tt + m])));
  }
#else
  for (int64_t m = 0; m < nm; ++m)
    for (int64_t n = 0; n < nn; ++n)
      y[(tt + m) * rows + rr + n] = (static_cast<float>(c[m][n]) * ws[rr + n]) * sx[tt + m];
#endif
}

// x: [Tp, Kp] int8 activations (Tp = T rounded up to 16, Kp = pack.kp; padding is 0); sx [T] per-token
// scales; ws [rows] per-row weight scales; y [T, rows]. Rows [r0, r1), r0 a multiple of 16. y[t][r] =
// (float(C[t][r]) * ws[r]) * sx[t], the VNNI tile's rounding order (same bits).
template <class Ops>
void amx_w8a8_rows(const AmxInt8Pack& pk, int64_t r0, int64_t r1, const int8_t* x, const float* sx,
                   const float* ws, int64_t T, float* y) {
  const AmxTileCfg cfg = amx_full_cfg();
  Ops::config(cfg);
  const int64_t kt_n = pk.kp / 64, rows = pk.rows;
  alignas(64) int32_t c[4][16][16];
  for (int64_t rb = r0 / 16; rb * 16 < r1; rb += 2) {
    const bool two_r = (rb + 1) * 16 < r1;
    const int8_t* b0 = pk.tiles.data() + rb * kt_n * 1024;
    const int8_t* b1 = b0 + kt_n * 1024;
    for (int64_t t0 = 0; t0 < T; t0 += 32) {
      const bool two_t = t0 + 16 < T;
      Ops::template zero<0>();
      Ops::template zero<1>();
      Ops::template zero<2>();
      Ops::template zero<3>();
      const int8_t* a0 = x + t0 * pk.kp;
      const int8_t* a1 = a0 + 16 * pk.kp;
      for (int64_t kt = 0; kt < kt_n; ++kt) {
        Ops::template load<4>(a0 + 64 * kt, pk.kp);
        Ops::template load<6>(b0 + 1024 * kt, 64);
        Ops::template dpbssd<0, 4, 6>();
        if (two_r) {
          Ops::template load<7>(b1 + 1024 * kt, 64);
          Ops::template dpbssd<1, 4, 7>();
        }
        if (two_t) {
          Ops::template load<5>(a1 + 64 * kt, pk.kp);
          Ops::template dpbssd<2, 5, 6>();
          if (two_r) Ops::template dpbssd<3, 5, 7>();
        }
      }
      Ops::template store<0>(c[0], 64);
      Ops::template store<1>(c[1], 64);
      Ops::template store<2>(c[2], 64);
      Ops::template store<3>(c[3], 64);
      for (int q = 0; q < 4; ++q) {
        if (((q & 1) && !two_r) || ((q >> 1) && !two_t)) continue;
        const int64_t rr = (rb + (q & 1)) * 16, tt = t0 + (q >> 1) * 16;
        amx_scale_out(c[q], rr, std::min<int64_t>(16, std::min(r1, rows) - rr), tt,
                      std::min<int64_t>(16, T - tt), ws, sx, rows, y);
      }
    }
  }
  Ops::release();
}

#if defined(__AVX512F__)
// The GGUF pack kernels (amx_qblk.h, amx_kpack.h) share the loop below. A weight's 16-row block is a run of
// nsub units of kw columns (kw = 32 or 16): unit j has a B tile of kw / 4 rows x 64 bytes at bt + 16 kw j
// (B[kk][4n + i] = w[n][kw j + 4kk + i]) and float steps ds[16 rows] (and, with a min, nm[16 rows], stored
// negated where the VNNI kernel subtracts) at 16 j. Per 16 tokens and unit: C = A x B (tdpbssd for signed
// codes, tdpbsud for unsigned ones with a min), then per token row t, in the VNNI tiles' order:
//   acc[t] = fma(float(C[t]), ds * dx[t], acc[t]);  acc[t] = fma(nm, dx[t] * s[t], acc[t])
// dx [cols/32, Tp] (unit j reads row kw j / 32) and s [nsub, Tp] (the unit's code sums): transposed so that a
// unit's 16 tokens are contiguous. Two C / A / B tile sets alternate between even and odd units, so the
// hardware can run the next product while the epilogue reads the last one.

// Tiles 0 / 1: C (16 x 64 bytes of int32); 4 / 5: A (16 tokens x kw bytes); 6 / 7: B (kw / 4 rows x 64
// bytes).
inline AmxTileCfg amx_unit_cfg(int kw) {
  AmxTileCfg c;
  for (int i : {0, 1}) c.colsb[i] = 64, c.rows[i] = 16;
  for (int i : {4, 5}) c.colsb[i] = static_cast<uint16_t>(kw), c.rows[i] = 16;
  for (int i : {6, 7}) c.colsb[i] = 64, c.rows[i] = static_cast<uint8_t>(kw / 4);
  return c;
}

// A 64-byte aligned view of a per-thread vector of at least n elements.
template <class T>
T* amx_scratch(std::vector<T>& v, size_t n) {
  v.resize(n + 64 / sizeof(T));
  return reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t{63});
}

template <bool kMin>
inline void amx_unit_epilogue(const int32_t (&c)[16][16], const float* ds, const float* nm, const float* dx,
                              const int32_t* s, __m512 (&acc)[16]) {
  const __m512 d = _mm512_load_ps(ds);
#pragma GCC unroll 16
  for (int m = 0; m < 16; ++m) {
    acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[m])),
                             _mm512_mul_ps(d, _mm512_set1_ps(dx[m])), acc[m]);
    if constexpr (kMin)
      acc[m] = _mm512_fmadd_ps(_mm512_load_ps(nm), _mm512_set1_ps(dx[m] * static_cast<float>(s[m])), acc[m]);
  }
}

// Rows [r0, r1) (r0 a multiple of 16) of a weight of `rows` rows and `cols` columns, all T tokens: q [Tp,
// cols] the Q8 activation codes (Tp = T rounded up to 16, zero padding), dx / s as above, y [T, rows].
// unpack(rb, bt, ds, nm) fills a row block's units.
template <class Ops, bool kMin, class Unpack>
void amx_unit_rows(int kw, int64_t nsub, int64_t rows, int64_t cols, int64_t r0, int64_t r1, const int8_t* q,
                   const float* dx, const int32_t* s, int64_t T, float* y, Unpack&& unpack) {
  thread_local std::vector<int8_t> bt_buf;
  thread_local std::vector<float> ds_buf, nm_buf;
  int8_t* bt = amx_scratch(bt_buf, static_cast<size_t>(nsub * 16 * kw));
  float* ds = amx_scratch(ds_buf, static_cast<size_t>(nsub * 16));
  float* nm = kMin ? amx_scratch(nm_buf, static_cast<size_t>(nsub * 16)) : nullptr;
  const int64_t tp = (T + 15) / 16 * 16, bbytes = 16 * kw;
  alignas(64) int32_t c[2][16][16];
  Ops::config(amx_unit_cfg(kw));
  for (int64_t rb = r0 / 16; rb * 16 < r1; ++rb) {
    unpack(rb, bt, ds, nm);
    const int64_t r = rb * 16;
    const auto mask = static_cast<__mmask16>((1u << std::min<int64_t>(16, std::min(r1, rows) - r)) - 1);
    for (int64_t t0 = 0; t0 < T; t0 += 16) {
      __m512 acc[16];
      for (auto& a : acc) a = _mm512_setzero_ps();
      const int8_t* a = q + t0 * cols;
      auto step = [&](int i, int64_t j) {
        amx_unit_epilogue<kMin>(c[i], ds + 16 * j, kMin ? nm + 16 * j : nullptr, dx + (kw * j / 32) * tp + t0,
                                s + j * tp + t0, acc);
      };
      for (int64_t j = 0; j < nsub; j += 2) {
        const bool two = j + 1 < nsub;
        Ops::template load<4>(a + kw * j, cols);
        Ops::template load<6>(bt + bbytes * j, 64);
        Ops::template zero<0>();
        if (two) {
          Ops::template load<5>(a + kw * (j + 1), cols);
          Ops::template load<7>(bt + bbytes * (j + 1), 64);
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
        step(0, j);
        if (two) {
          Ops::template store<1>(c[1], 64);
          step(1, j + 1);
        }
      }
      // Constant indices (acc stays in registers through the unit loop); tokens past T are padding.
#pragma GCC unroll 16
      for (int m = 0; m < 16; ++m)
        if (t0 + m < T) _mm512_mask_storeu_ps(y + (t0 + m) * rows + r, mask, acc[m]);
    }
  }
  Ops::release();
}

// The scale-group loop of amx_block16 and amx_bf16_block16, for one 16-token row of A tiles: groups g and
// g + 1 accumulate `tiles` tile products each in C tiles 0 and 1 (A / B from tiles 4 / 6 and 5 / 7), then
// epilogue(i, g) reads C tile i, stored in c[i]. Tile i of group g starts at unit u = g * span + i * unit of
// the row (a column for INT8, a pair for BF16): A at a + a_bytes * u (rows astride apart), B at b + b_bytes *
// u (rows 64 bytes apart). kBf16: TDPBF16PS, else TDPBSUD (signed activations x unsigned codes).
template <class Ops, bool kBf16, class Epilogue>
void amx_group_pairs(int64_t ng, int64_t tiles, int64_t unit, int64_t span, const uint8_t* a, int64_t astride,
                     int64_t a_bytes, const uint8_t* b, int64_t b_bytes, void* c, Epilogue&& epilogue) {
  auto product = [](auto one) {
    constexpr bool kOne = decltype(one)::value;
    if constexpr (kBf16) {
      if constexpr (kOne)
        Ops::template dpbf16ps<1, 5, 7>();
      else
        Ops::template dpbf16ps<0, 4, 6>();
    } else {
      if constexpr (kOne)
        Ops::template dpbsud<1, 5, 7>();
      else
        Ops::template dpbsud<0, 4, 6>();
    }
  };
  uint8_t* c1 = static_cast<uint8_t*>(c) + 1024;
  for (int64_t g = 0; g < ng; g += 2) {
    const bool two = g + 1 < ng;
    Ops::template zero<0>();
    if (two) Ops::template zero<1>();
    for (int64_t i = 0; i < tiles; ++i) {
      const int64_t u = g * span + i * unit;
      Ops::template load<4>(a + a_bytes * u, astride);
      Ops::template load<6>(b + b_bytes * u, 64);
      product(std::false_type{});
      if (two) {
        Ops::template load<5>(a + a_bytes * (u + span), astride);
        Ops::template load<7>(b + b_bytes * (u + span), 64);
        product(std::true_type{});
      }
    }
    Ops::template store<0>(c, 64);
    epilogue(0, g);
    if (two) {
      Ops::template store<1>(c1, 64);
      epilogue(1, g + 1);
    }
  }
}

// INT4 / INT8 codes with INT8 (or INT4) activations (W4A8, W4A4, grouped or asymmetric INT8; vnni_block_ok),
// one 16-row block of rows, all T tokens: vnni_block_avx512's operation on tiles. The block's per-call
// layout (vnni_block_layout: [kq][16 rows][4 columns] of the unsigned stored codes u) is already in B-tile
// order: the kw columns from c are B rows c / 4 .. (c + kw) / 4 - 1 at wb + 16 c, 64 bytes apart. Per 16
// tokens and scale group g: C = the sum of the group's tile products A x B (tdpbsud: signed activations x
// unsigned codes; exact in int32, as the VNNI tile's vpdpbusd sums are), then the VNNI tile's epilogue in its
// order: v = C - z * X_g (int32), acc = fma(float(v), s * sx[t], acc). The same bits. Groups g and g + 1
// accumulate in C tiles 0 and 1 from A / B tiles 4 / 6 and 5 / 7. xq [Tp, xstride], xg [Tp, ng] and sx [Tp]
// hold Tp = T rounded up to 16 tokens (zero padding), so the epilogue is one unrolled loop of 16.
template <class Ops>
void amx_block16(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z, int bits,
                 int zoff, int64_t cols, int64_t group, const int8_t* xq, int64_t xstride, const int32_t* xg,
                 int64_t ng, const float* sx, int T, float* y, int64_t ystride) {
  const int kw = amx_block_kw(group, ng, cols);
  float* sv;
  int32_t* zv;
  const uint8_t* wb = vnni_block_layout(nr, rows, s, z, bits, zoff, cols, ng, &sv, &zv);
  const int64_t span = ng == 1 ? (cols + 63) / 64 * 64 : group;  // columns per group (padded: one group)
  const int64_t tiles = span / kw;
  const auto mask = static_cast<__mmask16>((1u << nr) - 1);
  alignas(64) int32_t c[2][16][16];
  Ops::config(amx_unit_cfg(kw));
  for (int t0 = 0; t0 < T; t0 += 16) {
    __m512 acc[16];
    for (auto& a : acc) a = _mm512_setzero_ps();
    const int8_t* a = xq + t0 * xstride;
    auto epilogue = [&](int i, int64_t g) {
      const __m512 sg = _mm512_load_ps(sv + 16 * g);
      const __m512i zg = _mm512_load_si512(zv + 16 * g);
#pragma GCC unroll 16
      for (int m = 0; m < 16; ++m) {
        const __m512i v = _mm512_sub_epi32(_mm512_load_si512(c[i][m]),
                                           _mm512_mullo_epi32(zg, _mm512_set1_epi32(xg[(t0 + m) * ng + g])));
        acc[m] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(sg, _mm512_set1_ps(sx[t0 + m])), acc[m]);
      }
    };
    amx_group_pairs<Ops, false>(ng, tiles, kw, span, reinterpret_cast<const uint8_t*>(a), xstride, 1, wb, 16,
                                c, epilogue);
#pragma GCC unroll 16
    for (int m = 0; m < 16; ++m)
      if (t0 + m < T) _mm512_mask_storeu_ps(y + (t0 + m) * ystride, mask, acc[m]);
  }
  Ops::release();
}

// Weight-only prefill with BF16 activations on AMX-BF16 (bf16_tile_avx512bf16's arithmetic), one 16-row
// block, all T tokens. The block's per-call layout (bf16_block_layout: pair-major words, 16 rows per 64-byte
// line) is the B-tile order of TDPBF16PS (B[kk][2n + i] = value(row n, 2 (p0 + kk) + i)), so kp pairs from
// pair p0 are a B tile of kp rows at wb + 16 p0; A: 16 tokens' BF16 activations, 2 kp values per row. Per 16
// tokens and scale group g: C = the sum of the group's tile products (FP32), then the register tile's
// epilogue acc = fma(C, s_g, acc) (asymmetric: acc -= z s_g * X_g). Groups g and g + 1 alternate between tile
// sets. xb [Tp, xstride] and gsum [Tp, ng] hold Tp = T rounded up to 16 tokens (zero padding).
template <class Ops>
void amx_bf16_block16(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                      int64_t cols, int64_t group, const Nib16Lut* nib, const Byte16Lut* byte,
                      const uint16_t* xb, int64_t xstride, const float* gsum, int T, float* y,
                      int64_t ystride) {
  const uint32_t* wb;
  const float *sv, *zs;
  const int64_t ng = bf16_block_layout(nr, rows, s, z, cols, group, nib, byte, &wb, &sv, &zs);
  const int kp = amx_bf16_pairs(group, cols);
  const int64_t npairs = (cols + 1) / 2,
                gpairs = ng == 1 ? (npairs + 15) / 16 * 16 : std::min(group, cols) / 2;
  const int64_t tiles = gpairs / kp, astride = xstride * 2;
  const auto mask = static_cast<__mmask16>((1u << nr) - 1);
  alignas(64) float c[2][16][16];
  Ops::config(amx_unit_cfg(4 * kp));  // A rows of 4 kp bytes, B tiles of kp rows
  for (int t0 = 0; t0 < T; t0 += 16) {
    __m512 acc[16];
    for (auto& a : acc) a = _mm512_setzero_ps();
    const uint16_t* a = xb + t0 * xstride;
    auto epilogue = [&](int i, int64_t g) {
      const __m512 sg = _mm512_load_ps(sv + 16 * g);
#pragma GCC unroll 16
      for (int m = 0; m < 16; ++m) {
        acc[m] = _mm512_fmadd_ps(_mm512_load_ps(c[i][m]), sg, acc[m]);
        if (zs)
          acc[m] =
              _mm512_fnmadd_ps(_mm512_load_ps(zs + 16 * g), _mm512_set1_ps(gsum[(t0 + m) * ng + g]), acc[m]);
      }
    };
    amx_group_pairs<Ops, true>(ng, tiles, kp, gpairs, reinterpret_cast<const uint8_t*>(a), astride, 4,
                               reinterpret_cast<const uint8_t*>(wb), 64, c, epilogue);
#pragma GCC unroll 16
    for (int m = 0; m < 16; ++m)
      if (t0 + m < T) _mm512_mask_storeu_ps(y + (t0 + m) * ystride, mask, acc[m]);
  }
  Ops::release();
}
#endif

}  // namespace
}  // namespace lowbit::kern
