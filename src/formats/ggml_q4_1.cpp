// GGUF Q4_1 (ggml type 3): 32 weights per 20-byte block, 5.0 bpw.
//
//   offset 0   2   4                               20
//          | d | m | qs[16]                         |
//   d, m: fp16; qs[j] low nibble = element j, high nibble = element j+16.  x = d * q + m, q in [0, 15].
//
// Quantization (llama.cpp's quantize_row_q4_1_ref, byte-compatible): d = (max - min) / 15, m = min (both
// rounded to fp16 for storage), q = min(15, trunc((x - min) / d + 0.5)) using the FP32 d and min.
#include <cstddef>
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
void quant(const float* x, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / 32; ++b, x += 32) {
    float mn, mx;
    min_max(x, 32, &mn, &mx);
    const float d = (mx - mn) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_1 blk;
    blk.d = f32_to_f16(d);
    blk.m = f32_to_f16(mn);
    for (int j = 0; j < 16; ++j) {
      const int q0 = static_cast<int>((x[j] - mn) * id + 0.5f);
      const int q1 = static_cast<int>((x[j + 16] - mn) * id + 0.5f);
      blk.qs[j] = static_cast<uint8_t>((q0 < 15 ? q0 : 15) | (q1 < 15 ? q1 : 15) << 4);
    }
    std::memcpy(p + b * sizeof blk, &blk, sizeof blk);
  }
}
}  // namespace

FormatInfo row_q4_1() {
  FormatInfo r = make_gguf_row(FormatId::Q4_1, "q4_1", ggml::Q4_1, 4,
                               "GGUF Q4_1: 32 x 4-bit + fp16 scale and min (5.0 bpw)", deq, quant);
  r.scale_at[0] = static_cast<int>(offsetof(BlockQ4_1, d));
  r.scale_at[1] = static_cast<int>(offsetof(BlockQ4_1, m));
  return r;
}
}  // namespace lowbit::formats_detail
