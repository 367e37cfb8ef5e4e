// Internal helpers shared by the GGUF k-quant files (256-element super-blocks).
#pragma once
#include <cstdint>
#include <cstring>

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

// Q3_K: the 16 six-bit sub-block scales packed in 12 bytes (a = bytes 0..3, b = 4..7, c = 8..11 as
// little-endian words; formats/ggml_q3_k.cpp), unpacked and minus 32: out16[i] in [-32, 31].
inline void k3_scales(const uint8_t* s12, int8_t* out16) {
  uint32_t a, b, c;
  std::memcpy(&a, s12, 4);
  std::memcpy(&b, s12 + 4, 4);
  std::memcpy(&c, s12 + 8, 4);
  constexpr uint32_t k4 = 0x0F0F0F0Fu, k2 = 0x03030303u;
  const uint32_t w[4] = {(a & k4) | ((c >> 0) & k2) << 4, (b & k4) | ((c >> 2) & k2) << 4,
                         ((a >> 4) & k4) | ((c >> 4) & k2) << 4, ((b >> 4) & k4) | ((c >> 6) & k2) << 4};
  for (int i = 0; i < 16; ++i)
    out16[i] = static_cast<int8_t>(static_cast<int>((w[i / 4] >> (8 * (i % 4))) & 0xFF) - 32);
}
}  // namespace lowbit::formats_detail
