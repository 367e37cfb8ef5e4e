// Tier selection for the INT clip search's error sums (see clip_search.h).
#include "kernels/clip_search.h"

#include "kernels/dispatch.h"
#include "tensor/clip_search.h"

namespace lowbit {

void int_cells_error_tiered(const float* x, const float* w, int64_t n, const float* div, const float* scale,
                            const float* zero, int K, float umax, double* err) {
  if (kernel_isa() >= Isa::Avx2)
    int_cells_error_avx2(x, w, n, div, scale, zero, K, umax, err);
  else
    int_cells_error_scalar(x, w, n, div, scale, zero, K, umax, err);
}

}  // namespace lowbit
