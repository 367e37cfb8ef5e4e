// Tensors as stored in files and in memory.
//
// TensorView: a non-owning, typed window on bytes that some owner keeps alive (an mmap'd file, a buffer).
// Shapes are row-major, outermost first, exactly as safetensors/numpy write them: a Linear weight is
// [out_features, in_features]. GGUF lists dimensions innermost first; the io rung reverses them so that every
// TensorView here has the same convention.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lowbit {

// Element storage types found in checkpoints. GGML_BLOCK means llama.cpp block-quantized data whose ggml type
// id is carried in TensorView::ggml_type (see formats for the block layouts).
enum class DType : uint8_t {
  F32,
  F16,
  BF16,
  F64,
  I8,
  U8,
  I16,
  U16,
  I32,
  U32,
  I64,
  U64,
  BOOL,
  F8_E4M3,
  F8_E5M2,
  GGML_BLOCK
};

// Bytes per element, 0 for GGML_BLOCK (block sizes come from the formats table).
size_t dtype_size(DType t);
// Safetensors spelling ("F32", "BF16", "F8_E4M3", ...). GGML_BLOCK -> "GGML".
const char* dtype_name(DType t);
// Parse a safetensors dtype string; returns false if unknown.
bool dtype_from_name(const std::string& s, DType* out);

int64_t shape_numel(const std::vector<int64_t>& shape);
std::string shape_str(const std::vector<int64_t>& shape);  // "[896, 4864]"

struct TensorView {
  DType dtype = DType::F32;
  int ggml_type = -1;             // ggml type id when dtype == GGML_BLOCK
  std::vector<int64_t> shape;     // row-major, outermost first
  const uint8_t* data = nullptr;  // nbytes of payload, owned elsewhere
  size_t nbytes = 0;
  int64_t numel() const { return shape_numel(shape); }
};

// Converts an element tensor (F32/F16/BF16/F64/F8_E4M3/F8_E5M2/I8/...) to float32, into out[numel].
// GGML_BLOCK is not handled here (the model rung dequantizes it through the formats table).
void to_f32(const TensorView& t, float* out);

// Owning float32 matrix, 64-byte aligned. Layout row-major [rows, cols].
class Matrix {
 public:
  Matrix() = default;
  Matrix(int64_t rows, int64_t cols);
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t size() const { return rows_ * cols_; }
  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  float* row(int64_t r) { return data_.get() + r * cols_; }
  const float* row(int64_t r) const { return data_.get() + r * cols_; }
  bool empty() const { return size() == 0; }

 private:
  int64_t rows_ = 0, cols_ = 0;
  std::shared_ptr<float> data_;
};

}  // namespace lowbit
