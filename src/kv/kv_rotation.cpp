#include "kv/kv_rotation.h"

namespace lowbit {

bool kv_rotation_supported(int64_t n) {
  return n > 0 && (n & (n - 1)) == 0;
}

void rotate_heads(float* x, int64_t n_heads, int64_t head_dim) {
  for (int64_t h = 0; h < n_heads; ++h) fwht_normalized(x + h * head_dim, head_dim);
}

}  // namespace lowbit
