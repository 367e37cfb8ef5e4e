// Internal to src/kernels: GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL / MXFP4 prefill on AMX-INT8 tiles,
// over the load-time QBlkPack (kernel_plan.h), written once over a tile-unit policy as amx_tiles.h:
//   AmxHw  (matmul_amx.cpp): the tile instructions, as asm statements;
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

#include <cstdint>

#include "formats/ggml_types.h"
#include "kernels/amx_tiles.h"
#include "kernels/kernel_plan.h"
#include "kernels/pack_decode_avx512.h"

namespace lowbit::kern {
namespace {

// One 16-row block region of the pack -> nb B tiles (512 bytes each) and nb x 16 float scales / mins.
inline void amx_qblk_unpack(const QBlkPack& p, const uint8_t* base, int64_t nb, int8_t* bt, float* ds,
                            float* mn) {
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
        __m512i lo, hi;
        split_nibbles(v, lo, hi);
        if (q5) or_fifth_bits(base + p.hbit_off(b, nb) + 16 * k, lo, hi);
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

// Rows [r0, r1) (r0 a multiple of 16), all T tokens; q, dx, xs (the blocks' code sums) and y as
// amx_unit_rows reads them, one unit per 32-column block. block: one 16-row block packed per call, read
// instead of the load-time pack's data.
template <class Ops>
void amx_qblk_rows(const QBlkPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                   const int32_t* xs, int64_t T, float* y, const uint8_t* block) {
  const int64_t nb = p.cols / 32, region = nb * p.block_bytes;
  auto unpack = [&](int64_t rb, int8_t* bt, float* ds, float* mn) {
    amx_qblk_unpack(p, block ? block : p.data.get() + rb * region, nb, bt, ds, mn);
  };
  if (p.min_bytes)
    amx_unit_rows<Ops, true>(32, nb, p.rows, p.cols, r0, r1, q, dx, xs, T, y, unpack);
  else
    amx_unit_rows<Ops, false>(32, nb, p.rows, p.cols, r0, r1, q, dx, xs, T, y, unpack);
}

}  // namespace
}  // namespace lowbit::kern
#endif
