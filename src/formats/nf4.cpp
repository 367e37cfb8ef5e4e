// NF4 (QLoRA "NormalFloat 4"; bitsandbytes get_4bit_type): 16 values, quantiles of N(0,1) scaled to [-1, 1],
// with an exact 0. Block absmax scaling (default block 64): x_hat = value[u] * absmax(block).
//
//   code u (4 bits) -> value[u] below (float32, bit-exact); packed LSB-first: element 2i in the low nibble.
//
// Encoding picks the nearest value; at an exact midpoint between two values the LOWER code wins (bitsandbytes
// compares "x > midpoint"). Optional double quantization of the block scales: see tensor/qtensor.h.
#include <cmath>

#include "formats/format_rows.h"

namespace lowbit::formats_detail {
namespace {
constexpr float kNf4[16] = {-1.0f,
                            -0.6961928009986877f,
                            -0.5250730514526367f,
                            -0.39491748809814453f,
                            -0.28444138169288635f,
                            -0.18477343022823334f,
                            -0.09105003625154495f,
                            0.0f,
                            0.07958029955625534f,
                            0.16093020141124725f,
                            0.24611230194568634f,
                            0.33791524171829224f,
                            0.44070982933044434f,
                            0.5626170039176941f,
                            0.7229568362236023f,
                            1.0f};

uint32_t nf4_encode(float x, bool) {
  if (std::isnan(x)) return 7;  // NaN -> 0.0 (callers reject NaN first)
  uint32_t u = 0;
  // Count midpoints strictly below x: equivalent to nearest with ties to the lower code.
  for (int i = 0; i < 15; ++i)
    if (x > 0.5f * (kNf4[i] + kNf4[i + 1])) u = static_cast<uint32_t>(i + 1);
  return u;
}
}  // namespace

FormatInfo row_nf4() {
  FormatInfo r{};
  r.id = FormatId::NF4;
  r.name = "nf4";
  r.kind = FormatKind::Lut;
  r.bits = 4;
  r.block_elems = 1;  // scale is external (per group, default 64)
  r.native_scale = ScaleType::None;
  r.routes = kRouteWeights;
  r.elem = FormatId::NF4;
  r.max_finite = 1.0;
  r.min_positive = 0.07958029955625534;
  r.has_inf = r.has_nan = r.has_neg_zero = false;
  r.ggml_type = -1;
  r.description = "NormalFloat4 (QLoRA): 16 N(0,1) quantiles, absmax blocks (default 64)";
  r.decode = [](uint32_t c) { return kNf4[c & 15]; };
  r.encode = &nf4_encode;
  return r;
}
}  // namespace lowbit::formats_detail
