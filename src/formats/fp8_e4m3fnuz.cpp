// FP8 E4M3FNUZ (AMD MI300 / Graphcore): like E4M3FN but bias 8, no -0, no Inf.
//
//   bit   7   6 5 4 3   2 1 0
//         S   E E E E   M M M      bias 8; E=0: subnormal M * 2^-10
//
//   S.0000.001 = 2^-10 (min subnormal)   S.1111.111 = 240 (max finite: 1.875 * 2^7)
//   1.0000.000 (0x80) = the only NaN; no negative zero (-0 encodes as +0); no Inf.
// Saturating cast: |x| > 240 and +-Inf -> +-240. Non-saturating: overflow -> NaN (0x80).
#include "formats/format_rows.h"

namespace lowbit {
namespace {
constexpr MinifloatSpec kSpec{4, 3, 8, MfNan::NegZero, false};
const MfTable& table() {
  static const MfTable t(kSpec);
  return t;
}
}  // namespace

float fp8_e4m3fnuz_to_f32(uint8_t c) {
  return table().v[c & 0xFF];
}
uint8_t f32_to_fp8_e4m3fnuz(float x, bool saturate) {
  return static_cast<uint8_t>(mf_encode(kSpec, x, saturate));
}

namespace formats_detail {
FormatInfo row_e4m3fnuz() {
  return make_minifloat_row(
      FormatId::E4M3FNUZ, "e4m3fnuz", kSpec, kRouteWeights | kRouteActivations | kRouteKv,
      "FP8 E4M3FNUZ (AMD): bias 8, max 240, NaN 0x80, no -0/Inf",
      [](uint32_t c) { return fp8_e4m3fnuz_to_f32(static_cast<uint8_t>(c)); },
      [](float x, bool sat) -> uint32_t { return f32_to_fp8_e4m3fnuz(x, sat); });
}
}  // namespace formats_detail
}  // namespace lowbit
