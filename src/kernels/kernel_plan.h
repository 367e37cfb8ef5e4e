// Internal to src/kernels: the per-weight kernel plan (which fused kernel serves a WeightMatrix, plus the
// small side tables it needs) and the ISA-specific kernel entry points. Not part of the public API.
//
// Side tables are built once per weight (make_quant_weight, or lazily on the first matmul) and counted in
// WeightMatrix::nbytes(): decoded FP32 scales [grid.rows, grid.cols] (one 4-byte float per group; this turns
// the scale formats E8M0/E4M3/F16/NF4-dq/NVFP4-global into one multiply) and a code -> value table.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/ggml_types.h"
#include "kernels/weight.h"

namespace lowbit {

enum class Route : uint8_t {
  Dense,     // F32/F16/BF16 WeightKind: dense SIMD tiles
  Deq,       // any format: dequantize one row into L1 (scalar decoder), SIMD dot with every token
  Nib,       // 4-bit codes (INT4 sym/asym, NF4, FP4 E2M1, MXFP4, NVFP4): in-register LUT decode + FMA
  Byte,      // 8-bit codes (INT8 sym/asym, FP8 E4M3FN/E5M2, MXFP8): in-register decode + FMA
  GgmlQ8,    // GGUF Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, Q2_K..Q6_K: activations to Q8 blocks of 32, VNNI integer dots
  Codebook,  // LUT2/3/4 per-row codebooks: the row's f16 table widened into a register, codes looked up there
};

enum class ByteDec : uint8_t { Int8Sym, Int8Asym, E4M3, E5M2 };

// W8A8 prefill layout (matmul_avx512_tile.cpp): weights of 16 rows interleaved by 4 columns, plus row sums.
struct Int8Tile {
  std::vector<int8_t> packed;   // [ceil(rows/16), ceil(cols/4), 16, 4]
  std::vector<int32_t> rowsum;  // [ceil(rows/16) * 16]
  size_t bytes() const { return packed.size() + rowsum.size() * sizeof(int32_t); }
};

// GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL / MXFP4 weights repacked at load for AVX-512 VNNI
// (qblk_pack.cpp, matmul_avx512_qblk.cpp): the GGUF blocks (18 / 20 / 22 / 24 / 34 / 18 / 17 bytes per 32
// weights) reordered so that one 64-byte load feeds vpdpbusd for 16 output rows at once. Per row block rb (16
// rows, the last one zero-padded) the region data[rb * nb * block_bytes, +nb * block_bytes) holds the nb =
// cols / 32 column blocks in pairs (the last pair may hold one block), each pair
//   [codes b, codes b+1][high bits b, b+1][scales b, b+1][mins b, b+1]
// so that a decode reads one sequential stream and every code load is 64-byte aligned (a pair is 9 / 10 / 11
// / 12 / 17 / 9 / 9 cache lines):
//   codes: 4-bit types 4 chunks of 64 bytes, chunk k byte 4r + j = c[r][32b+8k+j] | c[r][32b+8k+4+j] << 4
//   (low
//          4 bits of the unsigned code c); Q8_0 8 chunks, chunk k byte 4r + j = q[r][32b+4k+j] + 128
//   high bits (Q5_0, Q5_1): per chunk k two uint64 masks (low nibbles, high nibbles), bit 4r + j
//   scales: 16 x 16 bits, row r: f16 d, or for MXFP4 the bf16 2^(e-128) (exact for every E8M0 e < 255; 255 is
//   NaN) mins (Q4_1, Q5_1): 16 f16 m
// so w[r][c] = d * (u(code) - offset) + m: u(c) = c with offset 8 (Q4_0), 16 (Q5_0), 128 (Q8_0), 0 (Q4_1,
// Q5_1); for the non-linear grids (IQ4_NL, MXFP4) u = lut[c] = grid value + 128 (MXFP4's grid is 2 x E2M1,
// hence the half in d), offset 128; m = 0 where the type has none. MXFP4 grows from 17 to 18 bytes per 32
// weights (the scale widens to 16 bits; counted in bytes()); the others keep their size.
struct QBlkPack {
  int ggml_type = -1;
  int64_t rows = 0, cols = 0;
  int64_t code_bytes = 0;  // per 16 rows x 32 columns: 256 (4-bit) or 512 (Q8_0)
  int64_t hbit_bytes = 0;  // 64 (Q5_0) or 0
  int64_t min_bytes = 0;   // 32 (Q4_1, Q5_1) or 0
  int64_t block_bytes =
      0;           // code_bytes + hbit_bytes + 32 + min_bytes: 288 (Q4_0), 352 (Q5_0), 544 (Q8_0), ...
  int offset = 0;  // w = d * (u - offset): 8 (Q4_0), 16 (Q5_0), 128 (Q8_0, IQ4_NL, MXFP4)
  bool bf16_scales = false;  // MXFP4: the 16-bit scales are bf16, not f16
  bool has_lut = false;      // IQ4_NL, MXFP4: u = lut[code]
  std::array<uint8_t, 16> lut{};
  std::shared_ptr<uint8_t> data;  // [ceil(rows/16), cols/32, block_bytes], 64-byte aligned
  size_t bytes() const { return static_cast<size_t>((rows + 15) / 16 * (cols / 32) * block_bytes); }
  // Offsets of column block b inside a row block's region (nb blocks).
  int64_t code_off(int64_t b) const { return (b & ~int64_t{1}) * block_bytes + (b & 1) * code_bytes; }
  int64_t hbit_off(int64_t b, int64_t nb) const {
    return (b & ~int64_t{1}) * block_bytes + pair(b, nb) * code_bytes + (b & 1) * hbit_bytes;
  }
  int64_t scale_off(int64_t b, int64_t nb) const {
    return (b & ~int64_t{1}) * block_bytes + pair(b, nb) * (code_bytes + hbit_bytes) + (b & 1) * 32;
  }
  int64_t min_off(int64_t b, int64_t nb) const {
    return (b & ~int64_t{1}) * block_bytes + pair(b, nb) * (code_bytes + hbit_bytes + 32) +
           (b & 1) * min_bytes;
  }
  static int64_t pair(int64_t b, int64_t nb) { return std::min<int64_t>(2, nb - (b & ~int64_t{1})); }
};
// GGUF Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS weights repacked at load for AVX-512 VNNI (kpack.cpp,
// matmul_avx512_kpack.cpp), the k-quant counterpart of QBlkPack: per row block rb (16 rows, the last one
// zero-padded) and super-block s (256 columns) one region of sb_bytes at data[(rb * cols / 256 + s) *
// sb_bytes], read front to back (a decode that jumped to scales at a region's end streamed 10-30 % slower
// from DRAM):
//   a code chunk is 64 bytes: byte 4r + j of the chunk of columns 8k..8k+7 = u[r][8k+j] & 15 | (u[r][8k+4+j]
//   & 15)
//   << 4 (u the unsigned code: Q4_K 0..15, Q5_K 0..31, Q6_K 0..63)
//   Q4_K:  the scale block d[16] f16, dmin[16] f16, sc[8][16] u8, m[8][16] u8 (sub-blocks of 32 columns; 320
//          bytes), then the 32 code chunks                                                      2368 bytes
//   Q5_K:  the same scale block, then per sub-block j at 320 + 320 j its 4 code chunks and per chunk two
//   uint64
//          fifth-bit masks (low / high nibbles, bit 4r + j)                                    2880 bytes
//   Q6_K:  d[16] f16 and 32 bytes of padding, then 4 groups of 4 sub-blocks (16 columns each), group g at
//          64 + 832 g: the 8 code chunks of columns 64g..64g+63, per sub-block i of the group 64 bytes of
//          high bits (byte 4r + j, bits 0-1 / 2-3 / 4-5 / 6-7 = u >> 4 of columns 16i + j / 16i + 4 + j / 16i
//          + 8 + j / 16i + 12 + j), then sc[4][16] int8                                                  3392
//          bytes
//   Q2_K:  d[16] f16, dmin[16] f16, the GGUF scale bytes sm[16 sub-blocks][16 rows] (4-bit scale | 4-bit
//          min << 4; sub-blocks of 16 columns), then per sub-block i at 320 + 64 i its code vector: byte
//          4r + j, bits 2q..2q+1 = u[r][16i + 4q + j] (0..3)                                    1344 bytes
//   Q3_K:  d[16] f16, sc[16][16] int8 (the 6-bit scale - 32), then per sub-block i at 288 + 96 i the
//          vector of the low two bits (as Q2_K) and four uint64 masks (mask q, bit 4r + j: bit 2 of
//          u[r][16i + 4q + j]; u = 0..7)                                                       1824 bytes
//   IQ4_XS: d[16] f16, sc[8][16] int8 (ls - 32; sub-blocks of 32 columns) and 32 bytes of padding, then the
//          32 code chunks as Q4_K's (u = the 4-bit grid index)                                 2240 bytes
// so w[r][c] = d * sc_j * u - dmin * m_j (Q2_K, Q4_K, Q5_K), d * sc_i * (u - 32) (Q6_K), d * sc_i * (u - 4)
// (Q3_K), d * sc_j * kIq4Grid[u] (IQ4_XS). Q2_K keeps its 1344 bytes per 16 x 256, Q3_K grows 1760 -> 1824
// (+3.6 %), Q4_K 2304 -> 2368 (+2.8 %: scales unpacked to bytes), Q5_K 2816 -> 2880 (+2.3 %), Q6_K 3360 ->
// 3392 (+1 %), IQ4_XS 2176 -> 2240 (+2.9 %); counted in bytes().
struct KPack {
  int ggml_type = -1;
  int64_t rows = 0, cols = 0;
  int64_t sb_bytes = 0;
  std::shared_ptr<uint8_t> data;  // [ceil(rows/16), cols/256, sb_bytes], 64-byte aligned
  size_t bytes() const { return static_cast<size_t>((rows + 15) / 16 * (cols / 256) * sb_bytes); }
};
bool kpack_supported(int ggml_type, int64_t cols);  // Q2_K .. Q6_K, IQ4_XS with whole super-blocks
// Columns per scale step of a KPack type's sub-blocks: 32 (Q4_K, Q5_K, IQ4_XS) or 16 (Q2_K, Q3_K, Q6_K).
inline int kpack_sub_block_cols(int ggml_type) {
  return ggml_type == ggml::Q4_K || ggml_type == ggml::Q5_K || ggml_type == ggml::IQ4_XS ? 32 : 16;
}
// GGUF types with a row-at-a-time VNNI kernel against Q8-rounded activations (Q4_0 .. Q8_0 in
// matmul_avx512_q.cpp, the k-quants Q2_K..Q6_K in matmul_avx512_k.cpp). IQ4_XS has none: held as rows it
// decodes on a per-call KPack.
bool ggml_q8_row_kernel(int ggml_type);
std::shared_ptr<const KPack> build_kpack(int ggml_type, const uint8_t* data, int64_t row_bytes, int64_t rows,
                                         int64_t cols);
// Layout fields without data, and one 16-row block of the pack from nr <= 16 GGUF rows (as pack_qblk_block).
KPack kpack_layout(int ggml_type, int64_t rows, int64_t cols);
void pack_kpack_block(const KPack& p, const uint8_t* const* rows, int nr, uint8_t* base);
// Row r of the pack, dequantized (the packer's oracle: equals the GGUF row decoder bit for bit).
void kpack_row_f32(const KPack& p, int64_t r, float* out);

// Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL / MXFP4 with whole 32-element blocks.
bool qblk_supported(int ggml_type, int64_t cols);
std::shared_ptr<const QBlkPack> build_qblk_pack(int ggml_type, const uint8_t* data, int64_t row_bytes,
                                                int64_t rows, int64_t cols);
// The pack's layout fields for a type and shape, without data.
QBlkPack qblk_layout(int ggml_type, int64_t rows, int64_t cols);
// One 16-row block of the pack (layout p) at base [cols/32 * block_bytes], from nr <= 16 GGUF rows (rows[i]:
// row i's blocks); rows nr..15 are zero. build_qblk_pack runs it per block at load; prefill of a weight
// without a load-time pack runs it per block and call (a transient pack, kernels/matmul_ggml.cpp).
void pack_qblk_block(const QBlkPack& p, const uint8_t* const* rows, int nr, uint8_t* base);
// Row r of the pack, dequantized (the test oracle of the packer: equals the GGUF row decoder bit for bit).
void qblk_row_f32(const QBlkPack& p, int64_t r, float* out);

namespace kern {
// Decode (one token) reads rows of more than this many bytes one after another, as one stream, instead of the
// four-row tiles' four interleaved streams, which the hardware prefetchers follow worse once four rows span
// more than a 4 KiB page (nib16 / byte16, W8A8 VNNI, GGUF Q4_0 / Q8_0 rows; the dense kernels always do).
// DRAM-cold, 2 threads, Qwen2.5-0.5B ffn_down (896 x 4864): int4:g128 103.6 -> 76.6 us, int8 195 -> 148, W8A8
// 269 -> 211, Q4_0 125 -> 84, Q8_0 222 -> 162; 1 KiB rows stay on the tiles (docs/kernels.md, "One stream per
// thread").
constexpr int64_t kSeqRowBytes = 1024;

// An E8M0 scale cell (MX formats): 2^(e - 127).
struct E8m0Cell {
  uint8_t e;
};
// An E4M3 scale cell (NVFP4), read as the binary16 whose bits are c << 7 (c < 0x7F: sign clear, not NaN):
// that is e4m3(c) / 2^8 exactly (normal and subnormal), so a product over these cells is scaled by 2^8 /
// global once.
struct E4m3Cell {
  uint8_t c;
};
// The byte route's 256 code values as BF16 in low / high byte planes (the byte16 kernel's vpermi2b tables).
struct Byte16Lut {
  alignas(64) uint8_t lo[256];
  alignas(64) uint8_t hi[256];
  bool sign_magnitude = false;  // code 128 + i = -(code i) (FP8): the kernel reads only the first half
};
}  // namespace kern

// W8A8 prefill layout for AMX-INT8 (kernels/amx_tiles.h): per 16-row block and 64-column K tile one 1 KiB B
// tile,
//   tiles[(rb * kp / 64 + kt) * 1024 + 64 kk + 4 n + i] = w[16 rb + n][64 kt + 4 kk + i]   (signed int8)
// rows padded to 16 and columns to kp (a multiple of 64) with 0.
struct AmxInt8Pack {
  int64_t rows = 0, cols = 0, kp = 0;
  std::vector<int8_t> tiles;  // [ceil(rows/16), kp/64, 16, 64]
  size_t bytes() const { return tiles.size(); }
};

struct KernelPlan {
  Route route = Route::Deq;
  int bits = 0;
  int ggml_type = -1;  // GgmlQ8: 2 = Q4_0, 8 = Q8_0, 12 = Q4_K, 13 = Q5_K, 14 = Q6_K
  ByteDec byte_dec = ByteDec::Int8Sym;
  bool int_codes = false;     // INT4 / INT8 codes: eligible for INT8-activation VNNI products
  bool asym = false;          // INT with stored zero points
  bool vnni_ok = false;       // group layout fits the VNNI lane mapping (see matmul_avx512.cpp)
  int64_t group = 0;          // columns per scale cell (grid.col_block)
  int64_t row_block = 1;      // rows per scale cell
  int64_t gcols = 0;          // scale cells per grid row
  std::vector<float> scales;  // [grid.rows, gcols] effective scales
  std::vector<float> zeros;   // [grid.rows, gcols] zero points as float (INT asym), empty otherwise
  std::vector<float> lut;     // [2^bits] code -> element value (INT sym: u - 2^(b-1); INT asym: u)
  // The stored cells themselves, which the nib16 decode reads instead of the FP32 tables above (2 + 1 bytes
  // per cell instead of 4 + 4: INT4 g32 asym reads 4.75 bits per weight instead of 6), set when the stored
  // scales are f16 that decode exactly to `scales` (not NF4's double quantization, not NVFP4's global scale).
  // They point into the QuantizedMatrix, which every weight holding this plan keeps alive. Null otherwise.
  const uint16_t* scales_f16 = nullptr;  // [grid.rows, gcols] binary16 bits
  const uint8_t* zeros_u8 = nullptr;     // [grid.rows, gcols] (asymmetric INT)
  // [grid.rows, gcols] MXFP4 / MX E2M1: the stored exponents (none 0 or 255)
  const kern::E8m0Cell* scales_e8m0 = nullptr;
  // NVFP4: the stored E4M3 cells and the factor 2^8 / global_scale the products over them are multiplied by
  // (one rounding more than the FP32 table, whose cells are e4m3 / global: not the same bits, within the
  // tolerance).
  const kern::E4m3Cell* scales_e4m3 = nullptr;
  float e4m3_post = 1.0f;
  // Codebook route: the stored tables [rows, 2^bits] binary16 (QuantizedMatrix::scales), read as they are.
  const uint16_t* codebook_f16 = nullptr;

