// The routes of matmul() for lowbit's own weight codes: decode on the lane kernels (nib, nib16, byte16,
// fp6), prefill on the BF16 tile and AMX-BF16, integer-activation routes (code dots, VNNI gemv and tiles, the
// INT block kernels, the AVX2 i8dot rows) and the W8A8 AMX tile. The kernels live in the ISA files; these
// functions lay out activations and walk row blocks over the pool.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/parallel.h"
#include "formats/format.h"
#include "formats/minifloat.h"
#include "kernels/dispatch.h"
#include "kernels/kernel_plan.h"
#include "kernels/kernel_select.h"
#include "kernels/matmul.h"
#include "kernels/matmul_avx512.h"
#include "kernels/matmul_internal.h"
#include "tensor/qtensor.h"

namespace lowbit::matmul_detail {

// Groups per row that need activation group sums (asymmetric weights), else 0.
int64_t asym_groups(const KernelPlan& p, int64_t cols) {
  return p.zeros.empty() ? 0 : (cols + p.group - 1) / p.group;
}

// Decode on the lane kernels (nib, nib16, byte16): each token's activations laid out once in the kernel's
// lane layout (act [pad] of E: float, or BF16 bits for the Avx512Bf16 tier's kernels; group sums for
// asymmetric weights), then gemv(nr, rows, scales, zeros, LaneX<E>*, y) per block of rows.
template <typename E, typename Layout, typename Gemv, typename S = float, typename Z = float>
void run_lane_gemv(const WeightMatrix& w, const KernelPlan& p, const float* x, int64_t T, float* y,
                   int64_t pad, Layout&& layout, Gemv&& gemv, const S* scales = nullptr,
                   const Z* zeros = nullptr) {
  const int64_t cols = w.cols;
  const int64_t ng = asym_groups(p, cols);
  thread_local std::vector<E> act;
  thread_local std::vector<float> gs;
  act.resize(static_cast<size_t>(T * pad));
  gs.resize(static_cast<size_t>(T * ng));
  std::vector<kern::LaneX<E>> xr(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    float* gsum = ng ? gs.data() + t * ng : nullptr;
    xr[t] = {act.data() + t * pad, gsum};
    layout(x + t * cols, cols, p.group, act.data() + t * pad, gsum);
  }
  const double work = static_cast<double>(w.nbytes()) * static_cast<double>(T);
  auto body = [&](int nr, const uint8_t* const* rp, const auto* const* sp, const auto* const* zp,
                  int64_t r0) { gemv(nr, rp, sp, zp, xr.data(), y + r0); };
  if (scales)
    for_cell_row_blocks(w, p, scales, zeros, work, body);
  else
    for_code_row_blocks(w, p, work, body);
}

// Decode on the nib route: FP32 activations permuted into the nib lane layout (rows in tiles that share the
// activation loads, and for T > 1 the code decode), or BF16 activations (bf16: select_kernel chose Nib16).
void run_nib_gemv512(const WeightMatrix& w, const KernelPlan& p, const float* x, int64_t T, float* y,
                     bool bf16) {
  const int64_t pad = kern::nib_padded(w.cols);
  const int nt = static_cast<int>(T);
  if (bf16) {
    kern::Nib16Lut lut;  // 32 entries: cheaper to build than to look up
    kern::nib16_make_lut(p.lut.data(), p.lut.size(), lut);
    // The stored binary16 / uint8 cells where they are exact (fewer bytes per token than the FP32 tables).
    auto gemv = [&](int nr, const uint8_t* const* rp, const auto* const* sp, const auto* const* zp,
                    const kern::Bf16X* xr, float* yb) {
      kern::nib16_gemv_avx512bf16(nr, rp, sp, zp, w.cols, p.group, p.bits, lut, nt, xr, yb, w.rows);
    };
    if (p.scales_f16)
      return run_lane_gemv<uint16_t>(w, p, x, T, y, pad, kern::nib16_layout, gemv, p.scales_f16, p.zeros_u8);
    if (p.scales_e8m0)
      return run_lane_gemv<uint16_t>(w, p, x, T, y, pad, kern::nib16_layout, gemv, p.scales_e8m0,
                                     static_cast<const float*>(nullptr));
    if (p.scales_e4m3) {
      auto gemv_post = [&](int nr, const uint8_t* const* rp, const auto* const* sp, const auto* const* zp,
                           const kern::Bf16X* xr, float* yb) {
        gemv(nr, rp, sp, zp, xr, yb);
        for (int t = 0; t < nt; ++t)
          for (int i = 0; i < nr; ++i) yb[t * w.rows + i] *= p.e4m3_post;
      };
      return run_lane_gemv<uint16_t>(w, p, x, T, y, pad, kern::nib16_layout, gemv_post, p.scales_e4m3,
                                     static_cast<const float*>(nullptr));
    }
    return run_lane_gemv<uint16_t>(w, p, x, T, y, pad, kern::nib16_layout, gemv);
  }
  run_lane_gemv<float>(w, p, x, T, y, pad, kern::nib_layout,
                       [&](int nr, const uint8_t* const* rp, const float* const* sp, const float* const* zp,
                           const kern::NibX* xr, float* yb) {
                         kern::nib_gemv_avx512(nr, rp, sp, zp, w.cols, p.group, p.lut.data(), nt, xr, yb,
                                               w.rows);
                       });
}

// Rows rp[0..nr) of an INT2 / INT3 / FP6 weight widened (widen_codes_avx512bf16) into this thread's buffer;
// wr[i] points at row i's widened copy.
void widen_block(const KernelPlan& p, int64_t cols, int nr, const uint8_t* const* rp, const uint8_t** wr) {
  const int64_t wide = p.bits == 6 ? (cols + 63) / 64 * 64 : (cols + 127) / 128 * 64;  // bytes per row
  thread_local std::vector<uint8_t> buf;
  buf.resize(static_cast<size_t>(kRowBlock * wide));
  for (int i = 0; i < nr; ++i) {
    kern::widen_codes_avx512bf16(rp[i], cols, p.bits, buf.data() + i * wide);
    wr[i] = buf.data() + i * wide;
  }
}

// FP6 decode: each block's rows widened to bytes (one 48 -> 64-byte step per 64 codes), then byte16.
void run_fp6_gemv(const WeightMatrix& w, const KernelPlan& p, const float* x, int64_t T, float* y) {
  run_lane_gemv<uint16_t>(w, p, x, T, y, kern::byte16_padded(w.cols), kern::byte16_layout,
                          [&](int nr, const uint8_t* const* rp, const float* const* sp,
                              const float* const* zp, const kern::Bf16X* xr, float* yb) {
                            const uint8_t* wr[kRowBlock];
                            widen_block(p, w.cols, nr, rp, wr);
                            kern::byte16_gemv_avx512bf16(nr, wr, sp, zp, w.cols, p.group, *p.byte16,
                                                         static_cast<int>(T), xr, yb, w.rows);
                          });
}

void run_byte16_gemv(const WeightMatrix& w, const KernelPlan& p, const float* x, int64_t T, float* y) {
  run_lane_gemv<uint16_t>(w, p, x, T, y, kern::byte16_padded(w.cols), kern::byte16_layout,
                          [&](int nr, const uint8_t* const* rp, const float* const* sp,
                              const float* const* zp, const kern::Bf16X* xr, float* yb) {
                            kern::byte16_gemv_avx512bf16(nr, rp, sp, zp, w.cols, p.group, *p.byte16,
                                                         static_cast<int>(T), xr, yb, w.rows);
                          });
}

// Prefill on the BF16 tile (k: Bf16Tile, or AmxBf16 / AmxBf16Emulated on AMX-BF16 tiles): activations
// rounded to BF16 once (zero-padded to an even count; group sums of the rounded values for asymmetric
// weights), then each block of 16 rows decoded once and multiplied by all tokens.
void run_bf16_tile(const WeightMatrix& w, const KernelPlan& p, Kernel k, const float* x, int64_t T,
                   float* y) {
  const int64_t rows = w.rows, cols = w.cols, xstride = (cols + 31) / 32 * 32;
  const int64_t ng = asym_groups(p, cols);
  // The AMX kernels read whole 16-token tiles: padding tokens hold x = 0.
  const bool amx = k == Kernel::AmxBf16 || k == Kernel::AmxBf16Emulated;
  const int64_t tp = amx ? (T + 15) / 16 * 16 : T;
  thread_local std::vector<uint16_t> act;
  thread_local std::vector<float> gs;
  act.assign(static_cast<size_t>(tp * xstride), 0);
  gs.assign(static_cast<size_t>(tp * ng), 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < cols; ++i) act[t * xstride + i] = f32_to_bf16(x[t * cols + i]);
    if (ng) kern::group_sums(x + t * cols, cols, p.group, true, gs.data() + t * ng);
  }
  // INT2 / INT3 / FP6: each block's rows widened first (widen_block), then as nib / byte.
  const bool low = p.route == Route::Deq && lowbit_codes(w, p), six = fp6_byte16_ok(w, p);
  kern::Nib16Lut lut;
  if (p.route == Route::Nib || low) kern::nib16_make_lut(p.lut.data(), p.lut.size(), lut);
  const kern::Nib16Lut* nib = p.route == Route::Nib || low ? &lut : nullptr;
  const kern::Byte16Lut* byte = nib ? nullptr : p.byte16.get();
  // The pool's workers see their own thread_local vectors: pass the caller's buffers as plain pointers.
  const uint16_t* xb = act.data();
  const float* gsum = ng ? gs.data() : nullptr;
  for_code_row_blocks(
      w, p, static_cast<double>(w.nbytes()) * static_cast<double>(T),
      [&](int nr, const uint8_t* const* rp, const float* const* sp, const float* const* zp, int64_t r0) {
        const uint8_t* wr[kRowBlock];
        if (low || six) widen_block(p, cols, nr, rp, wr);
        const auto tile = k == Kernel::AmxBf16           ? kern::amx_bf16_tiles
                          : k == Kernel::AmxBf16Emulated ? kern::amx_bf16_emulated
                                                         : kern::bf16_tile_avx512bf16;
        tile(nr, low || six ? wr : rp, sp, zp, cols, p.group, nib, byte, xb, xstride, gsum,
             static_cast<int>(T), y + r0, rows);
      });
}

