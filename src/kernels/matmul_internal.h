// Internal to src/kernels: what matmul.cpp (the dispatch and most routes) and matmul_ggml.cpp (the GGUF Q8
// routes) share: the row-block walk over the pool and the GGUF routes' entry points.
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

// The Q8 kernels (load-time pack, per-call pack, rows) on x [T, cols] as it is (matmul_ggml.cpp).
void run_q8_kernel(const WeightMatrix& w, const KernelPlan& p, Kernel k, const float* x, int64_t T, float* y);
// The residual pass (set_q8_residual_pass): W q8(x) + W q8(x - q8(x)) in one call of the kernel.
void run_q8_residual(const WeightMatrix& w, const KernelPlan& p, Kernel k, const float* x, int64_t T,
                     float* y);

}  // namespace lowbit::matmul_detail
