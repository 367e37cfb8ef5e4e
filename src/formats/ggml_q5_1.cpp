// GGUF Q5_1 (ggml type 7): 32 weights per 24-byte block, 6.0 bpw.
//
//   offset 0   2   4        8                      24
//          | d | m | qh[4]  | qs[16]                |
//   As Q5_0 (fifth bits in qh, little-endian uint32), but x = d * q + m with q in [0, 31].
//
// Quantization (llama.cpp's quantize_row_q5_1_ref, byte-compatible): d = (max - min) / 31, m = min (both
// rounded to fp16 for storage), q = trunc((x - min) / d + 0.5) using the FP32 d and min (the reference does
// not clamp; q <= 31 holds for finite input).
#include <cstddef>
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
void quant(const float* x, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / 32; ++b, x += 32) {
    float mn, mx;
    min_max(x, 32, &mn, &mx);
    const float d = (mx - mn) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ5_1 blk;
    blk.d = f32_to_f16(d);
    blk.m = f32_to_f16(mn);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = static_cast<int>((x[j] - mn) * id + 0.5f) & 0x1F;
      const int q1 = static_cast<int>((x[j + 16] - mn) * id + 0.5f) & 0x1F;
      blk.qs[j] = static_cast<uint8_t>((q0 & 0x0F) | (q1 & 0x0F) << 4);
      qh |= static_cast<uint32_t>(q0 >> 4) << j | static_cast<uint32_t>(q1 >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; ++k) blk.qh[k] = static_cast<uint8_t>(qh >> (8 * k));
    std::memcpy(p + b * sizeof blk, &blk, sizeof blk);
  }
}
}  // namespace

FormatInfo row_q5_1() {
  FormatInfo r = make_gguf_row(FormatId::Q5_1, "q5_1", ggml::Q5_1, 5,
                               "GGUF Q5_1: 32 x 5-bit + fp16 scale and min (6.0 bpw)", deq, quant);
  r.scale_at[0] = static_cast<int>(offsetof(BlockQ5_1, d));
  r.scale_at[1] = static_cast<int>(offsetof(BlockQ5_1, m));
  return r;
}
}  // namespace lowbit::formats_detail
