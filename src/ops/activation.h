// The gated MLP's activation, g = act(g) * u, for the activations of the architecture table
// (arch/arch_table.h).
#pragma once
#include <cstdint>

#include "arch/arch_table.h"

namespace lowbit {

// g[i] = act(g[i]) * u[i] for i < n. SiLU runs the kernels' SIMD silu_mul_f32; GeLU (tanh approximation, as
// PyTorch's gelu(approximate="tanh") and llama.cpp's GELU) is a scalar loop: only Gemma-style models use it.
void glu_f32(Activation act, float* g, const float* u, int64_t n);

// The tanh-approximated GeLU of one value (the reference the tests compare against).
float gelu_tanh(float x);

}  // namespace lowbit