// Nib / byte route decode without a lane kernel (groups the lanes cannot serve): one fused dot per row and
// token.
void run_code_dots512(const WeightMatrix& w, const KernelPlan& p, const float* x, int64_t T, float* y) {
  const int64_t rows = w.rows, cols = w.cols;
  for_row_blocks(
      rows,
      [&](int64_t r0, int64_t r1) {
        for (int64_t t = 0; t < T; ++t)
          for (int64_t r = r0; r < r1; ++r) {
            const float* xt = x + t * cols;
            y[t * rows + r] = p.route == Route::Nib
                                  ? kern::nib_dot_avx512(row_ptr(w, r), cols, p.group, p.scale_row(r),
                                                         p.zero_row(r), p.lut.data(), xt)
                                  : kern::byte_dot_avx512(row_ptr(w, r), cols, p.group, p.scale_row(r),
                                                          p.zero_row(r), p.byte_dec, xt);
          }
      },
      static_cast<double>(w.nbytes()) * static_cast<double>(T));
}

void run_vnni512(const WeightMatrix& w, const KernelPlan& p, const float* x, int64_t T, float* y) {
  const int64_t rows = w.rows, cols = w.cols;
  const int bits = p.bits;
  const int64_t pad = kern::qx_padded(bits, cols), nch = kern::qx_chunks(bits, cols);
  thread_local std::vector<int8_t> nat, qx;
  thread_local std::vector<int32_t> ls;
  thread_local std::vector<float> sx;
  nat.resize(static_cast<size_t>(cols));
  qx.resize(static_cast<size_t>(T * pad));
  ls.resize(static_cast<size_t>(T * nch * 16));
  sx.resize(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    quantize_activation_codes(w, x + t * cols, nat.data(), &sx[t]);
    kern::qx_layout_avx512(bits, nat.data(), cols, qx.data() + t * pad, ls.data() + t * nch * 16);
  }
  const int8_t* qxp = qx.data();
  const int32_t* lsp = ls.data();
  const float* sxp = sx.data();
  for_code_row_blocks(
      w, p, static_cast<double>(w.nbytes()) * static_cast<double>(T),
      [&](int nr, const uint8_t* const* rp, const float* const* sp, const float* const* zp, int64_t r0) {
        for (int64_t t = 0; t < T; ++t)
          kern::vnni_rows_avx512(bits, nr, rp, cols, p.group, sp, zp,
                                 {qxp + t * pad, lsp + t * nch * 16, sxp[t]}, y + t * rows + r0);
      });
}

