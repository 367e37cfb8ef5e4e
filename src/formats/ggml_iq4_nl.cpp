// GGUF IQ4_NL (ggml type 20): 32 weights per 18-byte block, 4.5 bpw; non-linear 4-bit grid.
//
//   offset 0   2                                   18
//          | d | qs[16]                             |
//   qs[j] low nibble -> element j, high nibble -> element j+16;  x = d * kIq4Grid[nibble]
//   kIq4Grid (ggml_iq4_grid.h) = {-127,-104,-83,-65,-49,-35,-22,-10,1,13,25,38,53,69,89,113}
//
// Quantization (llama.cpp's quantize_iq4_nl, what llama-quantize runs; byte-compatible with and without an
// importance vector): per block weights w_i = x_i^2, or imp_i * sqrt(sigma^2 + x_i^2) with sigma^2 = 2 mean
// x^2 over the block; m = the element of largest |x| (sign kept). Start from d = m / 127 (m toward the grid's
// +113 end), map every x / d to the nearest grid value g (ties to the upper one), fit d by weighted least
// squares; then try the 15 inverse scales (k - 127) / m, k = -7..7 (m toward the -127 end), keeping the fit
// with the largest (sum w g x)^2 / sum w g^2; finally every element is re-mapped under the FP32 d (stored
// rounded to fp16). Blocks with max |x| < 1e-15 store d = 0.
// (llama.cpp's quantize_row_iq4_nl_ref, used for on-the-fly conversion, skips the search; llama-quantize
// does not use it.) Importance entries that are negative or non-finite count as 0; a block whose weights
// are all 0 falls back to the unweighted rule (llama.cpp would store a NaN scale there); a step beyond fp16
// saturates to +-65504 (llama.cpp stores Inf) with the codes re-mapped under it.
#include <cmath>
#include <cstddef>
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
// One block of 32: the step d and the 32 grid indices. imp: the block's 32 importances or nullptr.
float encode_block(const float* x, const float* imp, uint8_t* L) {
  float w[32];
  float sigma2 = 0;
  for (int j = 0; j < 32; ++j) sigma2 += x[j] * x[j];
  sigma2 *= 2.f / 32;
  iq4_block_weights(x, imp, sigma2, w);
  const float d = iq4_block_step(x, w);
  const float id = d != 0 ? 1 / d : 0;
  for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(iq4_nearest_index(id * x[j]));
  return d;
}

// Blocks whose sums overflow (|x| beyond ~1e12) are encoded in units scaled by a power of two (exact:
// the same codes and, scaled back, the same d wherever the plain sums stay finite).
void weighted(const float* x, void* dst, int64_t n, const float* importance, float* values) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / 32; ++b, x += 32) {
    const float* imp = importance ? importance + 32 * b : nullptr;
    uint8_t L[32];
    float d = encode_block(x, imp, L);
    if (!std::isfinite(d)) {
      float amax = 0, xs[32];
      for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
      int e = 0;
      std::frexp(amax, &e);
      for (int j = 0; j < 32; ++j) xs[j] = std::ldexp(x[j], 1 - e);
      d = std::ldexp(encode_block(xs, imp, L), e - 1);
    }
    BlockIq4Nl blk;
    if (std::fabs(d) > 65504.0f) {  // beyond fp16 (llama.cpp stores Inf): saturate, re-map under that step
      d = d < 0 ? -65504.0f : 65504.0f;
      for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(iq4_nearest_index(x[j] / d));
    }
    blk.d = f32_to_f16(d);
    for (int j = 0; j < 16; ++j) blk.qs[j] = static_cast<uint8_t>(L[j] | L[j + 16] << 4);
    std::memcpy(p + b * sizeof blk, &blk, sizeof blk);
  }
  if (values) deq(dst, values, n);
}

void quant(const float* x, void* dst, int64_t n) {
  weighted(x, dst, n, nullptr, nullptr);
}
}  // namespace

FormatInfo row_iq4_nl() {
  FormatInfo r = make_gguf_row(FormatId::IQ4_NL, "iq4_nl", ggml::IQ4_NL, 4,
                               "GGUF IQ4_NL: 32 x 4-bit non-linear grid + fp16 (4.5 bpw)", deq, quant);
  r.quantize_row_weighted = weighted;
  r.scale_at[0] = static_cast<int>(offsetof(BlockIq4Nl, d));
  return r;
}
}  // namespace lowbit::formats_detail
