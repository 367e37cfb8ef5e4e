// GGUF MXFP4 (ggml type 39; gpt-oss): 32 weights per 17-byte block, 4.25 bpw. Same numbers as OCP MXFP4 but a
// different nibble order than lowbit's MX layout.
//
//   offset 0   1                                   17
//          | e | qs[16]                             |
//   e: E8M0 scale 2^(e-127). qs[j] low nibble -> element j, high nibble -> element j+16, each an E2M1 code.
//   x = e2m1(nibble) * 2^(e-127)
#include <cmath>
#include <cstring>

#include "formats/format_rows.h"
#include "formats/ggml_types.h"

namespace lowbit::formats_detail {
namespace {
struct BlockMxfp4 {
  uint8_t e;
  uint8_t qs[16];
};
static_assert(sizeof(BlockMxfp4) == 17, "ggml MXFP4 block is 17 bytes");

void deq(const void* src, float* y, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / 32; ++b, y += 32) {
    BlockMxfp4 blk;
    std::memcpy(&blk, p + b * sizeof blk, sizeof blk);
    const float d = e8m0_to_f32(blk.e);
    for (int j = 0; j < 16; ++j) {
      y[j] = fp4_e2m1_to_f32(blk.qs[j] & 0x0F) * d;
      y[j + 16] = fp4_e2m1_to_f32(blk.qs[j] >> 4) * d;
    }
  }
}
}  // namespace

FormatInfo row_ggml_mxfp4() {
  FormatInfo r =
      make_gguf_row(FormatId::GGML_MXFP4, "ggml_mxfp4", ggml::MXFP4, 4,
                    "GGUF MXFP4 (gpt-oss): E8M0 + 32 x E2M1, j/j+16 nibbles (4.25 bpw)", deq, nullptr);
  r.native_scale = ScaleType::E8M0;
  return r;
}
}  // namespace lowbit::formats_detail
