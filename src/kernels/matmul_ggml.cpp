// GGUF blocks against activations in Q8 blocks of 32, the routes of matmul() for every GGUF type: the
// load-time packs (QBlkPack, KPack), the per-call packs of a weight held as rows, AMX tiles over either, the
// VNNI / AVX2 row kernels, and the residual pass. The kernels themselves live in the ISA files
// (matmul_avx512_qblk.cpp, matmul_avx512_kpack.cpp, matmul_avx2_*.cpp, matmul_amx.cpp).
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "formats/ggml_types.h"
#include "kernels/kernel_plan.h"
#include "kernels/kernel_select.h"
#include "kernels/matmul.h"
#include "kernels/matmul_avx512.h"
#include "kernels/matmul_internal.h"

namespace lowbit::matmul_detail {
namespace {

// Activations of the load-time packs and the AVX2 row kernels: per token Q8 blocks of 32 (q [T, cols], dx
// [T, cols/32]; the AVX2 tier's quantizer when avx2, bit-identical) and the sums of the codes per `width`
// columns (sums [T, cols/width]; none for width 0). q has max(T, tp) rows, the rows past T zero (the AMX
// tiles read whole 16-token tiles). Thread-local buffers, valid until the next call.
struct Q8Acts {
  const int8_t* q;
  const float* dx;
  int32_t* sums;
};
Q8Acts q8_acts(const float* x, int64_t T, int64_t cols, int64_t width, bool avx2 = false, int64_t tp = 0) {
  const int64_t nb = cols / 32, ns = width ? cols / width : 0;
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> dx;
  thread_local std::vector<int32_t> sums;
  q.resize(static_cast<size_t>(std::max(T, tp) * cols));
  std::fill(q.begin() + T * cols, q.end(), int8_t{0});
  dx.resize(static_cast<size_t>(T * nb));
  sums.resize(static_cast<size_t>(T * ns));
  for (int64_t t = 0; t < T; ++t) {
    int8_t* qt = q.data() + t * cols;
    (avx2 ? kern::quantize_q8_blocks_avx2 : kern::quantize_q8_blocks_avx512)(x + t * cols, cols, qt,
                                                                             dx.data() + t * nb);
    for (int64_t b = 0; b < ns; ++b) {
      int32_t s = 0;
      for (int64_t i = 0; i < width; ++i) s += qt[b * width + i];
      sums[t * ns + b] = s;
    }
  }
  return {q.data(), dx.data(), sums.data()};
}

// GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL / MXFP4 with a load-time QBlkPack, decode and prefill:
// activations rounded to Q8 blocks of 32 (as llama.cpp does), each block's code sum times the weight offset
// folded into the integer accumulator.
// The QBlkPack kernel's activations: q8_acts with each block's sum turned into the integer accumulator's
// start (see qblk_gemm_avx512: -offset * sum, or the sum itself for the types with a min). pk: the pack or
// its layout.
Q8Acts qblk_acts(const QBlkPack& pk, const float* x, int64_t T, int64_t cols, bool avx2 = false) {
  const Q8Acts a = q8_acts(x, T, cols, 32, avx2);
  if (!pk.min_bytes)
    for (int64_t i = 0; i < T * (cols / 32); ++i) a.sums[i] *= -pk.offset;
  return a;
}

// avx2: the AVX2 tier's kernel and quantizer.
void run_qblk(const WeightMatrix& w, const QBlkPack& pk, bool avx2, const float* x, int64_t T, float* y) {
  const Q8Acts a = qblk_acts(pk, x, T, w.cols, avx2);
  const auto gemm = avx2 ? kern::qblk_gemm_avx2 : kern::qblk_gemm_avx512;
  for_row_blocks(
      w.rows, [&](int64_t r0, int64_t r1) { gemm(pk, r0, r1, a.q, a.dx, a.sums, T, y); },
      static_cast<double>(pk.bytes()) * static_cast<double>(T));
}

// 64-byte aligned per-thread scratch of at least n bytes.
uint8_t* tls_aligned(size_t n) {
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < n + 64) buf.resize(n + 64);
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t{63});
}

// For each 16-row block: the block's rows packed into per-thread scratch of block_bytes, then multiplied.
// pack(rows, nr, base); gemm(base, r0, nr).
template <typename Pack, typename Gemm>
void for_packed_row_blocks(const WeightMatrix& w, size_t block_bytes, double work_bytes, Pack&& pack,
                           Gemm&& gemm) {
  for_row_blocks(
      w.rows,
      [&](int64_t r0, int64_t r1) {
        uint8_t* base = tls_aligned(block_bytes);
        const uint8_t* rp[kRowBlock];
        for (int64_t r = r0; r < r1; ++r) rp[r - r0] = row_ptr(w, r);
        pack(rp, static_cast<int>(r1 - r0), base);
        gemm(base, r0, static_cast<int>(r1 - r0));
      },
      work_bytes);
}

