// GGUF Q5_1 (ggml type 7): 32 weights per 24-byte block, 6.0 bpw.
//
//   offset 0   2   4        8                      24
//          | d | m | qh[4]  | qs[16]                |
//   As Q5_0 (fifth bits in qh, little-endian uint32), but x = d * q + m with q in [0, 31].
#include <cstring>

#include "core/half.h"
#include "formats/format_rows.h"
#include "formats/ggml_types.h"

namespace lowbit::formats_detail {
namespace {
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_1) == 24, "Q5_1 block is 24 bytes");

void deq(const void* src, float* y, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / 32; ++b, y += 32) {
    BlockQ5_1 blk;
    std::memcpy(&blk, p + b * sizeof blk, sizeof blk);
    const float d = f16_to_f32(blk.d), m = f16_to_f32(blk.m);
    const uint32_t qh = blk.qh[0] | blk.qh[1] << 8 | blk.qh[2] << 16 | static_cast<uint32_t>(blk.qh[3]) << 24;
    for (int j = 0; j < 16; ++j) {
      const int q0 = (blk.qs[j] & 0x0F) | ((qh >> j) & 1) << 4;
      const int q1 = (blk.qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
      y[j] = static_cast<float>(q0) * d + m;
      y[j + 16] = static_cast<float>(q1) * d + m;
    }
  }
}
}  // namespace

FormatInfo row_q5_1() {
  return make_gguf_row(FormatId::Q5_1, "q5_1", ggml::Q5_1, 5,
                       "GGUF Q5_1: 32 x 5-bit + fp16 scale and min (6.0 bpw)", deq, nullptr);
}
}  // namespace lowbit::formats_detail
