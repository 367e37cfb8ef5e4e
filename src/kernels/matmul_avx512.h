// AVX-512 kernels (compiled with -mavx512f etc.; only called when cpu_features() reports AVX-512).
#pragma once
#include <cstdint>

#include "kernels/weight.h"

namespace lowbit {
// F32 / F16 / BF16 weights, float32 activations and accumulation.
void matmul_dense_avx512(const WeightMatrix& w, const float* x, int64_t T, float* y);
}  // namespace lowbit
