// GGUF Q4_0 (ggml type 2): 32 weights per 18-byte block, 4.5 bpw.
//
//   offset 0   2                                   18
//          | d | qs[16]                             |
//   d: fp16 scale; qs[j] low nibble = element j, high nibble = element j+16.  x = d * (q - 8), q in [0, 15].
//
// Quantization (llama.cpp reference, byte-compatible): m = the element of largest |x| (sign kept), d = m /
// -8, q = min(15, trunc(x / d + 8.5)), using the FP32 d (the stored fp16 d is rounded from it).
#include <cmath>
#include <cstddef>
#include <cstring>

#include "core/half.h"
#include "formats/format_rows.h"
#include "formats/ggml_types.h"

namespace lowbit::formats_detail {
namespace {
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block is 18 bytes");

void deq(const void* src, float* y, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / 32; ++b, y += 32) {
    BlockQ4_0 blk;
    std::memcpy(&blk, p + b * sizeof blk, sizeof blk);
    const float d = f16_to_f32(blk.d);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((blk.qs[j] & 0x0F) - 8) * d;
      y[j + 16] = static_cast<float>((blk.qs[j] >> 4) - 8) * d;
    }
  }
}

void quant(const float* x, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / 32; ++b, x += 32) {
    const float m = signed_absmax(x, 32);
    const float d = m / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_0 blk;
    blk.d = f32_to_f16(d);
    for (int j = 0; j < 16; ++j) {
      const int q0 = static_cast<int8_t>(x[j] * id + 8.5f);
      const int q1 = static_cast<int8_t>(x[j + 16] * id + 8.5f);
      blk.qs[j] = static_cast<uint8_t>((q0 < 15 ? q0 : 15) | (q1 < 15 ? q1 : 15) << 4);
    }
    std::memcpy(p + b * sizeof blk, &blk, sizeof blk);
  }
}
}  // namespace

FormatInfo row_q4_0() {
  FormatInfo r = make_gguf_row(FormatId::Q4_0, "q4_0", ggml::Q4_0, 4,
                               "GGUF Q4_0: 32 x 4-bit + fp16 scale (4.5 bpw)", deq, quant);
  r.scale_at[0] = static_cast<int>(offsetof(BlockQ4_0, d));
  return r;
}
}  // namespace lowbit::formats_detail
