// Decoders of one KV-cache head row into floats, 16 elements at a time (n % 16 == 0), for attention over the
// quantized paged cache (model/kv_attend.cpp, which holds the scalar versions and calls these on the Avx512
// tier). Each equals its scalar loop bit for bit (tests/kv).
#pragma once
#include <cstdint>

namespace lowbit::kern {

// INT8 row with one scale: out[i] = src[i] * s.
void kv_int8_row_avx512(const int8_t* src, int64_t n, float s, float* out);
// INT4 per-token asymmetric groups of G (a multiple of 16) from element off: x = m + u * s (F16 scales
// sc[0..ng), F16 minima sc[ng..2ng)); element c is the low (even c) or high nibble of byte c / 2.
void kv_int4tok_row_avx512(const uint8_t* codes, const uint8_t* sc, int64_t ng, int64_t G, int64_t off,
                           int64_t n, float* out);
// INT4 / INT2 per-channel keys (KIVI), codes packed low bits first: x = (u - 2^(bits-1)) * s, or min + u * s
// when mins is given (F16 scales / minima per channel).
void kv_intch_row_avx512(const uint8_t* codes, int bits, const uint16_t* scales, const uint16_t* mins,
                         int64_t n, float* out);

}  // namespace lowbit::kern
