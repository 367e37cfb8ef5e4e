// The formats table: one row (FormatInfo) per number format lowbit knows. Add data, not branches: a new
// format is one file (layout diagram + scalar reference + its row function) plus one line in the format list
// (formats/format_list.h); tests sweep the table.
//
// Three kinds of rows:
//  - element formats (F32/F16/BF16, FP8, FP6, FP4, E8M0, INT*, NF4): `decode`/`encode` map one code to one
//    value in *element units* (before any external scale). Scales live outside (see formats/scheme.h,
//    tensor/qtensor.h).
//  - microscaled formats (MXFP8/6/4, MXINT8, NVFP4): an element format + a block size + a native scale type;
//    the row's decode/encode are those of the element codes. quantize_matrix stores them as codes + per-block
//    scales.
//  - per-row codebook formats (LUT2/3/4, formats/codebook.h): decode/encode map a code to its index; the
//    values are the row's table, stored as the matrix's [rows, 2^bits] f16 scale grid.
//  - GGUF block formats (Q4_0 ... Q6_K, IQ4_NL, ggml MXFP4): self-contained blocks; `dequantize_row` (and for
//    Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, Q2_K..Q6_K, IQ4_NL, IQ4_XS and ggml MXFP4 `quantize_row`) work on whole rows
//    of blocks, byte-compatible with llama.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "formats/format_list.h"

namespace lowbit {

// One id per line of the format list (formats/format_list.h), in its order.
enum class FormatId : uint8_t {
#define LOWBIT_FORMAT_ID(id, row) id,
  LOWBIT_FORMAT_LIST(LOWBIT_FORMAT_ID)
#undef LOWBIT_FORMAT_ID
      kCount
};
constexpr int kNumFormats = static_cast<int>(FormatId::kCount);

enum class FormatKind : uint8_t {
  Float,        // IEEE-like minifloat (sign, exponent, mantissa)
  Int,          // two's-complement integer grid; codes stored offset-binary (see int_formats.cpp)
  Lut,          // codes index a value table (NF4)
  Codebook,     // codes index a per-row table of 2^bits values stored in the scale grid (LUT2/3/4)
  Scale,        // scale-only type (E8M0)
  Microscaled,  // element format + block + native scale (MX, NVFP4)
  GgmlBlock,    // self-contained llama.cpp block
};

// Types a scale (or zero-free step size) can be stored in. E4M3 here is "UE4M3": E4M3FN with the sign bit 0.
enum class ScaleType : uint8_t { None, F32, F16, BF16, E4M3, E8M0 };

// Routes a format can serve in the engine (bit mask).
enum RouteBits : int { kRouteWeights = 1, kRouteActivations = 2, kRouteKv = 4 };

struct FormatInfo {
  FormatId id;
  const char* name;  // lowbit spelling: "e4m3fn", "int4", "nf4", "mxfp4", "nvfp4", "q4_k", ...
  FormatKind kind;
  int bits;                // bits per element code (GGUF: nominal bits of the quants, e.g. 4 for Q4_K)
  int block_elems;         // elements sharing one in-format scale; 1 = scales external or none
  int block_bytes;         // GGUF: bytes per self-contained block; 0 otherwise
  ScaleType native_scale;  // MX: E8M0, NVFP4: E4M3, others None (the scheme chooses)
  int routes;              // RouteBits mask
  FormatId elem;        // element code format (MXFP4 -> E2M1, NVFP4 -> E2M1, MXINT8 -> MXINT8, else itself)
  double max_finite;    // largest finite |value| of one element code, in element units (before scaling)
  double min_positive;  // smallest positive |value| (min subnormal for floats; 1 for ints)
  bool has_inf, has_nan, has_neg_zero;
  int ggml_type;                   // ggml type id, -1 if none
  int exp_bits = 0, man_bits = 0;  // Float kind: field widths (sign bit = 1 + exp + man - 1); 0 otherwise
  const char* description;         // one line for `lowbit formats`

  // Element codec (element / microscaled rows; nullptr for GGUF rows). `encode` rounds to nearest, ties to
  // even; saturate=true clamps finite overflow (and +-Inf) to +-max_finite, false overflows to Inf/NaN where
  // the format has them (formats without either always saturate). NaN -> the format's NaN code; for formats
  // without NaN it encodes +0 (quantize_matrix rejects non-finite input before this happens).
  float (*decode)(uint32_t code) = nullptr;
  uint32_t (*encode)(float x, bool saturate) = nullptr;

