// QuantizedMatrix: a weight matrix [rows = out_features, cols = in_features] quantized under a QuantScheme,
// in a simple kernel-friendly layout, plus the scalar reference quantizer / dequantizer (the oracle for every
// optimised kernel) and a per-token activation quantizer.
//
// Layout (all little-endian):
//   codes   [rows, row_bytes]  Each row starts on a byte boundary. Code-based schemes (INT*, NF4,
//   FP8/FP6/FP4,
//           MX*, NVFP4): the row is an LSB-first bit stream, element c occupies bits [c*b, c*b + b) of the
//           row, so for b = 4 element 2i is the LOW nibble of byte i and 2i+1 the high nibble; b = 8 is one
//           byte per element; b = 2 packs 4 per byte from the low bits; b = 3 / 6 straddle bytes. row_bytes =
//           ceil(cols*b/8). GGUF schemes: the row's ggml blocks, byte-identical to llama.cpp (row_bytes =
//           cols/block*block_bytes). F32/F16/BF16: the raw values.
//   scales  [grid.rows, grid.cols] scale codes in scheme.scale_type (4/2/1 bytes each), row-major.
//           Cell (i, j) covers rows [i*grid.row_block, ...) x cols [j*grid.col_block, ...) (see ScaleGrid).
//           Per-group: grid = [rows, ceil(cols/group)]; per-channel [rows, 1]; per-tensor [1, 1];
//           2-D block [ceil(rows/R), ceil(cols/C)]; MX: E8M0 [rows, ceil(cols/32)]; NVFP4: E4M3 [rows,
//           cols/16].
//   zeros   [grid.rows, grid.cols] uint8 zero points (asymmetric INT only; empty otherwise).
//   LUT2/3/4 (per-row codebooks, formats/codebook.h): scales = [rows, 2^b] f16, row r's table; no zeros.
//
// Value of element (r, c) with cell (i, j) and code u:
//   INT (sym or asym):     (u - z) * s          z = zeros[i, j], or 2^(b-1) when symmetric
//   LUT2/3/4:              scale(r, u)          the row's table entry (fitted by weighted k-means)
//   every other code fmt:  decode_elem(u) * s   decode_elem = format_info(scheme.elem).decode
//   where s = scale(i, j): the decoded scale; NVFP4: decoded E4M3 / global_scale; NF4+dq: second level
//   applied.
// Quantization always uses the ROUNDED (stored) scale, so dequantization reproduces exactly what was decided.
//
// Non-finite input: quantize_matrix throws Error naming the first NaN/Inf (row, col): weights with NaN/Inf
// are a bug upstream. Activations: see quantize_activation_row.
#pragma once
#include <cstdint>
#include <vector>

#include "formats/scheme.h"
#include "tensor/tensor.h"

namespace lowbit {

struct QuantizedMatrix {
  QuantScheme scheme;
  int64_t rows = 0, cols = 0;
  FormatId elem = FormatId::F32;  // code format: INT4, NF4, E2M1 (MXFP4/NVFP4), E4M3FN, ..., or the GGUF type
  int bits = 0;                   // bits per code (GGUF: 0, codes are blocks)
  int64_t row_bytes = 0;          // bytes per row of `codes`
  std::vector<uint8_t> codes;     // [rows, row_bytes]
  ScaleGrid grid;                 // empty for Native schemes
  std::vector<uint8_t> scales;    // [grid.rows, grid.cols] x scale bytes (NF4 dq: int8 codes, 1 byte each)
  std::vector<uint8_t> zeros;     // [grid.rows, grid.cols] (asymmetric INT), else empty
  float global_scale = 1.0f;      // NVFP4 second level: s = e4m3(block) / global_scale; 1 otherwise
  // NF4 double quantization: s(cell k) = dq_scales[k / 256] * int8(scales[k]) / 127 + dq_offset
  std::vector<float> dq_scales;  // [ceil(grid.cells() / 256)]
  float dq_offset = 0.0f;
  // Input-column permutation (GPTQ act-order, model/hub_layouts.h), [cols] or empty (the common case: none).
  // When set, column j of codes/grid is the original input column input_perm[j]: W[:, input_perm[j]] =
  // stored column j, so y = W x = stored * x[input_perm]. dequantize_row / code() / the grid are in stored
  // order; kernels/matmul.h gathers x and weight_row_f32 scatters rows back to the original order.
  std::vector<int32_t> input_perm;