  // Built on the first INT8-activation prefill of a per-channel symmetric INT8 weight (int8_tile()); a
  // repacked copy of the codes, so it is counted here once it exists.
  mutable std::shared_ptr<const Int8Tile> tile;
  // The same weight laid out for AMX-INT8 tiles, built instead of `tile` when the AMX kernel serves the
  // prefill.
  mutable std::shared_ptr<const AmxInt8Pack> amx;
  // GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL / MXFP4 repacked at load (prepare_weight); serves every
  // product of the weight on AVX-512, so the GGUF rows themselves are then only read for embedding lookups
  // (WeightMatrix::nbytes counts the pack).
  std::shared_ptr<const QBlkPack> qblk;
  // GGUF Q4_K / Q5_K / Q6_K repacked at load, likewise.
  std::shared_ptr<const KPack> kpack;
  // A load-time pack serves this (GGUF) weight's products.
  bool load_pack() const { return qblk || kpack; }
  // Byte route on a CPU with the Avx512Bf16 tier, lane-compatible groups and every code value exact in BF16:
  // the byte16 decode kernel's table (built with the plan, so no product rebuilds it).
  std::shared_ptr<const kern::Byte16Lut> byte16;

  size_t bytes() const {
    return (scales.size() + zeros.size() + lut.size()) * sizeof(float) + (tile ? tile->bytes() : 0) +
           (amx ? amx->bytes() : 0) + (qblk ? qblk->bytes() : 0) + (kpack ? kpack->bytes() : 0) +
           (byte16 ? sizeof(kern::Byte16Lut) : 0);
  }
  const float* scale_row(int64_t r) const { return scales.data() + (r / row_block) * gcols; }
  const float* zero_row(int64_t r) const {
    return zeros.empty() ? nullptr : zeros.data() + (r / row_block) * gcols;
  }
};

// repack: build the load-time repacked layout where one exists (QBlkPack); false for tables that are only
// read row by row (an untied embedding).
std::shared_ptr<const KernelPlan> build_kernel_plan(const WeightMatrix& w, bool repack = true);
const KernelPlan& kernel_plan(const WeightMatrix& w);  // w.plan, or a cached plan built on first use

// The W8A8 prefill tile of w (built once, thread-safe), or nullptr when w is not per-channel symmetric INT8.
const Int8Tile* int8_tile(const WeightMatrix& w, const KernelPlan& p);
// W8A8 per-channel symmetric INT8 weight (what int8_tile and amx_int8_pack serve).
bool w8a8_per_channel(const WeightMatrix& w, const KernelPlan& p);
// Its AMX layout, built on the first AMX prefill (nullptr if not eligible).
const AmxInt8Pack* amx_int8_pack(const WeightMatrix& w, const KernelPlan& p);

// Fast scalar dequantization of row r using the plan's tables (all routes; bit-identical to weight_row_f32).
// lut: a replacement for the plan's value table (matmul_weight_row), else the plan's.
void deq_row_plan(const WeightMatrix& w, const KernelPlan& p, int64_t r, float* out,
                  const float* lut = nullptr);

namespace kern {
// ---- LUT2/3/4 per-row codebooks (matmul_lut*.cpp): the dot of one row (b-bit codes, its table of 2^b
// binary16 values) with x[cols], and the row decoded into out[cols]. Codes are the LSB-first bit stream of
// qtensor.h; 16 codes take 2b bytes, so every 16-code chunk starts on a byte. ----
float lut_dot_generic(const uint8_t* row, int64_t cols, int bits, const uint16_t* table, const float* x);
void lut_deq_generic(const uint8_t* row, int64_t cols, int bits, const uint16_t* table, float* out);
float lut_dot_avx2(const uint8_t* row, int64_t cols, int bits, const uint16_t* table, const float* x);
void lut_deq_avx2(const uint8_t* row, int64_t cols, int bits, const uint16_t* table, float* out);
float lut_dot_avx512(const uint8_t* row, int64_t cols, int bits, const uint16_t* table, const float* x);
// nr <= 4 rows at once (shared activation loads, independent chains): out[r] = row r . x.
void lut_dot4_avx512(const uint8_t* const* rows, int nr, int64_t cols, int bits,
                     const uint16_t* const* tables, const float* x, float* out);
// The row decode on the Avx512Bf16 tier (VBMI: one vpmultishiftqb extracts 16 codes; the prefill's FP32 tile
// rows; matmul_lut_avx512bf16.cpp).
void lut_deq_vbmi(const uint8_t* row, int64_t cols, int bits, const uint16_t* table, float* out);
// BF16 form on the Avx512Bf16 tier: the tables rounded to BF16, x as BF16 (xb: lut_bf16_activations, zero up
// to a multiple of 32 columns); 32 weights per vpermw + vdpbf16ps.
void lut_dot4_bf16(const uint8_t* const* rows, int nr, int64_t cols, int bits, const uint16_t* const* tables,
                   const uint16_t* xb, float* out);
void lut_bf16_activations(const float* x, int64_t cols, uint16_t* xb);
void lut_deq_avx512(const uint8_t* row, int64_t cols, int bits, const uint16_t* table, float* out);

// ---- generic / AVX2 ----
float dot_f32_generic(const float* a, const float* b, int64_t n);
float dot_f32_avx2(const float* a, const float* b, int64_t n);
// y[t * ystride + i] = w[i] . x[t] for nr <= 16 FP32 rows w[i] of n columns and T tokens x [T, n]
// (matmul_avx2.cpp): the AVX2 tier's prefill of decoded rows, 4-row x 3-token register tiles over 256-column
// chunks, each token triple's chunk shared by the row groups. The bits depend on neither nr nor T.
void rows_gemm_f32_avx2(const float* const* w, int nr, const float* x, int64_t T, int64_t n, float* y,
                        int64_t ystride);
// GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 (and Q4_K / Q6_K) rows against Q8 blocks of 32 on the AVX2 tier
// (matmul_avx2_q8.cpp):
// the same contracts as quantize_q8_blocks_avx512 (bit-identical to quantize_q8_blocks), ggml_q8_dot_avx512
// and ggml_q8_dot4_avx512 (Q4_0 / Q8_0).
// 8-bit code rows of the byte route on the AVX2 tier: byte_dot_avx512 / byte_deq_avx512's contracts.
float byte_dot_avx2(const uint8_t* row, int64_t cols, int64_t group, const float* s, const float* z,
                    ByteDec dec, const float* x);
void byte_deq_avx2(const uint8_t* row, int64_t cols, int64_t group, const float* s, const float* z,
                   ByteDec dec, float* out);
// sum_i w[i] x[i] for an F16 (bf16 false) or BF16 row on the AVX2 tier (matmul_avx2.cpp).
float dot_half_avx2(const uint16_t* w, bool bf16, const float* x, int64_t n);
// 4-bit code rows of the nib route on the AVX2 tier (matmul_avx2.cpp): nib_dot_avx512 / nib_deq_avx512's
// contracts (groups of 16k columns or one group; lut16: the plan's 16 values).
float nib_dot_avx2(const uint8_t* row, int64_t cols, int64_t group, const float* s, const float* z,
                   const float* lut16, const float* x);
void nib_deq_avx2(const uint8_t* row, int64_t cols, int64_t group, const float* s, const float* z,
                  const float* lut16, float* out);
// The INT4 formats' decode (a linear table, lut16[u] = l0 + u; groups of 32k columns or one group:
// nib_linear_ok): the token laid out once per call (xl [cols]: per 32 columns the 16 even ones, then the 16
// odd ones; xsum [groups] its group sums), then nib_dot_linear_avx2 per row, nib_dot_avx2's value.
bool nib_linear_ok(const float* lut16, int64_t group, int64_t cols);
void nib_linear_layout_avx2(const float* x, int64_t cols, int64_t group, float* xl, float* xsum);
float nib_dot_linear_avx2(const uint8_t* row, int64_t cols, int64_t group, const float* s, const float* z,
                          float l0, const float* xl, const float* xsum);
bool ggml_q8_avx2_supported(int ggml_type);
void quantize_q8_blocks_avx2(const float* x, int64_t n, int8_t* q, float* d);
// GGUF Q4_K / Q6_K rows on the AVX2 tier against the same Q8 blocks; bsum [cols / 32] their code sums.
bool ggml_k_avx2_supported(int ggml_type);
float ggml_k_dot_avx2(int ggml_type, const uint8_t* row, int64_t cols, const int8_t* qx, const float* dx,
                      const int32_t* bsum);
float ggml_q8_dot_avx2(int ggml_type, const uint8_t* row, int64_t cols, const int8_t* qx, const float* dx);
void ggml_q8_dot4_avx2(int ggml_type, const uint8_t* const* rows, int64_t cols, const int8_t* qx,
                       const float* dx, float* out);

// ---- AVX-512 (matmul_avx512.cpp / matmul_avx512_q.cpp) ----
float dot_f32_avx512(const float* a, const float* b, int64_t n);
// Row helpers of attention: out[i] = widen(h[i]) for F16 / BF16, y[i] += a * x[i].
void widen_f16_generic(const uint16_t* h, float* out, int64_t n);
void widen_f16_avx2(const uint16_t* h, float* out, int64_t n);
void widen_f16_avx512(const uint16_t* h, float* out, int64_t n);
void widen_bf16_generic(const uint16_t* h, float* out, int64_t n);
void widen_bf16_avx512(const uint16_t* h, float* out, int64_t n);
void widen_fp8_avx512(const uint8_t* codes, bool e4m3, float scale, float* out, int64_t n);
void axpy_f32_generic(float a, const float* x, float* y, int64_t n);
void axpy_f32_avx2(float a, const float* x, float* y, int64_t n);
void axpy_f32_avx512(float a, const float* x, float* y, int64_t n);
void silu_mul_f32_avx512(float* g, const float* u, int64_t n);
// y[t*ystride + i] = w[i,:] . x[t,:] for i < nr, t < T; w: [nr, cols] float rows (stride cols).
void gemm_rows_f32_avx512(const float* w, int64_t nr, int64_t cols, const float* x, int64_t T, float* y,
                          int64_t ystride);
// Fused dot products of one code row with one float token x[cols]. s / z: the row's scale (zero) cells.
float nib_dot_avx512(const uint8_t* row, int64_t cols, int64_t group, const float* s, const float* z,
                     const float* lut16, const float* x);
float byte_dot_avx512(const uint8_t* row, int64_t cols, int64_t group, const float* s, const float* z,
                      ByteDec dec, const float* x);
// Activations of one token for a lane-major decode kernel: act [padded cols] in the kernel's layout (float
// for nib, BF16 bits for nib16 / byte16), zero-padded; gsum [ceil(cols/group)] the token's sum over each
// scale group (asymmetric weights only, else null).
template <typename E>
struct LaneX {
  const E* act = nullptr;
  const float* gsum = nullptr;
};
// Float-activation 4-bit GEMV (T = 1..3) over several rows (matmul_avx512_q.cpp). nib_layout permutes each
// 128-element chunk so that act[128c+16k+l] = x[128c+8l+k].
using NibX = LaneX<float>;
// gsum[j] = the token's sum over scale group j (x[cols], groups of `group`), in double: z_g s_g X_g cancels
// against the float sum of u * x, so X_g must not add a float-order error that grows with the group size
// (per-channel groups are a whole row). bf16: sum the BF16-rounded values the BF16-activation kernels
// multiply.
void group_sums(const float* x, int64_t cols, int64_t group, bool bf16, float* gsum);
bool nib_lanes_ok(int64_t group, int64_t cols);  // every 8-element lane inside one group, regular per chunk
int64_t nib_padded(int64_t cols);
void nib_layout(const float* x, int64_t cols, int64_t group, float* xp, float* gsum);
// y[t*ystride + i] = row i . x[t] for i < nr, t < T; rows[i], s[i], z[i] (z[i] all null for sym): row i's
// codes, scale and zero cells.
void nib_gemv_avx512(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                     int64_t cols, int64_t group, const float* lut16, int T, const NibX* x, float* y,
                     int64_t ystride);
void nib_deq_avx512(const uint8_t* row, int64_t cols, int64_t group, const float* s, const float* z,
                    const float* lut16, float* out);
// The same GEMV with BF16 activations on the Avx512Bf16 tier (matmul_avx512bf16.cpp, where the layouts are
// described): act [nib_padded(cols)] rounded to BF16 in the kernel's pair layout, gsum summing the BF16
// values.
using Bf16X = LaneX<uint16_t>;
// The 16-entry value table as BF16 (round to nearest even), twice (32 entries, the vpermw table). Exact for
// INT4 and E2M1; NF4's values round by up to 2^-9 relative (nib16_table_exact; matmul_weight_row is the
// oracle).
struct Nib16Lut {
  alignas(64) uint16_t v[32];
};
// From the n <= 16 values of a plan's table (INT2 / INT3: 4 / 8; the entries past n are 0, never indexed).
void nib16_make_lut(const float* lut, size_t n, Nib16Lut& out);
bool nib16_table_exact(const float* lut16);  // every value of the 16-entry table exact in BF16
void nib16_layout(const float* x, int64_t cols, int64_t group, uint16_t* xb, float* gsum);
// 8-bit codes (byte route) with BF16 activations on the same tier: a 256-entry BF16 table as low / high byte
// planes; act [byte16_padded(cols)] in the kernel's layout, gsum as above (asym INT8).
int64_t byte16_padded(int64_t cols);
bool byte16_lanes_ok(int64_t group, int64_t cols);          // per-channel, groups of 16 / 32 / k*64
bool byte16_make_lut(const float* lut256, Byte16Lut& out);  // false when a value is not exact in BF16
void byte16_layout(const float* x, int64_t cols, int64_t group, uint16_t* xb, float* gsum);
void byte16_gemv_avx512bf16(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                            int64_t cols, int64_t group, const Byte16Lut& lut, int T, const Bf16X* x,
                            float* y, int64_t ystride);
// An INT2 / INT3 row (bits 2 / 3) in the 4-bit nib layout: out [ceil(cols / 128) * 64] bytes, byte m = code
// 2m | code 2m + 1 << 4 (the BF16 prefill tile's input for these formats); a 6-bit row (FP6) as one code per
// byte: out [ceil(cols / 64) * 64] (the byte16 kernels' input).
void widen_codes_avx512bf16(const uint8_t* row, int64_t cols, int bits, uint8_t* out);
// S, Z: the scale / zero cells the kernel reads: the plan's FP32 tables (float, float), or the stored cells
// (KernelPlan::scales_f16 + zeros_u8: uint16_t, uint8_t; scales_e8m0 / scales_e4m3: E8m0Cell / E4m3Cell,
// float). Instantiated for those four pairs (matmul_avx512bf16.cpp). bits: 4 (the nib formats), or 2 / 3
// (INT2 / INT3 bit streams, widened to the 4-bit layout in registers; lut: the 2^bits values, padded to 16).
template <typename S, typename Z>
void nib16_gemv_avx512bf16(int nr, const uint8_t* const* rows, const S* const* s, const Z* const* z,
                           int64_t cols, int64_t group, int bits, const Nib16Lut& lut, int T, const Bf16X* x,
                           float* y, int64_t ystride);
void byte_deq_avx512(const uint8_t* row, int64_t cols, int64_t group, const float* s, const float* z,
                     ByteDec dec, float* out);
// Weight-only prefill with BF16 activations (matmul_avx512bf16_tile.cpp): y[t*ystride + i] = row i . x[t] for
// nr <= 16 rows and T tokens. Exactly one of nib (4-bit codes) / byte (8-bit codes through the byte16
// planes); xb [T][xstride] the BF16-rounded activations zero-padded to an even count, gsum [T][groups] their
// group sums (asymmetric weights: z[i] non-null). Groups must be even or span the row.
void bf16_tile_avx512bf16(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                          int64_t cols, int64_t group, const Nib16Lut* nib, const Byte16Lut* byte,
                          const uint16_t* xb, int64_t xstride, const float* gsum, int T, float* y,
                          int64_t ystride);

// The same tile's per-call layout of one 16-row block (per-thread buffers): wb [ceil(pairs / 16) * 16][16]
// pair-major words (value(row i, 2kp), value(row i, 2kp + 1)), zero past the row; sv [groups][16] the rows'
// scales; zs [groups][16] z * s (null for symmetric weights). Returns the number of groups.
int64_t bf16_block_layout(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                          int64_t cols, int64_t group, const Nib16Lut* nib, const Byte16Lut* byte,
                          const uint32_t** wb, const float** sv, const float** zs);
// The weight-only prefill on AMX-BF16 tiles (amx_tiles.h, amx_bf16_block16): bf16_tile_avx512bf16's
// arguments and arithmetic (exact BF16 code values x BF16 activations, FP32 accumulation, group scales in
// FP32) with xb and gsum holding T rounded up to 16 tokens (zero padding); the products are summed in the
// tile unit's order, not the register tile's. amx_bf16_pairs: the pairs per tile product for the weight's
// groups (16 per channel or for groups of whole 32 columns, the group's pairs for groups of 16 or 8 columns),
// 0 where the kernel does not apply.
int amx_bf16_pairs(int64_t group, int64_t cols);
void amx_bf16_tiles(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                    int64_t cols, int64_t group, const Nib16Lut* nib, const Byte16Lut* byte,
                    const uint16_t* xb, int64_t xstride, const float* gsum, int T, float* y, int64_t ystride);
void amx_bf16_emulated(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                       int64_t cols, int64_t group, const Nib16Lut* nib, const Byte16Lut* byte,
                       const uint16_t* xb, int64_t xstride, const float* gsum, int T, float* y,
                       int64_t ystride);
// INT8 activations for the VNNI kernels, one token: codes laid out for the weight's bits (bits 8: natural
// order padded to 64; bits 4: per 128-element chunk the 64 even then the 64 odd elements), plus per-chunk
// lane sums (16 int32 per chunk: lane l sums the activation codes that meet weight lane l).
struct QxRow {
  const int8_t* q = nullptr;
  const int32_t* lanesum = nullptr;
  float scale = 0.0f;
};
int64_t qx_padded(int bits, int64_t cols);  // bytes of q per token
int64_t qx_chunks(int bits, int64_t cols);  // chunks per token (16 lane sums each)
void qx_layout_avx512(int bits, const int8_t* natural, int64_t cols, int8_t* q, int32_t* lanesum);
// quantize_activation_row(INT8, x, n, 0, codes, scale) bit for bit, vectorized; int8_act_codes_avx512: the
// codes for a given scale s > 0 (static activation scales).
void quantize_activation_int8_avx512(const float* x, int64_t n, int8_t* codes, float* scale);
void int8_act_codes_avx512(const float* x, int64_t n, float s, int8_t* codes);
// quantize_activation_int4 (kernels/matmul.h) bit for bit, vectorized.
void quantize_activation_int4_avx512(const float* x, int64_t n, float clip, int8_t* codes, float* scale);
// out[i] = rows[i] . x for nr rows (row i's codes, scale cells s[i], zero cells z[i], null for symmetric),
// four rows at a time, the tail one by one.
void vnni_rows_avx512(int bits, int nr, const uint8_t* const* rows, int64_t cols, int64_t group,
                      const float* const* s, const float* const* z, const QxRow& x, float* out);

// W8A8: per-channel INT8 codes -> the Int8Tile layout.
void pack_int8_rows16(const uint8_t* codes, int64_t row_bytes, int64_t rows, int64_t cols, int8_t* out,
                      int32_t* rowsum);
// y[t, r] for rows [r0, r1) (r0 a multiple of 16) and all T tokens: xu [T, ceil(cols/4)*4] activations + 128
// (u8), sx [T] their scales, wscale [rows] the weight scales.
void vnni_tile_int8_avx512(const int8_t* packed, const int32_t* rowsum, const float* wscale, int64_t r0,
                           int64_t r1, int64_t rows, int64_t cols, const uint8_t* xu, const float* sx,
                           int64_t T, float* y);
// INT4 / INT8 codes (any group that is per-channel or a multiple of 4, sym or asym) with INT8 activations,
// prefill (matmul_avx512_tile.cpp): nr <= 16 rows (codes, per-row scale / zero cells: zero null = symmetric
// around zoff), xq [T, xstride] signed INT8 activations (xstride = cols rounded up to 64, zero padding),
// xg [T, ng] their sums per scale group, sx [T] their scales; y[t * ystride + i] for the block's rows i.
void vnni_block_avx512(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                       int bits, int zoff, int64_t cols, int64_t group, const int8_t* xq, int64_t xstride,
                       const int32_t* xg, int64_t ng, const float* sx, int T, float* y, int64_t ystride);
// INT4 codes x NVFP4 activations on the AVX-512 tiers, prefill (f4vnni16, matmul_avx512_tile.cpp;
// per-channel or groups of whole 16-column blocks: f4_block_avx512_ok): vnni_block_avx512's layout and
// arguments, with xq the activations as c = 2 * E2M1 value (natural order, xstride a multiple of 64, zero
// padding), beta [T, bstride] the E4M3 block scales / 2 per 16 columns, xz [T, ng] the sum over a group's
// blocks of beta_b * (sum of the block's c); the outputs are y / g (the caller multiplies by each token's
// global scale). f4_rows_avx512 (decode) takes the same arguments, with xq in f4_rows_layout's order (per 128
// columns the 64 even ones, then the 64 odd ones; xs a multiple of 128), and gives a token the same bits as
// the tile.
bool f4_block_avx512_ok(int64_t group, int64_t gcols);
void f4_rows_layout(const int8_t* c, int64_t xs, int8_t* out);
void f4_rows_avx512(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                    int zoff, int64_t cols, int64_t group, int64_t ng, const int8_t* xq, int64_t xstride,
                    const float* beta, int64_t bstride, const float* xz, int T, float* y, int64_t ystride);
void f4_block_avx512(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                     int zoff, int64_t cols, int64_t group, int64_t ng, const int8_t* xq, int64_t xstride,
                     const float* beta, int64_t bstride, const float* xz, int T, float* y, int64_t ystride);
// The same products on the AVX2 tier (matmul_avx2_int.cpp; groups per-channel or of whole 32-column chunks:
// i8dot_avx2_ok). Decode, i8dot_rows_avx2: T tokens, xl [T, xstride] activation codes in the decode layout of
// i8x_layout_avx2 (bits 8: natural order; bits 4: per 64 columns the 32 even ones, then the 32 odd ones, or
// per 32 columns 16 and 16 where the groups are not whole 64-column chunks; zero padding to i8x_padded), xg
// [T, ng] their sums per scale group, sx [T] their scales; y[t * ystride + i] for rows i < nr. Prefill,
// i8dot_block_avx2: vnni_block_avx512's arguments (natural-order xq, xstride a multiple of 64 with zero
// padding). Both give the same bits for a token (the file's header has the formula).
bool i8dot_avx2_ok(int64_t group, int64_t gcols);
// INT4 codes x NVFP4 activations on the AVX2 tier (f4dot / f4dot16, matmul_avx2_int.cpp; per-channel or
// groups of whole 64-column chunks: f4dot_avx2_ok). Activations as c = 2 * E2M1 value (int8), beta
// [T][blocks] = E4M3 block scale / 2, xz [T][ng] = sum over a group's blocks of beta_b * (sum of the block's
// c); the outputs are y / g (the caller multiplies by each token's global scale). Decode: xl in
// i8x_layout_avx2's 64-column layout, bv [T][chunks * 8] the betas of each 64-column chunk's blocks 0, 0, 1,
// 1, 2, 2, 3, 3; prefill: xq natural order (xstride a multiple of 64, zero padding).
bool f4dot_avx2_ok(int64_t group, int64_t gcols);
void f4dot_rows_avx2(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                     int zoff, int64_t cols, int64_t group, int64_t ng, const int8_t* xl, int64_t xstride,
                     const float* bv, int64_t bstride, const float* xz, int T, float* y, int64_t ystride);
void f4dot_block_avx2(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                      int zoff, int64_t cols, int64_t group, int64_t ng, const int8_t* xq, int64_t xstride,
                      const float* beta, int64_t bstride, const float* xz, int T, float* y, int64_t ystride);
// quantize_activation_nvfp4 (kernels/matmul.h) bit for bit, vectorized per full block of 16.
// nvfp4_block_errors (kernels/matmul.h) bit for bit; vectorized with one step per lane (8 at a time) for
// a block of 16 finite values (other blocks go to the scalar one).
void nvfp4_block_errors_avx2(const float* x, int64_t n, const float* d, int nd, float* err);
// The same on AVX-512: lanes 0..7 the 8 steps at an even input, lanes 8..15 at the next odd one
// (act_nvfp4_avx512.cpp).
void nvfp4_block_errors_avx512(const float* x, int64_t n, const float* d, int nd, float* err);
void quantize_activation_nvfp4_avx2(const float* x, int64_t n, float clip, ActScale rule, uint8_t* codes,
                                    uint8_t* block_scales, float* global_scale);
// The INT8 / INT4 activation quantizers on AVX2, bit for bit the scalar ones (as the _avx512 versions).
void quantize_activation_int8_avx2(const float* x, int64_t n, int8_t* codes, float* scale);
void int8_act_codes_avx2(const float* x, int64_t n, float s, int8_t* codes);
void quantize_activation_int4_avx2(const float* x, int64_t n, float clip, int8_t* codes, float* scale);
int64_t i8x_padded(int64_t cols);
void i8x_layout_avx2(int bits, int64_t group, int64_t ng, const int8_t* natural, int64_t cols, int8_t* out);
void i8dot_rows_avx2(int bits, int nr, const uint8_t* const* rows, const float* const* s,
                     const float* const* z, int zoff, int64_t cols, int64_t group, int64_t ng,
                     const int8_t* xl, int64_t xstride, const int32_t* xg, const float* sx, int T, float* y,
                     int64_t ystride);
void i8dot_block_avx2(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                      int bits, int zoff, int64_t cols, int64_t group, const int8_t* xq, int64_t xstride,
                      const int32_t* xg, int64_t ng, const float* sx, int T, float* y, int64_t ystride);
// W8A8 on AMX-INT8 (amx_tiles.h): offset-binary per-channel INT8 codes (u = q + 128) -> AmxInt8Pack.
void pack_amx_int8(const uint8_t* codes, int64_t row_bytes, int64_t rows, int64_t cols, AmxInt8Pack& out);
// y[t, r] for rows [r0, r1) (r0 a multiple of 16) and all T tokens: x [ceil(T/16)*16, pk.kp] signed int8
// activations (zero padding), sx [T] their scales, wscale [rows]. amx_w8a8_tiles runs the tile instructions
// (only on the Amx tier); amx_w8a8_emulated the scalar model of them (any CPU; tests).
void amx_w8a8_tiles(const AmxInt8Pack& pk, int64_t r0, int64_t r1, const int8_t* x, const float* sx,
                    const float* wscale, int64_t T, float* y);
void amx_w8a8_emulated(const AmxInt8Pack& pk, int64_t r0, int64_t r1, const int8_t* x, const float* sx,
                       const float* wscale, int64_t T, float* y);
// GGUF QBlkPack types on AMX-INT8 tiles (amx_qblk.h), prefill: y[t, r] for rows [r0, r1) (r0 a multiple of
// 16), all T tokens; q [Tp, cols] Q8 activation codes, dx [cols/32, Tp] their block scales, xs [cols/32, Tp]
// the blocks' code sums (read for Q4_1 / Q5_1 only), Tp = T rounded up to 16 with zero padding. The same bits
// as qblk_gemm_avx512. amx_qblk_tiles: the tile instructions (Amx tier only); amx_qblk_emulated: the scalar
// model of them (AVX-512 CPUs; tests). block: one 16-row block packed per call (pack_qblk_block's output for
// rows [r0, r1), p its layout without data), read instead of p's load-time data.
void amx_qblk_tiles(const QBlkPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                    const int32_t* xs, int64_t T, float* y, const uint8_t* block = nullptr);
void amx_qblk_emulated(const QBlkPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                       const int32_t* xs, int64_t T, float* y, const uint8_t* block = nullptr);
// GGUF k-quants on AMX-INT8 tiles (amx_kpack.h), prefill, as above: dx [cols/32, Tp], s [nsub, Tp] the code
// sums of each sub-block (32 columns for Q4_K / Q5_K / IQ4_XS, else 16). The same bits as kpack_gemm_avx512.
// block: as for amx_qblk_tiles (pack_kpack_block's output).
void amx_kpack_tiles(const KPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                     const int32_t* s, int64_t T, float* y, const uint8_t* block = nullptr);
void amx_kpack_emulated(const KPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                        const int32_t* s, int64_t T, float* y, const uint8_t* block = nullptr);
// INT4 / INT8 codes with INT8 (or INT4) activations on AMX-INT8 tiles (amx_tiles.h, amx_block16), prefill:
// vnni_block_avx512's arguments, with xq, xg and sx holding T rounded up to 16 tokens (zero padding), and
// the same bits. amx_block_kw: the tile width in columns for the weight's
// scale groups (per-channel: 64; groups: the largest multiple of 4 up to 64 that divides the group, with
// whole groups only), 0 where the kernel does not apply. vnni_block_layout: one 16-row block in the VNNI
// tile's per-call layout ([kq][16 rows][4 columns] unsigned codes, columns padded with 0 to a multiple of
// 64; a per-thread buffer) and its scale / zero cells per group (sv, zv: 16 per group).
int amx_block_kw(int64_t group, int64_t gcols, int64_t cols);
const uint8_t* vnni_block_layout(int nr, const uint8_t* const* rows, const float* const* s,
                                 const float* const* z, int bits, int zoff, int64_t cols, int64_t ng,
                                 float** sv, int32_t** zv);
void amx_block_tiles(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                     int bits, int zoff, int64_t cols, int64_t group, const int8_t* xq, int64_t xstride,
                     const int32_t* xg, int64_t ng, const float* sx, int T, float* y, int64_t ystride);
void amx_block_emulated(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                        int bits, int zoff, int64_t cols, int64_t group, const int8_t* xq, int64_t xstride,
                        const int32_t* xg, int64_t ng, const float* sx, int T, float* y, int64_t ystride);
// Activations in Q8 blocks of 32 for the QBlkPack kernel: q [T, cols] int8, dx [T, cols/32] block scales, xo
// [T, cols/32] = -offset * (sum of the block's codes), the weight offset folded in exactly.
// y[t, r] for rows [r0, r1) (r0 a multiple of 16), all T tokens.
void qblk_gemm_avx512(const QBlkPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                      const int32_t* xo, int64_t T, float* y);
// The same kernel on one 16-row block held elsewhere (base: pack_qblk_block's output for rows r..r+nr-1 of a
// weight whose outputs have row stride ystride).
void qblk_block_gemm_avx512(const QBlkPack& p, const uint8_t* base, int64_t r, int nr, const int8_t* q,
                            const float* dx, const int32_t* xo, int64_t T, float* y, int64_t ystride);
// The KPack kernel: q [T, cols] int8 Q8 blocks of 32, dx [T, cols/32] their scales, s16 [T, cols/16] the sums
// of the codes per 16 columns. y[t, r] for rows [r0, r1) (r0 a multiple of 16), all T tokens.
void kpack_gemm_avx512(const KPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                       const int32_t* s16, int64_t T, float* y);
// The same kernel on one 16-row block held elsewhere (base: pack_kpack_block's output for rows r..r+nr-1; the
// output row stride is p.rows).
void kpack_block_gemm_avx512(const KPack& p, const uint8_t* base, int64_t r, int nr, const int8_t* q,
                             const float* dx, const int32_t* s16, int64_t T, float* y);
// The QBlkPack kernel on the AVX2 tier (matmul_avx2_qblk.cpp): the same contract as qblk_gemm_avx512 /
// qblk_block_gemm_avx512 (activations from quantize_q8_blocks_avx2); Q8_0 / IQ4_NL / MXFP4 take signed
// weights and do not read xo.
void qblk_gemm_avx2(const QBlkPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                    const int32_t* xo, int64_t T, float* y);
void qblk_block_gemm_avx2(const QBlkPack& p, const uint8_t* base, int64_t r, int nr, const int8_t* q,
                          const float* dx, const int32_t* xo, int64_t T, float* y, int64_t ystride);
// The KPack kernel on the AVX2 tier (matmul_avx2_kpack.cpp): kpack_gemm_avx512's contract (activations from
// quantize_q8_blocks_avx2).
void kpack_gemm_avx2(const KPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                     const int32_t* s16, int64_t T, float* y);
// quantize_q8_blocks (kernels/matmul.h) with AVX-512: the same float operations, so bit-identical.
void quantize_q8_blocks_avx512(const float* x, int64_t n, int8_t* q, float* d);
// GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 rows as stored (weights without a QBlkPack) against activations
// quantized to Q8 blocks of 32 (qx int8, dx one scale per block).
float ggml_q8_dot_avx512(int ggml_type, const uint8_t* row, int64_t cols, const int8_t* qx, const float* dx);
// The same, the row read as one stream with enough independent work for long rows (Q4_0: four blocks per
// zmm).
float ggml_q8_dot1_avx512(int ggml_type, const uint8_t* row, int64_t cols, const int8_t* qx, const float* dx);
// The same for four Q4_0 (ggml type 2) or Q8_0 (8) rows at once: out[i] = rows[i] . x.
void ggml_q8_dot4_avx512(int ggml_type, const uint8_t* const* rows, int64_t cols, const int8_t* qx,
                         const float* dx, float* out);

// GGUF k-quants (matmul_avx512_k.cpp) against the same Q8 blocks of 32, re-laid out per token by
// ggml_k_prep_x: qk[cols] int8 codes in the order the kernel loads them, xk[cols / 256 * ggml_k_xk_floats]
// per-super-block float factors (activation scales and code sums for the min / offset terms).
inline bool ggml_k_supported(int ggml_type) {
  return ggml_type >= 10 && ggml_type <= 14;
}  // Q2_K .. Q6_K
inline int64_t ggml_k_xk_floats(int ggml_type) {
  return ggml_type == ggml::Q4_K || ggml_type == ggml::Q5_K ? 16 : 32;
}
void ggml_k_prep_x(int ggml_type, const float* x, int64_t cols, int8_t* qk, float* xk);
float ggml_k_dot_avx512(int ggml_type, const uint8_t* row, int64_t cols, const int8_t* qk, const float* xk);
}  // namespace kern

}  // namespace lowbit