// A GGUF weight held as rows, each 16-row block packed per call into the KPack (k-quants) or QBlkPack layout,
// then gemm(meta, base, r0, nr): the per-call packs of the VNNI and the AMX prefill.
template <typename Gemm>
void for_kpack_blocks(const WeightMatrix& w, const KernelPlan& p, int64_t T, Gemm&& gemm) {
  const KPack meta = kpack_layout(p.ggml_type, w.rows, w.cols);
  for_packed_row_blocks(
      w, static_cast<size_t>(w.cols / 256 * meta.sb_bytes),
      static_cast<double>(w.nbytes()) * static_cast<double>(T),
      [&](const uint8_t* const* rp, int nr, uint8_t* base) { pack_kpack_block(meta, rp, nr, base); },
      [&](const uint8_t* base, int64_t r0, int nr) { gemm(meta, base, r0, nr); });
}

template <typename Gemm>
void for_qblk_blocks(const WeightMatrix& w, const KernelPlan& p, int64_t T, Gemm&& gemm) {
  const QBlkPack meta = qblk_layout(p.ggml_type, w.rows, w.cols);
  for_packed_row_blocks(
      w, static_cast<size_t>(w.cols / 32 * meta.block_bytes),
      static_cast<double>(w.nbytes()) * static_cast<double>(T),
      [&](const uint8_t* const* rp, int nr, uint8_t* base) { pack_qblk_block(meta, rp, nr, base); },
      [&](const uint8_t* base, int64_t r0, int nr) { gemm(meta, base, r0, nr); });
}

// Prefill on AMX-INT8 tiles (amx_tiles.h, amx_unit_rows) over the load-time pack, or, for a GGUF type held
// as rows (online --quantize q4_0 / q4_k, or no load-time pack), over each 16-row block packed per call
// (as Q8PackPerCall does): the Q8 activation blocks of the VNNI pack kernels, the codes padded to whole
// 16-token tiles with zeros, the block scales transposed to [cols/32, Tp] and the code sums to one per unit
// [nsub, Tp] (a unit is a 32-column block of the QBlkPack types, a sub-block of the k-quants: 32 columns for
// Q4_K / Q5_K / IQ4_XS, else 16; two per-16 sums added as the VNNI kernels add them).
void run_pack_amx(const WeightMatrix& w, const KernelPlan& p, const float* x, int64_t T, float* y,
                  bool hardware) {
  const int64_t cols = w.cols, n32 = cols / 32, n16 = cols / 16, tp = (T + 15) / 16 * 16;
  const bool per_call = !p.qblk && !p.kpack, kq = p.kpack || (per_call && kpack_supported(p.ggml_type, cols));
  const bool wide = !kq || kpack_sub_block_cols(p.ggml_type) == 32;
  const int64_t nsub = wide ? n32 : n16;
  const Q8Acts a = q8_acts(x, T, cols, 16, /*avx2=*/false, tp);
  thread_local std::vector<float> dxp;
  thread_local std::vector<int32_t> sp;
  dxp.assign(static_cast<size_t>(tp * n32), 0.0f);
  sp.assign(static_cast<size_t>(tp * nsub), 0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t b = 0; b < n32; ++b) dxp[static_cast<size_t>(b * tp + t)] = a.dx[t * n32 + b];
    for (int64_t j = 0; j < nsub; ++j)
      sp[static_cast<size_t>(j * tp + t)] =
          wide ? a.sums[t * n16 + 2 * j] + a.sums[t * n16 + 2 * j + 1] : a.sums[t * n16 + j];
  }
  const int8_t* q = a.q;  // the pool's workers see their own thread_locals
  const float* dx = dxp.data();
  const int32_t* s = sp.data();
  const auto qblk_fn = hardware ? kern::amx_qblk_tiles : kern::amx_qblk_emulated;
  const auto kpack_fn = hardware ? kern::amx_kpack_tiles : kern::amx_kpack_emulated;
  if (!per_call) {
    for_row_chunks(
        w.rows,
        [&](int64_t r0, int64_t r1) {
          if (p.qblk)
            qblk_fn(*p.qblk, r0, r1, q, dx, s, T, y, nullptr);
          else
            kpack_fn(*p.kpack, r0, r1, q, dx, s, T, y, nullptr);
        },
        static_cast<double>(p.qblk ? p.qblk->bytes() : p.kpack->bytes()) * static_cast<double>(T));
    return;
  }
  if (kq)
    for_kpack_blocks(w, p, T, [&](const KPack& meta, const uint8_t* base, int64_t r0, int nr) {
      kpack_fn(meta, r0, r0 + nr, q, dx, s, T, y, base);
    });
  else
    for_qblk_blocks(w, p, T, [&](const QBlkPack& meta, const uint8_t* base, int64_t r0, int nr) {
      qblk_fn(meta, r0, r0 + nr, q, dx, s, T, y, base);
    });
}