  bool is_gguf() const { return scheme.info().is_gguf(); }
  bool is_plain() const;                       // F32/F16/BF16 stored as is
  float scale(int64_t i, int64_t j) const;     // effective decoded scale of cell (i, j)
  int zero_point(int64_t i, int64_t j) const;  // INT: stored or 2^(b-1); other formats 0
  std::vector<float> decoded_scales() const;   // [grid.rows, grid.cols], effective scales (for kernels)
  uint32_t code(int64_t r, int64_t c) const;   // code-based schemes only
  const uint8_t* row_data(int64_t r) const { return codes.data() + r * row_bytes; }
  size_t storage_bytes() const;  // bytes held in memory (codes + scales + zeros + dq + global)
  double bits_per_weight() const { return lowbit::bits_per_weight(scheme, rows, cols); }
};

// Quantizes w [rows, cols] (row-major). importance: optional [cols] per-input-column weights for the Mse
// scale search (GPTQ/AWQ/imatrix statistics); ignored by Absmax. LUT2/3/4 always use it (when given) as the
// k-means weights; the GGUF k-quants (q2_k..q6_k) always use it in their scale/min search. Parallel over
// scale rows and then over rows. Throws UsageError (validate) for impossible shapes and Error for non-finite
// input.
// nvfp4_amax > 0: the NVFP4 global scale is 448 * 6 / nvfp4_amax instead of this matrix's own |w| max.
// Engines that fuse matrices (vLLM's q/k/v and gate/up) hold one global scale per fused matrix, so the
// quantizer passes the largest |w| of the fused group (which must be >= this matrix's). Ignored by other
// formats.
QuantizedMatrix quantize_matrix(const float* w, int64_t rows, int64_t cols, const QuantScheme& scheme,
                                const float* importance = nullptr, float nvfp4_amax = 0.0f);

// Wraps existing llama.cpp blocks (e.g. from a GGUF file) without copying semantics changes: copies
// rows*cols/block*block_bytes bytes from data. Throws if cols is not a multiple of the block.
QuantizedMatrix quantized_from_gguf(int ggml_type, int64_t rows, int64_t cols, const uint8_t* data,
                                    size_t nbytes);

// Scale tuning (train/tune_scales.h) moves the numbers a quantized matrix stores as floats and keeps its
// codes. rescale_grid: the cells of q whose values are all proportional to such numbers (a group's or
// channel's scale, a GGUF block's d and its dmin / m, a per-row codebook's table), so that multiplying them
// by one factor multiplies the cell's values by it and changes no byte count. Cell (i, j) covers rows
// [i*row_block, ...) x cols [j*col_block, ...) as in a ScaleGrid. Empty (cells() == 0) where the stored
// scales cannot take a continuous factor: MX's E8M0 exponents, NVFP4's E4M3 block scales, NF4's
// double-quantized int8 scales, plain F32 / F16 / BF16 rows, GGUF types without a scale_at field, and an
// input permutation (its cells are in stored column order).
ScaleGrid rescale_grid(const QuantizedMatrix& q);
// q with each cell k's stored numbers multiplied by mult[k] (rescale_grid(q).cells() factors, finite and
// > 0), rounded to their storage type (fp16 in GGUF blocks, the scheme's scale type otherwise; saturating at
// its largest finite value): dequantizing the result gives the values the kernels compute from it. Codes and
// zero points are unchanged. Throws UsageError("tensor") when the grid is empty or a factor is not finite
// and positive.
QuantizedMatrix rescale_cells(const QuantizedMatrix& q, const float* mult);

// Scalar reference dequantization of row r into out[cols].
void dequantize_row(const QuantizedMatrix& q, int64_t r, float* out);
void dequantize_matrix(const QuantizedMatrix& q, float* out);  // out[rows*cols], parallel over rows
Matrix dequantize_matrix(const QuantizedMatrix& q);

// std::nearbyint for a value that is clamped to a code range next: round half to even by adding and
// subtracting 1.5 * 2^23 (exact for |q| < 2^22; beyond that the result stays beyond every code range, so the
// clamp gives the same code). Without SSE4.1's roundss, which the baseline x86-64 build lacks, nearbyintf is
// a libm call per weight (GPTQ's column loop; the MSE clip search makes twenty per weight).
inline float round_for_clamp(float q) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (q + kMagic) - kMagic;
}

// The INT code of x under a scale div > 0 and a zero point, as a float: nearbyint(x / div) + zero clamped to
// [0, umax]. The comparisons give what fmin / fmax would (a NaN becomes 0) without their libm calls.
inline float int_code(float x, float div, float zero, float umax) {
  float v = round_for_clamp(x / div) + zero;
  v = v > 0.0f ? v : 0.0f;
  return v > umax ? umax : v;
}

// Bit-stream packing used by codes (LSB-first, see above).
inline uint32_t unpack_code(const uint8_t* row, int64_t i, int bits) {
  const int64_t bit = i * bits;
  const uint8_t* p = row + (bit >> 3);
  const int sh = static_cast<int>(bit & 7);
  uint32_t v = p[0] >> sh;
  if (sh + bits > 8) v |= static_cast<uint32_t>(p[1]) << (8 - sh);
  return v & ((1u << bits) - 1);
}
inline void pack_code(uint8_t* row, int64_t i, int bits, uint32_t code) {  // row must be zero-initialised
  const int64_t bit = i * bits;
  uint8_t* p = row + (bit >> 3);
  const int sh = static_cast<int>(bit & 7);
  p[0] = static_cast<uint8_t>(p[0] | (code << sh));
  if (sh + bits > 8) p[1] = static_cast<uint8_t>(p[1] | (code >> (8 - sh)));
}

// ---- per-token (dynamic) activation quantization ----
// fmt: INT8 (codes are int8 two's complement bytes, symmetric, s = absmax/127, q = clamp(RNE(x/s), -127,
// 127)) or an FP8 format (E4M3FN, E5M2, FNUZ variants; s = absmax / max_finite, code = saturating RNE cast of
// x/s). group_size 0 = one scale per row; otherwise ceil(n/group_size) scales (last group may be ragged).
// scales are FP32 and not rounded. Non-finite input never causes UB: absmax is taken over finite values;
// +-Inf saturates to the largest code; NaN -> NaN code for FP8, and for INT8 the group's scale is set to NaN
// so the whole group dequantizes to NaN (it stays visible to NaN checks downstream).
void quantize_activation_row(FormatId fmt, const float* x, int64_t n, int group_size, uint8_t* codes,
                             float* scales);
void dequantize_activation_row(FormatId fmt, const uint8_t* codes, const float* scales, int64_t n,
                               int group_size, float* out);

}  // namespace lowbit