// W8A8 prefill: activations quantized per token as the decode route does, then the register-tiled VNNI
// kernel.
void run_vnni_tile512(const WeightMatrix& w, const KernelPlan& p, const Int8Tile& tile, const float* x,
                      int64_t T, float* y) {
  const int64_t rows = w.rows, cols = w.cols, xs = (cols + 3) / 4 * 4;
  thread_local std::vector<int8_t> nat;
  thread_local std::vector<uint8_t> xu;
  thread_local std::vector<float> sx;
  nat.resize(static_cast<size_t>(cols));
  xu.assign(static_cast<size_t>(T * xs), 128);  // padding columns hold x = 0
  sx.resize(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    quantize_activation_codes(w, x + t * cols, nat.data(), &sx[t]);
    uint8_t* dst = xu.data() + t * xs;
    for (int64_t c = 0; c < cols; ++c) dst[c] = static_cast<uint8_t>(nat[c] ^ 0x80);  // x + 128
  }
  const uint8_t* xp = xu.data();
  const float* sxp = sx.data();
  for_row_blocks(
      rows,
      [&](int64_t r0, int64_t r1) {
        kern::vnni_tile_int8_avx512(tile.packed.data(), tile.rowsum.data(), p.scales.data(), r0, r1, rows,
                                    cols, xp, sxp, T, y);
      },
      static_cast<double>(w.nbytes()) * static_cast<double>(T));
}

