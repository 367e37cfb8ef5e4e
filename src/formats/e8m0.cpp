// E8M0 (OCP MX v1.0 scale type): an unsigned power of two.
//
//   bit   7 6 5 4 3 2 1 0
//         E E E E E E E E      value 2^(E-127), E in [0, 254];  0xFF = NaN;  no zero, no sign, no mantissa.
//
// Encoding a value (row codec): 2^floor(log2 x), the MX shared-exponent direction; scale_round(E8M0) rounds
// up.
#include "formats/format_rows.h"

namespace lowbit::formats_detail {
FormatInfo row_e8m0() {
  FormatInfo r{};
  r.id = FormatId::E8M0;
  r.name = "e8m0";
  r.kind = FormatKind::Scale;
  r.bits = 8;
  r.block_elems = 1;
  r.native_scale = ScaleType::None;
  r.routes = 0;
  r.elem = FormatId::E8M0;
  r.max_finite = 1.7014118346046923e38;    // 2^127
  r.min_positive = 5.877471754111438e-39;  // 2^-127
  r.has_inf = false;
  r.has_nan = true;
  r.has_neg_zero = false;
  r.ggml_type = -1;
  r.description = "E8M0 scale (OCP MX): 2^(E-127), 0xFF NaN, no zero";
  r.decode = [](uint32_t c) { return e8m0_to_f32(static_cast<uint8_t>(c)); };
  r.encode = [](float x, bool) -> uint32_t { return f32_to_e8m0(x, false); };
  return r;
}
}  // namespace lowbit::formats_detail