void run_kpack_transient(const WeightMatrix& w, const KernelPlan& p, const float* x, int64_t T, float* y) {
  const Q8Acts a = q8_acts(x, T, w.cols, 16);
  for_kpack_blocks(w, p, T, [&](const KPack& meta, const uint8_t* base, int64_t r0, int nr) {
    kern::kpack_block_gemm_avx512(meta, base, r0, nr, a.q, a.dx, a.sums, T, y);
  });
}

void run_qblk_transient(const WeightMatrix& w, const KernelPlan& p, const float* x, int64_t T, float* y) {
  const Q8Acts a = qblk_acts(qblk_layout(p.ggml_type, w.rows, w.cols), x, T, w.cols);
  for_qblk_blocks(w, p, T, [&](const QBlkPack& meta, const uint8_t* base, int64_t r0, int nr) {
    kern::qblk_block_gemm_avx512(meta, base, r0, nr, a.q, a.dx, a.sums, T, y, w.rows);
  });
}

// GGUF Q2_K .. Q6_K with a load-time KPack, decode and prefill: the same Q8 blocks of 32, plus per-16 code
// sums; avx2: the AVX2 tier's kernel and quantizer.
void run_kpack(const WeightMatrix& w, const KPack& pk, bool avx2, const float* x, int64_t T, float* y) {
  const Q8Acts a = q8_acts(x, T, w.cols, 16, avx2);
  const auto gemm = avx2 ? kern::kpack_gemm_avx2 : kern::kpack_gemm_avx512;
  for_row_blocks(
      w.rows, [&](int64_t r0, int64_t r1) { gemm(pk, r0, r1, a.q, a.dx, a.sums, T, y); },
      static_cast<double>(pk.bytes()) * static_cast<double>(T));
}

// GGUF blocks held as rows against activations in Q8 blocks of 32: the AVX-512 VNNI row kernels (every type,
// k-quants included), or on the AVX2 tier the vpmaddubsw ones (ggml_q8_avx2_supported: the legacy types, Q4_K
// and Q6_K).
void run_ggml_q8(const WeightMatrix& w, const KernelPlan& p, bool avx2, const float* x, int64_t T, float* y) {
  const int64_t rows = w.rows, cols = w.cols, nb = cols / 32;
  const int type = p.ggml_type;
  // Per token: int8 codes (Q8 blocks of 32) and per-block floats: the block scales, or the AVX-512 k-quant
  // kernels' per-super-block factors (same rounding, codes re-laid out for their loads; see ggml_k_prep_x).
  // The AVX2 k-quant rows also take each Q8 block's code sum (Q4_K's mins).
  const bool kq = !avx2 && kern::ggml_k_supported(type);
  const bool kq2 = avx2 && kern::ggml_k_avx2_supported(type);
  const int64_t nf = kq ? cols / 256 * kern::ggml_k_xk_floats(type) : nb;
  const int8_t* qxp;
  const float* dxp;
  const int32_t* bsp = nullptr;
  if (kq) {
    thread_local std::vector<int8_t> qx;
    thread_local std::vector<float> dx;
    qx.resize(static_cast<size_t>(T * cols));
    dx.resize(static_cast<size_t>(T * nf));
    for (int64_t t = 0; t < T; ++t)
      kern::ggml_k_prep_x(type, x + t * cols, cols, qx.data() + t * cols, dx.data() + t * nf);
    qxp = qx.data();
    dxp = dx.data();
  } else {
    const Q8Acts a = q8_acts(x, T, cols, kq2 ? 32 : 0, avx2);
    qxp = a.q;
    dxp = a.dx;
    bsp = a.sums;
  }
  // Q4_0, Q8_0: four rows per call, or long rows one after another (kern::kSeqRowBytes).
  const bool long_rows = static_cast<int64_t>(w.row_bytes()) > kern::kSeqRowBytes;
  const bool four = (type == ggml::Q4_0 || type == ggml::Q8_0) && !long_rows;
  const auto dot4 = avx2 ? kern::ggml_q8_dot4_avx2 : kern::ggml_q8_dot4_avx512;
  const auto dot1 = avx2        ? kern::ggml_q8_dot_avx2
                    : long_rows ? kern::ggml_q8_dot1_avx512
                                : kern::ggml_q8_dot_avx512;
  for_row_blocks(
      rows,
      [&](int64_t r0, int64_t r1) {
        for (int64_t t = 0; t < T; ++t) {
          int64_t r = r0;
          if (four)
            for (; r + 4 <= r1; r += 4) {
              const uint8_t* rp[4] = {row_ptr(w, r), row_ptr(w, r + 1), row_ptr(w, r + 2), row_ptr(w, r + 3)};
              float o[4];
              dot4(type, rp, cols, qxp + t * cols, dxp + t * nf, o);
              for (int i = 0; i < 4; ++i) y[t * rows + r + i] = o[i];
            }
          for (; r < r1; ++r)
            y[t * rows + r] =
                kq    ? kern::ggml_k_dot_avx512(type, row_ptr(w, r), cols, qxp + t * cols, dxp + t * nf)
                : kq2 ? kern::ggml_k_dot_avx2(type, row_ptr(w, r), cols, qxp + t * cols, dxp + t * nf,
                                              bsp + t * nb)
                      : dot1(type, row_ptr(w, r), cols, qxp + t * cols, dxp + t * nf);
        }
      },
      static_cast<double>(w.nbytes()) * static_cast<double>(T));
}

}  // namespace

