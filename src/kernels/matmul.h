// Matrix products with the weight in its storage format. y[t, :] = W · x[t, :] for t in [0, T).
//   x: [T, cols] float32 (row stride cols), y: [T, rows] float32 (row stride rows).
// The dispatch picks the best kernel for this CPU once (kernels/dispatch.h); every kernel is tested against
// matmul_reference.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/weight.h"

namespace lowbit {

void matmul(const WeightMatrix& w, const float* x, int64_t T, float* y);
// Plain scalar reference: widens each row to float32 and accumulates in double. The test oracle.
void matmul_reference(const WeightMatrix& w, const float* x, int64_t T, float* y);
// Widens row r of w to float32 (out[cols]).
void weight_row_f32(const WeightMatrix& w, int64_t r, float* out);
// The kernel that matmul() runs for this weight on this CPU, e.g. "f32.avx512", "bf16.avx512bf16", "q4_0.ref".
std::string matmul_kernel_name(const WeightMatrix& w);

}  // namespace lowbit
