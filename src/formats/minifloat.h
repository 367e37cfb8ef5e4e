// Generic sign/exponent/mantissa codec behind every small float format (FP8, FP6, FP4). Each concrete format
// (fp8_e4m3fn.cpp, ...) is a MinifloatSpec plus its bit diagram; this file holds the one rounding routine.
//
// Key property used by the encoder: for a sign-magnitude minifloat, the positive codes 0, 1, 2, ... up to the
// largest finite code decode to strictly increasing values, and the code of a value with unbiased exponent e
// and integer significand q (2^m <= q <= 2^(m+1)) is ((e + bias) << m) + q - 2^m. So RNE on the significand
// gives RNE on the code, subnormals included (exponent field 0 = same step as exponent field 1), and "ties to
// even" means "ties to the even code".
#pragma once
#include <cstdint>

namespace lowbit {

enum class MfNan : uint8_t {
  None,     // no NaN encodings (E2M1, E2M3, E3M2)
  AllOnes,  // S.1111.111 only (E4M3FN): exponent and mantissa all ones
  Ieee,     // exponent all ones and mantissa != 0 (E5M2); mantissa 0 is Inf
  NegZero,  // the single code 1000...0 (FNUZ variants); no negative zero
};

struct MinifloatSpec {
  int exp_bits;
  int man_bits;
  int bias;
  MfNan nan;
  bool has_inf;  // only with MfNan::Ieee
};

// Code layout: [sign][exponent][mantissa], sign at bit (exp_bits + man_bits).
float mf_decode(const MinifloatSpec& s, uint32_t code);
uint32_t mf_encode(const MinifloatSpec& s, float x, bool saturate);
uint32_t mf_max_finite_code(const MinifloatSpec& s);  // positive code of the largest finite value
double mf_max_finite(const MinifloatSpec& s);
double mf_min_subnormal(const MinifloatSpec& s);
uint32_t mf_nan_code(const MinifloatSpec& s, bool negative);  // 0 when the format has no NaN

// Fast named converters (decode via 256-entry tables) for the rest of the engine (KV cache, checkpoints).
float fp8_e4m3fn_to_f32(uint8_t c);
float fp8_e5m2_to_f32(uint8_t c);
float fp8_e4m3fnuz_to_f32(uint8_t c);
float fp8_e5m2fnuz_to_f32(uint8_t c);
float fp4_e2m1_to_f32(uint8_t c);  // low 4 bits
float fp6_e2m3_to_f32(uint8_t c);  // low 6 bits
float fp6_e3m2_to_f32(uint8_t c);  // low 6 bits
uint8_t f32_to_fp8_e4m3fn(float x, bool saturate = true);
uint8_t f32_to_fp8_e5m2(float x, bool saturate = true);
uint8_t f32_to_fp8_e4m3fnuz(float x, bool saturate = true);
uint8_t f32_to_fp8_e5m2fnuz(float x, bool saturate = true);
uint8_t f32_to_fp4_e2m1(float x);
uint8_t f32_to_fp6_e2m3(float x);
uint8_t f32_to_fp6_e3m2(float x);
// E8M0: value 2^(c-127), c in [0, 254]; 0xFF = NaN. No zero, no sign.
float e8m0_to_f32(uint8_t c);
// Exponent-only rounding of a positive value: round_up=true -> smallest 2^k >= x; false -> nearest in log2
// domain is NOT used; false means 2^floor(log2 x) (the MX shared-exponent rule). Clamped to [0, 254]; NaN ->
// 0xFF.
uint8_t f32_to_e8m0(float x, bool round_up);

}  // namespace lowbit

namespace lowbit {
// Decode table for a spec with up to 8 bits (used by the per-format files).
struct MfTable {
  float v[256];
  explicit MfTable(const MinifloatSpec& s) {
    for (uint32_t c = 0; c < 256; ++c) v[c] = c < (2u << (s.exp_bits + s.man_bits)) ? mf_decode(s, c) : 0.0f;
  }
};
}  // namespace lowbit
