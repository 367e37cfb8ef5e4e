// GGUF Q5_0 (ggml type 6): 32 weights per 22-byte block, 5.5 bpw.
//
//   offset 0   2        6                          22
//          | d | qh[4]  | qs[16]                    |
//   d: fp16. qh: 32 fifth bits as a little-endian uint32, bit j = 5th bit of element j.
//   element j      (j < 16) = (qs[j] & 0xF) | ((qh >> j) & 1) << 4
//   element j + 16          = (qs[j] >> 4)  | ((qh >> (j + 16)) & 1) << 4        x = d * (q - 16)
//
// Quantization (llama.cpp's quantize_row_q5_0_ref, byte-compatible): m = the element of largest |x| (sign
// kept), d = m / -16, q = min(31, trunc(x / d + 16.5)) using the FP32 d (stored rounded to fp16).
#include <cmath>
#include <cstddef>
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
void quant(const float* x, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / 32; ++b, x += 32) {
    const float m = signed_absmax(x, 32);
    const float d = m / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ5_0 blk;
    blk.d = f32_to_f16(d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      int q0 = static_cast<int>(x[j] * id + 16.5f), q1 = static_cast<int>(x[j + 16] * id + 16.5f);
      q0 = q0 < 31 ? q0 : 31;
      q1 = q1 < 31 ? q1 : 31;
      blk.qs[j] = static_cast<uint8_t>((q0 & 0x0F) | (q1 & 0x0F) << 4);
      qh |= static_cast<uint32_t>(q0 >> 4 & 1) << j | static_cast<uint32_t>(q1 >> 4 & 1) << (j + 16);
    }
    for (int k = 0; k < 4; ++k) blk.qh[k] = static_cast<uint8_t>(qh >> (8 * k));
    std::memcpy(p + b * sizeof blk, &blk, sizeof blk);
  }
}
}  // namespace

FormatInfo row_q5_0() {
  FormatInfo r = make_gguf_row(FormatId::Q5_0, "q5_0", ggml::Q5_0, 5,
                               "GGUF Q5_0: 32 x 5-bit + fp16 scale (5.5 bpw)", deq, quant);
  r.scale_at[0] = static_cast<int>(offsetof(BlockQ5_0, d));
  return r;
}
}  // namespace lowbit::formats_detail
