// GGUF Q5_0 (ggml type 6): 32 weights per 22-byte block, 5.5 bpw.
//
//   offset 0   2        6                          22
//          | d | qh[4]  | qs[16]                    |
//   d: fp16. qh: 32 fifth bits as a little-endian uint32, bit j = 5th bit of element j.
//   element j      (j < 16) = (qs[j] & 0xF) | ((qh >> j) & 1) << 4
//   element j + 16          = (qs[j] >> 4)  | ((qh >> (j + 16)) & 1) << 4        x = d * (q - 16)
#include <cstring>

#include "core/half.h"
#include "formats/format_rows.h"
#include "formats/ggml_types.h"

namespace lowbit::formats_detail {
namespace {
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_0) == 22, "Q5_0 block is 22 bytes");

void deq(const void* src, float* y, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / 32; ++b, y += 32) {
    BlockQ5_0 blk;
    std::memcpy(&blk, p + b * sizeof blk, sizeof blk);
    const float d = f16_to_f32(blk.d);
    const uint32_t qh = blk.qh[0] | blk.qh[1] << 8 | blk.qh[2] << 16 | static_cast<uint32_t>(blk.qh[3]) << 24;
    for (int j = 0; j < 16; ++j) {
      const int q0 = (blk.qs[j] & 0x0F) | ((qh >> j) & 1) << 4;
      const int q1 = (blk.qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
      y[j] = static_cast<float>(q0 - 16) * d;
      y[j + 16] = static_cast<float>(q1 - 16) * d;
    }
  }
}
}  // namespace

FormatInfo row_q5_0() {
  return make_gguf_row(FormatId::Q5_0, "q5_0", ggml::Q5_0, 5, "GGUF Q5_0: 32 x 5-bit + fp16 scale (5.5 bpw)",
                       deq, nullptr);
}
}  // namespace lowbit::formats_detail
