// FP8 E5M2FNUZ (AMD MI300): bias 16, no -0, no Inf.
//
//   bit   7   6 5 4 3 2   1 0
//         S   E E E E E   M M      bias 16; E=0: subnormal M * 2^-17
//
//   S.00000.01 = 2^-17 (min subnormal)   S.11111.11 = 57344 (max finite: 1.75 * 2^15)
//   1.00000.00 (0x80) = the only NaN; no negative zero; no Inf.
// Saturating cast: |x| > 57344 and +-Inf -> +-57344. Non-saturating: overflow -> NaN (0x80).
#include "formats/format_rows.h"

namespace lowbit {
namespace {
constexpr MinifloatSpec kSpec{5, 2, 16, MfNan::NegZero, false};
const MfTable& table() {
  static const MfTable t(kSpec);
  return t;
}
}  // namespace

float fp8_e5m2fnuz_to_f32(uint8_t c) {
  return table().v[c & 0xFF];
}
uint8_t f32_to_fp8_e5m2fnuz(float x, bool saturate) {
  return static_cast<uint8_t>(mf_encode(kSpec, x, saturate));
}

namespace formats_detail {
FormatInfo row_e5m2fnuz() {
  return make_minifloat_row(
      FormatId::E5M2FNUZ, "e5m2fnuz", kSpec, kRouteWeights | kRouteActivations | kRouteKv,
      "FP8 E5M2FNUZ (AMD): bias 16, max 57344, NaN 0x80, no -0/Inf",
      [](uint32_t c) { return fp8_e5m2fnuz_to_f32(static_cast<uint8_t>(c)); },
      [](float x, bool sat) -> uint32_t { return f32_to_fp8_e5m2fnuz(x, sat); });
}
}  // namespace formats_detail
}  // namespace lowbit
