// Matrix products with the weight in its storage format. y[t, :] = W · x[t, :] for t in [0, T).
//   x: [T, cols] float32 (row stride cols), y: [T, rows] float32 (row stride rows).
// The kernel is picked per weight from the ISA tier chosen once at start-up (kernels/dispatch.h) and the
// weight's kernel plan (kernels/kernel_plan.h); every kernel is tested against matmul_reference on every ISA
// tier. Dequantization is fused: a kernel never widens more than one row block of the matrix.
//
// Activation routes (WeightMatrix::act_format):
//   F32            weight-only: float activations.
//   INT8           x is quantized per token (symmetric, absmax/127, or act_static_scale when > 0) and
//   multiplied
//                  as integers (AVX-512 VNNI) where the weight codes are INT4/INT8; otherwise emulated
//                  exactly.
//   INT4           x is quantized per token to codes in [-7, 7] (symmetric, scale act_clip * absmax / 7;
//                  quantize_activation_int4) and multiplied as integers on the same VNNI kernels as INT8
//                  (codes widened to bytes; "+a4" in the kernel name) where the weight codes are INT4/INT8;
//                  otherwise (other weight formats, tiers below AVX-512) emulated exactly.
//   E4M3FN / E5M2 / FNUZ   x is quantized per token to FP8 and dequantized, then a float product (exact
//   emulation).
//   NVFP4          x is quantized per token to blocks of 16 E2M1 codes with E4M3 block scales under a dynamic
//                  FP32 per-token global scale (quantize_activation_nvfp4), then a float product for every
//                  weight format (exact emulation; "+a_nvfp4" in the kernel name). The kernels multiply the
//                  unscaled e2m1 * s_b (exact in BF16, so the BF16-activation kernels round nothing) and
//                  scale each token's outputs by its global scale; GGUF weights skip their Q8 activation
//                  blocks (f32tile / deq) so that nothing else rounds x. INT4 weights run integer kernels
//                  instead (f4vnni / f4vnni16 on AVX-512, f4dot / f4dot16 on AVX2: one float step per block).
// GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / Q2_K .. Q6_K weights on AVX-512 additionally quantize activations
// to Q8 blocks of 32 (like llama.cpp; its k-quant kernels use one scale per 256 instead) in decode (T < 4),
// and in prefill too where a pack serves it (load-time, or per call for the QBlkPack / KPack types held as
// rows): results then differ from matmul_reference by that rounding (see quantize_q8_blocks,
// matmul_rounds_to_q8 and docs/kernels.md). From T = 4 tokens on, W8A8 and those GGUF weights run integer
// register tiles (W8A8 from 16 tokens on AMX-INT8 tiles on the Amx tier), the weight-only 4- / 8-bit formats
// the BF16 tile on the Avx512Bf16 tier, every other format dequantize-row-block + dense F32 tiles.
// Weight-only 4-bit (nib route: INT4, NF4, FP4, MXFP4, NVFP4) and 8-bit (byte route: INT8, FP8) weights on
// the Avx512Bf16 tier round the activations to BF16 in decode and prefill: W4A16 / W8A16 with BF16
// activations, products exact, FP32 accumulation (matmul_rounds_to_bf16, docs/kernels.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/weight.h"

