// GGUF Q8_0 (ggml type 8): 32 weights per 34-byte block, 8.5 bpw.
//
//   offset 0   2                                   34
//          | d | qs[32] (int8)                      |        x = d * q
//
// Quantization (llama.cpp reference, byte-compatible): d = absmax / 127, q = roundf(x / d) -- note roundf
// rounds half AWAY from zero here (llama.cpp's choice), unlike lowbit's own INT8 (half to even).
#include <cmath>
#include <cstddef>
#include <cstring>

#include "core/half.h"
#include "formats/format_rows.h"
#include "formats/ggml_types.h"

namespace lowbit::formats_detail {
namespace {
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block is 34 bytes");

void deq(const void* src, float* y, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / 32; ++b, y += 32) {
    BlockQ8_0 blk;
    std::memcpy(&blk, p + b * sizeof blk, sizeof blk);
    const float d = f16_to_f32(blk.d);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(blk.qs[j]) * d;
  }
}

void quant(const float* x, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / 32; ++b, x += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8_0 blk;
    blk.d = f32_to_f16(d);
    for (int j = 0; j < 32; ++j) blk.qs[j] = static_cast<int8_t>(std::round(x[j] * id));
    std::memcpy(p + b * sizeof blk, &blk, sizeof blk);
  }
}
}  // namespace

FormatInfo row_q8_0() {
  FormatInfo r = make_gguf_row(FormatId::Q8_0, "q8_0", ggml::Q8_0, 8,
                               "GGUF Q8_0: 32 x int8 + fp16 scale (8.5 bpw)", deq, quant);
  r.scale_at[0] = static_cast<int>(offsetof(BlockQ8_0, d));
  return r;
}
}  // namespace lowbit::formats_detail
