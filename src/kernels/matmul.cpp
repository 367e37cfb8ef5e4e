#include "kernels/matmul.h"

#include <cstring>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"
#include "core/half.h"
#include "core/parallel.h"
#include "kernels/matmul_avx512.h"

namespace lowbit {

void weight_row_f32(const WeightMatrix& w, int64_t r, float* out) {
  const uint8_t* row = w.data + static_cast<size_t>(r) * w.row_bytes();
  switch (w.kind) {
    case WeightKind::F32: std::memcpy(out, row, w.cols * 4); return;
    case WeightKind::F16:
      for (int64_t i = 0; i < w.cols; ++i) {
        uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        out[i] = f16_to_f32(h);
      }
      return;
    case WeightKind::BF16:
      for (int64_t i = 0; i < w.cols; ++i) {
        uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        out[i] = bf16_to_f32(h);
      }
      return;
    case WeightKind::Ggml: break;
  }
  fail("kernels", "no dequantizer for weight format " + w.format_name());
}

void matmul_reference(const WeightMatrix& w, const float* x, int64_t T, float* y) {
  parallel_for(w.rows, 8, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(w.cols);
    for (int64_t r = r0; r < r1; ++r) {
      weight_row_f32(w, r, row.data());
      for (int64_t t = 0; t < T; ++t) {
        const float* xt = x + t * w.cols;
        double acc = 0;
        for (int64_t i = 0; i < w.cols; ++i) acc += static_cast<double>(row[i]) * xt[i];
        y[t * w.rows + r] = static_cast<float>(acc);
      }
    }
  });
}

namespace {
bool use_avx512() { return cpu_features().avx512f; }
}  // namespace

void matmul(const WeightMatrix& w, const float* x, int64_t T, float* y) {
  if (use_avx512() && (w.kind == WeightKind::F32 || w.kind == WeightKind::F16 || w.kind == WeightKind::BF16)) {
    matmul_dense_avx512(w, x, T, y);
    return;
  }
  matmul_reference(w, x, T, y);
}

std::string matmul_kernel_name(const WeightMatrix& w) {
  if (use_avx512() && (w.kind == WeightKind::F32 || w.kind == WeightKind::F16 || w.kind == WeightKind::BF16))
    return w.format_name() + ".avx512";
  return w.format_name() + ".ref";
}

}  // namespace lowbit
