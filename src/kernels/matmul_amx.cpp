// The AMX prefill kernels on the tile instructions: W8A8, INT4 / INT8 codes with INT8 activations and the
// weight-only BF16 tile (amx_tiles.h), the GGUF QBlkPack types (amx_qblk.h) and the k-quants (amx_kpack.h).
// Compiled with -mamx-tile -mamx-int8 -mamx-bf16 (and the AVX-512 flags for the epilogue); called only on the
// Amx tier, i.e. after cpuid, XCR0 and the kernel's grant of tile state (amx_request_permission,
// core/cpu.h). Tested through the scalar model of amx_emu.h.
#include <immintrin.h>

#include "kernels/amx_kpack.h"
#include "kernels/amx_qblk.h"
#include "kernels/amx_tiles.h"
#include "kernels/kernel_plan.h"

namespace lowbit::kern {
namespace {

// GCC's tile intrinsics are macros that paste the tile number into the instruction text, so the number must
// be a literal, not a template parameter: each operation dispatches on its compile-time index to literal
// tiles.
#define LOWBIT_AMX_EACH(OP)  \
  if constexpr (I == 0)      \
    OP(0);                   \
  else if constexpr (I == 1) \
    OP(1);                   \
  else if constexpr (I == 2) \
    OP(2);                   \
  else if constexpr (I == 3) \
    OP(3);                   \
  else if constexpr (I == 4) \
    OP(4);                   \
  else if constexpr (I == 5) \
    OP(5);                   \
  else if constexpr (I == 6) \
    OP(6);                   \
  else                       \
    OP(7)

struct AmxHw {
  static void config(const AmxTileCfg& c) {
    // A compiler barrier: the configuration's stores must reach memory before LDTILECFG reads it (GCC 12's
    // tile intrinsics have been reported to lose them; llama.cpp #26954).
    asm volatile("" : : "r"(&c) : "memory");
    _tile_loadconfig(&c);
  }
  static void release() { _tile_release(); }
  template <int I>
  static void zero() {
#define LOWBIT_OP(n) _tile_zero(n)
    LOWBIT_AMX_EACH(LOWBIT_OP);
#undef LOWBIT_OP
  }
  template <int I>
  static void load(const void* p, int64_t stride) {
#define LOWBIT_OP(n) _tile_loadd(n, p, stride)
    LOWBIT_AMX_EACH(LOWBIT_OP);
#undef LOWBIT_OP
  }
  template <int I>
  static void store(void* p, int64_t stride) {
#define LOWBIT_OP(n) _tile_stored(n, p, stride)
    LOWBIT_AMX_EACH(LOWBIT_OP);
#undef LOWBIT_OP
  }
  // The four products of the 2 x 2 blocking in amx_w8a8_rows; (0, 4, 6) and (1, 5, 7) in amx_qblk_rows.
  template <int C, int A, int B>
  static void dpbssd() {
    static_assert((C == 0 && A == 4 && B == 6) || (C == 1 && A == 4 && B == 7) ||
                      (C == 2 && A == 5 && B == 6) || (C == 3 && A == 5 && B == 7) ||
                      (C == 1 && A == 5 && B == 7),
                  "add the tile triple here");
    if constexpr (C == 0)
      _tile_dpbssd(0, 4, 6);
    else if constexpr (C == 1 && A == 4)
      _tile_dpbssd(1, 4, 7);
    else if constexpr (C == 1)
      _tile_dpbssd(1, 5, 7);
    else if constexpr (C == 2)
      _tile_dpbssd(2, 5, 6);
    else
      _tile_dpbssd(3, 5, 7);
  }
  // Signed A x unsigned B (the QBlkPack types with a min keep their unsigned codes; amx_block16's stored
  // codes).
  template <int C, int A, int B>
  static void dpbsud() {
    static_assert((C == 0 && A == 4 && B == 6) || (C == 1 && A == 5 && B == 7), "add the tile triple here");
    if constexpr (C == 0)
      _tile_dpbsud(0, 4, 6);
    else
      _tile_dpbsud(1, 5, 7);
  }
  // BF16 pairs into FP32 (amx_bf16_block16).
  template <int C, int A, int B>
  static void dpbf16ps() {
    static_assert((C == 0 && A == 4 && B == 6) || (C == 1 && A == 5 && B == 7), "add the tile triple here");
    if constexpr (C == 0)
      _tile_dpbf16ps(0, 4, 6);
    else
      _tile_dpbf16ps(1, 5, 7);
  }
};
#undef LOWBIT_AMX_EACH

}  // namespace

void amx_w8a8_tiles(const AmxInt8Pack& pk, int64_t r0, int64_t r1, const int8_t* x, const float* sx,
                    const float* wscale, int64_t T, float* y) {
  amx_w8a8_rows<AmxHw>(pk, r0, r1, x, sx, wscale, T, y);
}

void amx_qblk_tiles(const QBlkPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                    const int32_t* xs, int64_t T, float* y, const uint8_t* block) {
  amx_qblk_rows<AmxHw>(p, r0, r1, q, dx, xs, T, y, block);
}

void amx_kpack_tiles(const KPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                     const int32_t* s, int64_t T, float* y, const uint8_t* block) {
  amx_kpack_rows<AmxHw>(p, r0, r1, q, dx, s, T, y, block);
}

void amx_block_tiles(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                     int bits, int zoff, int64_t cols, int64_t group, const int8_t* xq, int64_t xstride,
                     const int32_t* xg, int64_t ng, const float* sx, int T, float* y, int64_t ystride) {
  amx_block16<AmxHw>(nr, rows, s, z, bits, zoff, cols, group, xq, xstride, xg, ng, sx, T, y, ystride);
}

void amx_bf16_tiles(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                    int64_t cols, int64_t group, const Nib16Lut* nib, const Byte16Lut* byte,
                    const uint16_t* xb, int64_t xstride, const float* gsum, int T, float* y,
                    int64_t ystride) {
  amx_bf16_block16<AmxHw>(nr, rows, s, z, cols, group, nib, byte, xb, xstride, gsum, T, y, ystride);
}

}  // namespace lowbit::kern
