// FP6 E3M2 (OCP MX v1.0 element type).
//
//   bit   5   4 3 2   1 0
//         S   E E E   M M      bias 3; E=0: subnormal M * 2^-4
//
//   S.000.01 = 0.0625 (min subnormal)   S.111.11 = 28 (max)   no Inf, no NaN; -0 exists.
// Cast: RNE, always saturating to +-28.
#include "formats/format_rows.h"

namespace lowbit {
namespace {
constexpr MinifloatSpec kSpec{3, 2, 3, MfNan::None, false};
const MfTable& table() {
  static const MfTable t(kSpec);
  return t;
}
}  // namespace

float fp6_e3m2_to_f32(uint8_t c) {
  return table().v[c & 0x3F];
}
uint8_t f32_to_fp6_e3m2(float x) {
  return static_cast<uint8_t>(mf_encode(kSpec, x, true));
}

namespace formats_detail {
FormatInfo row_e3m2() {
  return make_minifloat_row(
      FormatId::E3M2, "e3m2", kSpec, kRouteWeights | kRouteActivations,
      "FP6 E3M2 (OCP MX): bias 3, max 28, no Inf/NaN",
      [](uint32_t c) { return fp6_e3m2_to_f32(static_cast<uint8_t>(c)); },
      [](float x, bool sat) -> uint32_t { return f32_to_fp6_e3m2(x); });
}
}  // namespace formats_detail
}  // namespace lowbit