// xg[g] = the sum of the activation codes q of scale group g (groups of grp columns, ng of them).
void code_group_sums(const int8_t* q, int64_t cols, int64_t grp, int64_t ng, int32_t* xg) {
  for (int64_t g = 0; g < ng; ++g) {
    int32_t sum = 0;
    for (int64_t c = g * grp, e = std::min(cols, c + grp); c < e; ++c) sum += q[c];
    xg[g] = sum;
  }
}

// INT4 / INT8 codes x INT8 / INT4 activations over 16-row blocks laid out per call: the VNNI register tile
// (AVX-512: VnniBlock), its AMX-INT8 form (AmxBlock, or AmxBlockEmulated on the instruction model; the
// buffers padded to whole 16-token tiles) or the vpmaddubsw one (avx2: I8BlockAvx2).
void run_int_block(const WeightMatrix& w, const KernelPlan& p, const float* x, int64_t T, float* y,
                   Kernel k) {
  const int64_t cols = w.cols, xs = (cols + 63) / 64 * 64, ng = p.gcols, grp = ng == 1 ? cols : p.group;
  const bool amx = k == Kernel::AmxBlock || k == Kernel::AmxBlockEmulated;
  const int64_t tp = amx ? (T + 15) / 16 * 16 : T;
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<int32_t> xg;
  thread_local std::vector<float> sx;
  xq.assign(static_cast<size_t>(tp * xs), 0);  // padding columns (and tokens) hold x = 0
  xg.assign(static_cast<size_t>(tp * ng), 0);
  sx.assign(static_cast<size_t>(tp), 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    int8_t* q = xq.data() + t * xs;
    quantize_activation_codes(w, x + t * cols, q, &sx[t]);
    code_group_sums(q, cols, grp, ng, xg.data() + t * ng);
  }
  const int zoff = p.asym ? 0 : static_cast<int>(-p.lut[0]);
  auto* block = k == Kernel::I8BlockAvx2        ? kern::i8dot_block_avx2
                : k == Kernel::AmxBlock         ? kern::amx_block_tiles
                : k == Kernel::AmxBlockEmulated ? kern::amx_block_emulated
                                                : kern::vnni_block_avx512;
  // The pool's workers see their own thread_local vectors: pass the caller's buffers as plain pointers.
  const int8_t* xqp = xq.data();
  const int32_t* xgp = xg.data();
  const float* sxp = sx.data();
  for_code_row_blocks(
      w, p, static_cast<double>(w.nbytes()) * static_cast<double>(T),
      [&](int nr, const uint8_t* const* rp, const float* const* sp, const float* const* zp, int64_t r0) {
        block(nr, rp, sp, zp, p.bits, zoff, cols, p.group, xqp, xs, xgp, ng, sxp, static_cast<int>(T), y + r0,
              w.rows);
      });
}

