// A linear layer's weight as the kernels see it: [rows = out_features, cols = in_features], row-major, in the
// storage format it was loaded or quantized in. The kernels multiply it without widening the whole matrix.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tensor/qtensor.h"

namespace lowbit {

struct KernelPlan;  // kernels/kernel_plan.h: which fused kernel serves this weight + its side tables

enum class WeightKind : uint8_t {
  F32,    // float32 rows
  F16,    // IEEE half rows
  BF16,   // bfloat16 rows
  Ggml,   // llama.cpp block rows (ggml_type), e.g. Q4_0 / Q8_0 / Q4_K, zero-copy from a GGUF file
  Quant,  // a QuantizedMatrix (tensor/qtensor.h): codes + scales (+ zeros) under a QuantScheme
};

// How the NVFP4 activation route picks a block's E4M3 scale: Amax maps the block's largest magnitude to
// E2M1's 6 (NVIDIA's rule, what NVFP4 hardware and vLLM compute); Mse takes, among the E4M3 scales from two
// codes below that one up to the one that maps the largest magnitude to 4, the scale with the least squared
// error over the block (the "4 over 6" observation: 6 leaves E2M1's coarse top step between 4 and 6 to the
// largest values; a smaller or larger scale often fits the rest of the block better).
enum class ActScale : uint8_t { Amax, Mse };
const char* act_scale_name(ActScale s);  // "amax", "mse"

struct WeightMatrix {
  WeightKind kind = WeightKind::F32;
  int64_t rows = 0;                          // out_features
  int64_t cols = 0;                          // in_features
  const uint8_t* data = nullptr;             // rows * row_bytes() payload, owned by `owner`
  int ggml_type = -1;                        // when kind == Ggml
  std::shared_ptr<const void> owner;         // an mmap'd file or a heap buffer
  std::shared_ptr<const QuantizedMatrix> q;  // when kind == Quant (data/owner unused)
  // Activation route (W8A8, FP8 W/A): the input x is quantized per token to this format before the product
  // (INT8 / INT4 symmetric, an FP8 format, or NVFP4 blocks), emulating exactly what a W8A8 engine computes.
  // F32 = weight-only.
  FormatId act_format = FormatId::F32;
  float act_static_scale = 0.0f;  // > 0: one calibrated per-tensor scale instead of dynamic per-token scales
  // INT4 route: the per-token scale is act_clip * absmax / 7 (values beyond the clipped range saturate at
  // +-7; QuaRot clips activations at 0.9); NVFP4 route: the per-token global scale is act_clip * absmax /
  // (6 * 448) (the largest block scales saturate at E4M3's 448). 1 = no clipping; the other routes ignore it.
  float act_clip = 1.0f;
  // NVFP4 route: how each block of 16 gets its E4M3 scale (quantize_activation_nvfp4, kernels/matmul.h);
  // the other routes ignore it.
  ActScale act_scale = ActScale::Amax;
  // Kernel side tables (decoded scales, code LUT), built by make_quant_weight / prepare_weight, or lazily
  // (and cached process-wide) by the first matmul when absent.
  std::shared_ptr<const KernelPlan> plan;

  size_t row_bytes() const;
  // Bytes held in memory (Quant: codes + scales + zeros), plus the kernel side tables when built.
  size_t nbytes() const;
  // Bytes one decode product (a single token, AVX-512 tiers) reads: the codes and the side tables the kernel
  // walks (decoded scales / zero points, value tables), or the load-time pack; not the stored scale cells the
  // plan decoded (kept for export and dequantization), nor the prefill-only INT8 / AMX tiles. The decode
  // bandwidth bound (lowbit bench) divides by this.
  size_t decode_bytes() const;
  std::string format_name() const;  // "f32", "bf16", "q4_0", ...
};

// Owning F32 weight from a buffer (copies `src`, rows*cols floats).
WeightMatrix make_f32_weight(const float* src, int64_t rows, int64_t cols);
// Converts a float matrix to F16 or BF16 storage (round to nearest even).
WeightMatrix make_half_weight(const float* src, int64_t rows, int64_t cols, WeightKind kind);
// Zero-copy weight over llama.cpp block rows (ggml_type) at `data`, kept alive by `owner` (an mmap'd file, a
// buffer); no plan yet (prepare_weight builds it).
WeightMatrix make_ggml_weight(std::shared_ptr<const void> owner, const uint8_t* data, int ggml_type,
                              int64_t rows, int64_t cols);
// Wraps a quantized matrix and builds its kernel side tables.
WeightMatrix make_quant_weight(std::shared_ptr<const QuantizedMatrix> q);
// Builds w.plan (the kernel side tables) now, so nbytes() counts them and the first matmul does not pay for
// it. repack: also build a load-time repacked copy where a kernel has one (GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 /
// Q8_0 / IQ4_NL / MXFP4 and Q2_K .. Q6_K on AVX-512, within +4 % of the stored rows' size); pass false for a
// table that is only read row by row (an untied embedding).
void prepare_weight(WeightMatrix& w, bool repack = true);
// True when products of w read a load-time repacked copy: its stored rows (w.data) are then only read for
// row lookups, so a loader may release their pages.
bool weight_is_repacked(const WeightMatrix& w);

}  // namespace lowbit
