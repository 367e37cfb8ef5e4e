#include "kernels/weight.h"

#include <cctype>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/memory.h"
#include "formats/ggml_types.h"
#include "kernels/kernel_plan.h"
#include "kernels/matmul.h"

namespace lowbit {

size_t WeightMatrix::row_bytes() const {
  switch (kind) {
    case WeightKind::F32:
      return static_cast<size_t>(cols) * 4;
    case WeightKind::F16:
    case WeightKind::BF16:
      return static_cast<size_t>(cols) * 2;
    case WeightKind::Ggml: {
      const GgmlTypeInfo* t = ggml_type_info(ggml_type);
      if (!t) fail("kernels", "unknown ggml type " + std::to_string(ggml_type));
      return static_cast<size_t>(ggml_row_bytes(*t, cols));
    }
    case WeightKind::Quant:
      return static_cast<size_t>(q->row_bytes);
  }
  return 0;
}

size_t WeightMatrix::nbytes() const {
  // A load-time pack (GGUF QBlkPack / KPack types) serves every product instead of the stored rows, which
  // stay in the file mapping and are read only for embedding lookups (load_model drops their pages once
  // packed).
  if (kind == WeightKind::Ggml && plan && plan->load_pack()) return plan->bytes();
  const size_t base =
      kind == WeightKind::Quant ? q->storage_bytes() : row_bytes() * static_cast<size_t>(rows);
  return base + (plan ? plan->bytes() : 0);
}

size_t WeightMatrix::decode_bytes() const {
  if (kind == WeightKind::Ggml && plan && plan->load_pack()) return plan->bytes();
  if (kind != WeightKind::Quant) return row_bytes() * static_cast<size_t>(rows);
  size_t b = q->codes.size();
  if (!plan || plan->scales.empty())
    return q->storage_bytes();  // no decoded table: the stored cells are read
  // nib16 decode reads the stored binary16 / uint8 cells where the plan has them (matmul_codes.cpp,
  // run_nib_gemv512).
  if ((plan->scales_f16 || plan->scales_e8m0 || plan->scales_e4m3) &&
      (plan->route == Route::Nib || (plan->route == Route::Deq && plan->bits < 4)) &&  // INT2 / INT3 on nib16
      matmul_rounds_to_bf16(*this, 1))
    return b + plan->scales.size() * (plan->scales_f16 ? 2 : 1) + (plan->zeros_u8 ? plan->zeros.size() : 0) +
           plan->lut.size() * sizeof(float);
  b += (plan->scales.size() + plan->zeros.size() + plan->lut.size()) * sizeof(float);
  if (plan->byte16) b += sizeof(kern::Byte16Lut);
  return b;
}

std::string WeightMatrix::format_name() const {
  switch (kind) {
    case WeightKind::F32:
      return "f32";
    case WeightKind::F16:
      return "f16";
    case WeightKind::BF16:
      return "bf16";
    case WeightKind::Ggml: {
      const GgmlTypeInfo* t = ggml_type_info(ggml_type);
      std::string s = t ? t->name : "ggml?";
      for (auto& ch : s) ch = static_cast<char>(std::tolower(ch));
      return s;
    }
    case WeightKind::Quant:
      return to_string(q->scheme);
  }
  return "?";
}

namespace {
std::shared_ptr<uint8_t> shared_bytes(size_t n) {
  auto p = aligned_bytes(n);
  return std::shared_ptr<uint8_t>(p.release(), AlignedFree{});
}
}  // namespace

WeightMatrix make_f32_weight(const float* src, int64_t rows, int64_t cols) {
  WeightMatrix w;
  w.kind = WeightKind::F32;
  w.rows = rows;
  w.cols = cols;
  auto buf = shared_bytes(w.nbytes());
  std::memcpy(buf.get(), src, w.nbytes());
  w.data = buf.get();
  w.owner = buf;
  return w;
}

WeightMatrix make_half_weight(const float* src, int64_t rows, int64_t cols, WeightKind kind) {
  if (kind != WeightKind::F16 && kind != WeightKind::BF16)
    fail("kernels", "make_half_weight wants F16 or BF16");
  WeightMatrix w;
  w.kind = kind;
  w.rows = rows;
  w.cols = cols;
  auto buf = shared_bytes(w.nbytes());
  auto* dst = reinterpret_cast<uint16_t*>(buf.get());
  const int64_t n = rows * cols;
  for (int64_t i = 0; i < n; ++i) dst[i] = kind == WeightKind::F16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
  w.data = buf.get();
  w.owner = buf;
  return w;
}

WeightMatrix make_ggml_weight(std::shared_ptr<const void> owner, const uint8_t* data, int ggml_type,
                              int64_t rows, int64_t cols) {
  WeightMatrix w;
  w.kind = WeightKind::Ggml;
  w.rows = rows;
  w.cols = cols;
  w.ggml_type = ggml_type;
  w.data = data;
  w.owner = std::move(owner);
  return w;
}

WeightMatrix make_quant_weight(std::shared_ptr<const QuantizedMatrix> q) {
  WeightMatrix w;
  w.kind = WeightKind::Quant;
  w.rows = q->rows;
  w.cols = q->cols;
  w.q = std::move(q);
  prepare_weight(w);
  return w;
}

void prepare_weight(WeightMatrix& w, bool repack) {
  if (!w.plan) w.plan = build_kernel_plan(w, repack);
}

bool weight_is_repacked(const WeightMatrix& w) {
  return w.plan && w.plan->load_pack();
}

}  // namespace lowbit
