// The AMX W8A8 prefill kernel (amx_tiles.h) on a scalar model of the tile unit, and the AmxInt8Pack packer.
//
// Why a model: the development machine has no AMX, and a kernel that only runs where nobody tested it is a
// liability. The model implements exactly the instructions the kernel uses, as the Intel SDM defines them
// (palette 1: 8 tiles of up to 16 rows x 64 bytes; TILELOADD / TILESTORED copy `rows` rows of `colsb` bytes
// at `stride`; TILEZERO; TDPBSSD C[m][n] += sum over k < colsb(A)/4 and i < 4 of A[m][4k+i] * B[k][4n+i],
// signed bytes, int32 wrap-around), so every packing, K-loop and tail decision of the kernel is exercised by
// the tests; only the instructions themselves are left to the hardware.
#include <cstring>

#include "kernels/amx_tiles.h"
#include "kernels/kernel_plan.h"

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
  template <int C, int A, int B>
  static void dpbssd() {
    Tile &c = tiles()[C], &a = tiles()[A], &b = tiles()[B];
    for (int m = 0; m < c.rows; ++m)
      for (int n = 0; n < c.colsb / 4; ++n) {
        int32_t acc;
        std::memcpy(&acc, c.d[m] + 4 * n, 4);
        uint32_t u = static_cast<uint32_t>(acc);  // the instruction wraps around in 32 bits
        for (int k = 0; k < a.colsb / 4; ++k)
          for (int i = 0; i < 4; ++i)
            u += static_cast<uint32_t>(static_cast<int32_t>(static_cast<int8_t>(a.d[m][4 * k + i])) *
                                       static_cast<int8_t>(b.d[k][4 * n + i]));
        acc = static_cast<int32_t>(u);
        std::memcpy(c.d[m] + 4 * n, &acc, 4);
      }
  }
};

}  // namespace

void pack_amx_int8(const uint8_t* codes, int64_t row_bytes, int64_t rows, int64_t cols, AmxInt8Pack& out) {
  out.rows = rows;
  out.cols = cols;
  out.kp = (cols + 63) / 64 * 64;
  const int64_t kt_n = out.kp / 64;
  out.tiles.assign(static_cast<size_t>((rows + 15) / 16 * kt_n * 1024), 0);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = codes + r * row_bytes;
    int8_t* blk = out.tiles.data() + (r / 16) * kt_n * 1024 + 4 * (r % 16);
    for (int64_t c = 0; c < cols; ++c)
      blk[(c / 64) * 1024 + ((c % 64) / 4) * 64 + c % 4] = static_cast<int8_t>(src[c] ^ 0x80);  // q = u - 128
  }
}

void amx_w8a8_emulated(const AmxInt8Pack& pk, int64_t r0, int64_t r1, const int8_t* x, const float* sx,
                       const float* wscale, int64_t T, float* y) {
  amx_w8a8_rows<AmxEmu>(pk, r0, r1, x, sx, wscale, T, y);
}

}  // namespace lowbit::kern
