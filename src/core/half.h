// Scalar IEEE binary16 and bfloat16 conversions, bit-exact, round-to-nearest-even.
// Used everywhere (scales, weights, KV cache), so it lives in core; the formats table wraps them as rows.
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>

namespace lowbit {

inline uint32_t f32_bits(float f) {
  return std::bit_cast<uint32_t>(f);
}
// A 16-bit cell (F16 / BF16 scale) read from unaligned bytes.
inline uint16_t ld16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline float f32_from_bits(uint32_t u) {
  return std::bit_cast<float>(u);
}

// binary16: S EEEEE MMMMMMMMMM, bias 15.
inline float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  if (exp == 0) {
    if (man == 0) return f32_from_bits(sign);
    // subnormal: value = man * 2^-24
    float v = static_cast<float>(man) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (man << 13));
  return f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

inline uint16_t f32_to_f16(float f) {
  uint32_t x = f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // Inf or NaN (keep a quiet NaN payload bit)
    return static_cast<uint16_t>(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 | ((ax >> 13) & 0x3ff) : 0));
  }
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00);  // rounds to >= 65520 -> Inf
  if (ax < 0x38800000u) {  // result is subnormal or zero: value / 2^-24, RNE
    float a = f32_from_bits(ax);
    // Adding 0.5 (2^-1) pushes the subnormal bits into the low mantissa where the FPU rounds them (RNE).
    float t = a + 0.5f;
    return static_cast<uint16_t>(sign | (f32_bits(t) - 0x3f000000u));
  }
  uint32_t mant_odd = (ax >> 13) & 1;
  ax += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return static_cast<uint16_t>(sign | (ax >> 13));
}

// bfloat16: upper 16 bits of binary32.
inline float bf16_to_f32(uint16_t b) {
  return f32_from_bits(static_cast<uint32_t>(b) << 16);
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  uint32_t lsb = (x >> 16) & 1;
  x += 0x7fffu + lsb;
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace lowbit
