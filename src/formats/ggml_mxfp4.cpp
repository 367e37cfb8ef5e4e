// GGUF MXFP4 (ggml type 39; gpt-oss): 32 weights per 17-byte block, 4.25 bpw. Same numbers as OCP MXFP4 but a
// different nibble order than lowbit's MX layout.
//
//   offset 0   1                                   17
//          | e | qs[16]                             |
//   e: E8M0 scale 2^(e-127). qs[j] low nibble -> element j, high nibble -> element j+16, each an E2M1 code.
//   x = e2m1(nibble) * 2^(e-127)
//
// Quantization (ggml's quantize_row_mxfp4_ref, byte-compatible): amax = max |x|, e = floor(log2f(amax)) - 2 +
// 127 (0 for an all-zero block, and for amax below 2^-125, where the reference's byte cast wraps), and each
// element the E2M1 code whose value is nearest, scanning codes 0..15 (0, 0.5 .. 6, -0, -0.5 .. -6) and
// keeping the first on ties, so a tie goes to the smaller magnitude and 0 to +0. The block maximum can exceed
// 6 * 2^(e-127) (amax in [6, 8) * 2^(e-127)); it then saturates to +-6 * 2^(e-127).
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
// E2M1 code values, doubled (ggml's table), with half the E8M0 scale: kv * 2^(e-128) = e2m1 * 2^(e-127).
constexpr int8_t kDoubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

float half_scale(uint8_t e) {
  return std::ldexp(1.0f, static_cast<int>(e) - 128);
}

void quant(const float* x, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / 32; ++b, x += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j)
      if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
    int ev = std::isfinite(amax) ? 0 : 254;  // Inf: the largest scale (log2 would overflow the int)
    if (amax > 0.0f && std::isfinite(amax)) ev = static_cast<int>(std::floor(std::log2(amax))) - 2 + 127;
    BlockMxfp4 blk;
    blk.e = static_cast<uint8_t>(ev < 0 ? 0 : ev > 254 ? 254 : ev);
    const float d = half_scale(blk.e);
    auto nearest = [d](float v) {
      int best = 0;
      float best_err = std::fabs(kDoubled[0] * d - v);
      for (int i = 1; i < 16; ++i) {
        const float err = std::fabs(kDoubled[i] * d - v);
        if (err < best_err) {
          best = i;
          best_err = err;
        }
      }
      return best;
    };
    for (int j = 0; j < 16; ++j) blk.qs[j] = static_cast<uint8_t>(nearest(x[j]) | nearest(x[j + 16]) << 4);
    std::memcpy(p + b * sizeof blk, &blk, sizeof blk);
  }
}
}  // namespace

FormatInfo row_ggml_mxfp4() {
  FormatInfo r =
      make_gguf_row(FormatId::GGML_MXFP4, "ggml_mxfp4", ggml::MXFP4, 4,
                    "GGUF MXFP4 (gpt-oss): E8M0 + 32 x E2M1, j/j+16 nibbles (4.25 bpw)", deq, quant);
  r.native_scale = ScaleType::E8M0;
  return r;
}
}  // namespace lowbit::formats_detail
