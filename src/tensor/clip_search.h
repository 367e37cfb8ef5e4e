// The MSE clip search's inner loop for INT cells (choose_cell in qtensor.cpp), batched over the candidate
// clip ratios: err[k] is the weighted squared error of encoding and decoding n values under candidate k.
#pragma once
#include <cstdint>

namespace lowbit {

// For k in [0, K): err[k] = sum over i of w_i * (value_k(code_k(x_i)) - x_i)^2 (w_i = 1 without w), with
// code_k(x) = clamp(round(x / div[k]) + zero[k], 0, umax) and value_k(u) = (u - zero[k]) * scale[k]; the sum
// in double, in index order. zero[k] holds the integer zero point.
using IntCellsErrorFn = void (*)(const float* x, const float* w, int64_t n, const float* div,
                                 const float* scale, const float* zero, int K, float umax, double* err);

// The scalar reference: the test oracle, and what runs until a faster form is installed.
void int_cells_error_scalar(const float* x, const float* w, int64_t n, const float* div, const float* scale,
                            const float* zero, int K, float umax, double* err);

// Calls the installed form. SIMD lives in src/kernels, a rung above, so kernels installs its tiered form at
// start-up (kernels/clip_search.h) in every program that links it; it must give the reference's bits, so
// that the search picks the same scales whichever form ran.
void int_cells_error(const float* x, const float* w, int64_t n, const float* div, const float* scale,
                     const float* zero, int K, float umax, double* err);
void set_int_cells_error(IntCellsErrorFn f);  // nullptr restores the scalar reference
IntCellsErrorFn installed_int_cells_error();

}  // namespace lowbit
