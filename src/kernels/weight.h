// A linear layer's weight as the kernels see it: [rows = out_features, cols = in_features], row-major, in the
// storage format it was loaded or quantized in. The kernels multiply it without widening the whole matrix.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace lowbit {

enum class WeightKind : uint8_t {
  F32,   // float32 rows
  F16,   // IEEE half rows
  BF16,  // bfloat16 rows
  Ggml,  // llama.cpp block rows (ggml_type), e.g. Q4_0 / Q8_0 / Q4_K
};

struct WeightMatrix {
  WeightKind kind = WeightKind::F32;
  int64_t rows = 0;                  // out_features
  int64_t cols = 0;                  // in_features
  const uint8_t* data = nullptr;     // rows * row_bytes() payload, owned by `owner`
  int ggml_type = -1;                // when kind == Ggml
  std::shared_ptr<const void> owner; // an mmap'd file or a heap buffer

  size_t row_bytes() const;
  size_t nbytes() const { return row_bytes() * static_cast<size_t>(rows); }
  std::string format_name() const;  // "f32", "bf16", "q4_0", ...
};

// Owning F32 weight from a buffer (copies `src`, rows*cols floats).
WeightMatrix make_f32_weight(const float* src, int64_t rows, int64_t cols);
// Converts a float matrix to F16 or BF16 storage (round to nearest even).
WeightMatrix make_half_weight(const float* src, int64_t rows, int64_t cols, WeightKind kind);

}  // namespace lowbit
