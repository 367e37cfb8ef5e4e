// Normalisation layers of the decoder.
#pragma once
#include <cstdint>

namespace lowbit {

// RMSNorm of T rows of n: out = x / sqrt(mean(x^2) + eps) * w (sum of squares in double). out may equal x.
void rms_norm(const float* x, const float* w, float* out, int64_t T, int64_t n, double eps);

}  // namespace lowbit
