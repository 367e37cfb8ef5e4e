// FP8 E4M3FN (OCP OFP8 "E4M3"; NVIDIA/Intel/Arm). Weights, activations, KV cache.
//
//   bit   7   6 5 4 3   2 1 0
//         S   E E E E   M M M      bias 7; E=0: subnormal M * 2^-9
//
//   S.0000.001 = 2^-9 (min subnormal)   S.0001.000 = 2^-6 (min normal)   S.1111.110 = 448 (max finite)
//   S.1111.111 = NaN (two codes)        no Inf; -0 exists.
// Saturating cast: |x| > 448 and +-Inf -> +-448. Non-saturating: rounds past 448 (>= 464) -> NaN.
#include "formats/format_rows.h"

namespace lowbit {
namespace {
constexpr MinifloatSpec kSpec{4, 3, 7, MfNan::AllOnes, false};
const MfTable& table() {
  static const MfTable t(kSpec);
  return t;
}
}  // namespace

float fp8_e4m3fn_to_f32(uint8_t c) {
  return table().v[c];
}
uint8_t f32_to_fp8_e4m3fn(float x, bool saturate) {
  return static_cast<uint8_t>(mf_encode(kSpec, x, saturate));
}

namespace formats_detail {
FormatInfo row_e4m3fn() {
  return make_minifloat_row(
      FormatId::E4M3FN, "e4m3fn", kSpec, kRouteWeights | kRouteActivations | kRouteKv,
      "FP8 E4M3FN (OCP): bias 7, max 448, NaN S.1111.111, no Inf",
      [](uint32_t c) { return fp8_e4m3fn_to_f32(static_cast<uint8_t>(c)); },
      [](float x, bool sat) -> uint32_t { return f32_to_fp8_e4m3fn(x, sat); });
}
}  // namespace formats_detail
}  // namespace lowbit
