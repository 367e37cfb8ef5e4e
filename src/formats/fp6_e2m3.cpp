// FP6 E2M3 (OCP MX v1.0 element type). 6-bit codes in the low bits of a byte / packed bit stream.
//
//   bit   5   4 3   2 1 0
//         S   E E   M M M      bias 1; E=0: subnormal M * 2^-3
//
//   S.00.001 = 0.125 (min subnormal)   S.11.111 = 7.5 (max)   no Inf, no NaN; -0 exists.
// Cast: RNE, always saturating to +-7.5 (NaN encodes +0; callers reject NaN first).
#include "formats/format_rows.h"

namespace lowbit {
namespace {
constexpr MinifloatSpec kSpec{2, 3, 1, MfNan::None, false};
const MfTable& table() {
  static const MfTable t(kSpec);
  return t;
}
}  // namespace

float fp6_e2m3_to_f32(uint8_t c) {
  return table().v[c & 0x3F];
}
uint8_t f32_to_fp6_e2m3(float x) {
  return static_cast<uint8_t>(mf_encode(kSpec, x, true));
}

namespace formats_detail {
FormatInfo row_e2m3() {
  return make_minifloat_row(
      FormatId::E2M3, "e2m3", kSpec, kRouteWeights | kRouteActivations,
      "FP6 E2M3 (OCP MX): bias 1, max 7.5, no Inf/NaN",
      [](uint32_t c) { return fp6_e2m3_to_f32(static_cast<uint8_t>(c)); },
      [](float x, bool sat) -> uint32_t { return f32_to_fp6_e2m3(x); });
}
}  // namespace formats_detail
}  // namespace lowbit
