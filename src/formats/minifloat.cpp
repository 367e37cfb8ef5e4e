#include "formats/minifloat.h"

#include <cmath>
#include <cstdint>
#include <limits>

namespace lowbit {

uint32_t mf_max_finite_code(const MinifloatSpec& s) {
  uint32_t all = (1u << (s.exp_bits + s.man_bits)) - 1;  // all magnitude bits set
  switch (s.nan) {
    case MfNan::AllOnes:
      return all - 1;  // S.1111.110
    case MfNan::Ieee:
      return all - (1u << s.man_bits);  // exponent all ones is Inf/NaN: S.11110.11
    case MfNan::NegZero:
    case MfNan::None:
      return all;
  }
  return all;
}

uint32_t mf_nan_code(const MinifloatSpec& s, bool negative) {
  uint32_t sign = negative ? 1u << (s.exp_bits + s.man_bits) : 0u;
  uint32_t all = (1u << (s.exp_bits + s.man_bits)) - 1;
  switch (s.nan) {
    case MfNan::AllOnes:
      return sign | all;
    case MfNan::Ieee:
      return sign | (all - ((1u << (s.man_bits - 1)) - 1));  // quiet NaN: top mantissa bit only
    case MfNan::NegZero:
      return 1u << (s.exp_bits + s.man_bits);
    case MfNan::None:
      return 0;
  }
  return 0;
}

float mf_decode(const MinifloatSpec& s, uint32_t code) {
  const int m = s.man_bits;
  const uint32_t sign_bit = 1u << (s.exp_bits + m);
  code &= (sign_bit << 1) - 1;
  const bool neg = code & sign_bit;
  const uint32_t mag = code & (sign_bit - 1);
  const uint32_t e = mag >> m, man = mag & ((1u << m) - 1);
  const uint32_t e_all = (1u << s.exp_bits) - 1;
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  switch (s.nan) {
    case MfNan::AllOnes:
      if (e == e_all && man == (1u << m) - 1) return neg ? -qnan : qnan;
      break;
    case MfNan::Ieee:
      if (e == e_all) {
        if (man) return neg ? -qnan : qnan;
        return neg ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
      }
      break;
    case MfNan::NegZero:
      if (code == sign_bit) return qnan;
      break;
    case MfNan::None:
      break;
  }
  float v = e == 0 ? std::ldexp(static_cast<float>(man), 1 - s.bias - m)
                   : std::ldexp(static_cast<float>((1u << m) + man), static_cast<int>(e) - s.bias - m);
  return neg ? -v : v;
}

uint32_t mf_encode(const MinifloatSpec& s, float x, bool saturate) {
  const int m = s.man_bits;
  const uint32_t sign_bit = 1u << (s.exp_bits + m);
  if (std::isnan(x)) return mf_nan_code(s, std::signbit(x));
  const bool neg = std::signbit(x);
  const uint32_t sign = neg ? sign_bit : 0u;
  const uint32_t max_code = mf_max_finite_code(s);
  const bool can_overflow = s.nan != MfNan::None;  // formats without NaN/Inf always saturate
  // Overflow target of a non-saturating cast: Inf where it exists, otherwise NaN.
  auto overflow = [&]() -> uint32_t {
    if (saturate || !can_overflow) return sign | max_code;
    if (s.has_inf) return sign | (max_code + 1);  // S.11111.00
    return mf_nan_code(s, neg);
  };
  const float a = std::fabs(x);
  if (std::isinf(a)) return overflow();
  int64_t c = 0;
  if (a > 0) {
    int e2 = 0;
    std::frexp(a, &e2);                  // a = f * 2^e2, f in [0.5, 1)
    int e = e2 - 1;                      // unbiased exponent of a
    if (e < 1 - s.bias) e = 1 - s.bias;  // subnormal range uses the min-normal step
    if (e > 200) return overflow();
    // Significand as an integer in units of the step 2^(e-m); exact scaling, then RNE (default FP env).
    const float q = std::nearbyint(std::ldexp(a, m - e));
    c = (static_cast<int64_t>(e + s.bias) << m) + static_cast<int64_t>(q) - (int64_t{1} << m);
  }
  if (c > static_cast<int64_t>(max_code)) return overflow();
  if (c == 0 && s.nan == MfNan::NegZero) return 0;  // FNUZ: no negative zero, -0 -> +0
  return sign | static_cast<uint32_t>(c);
}

double mf_max_finite(const MinifloatSpec& s) {
  return mf_decode(s, mf_max_finite_code(s));
}
double mf_min_subnormal(const MinifloatSpec& s) {
  return std::ldexp(1.0, 1 - s.bias - s.man_bits);
}

float e8m0_to_f32(uint8_t c) {
  if (c == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(c) - 127);
}

uint8_t f32_to_e8m0(float x, bool round_up) {
  if (std::isnan(x)) return 0xFF;
  if (!(x > 0)) return 0;  // no zero in E8M0: the smallest scale 2^-127
  if (std::isinf(x)) return 254;
  int e2 = 0;
  float f = std::frexp(x, &e2);  // x = f * 2^e2
  int e = e2 - 1;                // floor(log2 x)
  if (round_up && f != 0.5f) e += 1;
  if (e < -127) e = -127;
  if (e > 127) e = 127;
  return static_cast<uint8_t>(e + 127);
}

}  // namespace lowbit
