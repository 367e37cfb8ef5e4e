// The MSE clip search's inner loop for INT cells (choose_cell in qtensor.cpp), batched over the candidate
// clip ratios: err[k] is the weighted squared error of encoding and decoding n values under candidate k.
#pragma once
#include <cstdint>

namespace lowbit {

// For k in [0, K): err[k] = sum over i of w_i * (value_k(code_k(x_i)) - x_i)^2 (w_i = 1 without w), with
// code_k(x) = clamp(round(x / div[k]) + zero[k], 0, umax) and value_k(u) = (u - zero[k]) * scale[k]; the sum
// in double, in index order. zero[k] holds the integer zero point. Picks the AVX2 form where the CPU has it.
void int_cells_error(const float* x, const float* w, int64_t n, const float* div, const float* scale,
                     const float* zero, int K, float umax, double* err);

// The scalar reference, and the AVX2 form: 8 candidates per vector, each lane doing the scalar arithmetic in
// the scalar order (no FMA contraction: the file is built without -mfma), so both give the same bits. Call
// the AVX2 form only where cpu_features().avx2.
void int_cells_error_scalar(const float* x, const float* w, int64_t n, const float* div, const float* scale,
                            const float* zero, int K, float umax, double* err);
void int_cells_error_avx2(const float* x, const float* w, int64_t n, const float* div, const float* scale,
                          const float* zero, int K, float umax, double* err);

}  // namespace lowbit
