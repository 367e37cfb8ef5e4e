// OCP Microscaling (MX v1.0): blocks of 32 elements sharing one E8M0 scale X = 2^shared_exp.
//
//   block:  [E8M0 scale: 8 bits] [32 element codes: 32 * b bits]        value_i = X * elem(code_i)
//   MXFP8 E4M3 / E5M2 (b=8), MXFP6 E2M3 / E3M2 (b=6), MXFP4 (E2M1, b=4), MXINT8 (int8 as fixed point 1.6,
//   b=8)
//
// Shared exponent (the spec / microxcaling reference rule, the default):
//   shared_exp = floor(log2(max_i |x_i|)) - emax_elem, clamped to [-127, 127],
//   emax_elem = floor(log2(max finite elem)) = 8 (E4M3), 15 (E5M2), 4 (E3M2), 2 (E2M3, E2M1), 0 (INT8).
//   code_i = cast_saturating(x_i / X), RNE. (A block max of 7.9 under E2M1: X = 2^(2-2) = 1 and 7.9 -> 6.)
// Bits per element including the scale: 8.25, 6.25, 4.25, 8.25. In tensor/qtensor.h an MX matrix is stored as
// codes + an E8M0 scale grid [rows, ceil(cols/32)]; the ggml MXFP4 block type is a separate row
// (ggml_mxfp4.cpp).
//
// MXINT8 element: int8 two's complement q, value q / 64; cast = clamp(RNE(x * 64), -127, 127) (symmetric).
#include <cmath>

#include "formats/format_rows.h"

namespace lowbit::formats_detail {
namespace {
FormatInfo mx_row(FormatId id, const char* name, FormatId elem, const char* desc) {
  FormatInfo r = format_info_elem_copy(elem);
  r.id = id;
  r.name = name;
  r.kind = FormatKind::Microscaled;
  r.block_elems = 32;
  r.native_scale = ScaleType::E8M0;
  r.routes = kRouteWeights | kRouteActivations;
  r.elem = elem;
  r.description = desc;
  return r;
}
}  // namespace

FormatInfo row_mxfp8_e4m3() {
  return mx_row(FormatId::MXFP8_E4M3, "mxfp8_e4m3", FormatId::E4M3FN,
                "OCP MXFP8: 32 x E4M3 + E8M0 scale (8.25 bpw)");
}
FormatInfo row_mxfp8_e5m2() {
  return mx_row(FormatId::MXFP8_E5M2, "mxfp8_e5m2", FormatId::E5M2,
                "OCP MXFP8: 32 x E5M2 + E8M0 scale (8.25 bpw)");
}
FormatInfo row_mxfp6_e2m3() {
  return mx_row(FormatId::MXFP6_E2M3, "mxfp6_e2m3", FormatId::E2M3,
                "OCP MXFP6: 32 x E2M3 + E8M0 scale (6.25 bpw)");
}
FormatInfo row_mxfp6_e3m2() {
  return mx_row(FormatId::MXFP6_E3M2, "mxfp6_e3m2", FormatId::E3M2,
                "OCP MXFP6: 32 x E3M2 + E8M0 scale (6.25 bpw)");
}
FormatInfo row_mxfp4() {
  return mx_row(FormatId::MXFP4, "mxfp4", FormatId::E2M1, "OCP MXFP4: 32 x E2M1 + E8M0 scale (4.25 bpw)");
}
FormatInfo row_mxint8() {
  FormatInfo r{};
  r.id = FormatId::MXINT8;
  r.name = "mxint8";
  r.kind = FormatKind::Microscaled;
  r.bits = 8;
  r.block_elems = 32;
  r.native_scale = ScaleType::E8M0;
  r.routes = kRouteWeights | kRouteActivations;
  r.elem = FormatId::MXINT8;
  r.max_finite = 127.0 / 64.0;
  r.min_positive = 1.0 / 64.0;
  r.has_inf = r.has_nan = r.has_neg_zero = false;
  r.ggml_type = -1;
  r.description = "OCP MXINT8: 32 x int8 (fixed point 1.6) + E8M0 scale (8.25 bpw)";
  r.decode = [](uint32_t c) { return static_cast<float>(static_cast<int8_t>(c & 0xff)) / 64.0f; };
  r.encode = [](float x, bool) -> uint32_t {
    if (std::isnan(x)) return 0;
    float q = std::nearbyint(std::fmax(-127.0f, std::fmin(127.0f, x * 64.0f)));
    return static_cast<uint8_t>(static_cast<int8_t>(q));
  };
  return r;
}

}  // namespace lowbit::formats_detail
