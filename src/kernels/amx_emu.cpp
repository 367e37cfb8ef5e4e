// The AMX W8A8 prefill kernel (amx_tiles.h) on the scalar model of the tile unit (amx_emu.h), and the
// AmxInt8Pack packer.
#include <cstring>

#include "kernels/amx_emu.h"
#include "kernels/amx_tiles.h"
#include "kernels/kernel_plan.h"

namespace lowbit::kern {

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
