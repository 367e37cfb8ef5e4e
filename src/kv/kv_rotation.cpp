#include "kv/kv_rotation.h"

#include <cmath>

namespace lowbit {

bool kv_rotation_supported(int64_t n) {
  return n > 0 && (n & (n - 1)) == 0;
}

void fwht_normalized(float* x, int64_t n) {
  for (int64_t len = 1; len < n; len <<= 1)
    for (int64_t i = 0; i < n; i += 2 * len)
      for (int64_t j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
  const float s = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void rotate_heads(float* x, int64_t n_heads, int64_t head_dim) {
  for (int64_t h = 0; h < n_heads; ++h) fwht_normalized(x + h * head_dim, head_dim);
}

}  // namespace lowbit
