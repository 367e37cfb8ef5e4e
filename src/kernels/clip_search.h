// The INT clip search's batched error sums (tensor/clip_search.h) by kernel tier. dispatch.cpp installs
// int_cells_error_tiered into tensor's hook at start-up, so every program that links the kernels gets it.
#pragma once
#include <cstdint>

namespace lowbit {

// AVX2: 8 candidates per vector, each lane doing the scalar reference's arithmetic in its order (built with
// -ffp-contract=off: no multiply and add fused), so the sums equal the reference's bit for bit. Only where
// the CPU has AVX2.
void int_cells_error_avx2(const float* x, const float* w, int64_t n, const float* div, const float* scale,
                          const float* zero, int K, float umax, double* err);

// The AVX2 form from the Avx2 tier up (kernel_isa()), else the scalar reference.
void int_cells_error_tiered(const float* x, const float* w, int64_t n, const float* div, const float* scale,
                            const float* zero, int K, float umax, double* err);

}  // namespace lowbit
