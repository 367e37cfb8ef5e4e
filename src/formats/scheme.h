// QuantScheme: how a weight matrix [rows = out_features, cols = in_features] is quantized (element format,
// scale granularity, scale storage type, symmetry, scale search), its compact string form, validation against
// a shape, and exact bits-per-weight accounting.
//
// String form (parse_scheme / to_string), tokens separated by ':', format first, rest in any order:
//   int4:g128:sym:f16   int4:g32:asym   int8:channel   e4m3:channel   e4m3:block128x128   e4m3:tensor
//   nf4:g64:dq   mxfp4   mxfp8   nvfp4   q4_k   lut3   f16      (+ ":mse" for the clipping search)
//   granularity: tensor | channel | token | g<N> | block<R>x<C>      symmetry: sym | asym (INT formats only)
//   scale type:  f32 | f16 | bf16 | e4m3 | e8m0                      search: absmax | mse      dq (NF4 only)
// Defaults per format (to_string always prints the full canonical form):
//   int*: g128 sym f16    nf4: g64 f32    fp8 (e4m3fn, e5m2, fnuz): channel f32    e2m1/e2m3/e3m2: g32 f16
//   mx*: g32 e8m0 (fixed)    nvfp4: g16 e4m3 + fp32 tensor scale (fixed)    q*_k/q*_0/iq4_nl: native blocks
//   f32/f16/bf16: stored as is (no scale).    lut2/3/4: one f16 table of 2^b values per row (the scale grid
//   is [rows, 2^b]; fixed, see formats/codebook.h).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "formats/format.h"

namespace lowbit {

enum class Granularity : uint8_t {
  Tensor,   // one scale for the whole matrix
  Channel,  // one scale per output row
  Group,    // one scale per group_size consecutive inputs of a row; the last group of a row may be shorter
  Block2D,  // one scale per block_rows x block_cols tile (edge tiles may be smaller)
  Token,    // activations: one scale per token (row); for weights identical to Channel
  Native,   // GGUF blocks (scales inside the blocks) and plain F32/F16/BF16 (no scale)
};

enum class ScaleSearch : uint8_t {
  Absmax,  // scale = absmax / max_code (asym: (max - min) / (2^b - 1)); MX: the spec shared-exponent rule
  Mse,     // grid over clip ratios r in [search_min_ratio, 1], pick the one minimising the weighted squared
           // error sum_j w_j (x_j - x_hat_j)^2 of the group (w = importance per column, or 1)
};

struct QuantScheme {
  FormatId format = FormatId::INT4;  // as named by the user: int4, nf4, mxfp4, nvfp4, q4_k, e4m3fn, f16 ...
  Granularity gran = Granularity::Group;
  int group_size = 128;                // Group: elements per group along cols
  int block_rows = 0, block_cols = 0;  // Block2D tile
  ScaleType scale_type = ScaleType::F16;
  bool symmetric = true;  // false: INT with zero point (b-bit zero counted in bpw)
  ScaleSearch search = ScaleSearch::Absmax;
  bool double_quant = false;  // NF4: scales -> int8 in chunks of 256 (mean subtracted) + FP32 per chunk
  int search_steps = 20;      // Mse: number of clip ratios tried (evenly spaced in [min_ratio, 1])
  float search_min_ratio = 0.5f;

  const FormatInfo& info() const { return format_info(format); }
  const FormatInfo& elem_info() const { return format_info(format_info(format).elem); }
  bool operator==(const QuantScheme&) const = default;
};

// Throws UsageError with the offending token and what to write instead.
QuantScheme parse_scheme(std::string_view s);
std::string to_string(const QuantScheme& s);
// The defaults listed above for a format.
QuantScheme default_scheme(FormatId f);

// Throws UsageError when the scheme cannot be applied to a [rows, cols] matrix (group larger than a row, GGUF
// row not a multiple of the block, bad tile, unsupported combination).
void validate(const QuantScheme& s, int64_t rows, int64_t cols);

// The scale grid: cell (i, j) covers rows [i*row_block, min(rows, (i+1)*row_block)) and cols
// [j*col_block, min(cols, (j+1)*col_block)). Native schemes have an empty grid (rows = cols = 0).
struct ScaleGrid {
  int64_t rows = 0, cols = 0;            // number of cells along each dimension
  int64_t row_block = 1, col_block = 1;  // cell size (edge cells may be smaller)
  int64_t cells() const { return rows * cols; }
};
ScaleGrid scale_grid(const QuantScheme& s, int64_t rows, int64_t cols);

// Exact storage accounting, in bits, as a checkpoint stores it densely packed (no per-row padding):
//   elements     rows*cols*bits (GGUF: whole blocks incl. their internal scales)
//   scales       cells * scale_bits         (NF4 with dq: cells*8 + ceil(cells/256)*32 + 32 for the mean)
//   zeros        cells * bits               (asymmetric INT only)
//   second_level 32 for NVFP4's FP32 tensor scale
struct StorageBits {
  int64_t elements = 0, scales = 0, zeros = 0, second_level = 0;
  int64_t total() const { return elements + scales + zeros + second_level; }
};
StorageBits storage_bits(const QuantScheme& s, int64_t rows, int64_t cols);
// total bits / (rows*cols). INT4 g128 f16 sym: 4.125; asym: 4.15625; MXFP4: 4.25; NVFP4: 4.5 +
// 32/(rows*cols).
double bits_per_weight(const QuantScheme& s, int64_t rows, int64_t cols);

const char* granularity_name(Granularity g);

}  // namespace lowbit
