#include "ops/activation.h"

#include <cmath>

#include "kernels/matmul.h"

namespace lowbit {

float gelu_tanh(float x) {
  const float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

void glu_f32(Activation act, float* g, const float* u, int64_t n) {
  if (act == Activation::Silu) return silu_mul_f32(g, u, n);
  for (int64_t i = 0; i < n; ++i) g[i] = gelu_tanh(g[i]) * u[i];
}

}  // namespace lowbit
