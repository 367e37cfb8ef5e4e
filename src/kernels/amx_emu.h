// Internal to src/kernels: a scalar model of the AMX tile unit (the AmxEmu tile-unit policy of amx_tiles.h),
// exactly the instructions the tile kernels use, as the Intel SDM defines them: palette 1 (8 tiles of up to
// 16 rows x 64 bytes, each with its configured rows and bytes per row); LDTILECFG (zeroes the tiles);
// TILELOADD / TILESTORED copy `rows` rows of `colsb` bytes at `stride`; TILEZERO; TDPBSSD / TDPBSUD
// (signed A x signed / unsigned B bytes, int32 wrap-around); TDPBF16PS (BF16 pairs into FP32).
//
// Why a model: the development machine has no AMX, and a kernel that only runs where nobody tested it is a
// liability. Every packing, K-loop and tail decision of the kernels runs on it in the tests
// (set_amx_emulation); only the instructions themselves are left to the hardware. Internal linkage on
// purpose: amx_emu.cpp (generic flags) and matmul_avx512_amx_emu.cpp (AVX-512 flags) each get their own.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/amx_tiles.h"

namespace lowbit::kern {
namespace {

struct AmxEmu {
  struct Tile {
    int rows = 0, colsb = 0;
    alignas(64) uint8_t d[16][64];
  };
  static Tile* tiles() {
    thread_local Tile t[8];
    return t;
  }
  static void config(const AmxTileCfg& c) {
    for (int i = 0; i < 8; ++i) {
      tiles()[i].rows = c.rows[i];
      tiles()[i].colsb = c.colsb[i];
      std::memset(tiles()[i].d, 0, sizeof tiles()[i].d);  // LDTILECFG zeroes the tile data
    }
  }
  static void release() {
    for (int i = 0; i < 8; ++i) tiles()[i] = Tile{};
  }
  template <int I>
  static void zero() {
    std::memset(tiles()[I].d, 0, sizeof tiles()[I].d);
  }
  template <int I>
  static void load(const void* p, int64_t stride) {
    Tile& t = tiles()[I];
    for (int r = 0; r < t.rows; ++r)
      std::memcpy(t.d[r], static_cast<const uint8_t*>(p) + r * stride, t.colsb);
  }
  template <int I>
  static void store(void* p, int64_t stride) {
    const Tile& t = tiles()[I];
    for (int r = 0; r < t.rows; ++r) std::memcpy(static_cast<uint8_t*>(p) + r * stride, t.d[r], t.colsb);
  }
  // TDPBSSD (B signed) / TDPBSUD (B unsigned): C[m][n] += sum over k < colsb(A)/4, i < 4 of
  // A[m][4k+i] * B[k][4n+i], A signed, int32 wrap-around.
  template <int C, int A, int B, bool kBSigned>
  static void dpbs() {
    Tile &c = tiles()[C], &a = tiles()[A], &b = tiles()[B];
    for (int m = 0; m < c.rows; ++m)
      for (int n = 0; n < c.colsb / 4; ++n) {
        int32_t acc;
        std::memcpy(&acc, c.d[m] + 4 * n, 4);
        uint32_t u = static_cast<uint32_t>(acc);  // the instruction wraps around in 32 bits
        for (int k = 0; k < a.colsb / 4; ++k)
          for (int i = 0; i < 4; ++i) {
            const int32_t bv = kBSigned ? static_cast<int32_t>(static_cast<int8_t>(b.d[k][4 * n + i]))
                                        : static_cast<int32_t>(b.d[k][4 * n + i]);
            u += static_cast<uint32_t>(static_cast<int32_t>(static_cast<int8_t>(a.d[m][4 * k + i])) * bv);
          }
        acc = static_cast<int32_t>(u);
        std::memcpy(c.d[m] + 4 * n, &acc, 4);
      }
  }
  // TDPBF16PS: C[m][n] (FP32) += A[m][2k] * B[k][2n], then += A[m][2k + 1] * B[k][2n + 1], for k < colsb(A)/4
  // in order; BF16 inputs that are denormal read as 0 (DAZ), each step rounds to nearest even with denormal
  // results flushed to 0 (FTZ). A product of two BF16 values is exact in FP32, so one fma per step is the
  // instruction's arithmetic as the SDM writes it.
  template <int C, int A, int B>
  static void dpbf16ps() {
    Tile &c = tiles()[C], &a = tiles()[A], &b = tiles()[B];
    auto bf = [](const uint8_t* p) {
      uint16_t h;
      std::memcpy(&h, p, 2);
      uint32_t u = static_cast<uint32_t>(h) << 16;
      if ((u & 0x7F800000u) == 0) u &= 0x80000000u;  // DAZ
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    };
    for (int m = 0; m < c.rows; ++m)
      for (int n = 0; n < c.colsb / 4; ++n) {
        float acc;
        std::memcpy(&acc, c.d[m] + 4 * n, 4);
        for (int k = 0; k < a.colsb / 4; ++k)
          for (int i = 0; i < 2; ++i) {
            acc = std::fma(bf(a.d[m] + 4 * k + 2 * i), bf(b.d[k] + 4 * n + 2 * i), acc);
            if (std::fpclassify(acc) == FP_SUBNORMAL) acc = std::copysign(0.0f, acc);  // FTZ
          }
        std::memcpy(c.d[m] + 4 * n, &acc, 4);
      }
  }
  template <int C, int A, int B>
  static void dpbssd() {
    dpbs<C, A, B, true>();
  }
  template <int C, int A, int B>
  static void dpbsud() {
    dpbs<C, A, B, false>();
  }
};

}  // namespace
}  // namespace lowbit::kern
