// GGUF IQ4_NL (ggml type 20): 32 weights per 18-byte block, 4.5 bpw; non-linear 4-bit grid.
//
//   offset 0   2                                   18
//          | d | qs[16]                             |
//   qs[j] low nibble -> element j, high nibble -> element j+16;  x = d * kIq4Grid[nibble]
//   kIq4Grid (ggml_iq4_grid.h) = {-127,-104,-83,-65,-49,-35,-22,-10,1,13,25,38,53,69,89,113}
#include <cstring>

#include "core/half.h"
#include "formats/format_rows.h"
#include "formats/ggml_iq4_grid.h"
#include "formats/ggml_types.h"

namespace lowbit::formats_detail {
namespace {
struct BlockIq4Nl {
  uint16_t d;
  uint8_t qs[16];
};
static_assert(sizeof(BlockIq4Nl) == 18, "IQ4_NL block is 18 bytes");

void deq(const void* src, float* y, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / 32; ++b, y += 32) {
    BlockIq4Nl blk;
    std::memcpy(&blk, p + b * sizeof blk, sizeof blk);
    const float d = f16_to_f32(blk.d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * kIq4Grid[blk.qs[j] & 0x0F];
      y[j + 16] = d * kIq4Grid[blk.qs[j] >> 4];
    }
  }
}
}  // namespace

FormatInfo row_iq4_nl() {
  return make_gguf_row(FormatId::IQ4_NL, "iq4_nl", ggml::IQ4_NL, 4,
                       "GGUF IQ4_NL: 32 x 4-bit non-linear grid + fp16 (4.5 bpw)", deq, nullptr);
}
}  // namespace lowbit::formats_detail
