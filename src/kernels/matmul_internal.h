// Internal to src/kernels: what matmul.cpp (the activation routes and the dispatch), matmul_codes.cpp (the
// weight-code routes) and matmul_ggml.cpp (the GGUF Q8 routes) share: the row-block walks over the pool and
// the routes' entry points.
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/parallel.h"
#include "kernels/kernel_plan.h"
#include "kernels/kernel_select.h"
#include "kernels/weight.h"

namespace lowbit::matmul_detail {

// Rows per parallel work item: enough for the row block's weights to stay in L1/L2 across the tokens.
constexpr int64_t kRowBlock = 16;

inline const uint8_t* row_ptr(const WeightMatrix& w, int64_t r) {
  return w.kind == WeightKind::Quant ? w.q->row_data(r) : w.data + static_cast<size_t>(r) * w.row_bytes();
}

// Below this much weight traffic (bytes x tokens) a product runs on the calling thread: waking the pool costs
// more than the work (small models decode ~50 such products per token).
constexpr double kSerialBytes = 48 * 1024;

// fn(r0, r1) once per chunk of whole blocks of `block` rows (a multiple of kRowBlock) a thread takes, in
// parallel unless the work is small: for kernels that walk the blocks themselves and pay a per-call set-up
// (the AMX kernels load the tile configuration once per call).
template <typename Fn>
void for_row_chunks(int64_t rows, Fn&& fn, double work_bytes = 1e30, int64_t block = kRowBlock) {
  const int64_t nb = (rows + block - 1) / block;
  parallel_for(nb, work_bytes < kSerialBytes ? nb : 1,
               [&](int64_t b0, int64_t b1) { fn(b0 * block, std::min(rows, b1 * block)); });
}

// fn(r0, r1) for each block of `block` rows, as for_row_chunks hands them out.
template <typename Fn>
void for_row_blocks(int64_t rows, Fn&& fn, double work_bytes = 1e30, int64_t block = kRowBlock) {
  for_row_chunks(
      rows,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; r += block) fn(r, std::min(r1, r + block));
      },
      work_bytes, block);
}

// fn(nr, rows, scales, zeros, r0) for each block of rows of a nib / byte route weight, in parallel: the
// block's row codes, scale cells and zero cells as pointer arrays, the kernels' input. scales / zeros: the
// cell arrays [grid.rows, gcols] the kernel reads (the plan's FP32 tables, or the stored cells); zeros null
// for symmetric weights.
template <typename S, typename Z, typename Fn>
void for_cell_row_blocks(const WeightMatrix& w, const KernelPlan& p, const S* scales, const Z* zeros,
                         double work_bytes, Fn&& fn) {
  for_row_blocks(
      w.rows,
      [&](int64_t r0, int64_t r1) {
        const uint8_t* rp[kRowBlock];
        const S* sp[kRowBlock];
        const Z* zp[kRowBlock];
        // Scale cells by stepping (scale_row's division per row cost ~2 % of small models' decode).
        int64_t cell = r0 / p.row_block, in_cell = r0 % p.row_block;
        for (int64_t r = r0; r < r1; ++r) {
          rp[r - r0] = row_ptr(w, r);
          sp[r - r0] = scales + cell * p.gcols;
          zp[r - r0] = zeros ? zeros + cell * p.gcols : nullptr;
          if (++in_cell == p.row_block) in_cell = 0, ++cell;
        }
        fn(static_cast<int>(r1 - r0), rp, sp, zp, r0);
      },
      work_bytes);
}

template <typename Fn>
void for_code_row_blocks(const WeightMatrix& w, const KernelPlan& p, double work_bytes, Fn&& fn) {
  for_cell_row_blocks(w, p, p.scales.data(), p.zeros.empty() ? nullptr : p.zeros.data(), work_bytes,
                      std::forward<Fn>(fn));
}

// The Q8 kernels (load-time pack, per-call pack, rows) on x [T, cols] as it is (matmul_ggml.cpp).
void run_q8_kernel(const WeightMatrix& w, const KernelPlan& p, Kernel k, const float* x, int64_t T, float* y);
// The residual pass (set_q8_residual_pass): W q8(x) + W q8(x - q8(x)) in one call of the kernel.
void run_q8_residual(const WeightMatrix& w, const KernelPlan& p, Kernel k, const float* x, int64_t T,
                     float* y);

// The weight-code routes (matmul_codes.cpp): lane decode kernels, the BF16 / AMX-BF16 tile, code dots, the
// VNNI INT8 / INT4 routes, the W8A8 AMX tile.
void run_nib_gemv512(const WeightMatrix& w, const KernelPlan& p, const float* x, int64_t T, float* y,
                     bool bf16);
void run_fp6_gemv(const WeightMatrix& w, const KernelPlan& p, const float* x, int64_t T, float* y);
void run_byte16_gemv(const WeightMatrix& w, const KernelPlan& p, const float* x, int64_t T, float* y);
void run_bf16_tile(const WeightMatrix& w, const KernelPlan& p, Kernel k, const float* x, int64_t T, float* y);
void run_code_dots512(const WeightMatrix& w, const KernelPlan& p, const float* x, int64_t T, float* y);
void run_vnni512(const WeightMatrix& w, const KernelPlan& p, const float* x, int64_t T, float* y);
void run_vnni_tile512(const WeightMatrix& w, const KernelPlan& p, const Int8Tile& tile, const float* x,
                      int64_t T, float* y);
void run_int_block(const WeightMatrix& w, const KernelPlan& p, const float* x, int64_t T, float* y, Kernel k);
void run_i8dot_rows_avx2(const WeightMatrix& w, const KernelPlan& p, const float* x, int64_t T, float* y);
void run_amx_w8a8(const WeightMatrix& w, const KernelPlan& p, const AmxInt8Pack& pk, const float* x,
                  int64_t T, float* y, bool hardware);

}  // namespace lowbit::matmul_detail