  // Row codecs for GGUF block rows (n = multiple of block_elems); quantize_row is nullptr where unsupported
  // (the IQ2/IQ3/IQ1/TQ rows). Without importance every encoder is llama.cpp's own reference rule,
  // byte for byte (what llama-quantize writes without an imatrix).
  void (*dequantize_row)(const void* src, float* dst, int64_t n) = nullptr;
  void (*quantize_row)(const float* src, void* dst, int64_t n) = nullptr;
  // GGUF k-quants (Q2_K .. Q6_K), IQ4_NL and IQ4_XS, nullptr elsewhere: the encoder with optional per-element
  // importance (imatrix / Hessian diagonal; `values` receives what it encoded). K-quants and IQ4_XS only
  // (nullptr for IQ4_NL): the grid of an encoded row for quantizers that choose the codes
  // themselves (GPTQ): element i = scale[i] * q + offset[i] for a code q in [code_min, code_max];
  // set_row_codes stores a row's codes and keeps its scales.
  void (*quantize_row_weighted)(const float* src, void* dst, int64_t n, const float* importance,
                                float* values) = nullptr;
  void (*row_grid)(const void* row, float* scale, float* offset, int64_t n) = nullptr;
  void (*set_row_codes)(void* row, const int8_t* codes, int64_t n) = nullptr;
  int code_min = 0, code_max = 0;
  // Non-affine grids (IQ4_XS): element i = scale[i] * code_values[q] + offset[i] instead, for a code q in
  // [code_min, code_max]; the values ascend. nullptr for the k-quants.
  const int8_t* code_values = nullptr;
  // GGUF rows whose every value is proportional to one or two fp16 numbers of its block (d, and dmin / m
  // where the block has mins): their byte offsets in the block, -1 = none. Multiplying them by one factor
  // multiplies the block's values by it (scale tuning, tensor/qtensor.h rescale_cells). {-1, -1} elsewhere
  // (MXFP4's E8M0 exponent cannot take a continuous factor).
  int scale_at[2] = {-1, -1};

  bool is_element() const {
    return kind == FormatKind::Float || kind == FormatKind::Int || kind == FormatKind::Lut;
  }
  bool is_gguf() const { return kind == FormatKind::GgmlBlock; }
  bool is_microscaled() const { return kind == FormatKind::Microscaled; }
};

// All rows, in FormatId order (format_table()[i].id == FormatId(i)).
const std::vector<FormatInfo>& format_table();
const FormatInfo& format_info(FormatId id);
// Case-insensitive; accepts aliases ("e4m3" -> e4m3fn, "fp8" -> e4m3fn, "fp4" -> e2m1, "mxfp8" -> mxfp8_e4m3,
// "mxfp6" -> mxfp6_e2m3, "q4_K" any case). Throws UsageError "[formats] unknown format 'int5'; did you mean
// 'int4'? (run lowbit formats for the list)".
const FormatInfo& format_by_name(std::string_view name);
const FormatInfo* find_format(std::string_view name);  // nullptr when unknown
// Row for a ggml type id, nullptr if lowbit has no codec for it (F32/F16/BF16 map to the plain rows).
const FormatInfo* format_by_ggml_type(int ggml_type);

// ---- scale types ----
const char* scale_type_name(ScaleType t);  // "f32", "f16", "bf16", "e4m3", "e8m0", "none"
bool scale_type_from_name(std::string_view s, ScaleType* out);
int scale_type_bits(ScaleType t);  // 32, 16, 16, 8, 8, 0
// Round a positive scale to what the type stores. F16/BF16/E4M3: round to nearest even (E4M3 saturates at
// 448, tiny values may become 0). E8M0: rounds UP to a power of two (a smaller scale would clip the group
// max), clamped to [2^-127, 2^127]. F32: identity.
float scale_round(ScaleType t, float s);
uint32_t scale_encode(ScaleType t, float s);  // code as stored (same rounding as scale_round)
float scale_decode(ScaleType t, uint32_t code);
// Store / load a scale code of `t` at p (little-endian, scale_type_bits/8 bytes).
void scale_store(ScaleType t, uint32_t code, uint8_t* p);
uint32_t scale_load(ScaleType t, const uint8_t* p);

// ---- GGUF row codecs (throw Error for types without a codec) ----
void dequantize_row_ggml(int ggml_type, const void* src, float* dst, int64_t n);
// importance (optional, [n]): per-element weights of the scale search (k-quants; the other types ignore it);
// values (optional, [n]) receives the encoded values (what dequantize_row_ggml will return).
void quantize_row_ggml(int ggml_type, const float* src, void* dst, int64_t n,
                       const float* importance = nullptr, float* values = nullptr);

// The GGUF block types lowbit can quantize to (those with an encoder), comma-separated: "q4_0, q4_1, ...".
std::string gguf_quantizer_names();

// Edit distance helper used for "did you mean" messages (also used by scheme parsing).
std::string closest_name(std::string_view name, const std::vector<std::string>& candidates);

}  // namespace lowbit