// INT4 / INT8 codes x INT8 / INT4 activations on the AVX2 tier, decode: each token's codes laid out once
// (i8x_layout_avx2) with their sums per scale group, then the row kernel per block of rows.
void run_i8dot_rows_avx2(const WeightMatrix& w, const KernelPlan& p, const float* x, int64_t T, float* y) {
  const int64_t cols = w.cols, xs = kern::i8x_padded(cols), ng = p.gcols, grp = ng == 1 ? cols : p.group;
  thread_local std::vector<int8_t> nat, xl;
  thread_local std::vector<int32_t> xg;
  thread_local std::vector<float> sx;
  nat.resize(static_cast<size_t>(cols));
  xl.resize(static_cast<size_t>(T * xs));
  xg.assign(static_cast<size_t>(T * ng), 0);
  sx.resize(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    quantize_activation_codes(w, x + t * cols, nat.data(), &sx[t]);
    code_group_sums(nat.data(), cols, grp, ng, xg.data() + t * ng);
    kern::i8x_layout_avx2(p.bits, p.group, ng, nat.data(), cols, xl.data() + t * xs);
  }
  const int zoff = p.asym ? 0 : static_cast<int>(-p.lut[0]);
  const int8_t* xlp = xl.data();  // the pool's workers see their own thread_local vectors
  const int32_t* xgp = xg.data();
  const float* sxp = sx.data();
  for_code_row_blocks(
      w, p, static_cast<double>(w.nbytes()) * static_cast<double>(T),
      [&](int nr, const uint8_t* const* rp, const float* const* sp, const float* const* zp, int64_t r0) {
        kern::i8dot_rows_avx2(p.bits, nr, rp, sp, zp, zoff, cols, p.group, ng, xlp, xs, xgp, sxp,
                              static_cast<int>(T), y + r0, w.rows);
      });
}

// W8A8 prefill on AMX-INT8 tiles (amx_tiles.h): the same activation quantization; signed codes, no offset.
void run_amx_w8a8(const WeightMatrix& w, const KernelPlan& p, const AmxInt8Pack& pk, const float* x,
                  int64_t T, float* y, bool hardware) {
  const int64_t rows = w.rows, cols = w.cols, tp = (T + 15) / 16 * 16;
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> sx;
  xq.assign(static_cast<size_t>(tp * pk.kp), 0);  // padding tokens and columns hold x = 0
  sx.resize(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) quantize_activation_codes(w, x + t * cols, xq.data() + t * pk.kp, &sx[t]);
  const int8_t* xp = xq.data();
  const float* sxp = sx.data();
  for_row_chunks(
      rows,
      [&](int64_t r0, int64_t r1) {
        if (hardware)
          kern::amx_w8a8_tiles(pk, r0, r1, xp, sxp, p.scales.data(), T, y);
        else
          kern::amx_w8a8_emulated(pk, r0, r1, xp, sxp, p.scales.data(), T, y);
      },
      static_cast<double>(w.nbytes()) * static_cast<double>(T),
      2 * kRowBlock);  // the kernel's 2 x 2 tile blocking
}

}  // namespace lowbit::matmul_detail
