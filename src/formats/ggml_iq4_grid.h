// The IQ4_NL / IQ4_XS non-linear 4-bit grid: a 4-bit index selects one of these 16 int8 values, scaled by the
// block's (IQ4_NL) or sub-block's (IQ4_XS) step. Internal to src/formats.
#pragma once
#include <cstdint>

namespace lowbit::formats_detail {
inline constexpr int8_t kIq4Grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                        1,    13,   25,  38,  53,  69,  89,  113};
}  // namespace lowbit::formats_detail
