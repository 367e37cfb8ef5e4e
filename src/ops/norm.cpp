#include "ops/norm.h"

#include <cmath>

#include "kernels/reduce.h"

namespace lowbit {

void rms_norm(const float* x, const float* w, float* out, int64_t T, int64_t n, double eps) {
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * n;
    const double ss = sum_squares_f64(xt, n);
    float r = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
    float* o = out + t * n;
    for (int64_t i = 0; i < n; ++i) o[i] = xt[i] * r * w[i];
  }
}

}  // namespace lowbit