namespace lowbit {

// The kernels matmul() chooses from. Which one runs is decided in one place, select_kernel(): matmul() runs
// it, matmul_kernel_name() names it, matmul_rounds_to_bf16 / _q8 and WeightMatrix::decode_bytes read it.
enum class Kernel : uint8_t {
  Deq,                // unfused: a row dequantized into a buffer, then dot products (every tier)
  Dense,              // F32 / F16 / BF16 weights, AVX-512
  VnniGemv,           // INT4 / INT8 codes x INT8 activations, decode
  VnniTile,           // W8A8 per-channel prefill, VNNI register tile
  AmxTile,            // W8A8 per-channel prefill on AMX-INT8 tiles
  AmxTileEmulated,    // the same on the instruction-level emulator (set_amx_emulation)
  AmxQ8Pack,          // GGUF on the load-time pack (QBlkPack / KPack), prefill on AMX-INT8 tiles
  AmxQ8PackEmulated,  // the same on the instruction-level emulator
  AmxQ8PackPerCall,   // GGUF held as rows, prefill on AMX-INT8 tiles over 16-row blocks packed per call
  AmxQ8PackPerCallEmulated,  // the same on the instruction-level emulator
  VnniBlock,         // other INT4 / INT8 codes x INT8 activations, prefill over per-call decoded blocks
  AmxBlock,          // the same blocks on AMX-INT8 tiles (the same bits)
  AmxBlockEmulated,  // the same on the instruction-level emulator
  AmxBf16,           // weight-only prefill (as Bf16Tile) on AMX-BF16 tiles
  AmxBf16Emulated,   // the same on the instruction-level emulator
  F4Row,             // INT4 codes x NVFP4 activation codes, decode by rows
  F4Block,           // the same, prefill on the VnniBlock tile (a token gets the same bits from both)
  F32Tile,           // prefill: 16-row blocks dequantized into the dense FP32 tile
  Q8Row,             // GGUF blocks x Q8 activations, decode by row
  Q8Pack,            // GGUF on the load-time pack (QBlkPack / KPack), decode and prefill
  Q8PackPerCall,     // GGUF prefill on a pack made per call
  NibLane,           // 4-bit codes, lane kernel, FP32 activations (avx512 tier)
  Nib16,             // 4-bit (and INT2 / INT3 widened) codes, lane kernel, BF16 activations
  NibDot,            // 4-bit codes, one fused dot per row (groups the lanes cannot serve)
  Byte16,            // 8-bit codes, lane kernel, BF16 activations
  Fp6Byte16,         // FP6 rows widened per block to bytes, then the byte16 kernel
  ByteDot,           // 8-bit codes, one fused dot per row
  Bf16Tile,          // weight-only prefill on the BF16 tile
  LutBf16,           // LUT2/3/4 per-row codebooks, Avx512Bf16 tier: BF16 tables, vpermw + vdpbf16ps
  LutAvx512,         // LUT2/3/4 per-row codebooks: table in a register, vpermps lookups fused with the FMA
  LutAvx2,           // the same with two vpermps + blend per 8 codes
  LutGeneric,        // the same in scalar code (the generic tier)
  // The AVX2 tier (matmul_avx2*.cpp). Decode: one fused dot per row and token (Q8PackAvx2: per 16 rows);
  // prefill: Q8RowAvx2 the same, Q8PackAvx2 its tile, the others each row decoded / widened once, then dotted
  // with every token.
  Q8RowAvx2,    // GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 x Q8 activations (vpmaddubsw)
  Q8PackAvx2,   // the same types and IQ4_NL / MXFP4 on the load-time QBlkPack, 16 rows x up to 8 tokens per
                // tile
  DenseAvx2,    // F32 / F16 / BF16
  NibAvx2,      // 4-bit codes (the nib route)
  ByteAvx2,     // 8-bit codes (the byte route)
  I8RowAvx2,    // INT4 / INT8 codes x INT8 / INT4 activation codes, decode by row (vpmaddubsw)
  I8BlockAvx2,  // the same, prefill: 8-row halves laid out per call, up to 4 (INT4) / 8 (INT8) tokens per
                // tile
  F4RowAvx2,    // INT4 codes x NVFP4 activation codes, decode by row
  F4BlockAvx2,  // the same, prefill on the I8BlockAvx2 layout, one float step per 16-column block
};
// What a kernel rounds the activations to beyond the weight's activation route. Q8x2: the Q8 kernels with
// the residual pass (set_q8_residual_pass): x rounded to Q8 blocks plus its residual x - q8(x) rounded to Q8
// blocks, i.e. about 16-bit block activations.
enum class ActRounding : uint8_t { None, Bf16, Q8, Q8x2 };
struct KernelChoice {
  Kernel kernel;
  ActRounding rounding;
};
// The kernel matmul(w, ., T, .) runs on the current ISA tier.
KernelChoice select_kernel(const WeightMatrix& w, int64_t T);
const char* kernel_short_name(Kernel k);  // "nib16", "bf16tile", ... (the parts of matmul_kernel_name)

void matmul(const WeightMatrix& w, const float* x, int64_t T, float* y);
// Plain scalar reference: applies the activation route to x (quantize_activations), widens each row to
// float32 and accumulates in double. The test oracle.
void matmul_reference(const WeightMatrix& w, const float* x, int64_t T, float* y);
// Widens row r of w to float32 (out[cols]).
void weight_row_f32(const WeightMatrix& w, int64_t r, float* out);
// The whole matrix as floats [rows, cols], row by row through weight_row_f32.
std::vector<float> weight_to_f32(const WeightMatrix& w);
// The kernels that matmul() runs for this weight on this CPU and the current ISA tier,
// "<format>.<decode kernel>[+<prefill kernel>].<isa>" (the second name when prefill, T >= 4, runs another
// one), e.g. "f32.dense.avx512", "q4_0.q8vnni+q8vnni16.avx512",
// "int4:g128:sym:f16.nib16+bf16tile.avx512bf16", "int4:g128:sym:f16.nib+f32tile.avx512" (prefill: 16-row
// blocks dequantized into the FP32 tile), "nf4:g64:f32.deq.generic",
// "int8:channel:sym:f32+a8.vnni+vnnitile.avx512", "int4:g128:sym:f16+a8.vnni+vnniblock.avx512". ".deq.<isa>"
// is the unfused kernel (a row dequantized into a buffer, then dot products), which `lowbit run` / `bench`
// report as a slow fallback.
std::string matmul_kernel_name(const WeightMatrix& w);

// What the activation route does to x: xq[T, cols] = dequantize(quantize(x)) per w.act_format (copy for F32).
void quantize_activations(const WeightMatrix& w, const float* x, int64_t T, float* xq);
// The same for a dynamic route given by its format, clip and block-scale rule alone (the route reads nothing
// else of a weight but its width): xq[T, cols] as a matrix of `cols` inputs with that route multiplies them.
// Calibration statistics and training's fake quantization use it where no weight exists yet.
void quantize_activations(FormatId act_format, float act_clip, ActScale act_scale, const float* x, int64_t T,
                          int64_t cols, float* xq);
// INT8 route, one token: codes[cols] and the scale used (dynamic absmax/127 or w.act_static_scale).
void quantize_activation_int8(const WeightMatrix& w, const float* x, int8_t* codes, float* scale);
// INT4 route, one token, the definition (scalar): amax = max |x_i| over the finite x_i, s = amax * clip / 7,
// codes = clamp(nearbyint(x / s), -7, 7). As the INT8 route: a NaN input makes the scale NaN and its code 0;
// +-Inf saturates to +-7; no finite non-zero value gives s = 0 and codes 0 (+-7 for infinities). Codes are
// symmetric (-8 is never used) so that code and value tables of the weights' symmetric INT4 match.
void quantize_activation_int4(const float* x, int64_t n, float clip, int8_t* codes, float* scale);
// max |x_i| over the finite x_i of one token, and whether any is NaN: the per-token scale of the INT4 and
// NVFP4 routes (a NaN poisons the token's scale, an Inf saturates).
float finite_absmax(const float* x, int64_t n, bool* has_nan);
// NVFP4 route, one token, the definition (scalar). NVIDIA's NVFP4 takes one FP32 scale per tensor (static, or
// from the tensor's amax); here it is dynamic per token, like the INT4 route's scale:
//   g      = act_clip * amax / (6 * 448), amax = max |x_i| over the finite x_i   (FP32; 6 * 448 = E2M1 max
//            times E4M3 max, so the token's largest block scale lands at the top of E4M3's range)
//   s_b    = e4m3(bmax_b / 6 / g) per block b of 16 consecutive inputs (the last block may be shorter;
//            bmax over its finite values; RNE, saturating at 448: with act_clip < 1 the largest saturate)
//            with ActScale::Amax; with ActScale::Mse (nvfp4_act_block_scale) the E4M3 code among
//            c6 - 2 .. c4 (c6 that code, c4 = e4m3(bmax_b / 4 / g); codes 1 .. 0x7E) with the least squared
//            error of the block's x_hat
//   code_i = e2m1(x_i / (s_b * g))  (RNE, saturating at +-6)
//   x_hat  = e2m1(code_i) * s_b * g  (dequantize_activation_nvfp4; the first product is exact)
// codes[n]: one E2M1 code per byte (low nibble; 0x8 is -0); block_scales[ceil(n / 16)]: E4M3FN codes (sign
// 0); *global_scale: g. Non-finite inputs as the INT4 route: a NaN makes g NaN (the whole token dequantizes
// to NaN) and its code 0; +-Inf codes +-6 (0x7 / 0xF); no finite non-zero value (or amax so small that g
// underflows) gives g = 0 and codes 0 (+-6 for infinities); s_b == 0 (a block of zeros, or one whose bmax is
// at most clip * amax / (448 * 2^10), half E4M3's smallest step) gives codes 0 (+-6 for infinities), so the
// block dequantizes to zeros.
constexpr int kNvfp4ActBlock = 16;
void quantize_activation_nvfp4(const float* x, int64_t n, float clip, ActScale rule, uint8_t* codes,
                               uint8_t* block_scales, float* global_scale);
// The squared errors of one block x[n] at the steps d[nd]: err[k] = S_even + S_odd, the sums over the
// block's finite x_i at even and at odd i, each in order, of e_i^2 with e_i = fma(-e2m1(code(x_i * r_k)),
// d[k], x_i), r_k = 1 / d[k] in float (a product, not the route's x_i / d: a division per input and step
// was most of the search's time; the two differ only where x_i / d is within an ulp of a rounding boundary),
// each term added by one fma (so a vectorized version with one step per lane, or an even and an odd input
// side by side, the same e_i and the same sequential sums gives the same bits).
void nvfp4_block_errors(const float* x, int64_t n, const float* d, int nd, float* err);
using Nvfp4BlockErrors = void (*)(const float* x, int64_t n, const float* d, int nd, float* err);
// A block's E4M3 scale code under `rule` (global scale g > 0, bmax its finite absmax): Amax c6 =
// e4m3(bmax / 6 / g); Mse the code of least error (errs at the steps fp8(code) * g), c6 first, then
// c6 - 2 .. c4 in increasing order, a later code only when strictly smaller (0 stays 0: nothing to fit).
uint8_t nvfp4_act_block_scale(const float* x, int64_t n, float g, float bmax, ActScale rule,
                              Nvfp4BlockErrors errs = nvfp4_block_errors);
void dequantize_activation_nvfp4(const uint8_t* codes, const uint8_t* block_scales, float global_scale,
                                 int64_t n, float* out);
// The NVFP4 route of w over T tokens (x and xq: [T, cols], input order): g == nullptr: xq = x_hat; otherwise
// xq = e2m1 * s_b (x_hat without the global scale, which goes to g[T]): what the kernels multiply.
void quantize_activations_nvfp4(const WeightMatrix& w, const float* x, int64_t T, float* xq, float* g);
// The integer activation routes (INT8, INT4) of w, one token, with the current ISA tier (bit-identical to
// the scalar definitions).
void quantize_activation_codes(const WeightMatrix& w, const float* x, int8_t* codes, float* scale);
// Integer reference of the integer-activation products (INT8 / INT4 activations x symmetric or asymmetric
// INT4 / INT8 weight codes, any group): per token and scale group the exact int64 sum of
// (weight code - zero point) * activation code, then y = sum over groups of double(sum) * weight scale *
// activation scale. The W4A4 / W8A8 kernels' oracle: their integer sums are these, bit for bit; their float
// results differ only by the order of the final float scaling (docs/kernels.md).
void matmul_int_reference(const WeightMatrix& w, const float* x, int64_t T, float* y);
// llama.cpp-style Q8 blocks of 32 (n multiple of 32): d[b] = absmax/127, q = RNE(x/d) (0 when d == 0).
void quantize_q8_blocks(const float* x, int64_t n, int8_t* q, float* d);
// True when matmul(w, ., T, .) rounds activations to Q8 blocks in one pass (the GGUF types above on AVX-512:
// decode, and prefill for weights repacked at load; on AVX2 the q8dot / q8dot16 kernels).
bool matmul_rounds_to_q8(const WeightMatrix& w, int64_t T);
// The Q8 kernels' residual pass (process-wide; off by default, as llama.cpp computes): each token's
// activations x go in as two tokens, q8(x) and r = x - q8(x), whose products are added, so the kernels see
// q8(x) + q8(r): the rounding error of 8-bit blocks (up to 1/254 of the block's largest |x|) shrinks
// ~254-fold for about twice the integer work (prefill) and a second token's pass over the cached rows
// (decode). Kernel names get "x2" (q8vnni16x2). Not for use while another thread is inside matmul().
void set_q8_residual_pass(bool on);
// True when matmul(w, ., T, .) rounds activations to BF16 (round to nearest even; nib / byte route decode on
// the Avx512Bf16 tier).
bool matmul_rounds_to_bf16(const WeightMatrix& w, int64_t T);
// Row r of w as matmul(w, ., T, .) multiplies it: weight_row_f32, except where the kernel rounds the format's
// value table to BF16 (NF4 when matmul_rounds_to_bf16): bf16(value) * scale; lut2/3/4 on the BF16 kernel:
// bf16(table entry). The tests' oracle.
void matmul_weight_row(const WeightMatrix& w, int64_t T, int64_t r, float* out);
// Test seam: run the AMX prefill kernels (W8A8, the GGUF packs) on a scalar model of the tile unit
// (kernels/amx_emu.h) on CPUs without AMX (from the Avx512 tier on), so their packing and tile loops are
// tested everywhere. Process-wide; off by default; not for use while another thread is inside matmul().
void set_amx_emulation(bool on);
// Dot product of two float vectors with the current ISA tier (used by attention).
float dot_f32(const float* a, const float* b, int64_t n);
// out[n] = F16 / BF16 values h[n] widened to float (bit-exact; F16C / AVX-512 where available).
void widen_f16(const uint16_t* h, float* out, int64_t n);
void widen_bf16(const uint16_t* h, float* out, int64_t n);
// out[i * n + c] = rows[i][c] widened, for n_rows rows of n F16 values each (a K or V tile of the paged
// cache, whose rows lie in different pages): one tier dispatch for the tile instead of one per row.
void widen_f16_rows(const uint16_t* const* rows, int64_t n_rows, int64_t n, float* out);
// out[i] = value(codes[i]) * scale for FP8 E4M3FN (e4m3) or E5M2 codes, equal to the formats library's decode
// times scale (NaN codes give a NaN).
void widen_fp8(const uint8_t* codes, bool e4m3, float scale, float* out, int64_t n);
// y[n] += a * x[n] with the current ISA tier (attention's value accumulation).
void axpy_f32(float a, const float* x, float* y, int64_t n);
// The gated MLP's activation: g[i] = silu(g[i]) * u[i] = g[i] / (1 + exp(-g[i])) * u[i]. AVX-512: a
// polynomial exp (relative error ~1e-7, kernels/exp_avx512.h) instead of libm's scalar expf, which cost ~5 %
// of a small model's decode step (117 K calls per token on a 0.5B shape) and more in prefill. NaN stays NaN.
void silu_mul_f32(float* g, const float* u, int64_t n);

}  // namespace lowbit