// The Q8 kernels (load-time pack, per-call pack, rows) on x [T, cols] as it is.
void run_q8_kernel(const WeightMatrix& w, const KernelPlan& p, Kernel k, const float* x, int64_t T,
                   float* y) {
  switch (k) {
    case Kernel::Q8Pack:
    case Kernel::Q8PackAvx2:
      return p.qblk ? run_qblk(w, *p.qblk, k == Kernel::Q8PackAvx2, x, T, y)
                    : run_kpack(w, *p.kpack, k == Kernel::Q8PackAvx2, x, T, y);
    case Kernel::AmxQ8Pack:
    case Kernel::AmxQ8PackEmulated:
    case Kernel::AmxQ8PackPerCall:
    case Kernel::AmxQ8PackPerCallEmulated:
      return run_pack_amx(w, p, x, T, y, k == Kernel::AmxQ8Pack || k == Kernel::AmxQ8PackPerCall);
    case Kernel::Q8PackPerCall:
      return kpack_supported(p.ggml_type, w.cols) ? run_kpack_transient(w, p, x, T, y)
                                                  : run_qblk_transient(w, p, x, T, y);
    default:
      return run_ggml_q8(w, p, k == Kernel::Q8RowAvx2, x, T, y);
  }
}

// The residual pass (set_q8_residual_pass): tokens t and T + t of one call are x_t and its Q8 rounding
// residual r_t = x_t - q8(x_t) (quantize_q8_blocks, bit-identical to every Q8 kernel's quantizer), so the
// kernel computes W q8(x_t) and W q8(r_t), and y_t is their sum. One call keeps the prefill tiles' weight
// decode shared by both halves.
void run_q8_residual(const WeightMatrix& w, const KernelPlan& p, Kernel k, const float* x, int64_t T,
                     float* y) {
  const int64_t cols = w.cols, rows = w.rows;
  thread_local std::vector<float> x2, y2;
  x2.resize(static_cast<size_t>(2 * T * cols));
  y2.resize(static_cast<size_t>(2 * T * rows));
  float* x2p = x2.data();  // the pool's workers see their own thread_locals
  std::copy(x, x + T * cols, x2p);
  parallel_for(T, 1, [&](int64_t t0, int64_t t1) {
    std::vector<int8_t> q(static_cast<size_t>(cols));
    std::vector<float> d(static_cast<size_t>(cols / 32));
    for (int64_t t = t0; t < t1; ++t) {
      const float* xt = x + t * cols;
      float* rt = x2p + (T + t) * cols;
      quantize_q8_blocks(xt, cols, q.data(), d.data());
      for (int64_t c = 0; c < cols; ++c) rt[c] = xt[c] - static_cast<float>(q[c]) * d[c / 32];
    }
  });
  float* y2p = y2.data();
  run_q8_kernel(w, p, k, x2p, 2 * T, y2p);
  for (int64_t i = 0; i < T * rows; ++i) y[i] = y2p[i] + y2p[T * rows + i];
}

}  // namespace lowbit::matmul_detail
