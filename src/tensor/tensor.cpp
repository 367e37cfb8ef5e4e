#include "tensor/tensor.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/half.h"
#include "core/memory.h"

namespace lowbit {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64:
    case DType::I64:
    case DType::U64:
      return 8;
    case DType::F32:
    case DType::I32:
    case DType::U32:
      return 4;
    case DType::F16:
    case DType::BF16:
    case DType::I16:
    case DType::U16:
      return 2;
    case DType::I8:
    case DType::U8:
    case DType::BOOL:
    case DType::F8_E4M3:
    case DType::F8_E5M2:
      return 1;
    case DType::GGML_BLOCK:
      return 0;
  }
  return 0;
}

namespace {
struct NameRow {
  DType t;
  const char* name;
};
constexpr NameRow kNames[] = {
    {DType::F32, "F32"},         {DType::F16, "F16"},         {DType::BF16, "BF16"},
    {DType::F64, "F64"},         {DType::I8, "I8"},           {DType::U8, "U8"},
    {DType::I16, "I16"},         {DType::U16, "U16"},         {DType::I32, "I32"},
    {DType::U32, "U32"},         {DType::I64, "I64"},         {DType::U64, "U64"},
    {DType::BOOL, "BOOL"},       {DType::F8_E4M3, "F8_E4M3"}, {DType::F8_E5M2, "F8_E5M2"},
    {DType::GGML_BLOCK, "GGML"},
};
}  // namespace

const char* dtype_name(DType t) {
  for (auto& r : kNames)
    if (r.t == t) return r.name;
  return "?";
}

bool dtype_from_name(const std::string& s, DType* out) {
  for (auto& r : kNames) {
    if (s == r.name && r.t != DType::GGML_BLOCK) {
      *out = r.t;
      return true;
    }
  }
  return false;
}

int64_t shape_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

namespace {
// FP8 decoders for the two safetensors FP8 dtypes (OCP E4M3FN and E5M2). Kept here, not in formats, because
// the tensor rung must widen stored checkpoints without depending on quantization logic.
float e4m3fn_decode(uint8_t b) {
  uint32_t s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  float v;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  if (e == 0)
    v = std::ldexp(static_cast<float>(m), -9);
  else
    v = std::ldexp(1.0f + m / 8.0f, static_cast<int>(e) - 7);
  return s ? -v : v;
}
float e5m2_decode(uint8_t b) {
  return f16_to_f32(static_cast<uint16_t>(b) << 8);
}
}  // namespace

void to_f32(const TensorView& t, float* out) {
  const int64_t n = t.numel();
  const uint8_t* p = t.data;
  auto rd = [&](auto tag, int64_t i) {
    using T = decltype(tag);
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    return v;
  };
  switch (t.dtype) {
    case DType::F32:
      std::memcpy(out, p, n * 4);
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(rd(uint16_t{}, i));
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(rd(uint16_t{}, i));
      return;
    case DType::F64:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(rd(double{}, i));
      return;
    case DType::I8:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int8_t>(p[i]);
      return;
    case DType::U8:
    case DType::BOOL:
      for (int64_t i = 0; i < n; ++i) out[i] = p[i];
      return;
    case DType::I16:
      for (int64_t i = 0; i < n; ++i) out[i] = rd(int16_t{}, i);
      return;
    case DType::U16:
      for (int64_t i = 0; i < n; ++i) out[i] = rd(uint16_t{}, i);
      return;
    case DType::I32:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(rd(int32_t{}, i));
      return;
    case DType::U32:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(rd(uint32_t{}, i));
      return;
    case DType::I64:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(rd(int64_t{}, i));
      return;
    case DType::U64:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(rd(uint64_t{}, i));
      return;
    case DType::F8_E4M3:
      for (int64_t i = 0; i < n; ++i) out[i] = e4m3fn_decode(p[i]);
      return;
    case DType::F8_E5M2:
      for (int64_t i = 0; i < n; ++i) out[i] = e5m2_decode(p[i]);
      return;
    case DType::GGML_BLOCK:
      break;
  }
  fail("tensor", "to_f32: GGML block tensors must be dequantized through the formats table");
}

Matrix::Matrix(int64_t rows, int64_t cols) : rows_(rows), cols_(cols) {
  auto bytes = aligned_bytes(static_cast<size_t>(rows * cols) * sizeof(float));
  data_ = std::shared_ptr<float>(reinterpret_cast<float*>(bytes.release()), [](float* p) { std::free(p); });
}

}  // namespace lowbit
