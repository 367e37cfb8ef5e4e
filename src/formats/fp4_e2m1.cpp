// FP4 E2M1 (OCP MX v1.0; NVFP4 elements).
//
//   bit   3   2 1   0
//         S   E E   M      bias 1; E=0: subnormal M * 0.5
//
//   magnitudes by code 0..7: 0, 0.5, 1, 1.5, 2, 3, 4, 6   (S=1: negatives, 0x8 = -0)   no Inf, no NaN.
// Packing (MX, NVFP4, qtensor): two per byte, first element in the low nibble: byte = hi << 4 | lo.
// Cast: RNE (e.g. 2.5 -> 2, 5 -> 4, 0.25 -> 0), always saturating to +-6.
#include "formats/format_rows.h"

namespace lowbit {
namespace {
constexpr MinifloatSpec kSpec{2, 1, 1, MfNan::None, false};
const MfTable& table() {
  static const MfTable t(kSpec);
  return t;
}
}  // namespace

float fp4_e2m1_to_f32(uint8_t c) {
  return table().v[c & 0x0F];
}
uint8_t f32_to_fp4_e2m1(float x) {
  return static_cast<uint8_t>(mf_encode(kSpec, x, true));
}

namespace formats_detail {
FormatInfo row_e2m1() {
  return make_minifloat_row(
      FormatId::E2M1, "e2m1", kSpec, kRouteWeights | kRouteActivations,
      "FP4 E2M1 (OCP MX): {0,.5,1,1.5,2,3,4,6}, no Inf/NaN",
      [](uint32_t c) { return fp4_e2m1_to_f32(static_cast<uint8_t>(c)); },
      [](float x, bool sat) -> uint32_t { return f32_to_fp4_e2m1(x); });
}
}  // namespace formats_detail
}  // namespace lowbit
