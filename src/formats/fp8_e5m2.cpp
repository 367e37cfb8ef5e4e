// FP8 E5M2 (OCP OFP8; IEEE-like). More range, less precision: gradients, some KV caches.
//
//   bit   7   6 5 4 3 2   1 0
//         S   E E E E E   M M      bias 15; E=0: subnormal M * 2^-16
//
//   S.00000.01 = 2^-16 (min subnormal)   S.11110.11 = 57344 (max finite)
//   S.11111.00 = +-Inf   S.11111.{01,10,11} = NaN   -0 exists.
// Saturating cast: |x| > 57344 and +-Inf -> +-57344. Non-saturating: overflow -> +-Inf (IEEE rounding at the
// edge).
#include "formats/format_rows.h"

namespace lowbit {
namespace {
constexpr MinifloatSpec kSpec{5, 2, 15, MfNan::Ieee, true};
const MfTable& table() {
  static const MfTable t(kSpec);
  return t;
}
}  // namespace

float fp8_e5m2_to_f32(uint8_t c) {
  return table().v[c & 0xFF];
}
uint8_t f32_to_fp8_e5m2(float x, bool saturate) {
  return static_cast<uint8_t>(mf_encode(kSpec, x, saturate));
}

namespace formats_detail {
FormatInfo row_e5m2() {
  return make_minifloat_row(
      FormatId::E5M2, "e5m2", kSpec, kRouteWeights | kRouteActivations | kRouteKv,
      "FP8 E5M2 (OCP): bias 15, max 57344, IEEE Inf/NaN",
      [](uint32_t c) { return fp8_e5m2_to_f32(static_cast<uint8_t>(c)); },
      [](float x, bool sat) -> uint32_t { return f32_to_fp8_e5m2(x, sat); });
}
}  // namespace formats_detail
}  // namespace lowbit
