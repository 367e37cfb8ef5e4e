// The kernel decision shared by matmul.cpp and its route files (which run the kernel) and kernel_select.cpp
// (which decides, names it and answers what it rounds). Internal to the kernels rung; the public face is
// select_kernel() in matmul.h.
#pragma once
#include <cstdint>

#include "kernels/dispatch.h"
#include "kernels/kernel_plan.h"
#include "kernels/matmul.h"
#include "kernels/weight.h"

namespace lowbit {

// From this many tokens on, dequantizing a row block once and running a tile (dense FP32, BF16, VNNI) beats
// re-decoding the codes for every token: prefill kernels from here, decode kernels below.
constexpr int64_t kPrefillTokens = 4;
// From this many tokens on, W8A8 prefill runs on AMX tiles where the Amx tier is active: one A tile holds 16
// tokens, fewer would leave the tile unit partly idle (the VNNI register tile serves 4..15). Not tuned on
// hardware.
constexpr int64_t kAmxTokens = 16;

// The decision itself, for a weight, its plan and an ISA tier.
KernelChoice select_kernel(const WeightMatrix& w, const KernelPlan& p, Isa isa, int64_t T);
// The tier a kernel needs (the suffix of matmul_kernel_name).
Isa kernel_tier(Kernel k);
// set_amx_emulation's state.
bool amx_emulated();

// Conditions of the fused kernels, also read by the kernels themselves (matmul.cpp, matmul_codes.cpp,
// matmul_ggml.cpp). INT2 / INT3 weight-only products on the Avx512Bf16 tier with the codes widened to 4 bits
// in registers: decode on the nib16 kernel (lane-compatible groups), prefill on the BF16 tile (run_bf16_tile,
// even groups).
bool lowbit_codes(const WeightMatrix& w, const KernelPlan& p);
bool lowbit_nib16_ok(const WeightMatrix& w, const KernelPlan& p);
// FP6 (6-bit E2M3 / E3M2 streams) on the byte16 kernels and the BF16 tile, each block's rows widened to one
// code per byte first (widen_codes_avx512bf16); the plan holds the byte16 table when the groups fit its
// lanes.
bool fp6_byte16_ok(const WeightMatrix& w, const KernelPlan& p);
// True when the byte route's decode runs the BF16-activation kernel: the Avx512Bf16 tier and a plan with the
// byte16 table (lane-compatible groups, every code value exact in BF16).
bool byte16_ok(const KernelPlan& p);
// True when prefill of a nib / byte route weight runs the BF16 register tile: the Avx512Bf16 tier, a value
// table in BF16 (nib: every table, NF4's rounded to BF16 as in decode; byte: the byte16 table, exact) and
// groups of whole pairs.
bool bf16_tile_ok(const WeightMatrix& w, const KernelPlan& p);
// INT4 / INT8 weights with INT8 activations that the W8A8 tile does not take (INT4, groups, zero points): the
// VNNI register tile over 16-row blocks decoded per call (vnni_block_avx512). Stored codes u with value
// lut[u] = u - zoff (symmetric) or u (asymmetric, stored integer zero points), groups of whole 4-column
// steps.
bool vnni_block_ok(const WeightMatrix& w, const KernelPlan& p);
// True when GGUF-type prefill (T >= kPrefillTokens) runs on a pack's tile: the load-time pack, or, for a
// QBlkPack or KPack type held as rows (online --quantize q4_0 / q8_0 / q4_k, i.e. WeightKind::Quant, or a
// GGUF weight without its load-time pack), a per-call pack: each 16-row block is packed into a per-thread
// buffer and multiplied by all tokens, so the packing (~1 byte operation per weight byte) is paid once per
// call and block, not per token, and nothing stays resident. Decode keeps the row kernel (a pack per call
// would cost more than the product).
bool pack_tile_ok(const WeightMatrix& w, const KernelPlan& p);

// LUT2/3/4 weights with FP32 activations (Route::Codebook) on the tier's "lut" row kernels (matmul_lut.cpp):
// decode fused per row, other token counts below the AVX-512 prefill tile one decoded row per token batch.
void run_lut(const WeightMatrix& w, const KernelPlan& p, Isa isa, const float* x, int64_t T, float* y);

}  // namespace lowbit
