// Internal helpers shared by the GGUF k-quant files (256-element super-blocks).
#pragma once
#include <cstdint>

namespace lowbit::formats_detail {
constexpr int kQK_K = 256;

// Q4_K / Q5_K: 8 sub-blocks, each with a 6-bit scale and a 6-bit min, packed into 12 bytes:
//   j < 4:  scale = q[j] & 63,                         min = q[j+4] & 63
//   j >= 4: scale = (q[j+4] & 15) | (q[j-4] >> 6) << 4, min = (q[j+4] >> 4) | (q[j] >> 6) << 4
inline void k4_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}
}  // namespace lowbit::formats_detail
