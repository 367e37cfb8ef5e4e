// Integer grids INT8, INT4, INT3, INT2 (weights with external scales; INT8 also activations/KV).
//
// Value model: x_hat = (u - z) * scale, where u is the stored b-bit code, unsigned ("offset binary"):
//   symmetric:  z = 2^(b-1) implicit (INT4: u = q + 8, q in [-8, 7]; scale = absmax / (2^(b-1) - 1))
//   asymmetric: z = stored zero point in [0, 2^b - 1] (scale = (max - min) / (2^b - 1), z = RNE(-min /
//   scale))
// Packed codes (tensor/qtensor.h): LSB-first bit stream per row; for INT4 element 2i is the low nibble.
//
//   INT4 code u:  bit 3 2 1 0 = u;  q = u - 8  (two's complement q with the sign bit flipped)
//
// Rounding: round half to even (std::nearbyint), then clamp to [0, 2^b - 1]. The row codec below works in
// "element units" (the integer q): decode(u) = u - 2^(b-1), encode(x) = clamp(RNE(x)) + 2^(b-1).
#include <cmath>

#include "formats/format_rows.h"

namespace lowbit::formats_detail {
namespace {
template <int B>
float int_decode(uint32_t u) {
  return static_cast<float>(static_cast<int>(u & ((1u << B) - 1)) - (1 << (B - 1)));
}
template <int B>
uint32_t int_encode(float x, bool) {
  if (std::isnan(x)) return 1u << (B - 1);  // NaN -> 0 (callers reject NaN before encoding)
  float q = std::nearbyint(std::fmax(-(1 << (B - 1)) * 1.0f, std::fmin(((1 << (B - 1)) - 1) * 1.0f, x)));
  return static_cast<uint32_t>(static_cast<int>(q) + (1 << (B - 1)));
}
template <int B>
FormatInfo int_row(FormatId id, const char* name, int routes, const char* desc) {
  FormatInfo r{};
  r.id = id;
  r.name = name;
  r.kind = FormatKind::Int;
  r.bits = B;
  r.block_elems = 1;
  r.native_scale = ScaleType::None;
  r.routes = routes;
  r.elem = id;
  r.max_finite = (1 << (B - 1)) - 1;  // symmetric grid edge used for scale = absmax / max_finite
  r.min_positive = 1;
  r.has_inf = r.has_nan = r.has_neg_zero = false;
  r.ggml_type = -1;
  r.description = desc;
  r.decode = &int_decode<B>;
  r.encode = &int_encode<B>;
  return r;
}
}  // namespace

FormatInfo row_int8() {
  return int_row<8>(FormatId::INT8, "int8", kRouteWeights | kRouteActivations | kRouteKv,
                    "8-bit integer grid, sym (absmax/127) or asym (zero point)");
}
FormatInfo row_int4() {
  return int_row<4>(FormatId::INT4, "int4", kRouteWeights | kRouteKv,
                    "4-bit integer grid, sym (absmax/7) or asym");
}
FormatInfo row_int3() {
  return int_row<3>(FormatId::INT3, "int3", kRouteWeights, "3-bit integer grid, sym (absmax/3) or asym");
}
FormatInfo row_int2() {
  return int_row<2>(FormatId::INT2, "int2", kRouteWeights, "2-bit integer grid, sym (absmax/1) or asym");
}
}  // namespace lowbit::formats_detail
