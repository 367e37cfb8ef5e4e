// One kernel selection: which kernel serves a weight on an ISA tier at T tokens (select_kernel), its name,
// and what it rounds. matmul() runs what this decides; nothing else decides.
#include "kernels/kernel_select.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "core/half.h"
#include "formats/format.h"
#include "kernels/matmul_avx512.h"
#include "tensor/qtensor.h"

namespace lowbit {

namespace {
std::atomic<bool> g_amx_emulated{false};
std::atomic<bool> g_q8_residual{false};

// A Q8 kernel's choice: one rounding pass, or two with the residual pass on.
KernelChoice q8_kernel(Kernel k) {
  return {k, g_q8_residual.load(std::memory_order_relaxed) ? ActRounding::Q8x2 : ActRounding::Q8};
}
}  // namespace

bool amx_emulated() {
  return g_amx_emulated.load(std::memory_order_relaxed);
}

namespace {
// Where a prefill of T tokens runs on AMX tiles: from kAmxTokens, the hardware kernel on the Amx tier, its
// run on the tile-unit model where set_amx_emulation is on; otherwise none (nullopt).
std::optional<Kernel> amx_kernel(Isa isa, int64_t T, Kernel hardware, Kernel emulated) {
  if (T < kAmxTokens) return std::nullopt;
  if (isa >= Isa::Amx) return hardware;
  if (amx_emulated()) return emulated;
  return std::nullopt;
}
}  // namespace

// INT2 / INT3 weight-only products on the Avx512Bf16 tier with the codes widened to 4 bits in registers:
// decode on the nib16 kernel (lane-compatible groups), prefill on the BF16 tile (run_bf16_tile, even groups).
bool lowbit_codes(const WeightMatrix& w, const KernelPlan& p) {
  return kernel_isa() >= Isa::Avx512Bf16 && w.kind == WeightKind::Quant && w.act_format == FormatId::F32 &&
         (p.bits == 2 || p.bits == 3) && p.route == Route::Deq && p.lut.size() == (size_t{1} << p.bits);
}

bool lowbit_nib16_ok(const WeightMatrix& w, const KernelPlan& p) {
  return lowbit_codes(w, p) && kern::nib_lanes_ok(p.group, w.cols);
}

// FP6 (6-bit E2M3 / E3M2 streams) on the byte16 kernels and the BF16 tile, each block's rows widened to one
// code per byte first (widen_codes_avx512bf16); the plan holds the byte16 table when the groups fit its
// lanes.
bool fp6_byte16_ok(const WeightMatrix& w, const KernelPlan& p) {
  return kernel_isa() >= Isa::Avx512Bf16 && w.kind == WeightKind::Quant && w.act_format == FormatId::F32 &&
         p.bits == 6 && p.route == Route::Deq && p.byte16;
}

// True when the byte route's decode runs the BF16-activation kernel: the Avx512Bf16 tier and a plan with the
// byte16 table (lane-compatible groups, every code value exact in BF16).
bool byte16_ok(const KernelPlan& p) {
  return kernel_isa() >= Isa::Avx512Bf16 && p.route == Route::Byte && p.byte16;
}

// True when prefill of a nib / byte route weight runs the BF16 register tile: the Avx512Bf16 tier, a value
// table in BF16 (nib: every table, NF4's rounded to BF16 as in decode; byte: the byte16 table, exact) and
// groups of whole pairs.
bool bf16_tile_ok(const WeightMatrix& w, const KernelPlan& p) {
  if (kernel_isa() < Isa::Avx512Bf16 || !(p.group >= w.cols || p.group % 2 == 0)) return false;
  return (p.route == Route::Nib && p.lut.size() >= 16) || byte16_ok(p) || lowbit_codes(w, p) ||
         fp6_byte16_ok(w, p);
}

// Weight-only prefill where bf16_tile_ok: on AMX-BF16 tiles from kAmxTokens (the Amx tier, or the emulator)
// where the groups make whole tile products, else the BF16 register tile. Both round x to BF16.
KernelChoice bf16_prefill(const WeightMatrix& w, const KernelPlan& p, Isa isa, int64_t T) {
  const auto amx = amx_kernel(isa, T, Kernel::AmxBf16, Kernel::AmxBf16Emulated);
  return {amx && kern::amx_bf16_pairs(p.group, w.cols) > 0 ? *amx : Kernel::Bf16Tile, ActRounding::Bf16};
}

// INT4 / INT8 weights with INT8 activations that the W8A8 tile does not take (INT4, groups, zero points): the
// VNNI register tile over 16-row blocks decoded per call (vnni_block_avx512). Stored codes u with value
// lut[u] = u - zoff (symmetric) or u (asymmetric, stored integer zero points), groups of whole 4-column
// steps.
bool vnni_block_ok(const WeightMatrix& w, const KernelPlan& p) {
  if (w.kind != WeightKind::Quant || !p.int_codes || (p.bits != 4 && p.bits != 8)) return false;
  if (!(p.gcols == 1 || p.group % 4 == 0) || p.lut.size() != (size_t{1} << p.bits)) return false;
  const float zoff = p.asym ? 0.0f : -p.lut[0];
  for (size_t u = 0; u < p.lut.size(); ++u)
    if (p.lut[u] != static_cast<float>(u) - zoff) return false;
  return true;
}

// True when GGUF-type prefill (T >= kPrefillTokens) runs on a pack's tile: the load-time pack, or, for a
// QBlkPack or KPack type held as rows (online --quantize q4_0 / q8_0 / q4_k, i.e. WeightKind::Quant, or a
// GGUF weight without its load-time pack), a per-call pack: each 16-row block is packed into a per-thread
// buffer and multiplied by all tokens, so the packing (~1 byte operation per weight byte) is paid once per
// call and block, not per token, and nothing stays resident. Decode keeps the row kernel (a pack per call
// would cost more than the product) where the type has one; IQ4_XS has none, and a per-call pack beats
// dequantized rows by far (bench_kernels `matmul/rows:iq4_xs`).
bool pack_tile_ok(const WeightMatrix& w, const KernelPlan& p) {
  return p.load_pack() || qblk_supported(p.ggml_type, w.cols) || kpack_supported(p.ggml_type, w.cols);
}

// The one kernel decision (see matmul.h): matmul runs it, matmul_kernel_name names it, the rounding queries
// and decode_bytes read it.
KernelChoice select_kernel(const WeightMatrix& w, const KernelPlan& p, Isa isa, int64_t T) {
  const bool prefill = T >= kPrefillTokens;
  // LUT2/3/4 per-row codebooks, weight-only: the lut row kernels on every tier (AVX-512 prefill: rows decoded
  // by lut_deq_avx512 into the FP32 tile).
  if (p.route == Route::Codebook && w.kind == WeightKind::Quant && w.act_format == FormatId::F32) {
    if (isa >= Isa::Avx512)
      return prefill                  ? KernelChoice{Kernel::F32Tile, ActRounding::None}
             : isa >= Isa::Avx512Bf16 ? KernelChoice{Kernel::LutBf16, ActRounding::Bf16}
                                      : KernelChoice{Kernel::LutAvx512, ActRounding::None};
    return {isa >= Isa::Avx2 ? Kernel::LutAvx2 : Kernel::LutGeneric, ActRounding::None};
  }
  // GGUF legacy blocks, Q4_K and Q6_K on the AVX2 tier: Q8 activation blocks and integer dots on the
  // load-time QBlkPack where the weight has one (16 rows per tile), else by row, decode and prefill (NVFP4
  // activations stay an exact emulation: unfused).
  if (isa == Isa::Avx2 && p.route == Route::GgmlQ8 && (p.qblk || p.kpack) && w.act_format != FormatId::NVFP4)
    return q8_kernel(Kernel::Q8PackAvx2);
  if (isa == Isa::Avx2 && p.route == Route::GgmlQ8 && kern::ggml_q8_avx2_supported(p.ggml_type) &&
      w.act_format != FormatId::NVFP4)
    return q8_kernel(Kernel::Q8RowAvx2);
  if (isa == Isa::Avx2 && p.route == Route::Dense) return {Kernel::DenseAvx2, ActRounding::None};
  // INT4 codes with NVFP4 activations on the AVX2 tier: integer products per 16-column block (the blocks are
  // in the model's input order, so not for an input-permuted weight).
  if (isa == Isa::Avx2 && w.act_format == FormatId::NVFP4 && p.bits == 4 && vnni_block_ok(w, p) &&
      kern::f4dot_avx2_ok(p.group, p.gcols) && w.q->input_perm.empty())
    return {prefill ? Kernel::F4BlockAvx2 : Kernel::F4RowAvx2, ActRounding::None};
  // INT4 / INT8 codes with INT8 / INT4 activations on the AVX2 tier: integer products (both kernels give a
  // token the same bits, so batching does not change it).
  if (isa == Isa::Avx2 && (w.act_format == FormatId::INT8 || w.act_format == FormatId::INT4) &&
      vnni_block_ok(w, p) && kern::i8dot_avx2_ok(p.group, p.gcols))
    return {prefill ? Kernel::I8BlockAvx2 : Kernel::I8RowAvx2, ActRounding::None};
  // The nib route's 4-bit codes (INT4, NF4, FP4, MXFP4, NVFP4 weights) on the AVX2 tier.
  if (isa == Isa::Avx2 && p.route == Route::Nib && w.kind == WeightKind::Quant && p.lut.size() >= 16)
    return {Kernel::NibAvx2, ActRounding::None};
  if (isa == Isa::Avx2 && p.route == Route::Byte && w.kind == WeightKind::Quant)
    return {Kernel::ByteAvx2, ActRounding::None};
  if (isa < Isa::Avx512) return {Kernel::Deq, ActRounding::None};
  // INT4 codes with NVFP4 activations: integer products with one float step per 16-column block (both
  // kernels give a token the same bits).
  if (w.act_format == FormatId::NVFP4 && p.bits == 4 && vnni_block_ok(w, p) &&
      kern::f4_block_avx512_ok(p.group, p.gcols) && w.q->input_perm.empty())
    return {prefill ? Kernel::F4Block : Kernel::F4Row, ActRounding::None};
  // INT4 / INT8 codes with INT8 or INT4 activations (W4A4: the 4-bit codes are widened to bytes and run on
  // the same integer kernels, exact in int32): integer products. Prefill: W8A8 per-channel on AMX tiles (from
  // kAmxTokens, where the tier or the emulator has them) or the VNNI register tile, other INT codes over
  // per-call decoded blocks on AMX tiles (from kAmxTokens, whole scale groups) or the VNNI tile, anything
  // else dequantized into the FP32 tile (x still through the activation route).
  const bool int_act = w.act_format == FormatId::INT8 || w.act_format == FormatId::INT4;
  if (int_act && p.int_codes && p.vnni_ok) {
    if (!prefill) return {Kernel::VnniGemv, ActRounding::None};
    if (w8a8_per_channel(w, p))
      return {amx_kernel(isa, T, Kernel::AmxTile, Kernel::AmxTileEmulated).value_or(Kernel::VnniTile),
              ActRounding::None};
    if (!vnni_block_ok(w, p)) return {Kernel::F32Tile, ActRounding::None};
    const auto amx = amx_kernel(isa, T, Kernel::AmxBlock, Kernel::AmxBlockEmulated);
    return {amx && kern::amx_block_kw(p.group, p.gcols, w.cols) > 0 ? *amx : Kernel::VnniBlock,
            ActRounding::None};
  }
  switch (p.route) {
    case Route::Dense:
      return {Kernel::Dense, ActRounding::None};
    case Route::GgmlQ8:
      // NVFP4 activations are an exact emulation: no Q8 rounding on top (unfused decode, FP32 tile prefill).
      if (w.act_format == FormatId::NVFP4)
        return {prefill ? Kernel::F32Tile : Kernel::Deq, ActRounding::None};
      // Q8 blocks of x against the load-time pack; without one, decode by row and prefill on a per-call pack
      // where the type has one, else (Q2_K / Q3_K held as rows) rows dequantized into the FP32 tile.
      // Prefill on the load-time or per-call packs on AMX-INT8 tiles from kAmxTokens tokens (the same bits).
      if (p.qblk || p.kpack)
        return q8_kernel(
            amx_kernel(isa, T, Kernel::AmxQ8Pack, Kernel::AmxQ8PackEmulated).value_or(Kernel::Q8Pack));
      if (!prefill && ggml_q8_row_kernel(p.ggml_type)) return q8_kernel(Kernel::Q8Row);
      if (pack_tile_ok(w, p))
        return q8_kernel(amx_kernel(isa, T, Kernel::AmxQ8PackPerCall, Kernel::AmxQ8PackPerCallEmulated)
                             .value_or(Kernel::Q8PackPerCall));
      return {Kernel::F32Tile, ActRounding::None};
    case Route::Nib:
    case Route::Byte:
      if (prefill)
        return bf16_tile_ok(w, p) ? bf16_prefill(w, p, isa, T)
                                  : KernelChoice{Kernel::F32Tile, ActRounding::None};
      if (p.route == Route::Nib && kern::nib_lanes_ok(p.group, w.cols))
        return isa >= Isa::Avx512Bf16 ? KernelChoice{Kernel::Nib16, ActRounding::Bf16}
                                      : KernelChoice{Kernel::NibLane, ActRounding::None};
      if (byte16_ok(p)) return {Kernel::Byte16, ActRounding::Bf16};
      return {p.route == Route::Nib ? Kernel::NibDot : Kernel::ByteDot, ActRounding::None};
    case Route::Deq:
    case Route::Codebook:  // with integer / FP8 activations: unfused, as any other format
      break;
  }
  // INT2 / INT3 on the nib16 kernel and FP6 on byte16 (rows widened in registers / per block), both on the
  // BF16 tile for prefill; everything else unfused (decode) or dequantized into the FP32 tile (prefill).
  if (!prefill && lowbit_nib16_ok(w, p)) return {Kernel::Nib16, ActRounding::Bf16};
  if (!prefill && fp6_byte16_ok(w, p)) return {Kernel::Fp6Byte16, ActRounding::Bf16};
  if (prefill && (lowbit_codes(w, p) || fp6_byte16_ok(w, p)) && bf16_tile_ok(w, p))
    return bf16_prefill(w, p, isa, T);
  return {prefill ? Kernel::F32Tile : Kernel::Deq, ActRounding::None};
}

KernelChoice select_kernel(const WeightMatrix& w, int64_t T) {
  return select_kernel(w, kernel_plan(w), kernel_isa(), T);
}

const char* kernel_short_name(Kernel k) {
  switch (k) {
    case Kernel::Deq:
      return "deq";
    case Kernel::Dense:
    case Kernel::DenseAvx2:
      return "dense";
    case Kernel::VnniGemv:
      return "vnni";
    case Kernel::AmxTile:
      return "amxtile";
    case Kernel::AmxTileEmulated:
      return "amxtile-emulated";
    case Kernel::AmxQ8Pack:
    case Kernel::AmxQ8PackPerCall:
      return "q8amx";
    case Kernel::AmxQ8PackEmulated:
    case Kernel::AmxQ8PackPerCallEmulated:
      return "q8amx-emulated";
    case Kernel::VnniTile:
      return "vnnitile";
    case Kernel::VnniBlock:
      return "vnniblock";
    case Kernel::AmxBlock:
      return "amxblock";
    case Kernel::AmxBlockEmulated:
      return "amxblock-emulated";
    case Kernel::AmxBf16:
      return "amxbf16";
    case Kernel::AmxBf16Emulated:
      return "amxbf16-emulated";
    case Kernel::F4Row:
      return "f4vnni";
    case Kernel::F4Block:
      return "f4vnni16";
    case Kernel::F32Tile:
      return "f32tile";
    case Kernel::Q8Row:
      return "q8vnni";
    case Kernel::Q8RowAvx2:
      return "q8dot";
    case Kernel::Q8PackAvx2:
      return "q8dot16";
    case Kernel::Q8Pack:
    case Kernel::Q8PackPerCall:
      return "q8vnni16";
    case Kernel::NibLane:
    case Kernel::NibDot:
    case Kernel::NibAvx2:
      return "nib";
    case Kernel::Nib16:
      return "nib16";
    case Kernel::Byte16:
    case Kernel::Fp6Byte16:
      return "byte16";
    case Kernel::ByteDot:
    case Kernel::ByteAvx2:
      return "byte";
    case Kernel::I8RowAvx2:
      return "i8dot";
    case Kernel::I8BlockAvx2:
      return "i8dot16";
    case Kernel::F4RowAvx2:
      return "f4dot";
    case Kernel::F4BlockAvx2:
      return "f4dot16";
    case Kernel::Bf16Tile:
      return "bf16tile";
    case Kernel::LutBf16:
    case Kernel::LutAvx512:
    case Kernel::LutAvx2:
    case Kernel::LutGeneric:
      return "lut";
  }
  return "?";
}

Isa kernel_tier(Kernel k) {
  switch (k) {
    case Kernel::AmxTile:
    case Kernel::AmxQ8Pack:
    case Kernel::AmxQ8PackPerCall:
    case Kernel::AmxBlock:
    case Kernel::AmxBf16:
      return Isa::Amx;
    case Kernel::Nib16:
    case Kernel::Byte16:
    case Kernel::Fp6Byte16:
    case Kernel::Bf16Tile:
    case Kernel::LutBf16:
      return Isa::Avx512Bf16;
    case Kernel::Deq:
    case Kernel::LutGeneric:
      return Isa::Generic;
    case Kernel::LutAvx2:
    case Kernel::Q8RowAvx2:
    case Kernel::Q8PackAvx2:
    case Kernel::NibAvx2:
    case Kernel::DenseAvx2:
    case Kernel::ByteAvx2:
    case Kernel::I8RowAvx2:
    case Kernel::I8BlockAvx2:
    case Kernel::F4RowAvx2:
    case Kernel::F4BlockAvx2:
      return Isa::Avx2;
    default:
      return Isa::Avx512;
  }
}

std::string matmul_kernel_name(const WeightMatrix& w) {
  const Isa isa = kernel_isa();
  const KernelPlan& p = kernel_plan(w);
  std::string name = w.format_name();
  if (w.act_format == FormatId::INT8)
    name += "+a8";
  else if (w.act_format == FormatId::INT4)
    name += "+a4";
  else if (w.act_format != FormatId::F32)
    name += std::string("+a_") + format_info(w.act_format).name +
            (w.act_format == FormatId::NVFP4 && w.act_scale == ActScale::Mse ? "_mse" : "");
  // "<decode>[+<prefill>].<tier>": decode at one token, prefill at a long prompt (AMX from kAmxTokens on).
  const KernelChoice dc = select_kernel(w, p, isa, 1), pc = select_kernel(w, p, isa, 1 << 20);
  const Kernel dec = dc.kernel, pre = pc.kernel;
  // An unfused decode names the whole weight: the slow fallback that `run` / `bench` warn about.
  if (dec == Kernel::Deq) return name + (w.kind == WeightKind::F32 ? ".dot." : ".deq.") + isa_name(isa);
  // "x2": the Q8 kernels with the residual pass (set_q8_residual_pass).
  const std::string d = std::string(kernel_short_name(dec)) + (dc.rounding == ActRounding::Q8x2 ? "x2" : ""),
                    f = std::string(kernel_short_name(pre)) + (pc.rounding == ActRounding::Q8x2 ? "x2" : "");
  return name + "." + d + (f != d ? "+" + f : "") + "." +
         isa_name(std::max(kernel_tier(dec), kernel_tier(pre)));
}

void set_q8_residual_pass(bool on) {
  g_q8_residual.store(on, std::memory_order_relaxed);
}

void set_amx_emulation(bool on) {
  g_amx_emulated.store(on, std::memory_order_relaxed);
}

bool matmul_rounds_to_bf16(const WeightMatrix& w, int64_t T) {
  return select_kernel(w, T).rounding == ActRounding::Bf16;
}

void matmul_weight_row(const WeightMatrix& w, int64_t T, int64_t r, float* out) {
  const KernelPlan& p = kernel_plan(w);
  // An input-permuted matrix (QuantizedMatrix::input_perm): the rows below are in stored column order, and
  // are scattered back to the original input order (as weight_row_f32 returns them).
  const int32_t* perm =
      w.kind == WeightKind::Quant && !w.q->input_perm.empty() ? w.q->input_perm.data() : nullptr;
  thread_local std::vector<float> stored;
  float* dst = out;
  if (perm) {
    stored.resize(static_cast<size_t>(w.cols));
    dst = stored.data();
  }
  if (p.route == Route::Codebook && matmul_rounds_to_bf16(w, T)) {  // lut tables rounded to BF16
    const int k = static_cast<int>(p.gcols);
    float t[16];
    for (int u = 0; u < k; ++u) t[u] = bf16_to_f32(f32_to_bf16(f16_to_f32(p.codebook_f16[r * k + u])));
    const uint8_t* row = w.q->row_data(r);
    for (int64_t c = 0; c < w.cols; ++c) dst[c] = t[unpack_code(row, c, p.bits)];
  } else if (p.route != Route::Nib || p.lut.size() < 16 || kern::nib16_table_exact(p.lut.data()) ||
             !matmul_rounds_to_bf16(w, T)) {
    return weight_row_f32(w, r, out);
  } else {
    float lut[16];
    for (int i = 0; i < 16; ++i) lut[i] = bf16_to_f32(f32_to_bf16(p.lut[static_cast<size_t>(i)]));
    deq_row_plan(w, p, r, dst, lut);
  }
  if (perm)
    for (int64_t j = 0; j < w.cols; ++j) out[perm[j]] = dst[j];
}

bool matmul_rounds_to_q8(const WeightMatrix& w, int64_t T) {
  return select_kernel(w, T).rounding == ActRounding::Q8;
}

}  // namespace lowbit
