// Reductions over a float row that the decoder and the sampler run on every token: the sum of squares of
// RMSNorm, the finiteness check of the logits and the greedy argmax. Each has one definition (the generic
// tier's scalar code) that the AVX2 and AVX-512 versions reproduce bit for bit.
#pragma once
#include <cstdint>

namespace lowbit {

// sum x_i^2 in double, in a fixed order: 8 partial sums, sum j taking x_i for i = j (mod 8) over the whole
// 8-element prefix in index order, combined as ((s0 + s4) + (s1 + s5)) + ((s2 + s6) + (s3 + s7)); then the
// remaining n mod 8 elements added in order. (Each x_i * x_i is exact in double, so fma and mul + add agree.)
// A single sequential sum took ~1 % of a 16-sequence decode step on its 4-cycle dependency chain.
double sum_squares_f64(const float* x, int64_t n);

// Whether every x_i is finite (no NaN, no +-Inf).
bool all_finite_f32(const float* x, int64_t n);

// The index of the first largest x_i, as std::max_element returns it (n > 0); with a NaN anywhere, exactly
// std::max_element's answer (which depends on where the NaN sits).
int64_t argmax_f32(const float* x, int64_t n);

namespace kern {
double sum_squares_f64_generic(const float* x, int64_t n);
bool all_finite_f32_generic(const float* x, int64_t n);
int64_t argmax_f32_generic(const float* x, int64_t n);
double sum_squares_f64_avx2(const float* x, int64_t n);
bool all_finite_f32_avx2(const float* x, int64_t n);
int64_t argmax_f32_avx2(const float* x, int64_t n);
double sum_squares_f64_avx512(const float* x, int64_t n);
bool all_finite_f32_avx512(const float* x, int64_t n);
int64_t argmax_f32_avx512(const float* x, int64_t n);
}  // namespace kern

}  // namespace lowbit
