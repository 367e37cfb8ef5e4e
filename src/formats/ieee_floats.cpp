// Plain IEEE storage formats (no scale): F32, F16 (binary16), BF16 (bfloat16). Codecs from core/half.h.
//
//   F32   bit 31 S | 30..23 E (bias 127) | 22..0 M
//   F16   bit 15 S | 14..10 E (bias 15)  |  9..0 M     max 65504, min subnormal 2^-24
//   BF16  bit 15 S | 14..7  E (bias 127) |  6..0 M     = upper half of F32; max ~3.39e38
// Rounding: RNE. F16 saturate=true clamps to +-65504 instead of overflowing to Inf; NaN stays NaN.
#include <cmath>
#include <limits>

#include "core/half.h"
#include "formats/format_rows.h"
#include "formats/ggml_types.h"

namespace lowbit::formats_detail {
namespace {
FormatInfo plain_row(FormatId id, const char* name, int bits, double maxv, double minv, const char* desc) {
  FormatInfo r{};
  r.id = id;
  r.name = name;
  r.kind = FormatKind::Float;
  r.bits = bits;
  r.block_elems = 1;
  r.block_bytes = 0;
  r.native_scale = ScaleType::None;
  r.routes = kRouteWeights | kRouteActivations | kRouteKv;
  r.elem = id;
  r.max_finite = maxv;
  r.min_positive = minv;
  r.has_inf = true;
  r.has_nan = true;
  r.has_neg_zero = true;
  r.ggml_type = -1;
  r.description = desc;
  return r;
}
}  // namespace

FormatInfo row_f32() {
  auto r = plain_row(FormatId::F32, "f32", 32, std::numeric_limits<float>::max(),
                     std::numeric_limits<float>::denorm_min(), "IEEE binary32 (reference precision)");
  r.ggml_type = ggml::F32;
  r.exp_bits = 8;
  r.man_bits = 23;
  r.decode = [](uint32_t c) { return f32_from_bits(c); };
  r.encode = [](float x, bool) -> uint32_t { return f32_bits(x); };
  return r;
}

FormatInfo row_f16() {
  auto r = plain_row(FormatId::F16, "f16", 16, 65504.0, std::ldexp(1.0, -24), "IEEE binary16: max 65504");
  r.ggml_type = ggml::F16;
  r.exp_bits = 5;
  r.man_bits = 10;
  r.decode = [](uint32_t c) { return f16_to_f32(static_cast<uint16_t>(c)); };
  r.encode = [](float x, bool sat) -> uint32_t {
    if (sat && !std::isnan(x)) x = std::fmax(-65504.0f, std::fmin(65504.0f, x));
    return f32_to_f16(x);
  };
  return r;
}

FormatInfo row_bf16() {
  auto r = plain_row(FormatId::BF16, "bf16", 16, 3.3895313892515355e38, std::ldexp(1.0, -133),
                     "bfloat16: F32 range, 8-bit significand");
  r.ggml_type = ggml::BF16;
  r.exp_bits = 8;
  r.man_bits = 7;
  r.decode = [](uint32_t c) { return bf16_to_f32(static_cast<uint16_t>(c)); };
  r.encode = [](float x, bool sat) -> uint32_t {
    uint16_t b = f32_to_bf16(x);
    if (sat && (b & 0x7fff) == 0x7f80 && !std::isinf(x)) b = static_cast<uint16_t>((b & 0x8000) | 0x7f7f);
    return b;
  };
  return r;
}
}  // namespace lowbit::formats_detail
