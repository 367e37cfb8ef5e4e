// GGUF Q4_1 (ggml type 3): 32 weights per 20-byte block, 5.0 bpw.
//
//   offset 0   2   4                               20
//          | d | m | qs[16]                         |
//   d, m: fp16; qs[j] low nibble = element j, high nibble = element j+16.  x = d * q + m, q in [0, 15].
#include <cstring>

#include "core/half.h"
#include "formats/format_rows.h"
#include "formats/ggml_types.h"

namespace lowbit::formats_detail {
namespace {
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_1) == 20, "Q4_1 block is 20 bytes");

void deq(const void* src, float* y, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / 32; ++b, y += 32) {
    BlockQ4_1 blk;
    std::memcpy(&blk, p + b * sizeof blk, sizeof blk);
    const float d = f16_to_f32(blk.d), m = f16_to_f32(blk.m);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(blk.qs[j] & 0x0F) * d + m;
      y[j + 16] = static_cast<float>(blk.qs[j] >> 4) * d + m;
    }
  }
}
}  // namespace

FormatInfo row_q4_1() {
  return make_gguf_row(FormatId::Q4_1, "q4_1", ggml::Q4_1, 4,
                       "GGUF Q4_1: 32 x 4-bit + fp16 scale and min (5.0 bpw)", deq, nullptr);
}
}  // namespace lowbit::formats_detail
