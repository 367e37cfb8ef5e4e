// LUT2/3/4 per-row codebooks: the scalar kernel (generic tier) and the product over a weight that runs the
// tier's row kernels (kernel "lut"; AVX-512 / AVX2 row kernels in matmul_lut_avx512.cpp / _avx2.cpp).
#include <vector>

#include "core/half.h"
#include "core/parallel.h"
#include "kernels/kernel_select.h"
#include "tensor/qtensor.h"

namespace lowbit {
namespace kern {

float lut_dot_generic(const uint8_t* row, int64_t cols, int bits, const uint16_t* table, const float* x) {
  float t[16];
  for (int u = 0; u < (1 << bits); ++u) t[u] = f16_to_f32(table[u]);
  float a[4] = {0, 0, 0, 0};
  int64_t c = 0;
  for (; c + 4 <= cols; c += 4)
    for (int i = 0; i < 4; ++i) a[i] += t[unpack_code(row, c + i, bits)] * x[c + i];
  for (; c < cols; ++c) a[0] += t[unpack_code(row, c, bits)] * x[c];
  return (a[0] + a[1]) + (a[2] + a[3]);
}

void lut_deq_generic(const uint8_t* row, int64_t cols, int bits, const uint16_t* table, float* out) {
  float t[16];
  for (int u = 0; u < (1 << bits); ++u) t[u] = f16_to_f32(table[u]);
  for (int64_t c = 0; c < cols; ++c) out[c] = t[unpack_code(row, c, bits)];
}

}  // namespace kern

// Avx512Bf16 tier (T <= 3): the BF16 kernel, four rows per call and token. Other tiers, one token: the fused
// row dot (four rows per call on AVX-512). More tokens: the row decoded once into a per-thread buffer, then
// one dot per token. (The AVX-512 prefill does not come here: it runs the FP32 tile over rows lut_deq_*
// decodes.)
void run_lut(const WeightMatrix& w, const KernelPlan& p, Isa isa, const float* x, int64_t T, float* y) {
  const int64_t rows = w.rows, cols = w.cols, k = p.gcols;
  const int bits = p.bits;
  const bool vbmi = isa >= Isa::Avx512Bf16, a512 = isa >= Isa::Avx512, a2 = isa >= Isa::Avx2;
  auto dot = a512 ? kern::lut_dot_avx512 : a2 ? kern::lut_dot_avx2 : kern::lut_dot_generic;
  auto deq = vbmi   ? kern::lut_deq_vbmi
             : a512 ? kern::lut_deq_avx512
             : a2   ? kern::lut_deq_avx2
                    : kern::lut_deq_generic;
  // The Avx512Bf16 tier decodes in BF16: x rounded once per token.
  std::vector<uint16_t> xb;
  if (vbmi && T <= 3) {
    const int64_t padded = (cols + 31) / 32 * 32;
    xb.resize(static_cast<size_t>(T * padded));
    for (int64_t i = 0; i < T; ++i) kern::lut_bf16_activations(x + i * cols, cols, xb.data() + i * padded);
  }
  auto fdot = a512 ? kern::dot_f32_avx512 : a2 ? kern::dot_f32_avx2 : kern::dot_f32_generic;
  // Small products on the calling thread (waking the pool costs more than ~48 KiB of weight traffic).
  const double work = static_cast<double>(w.decode_bytes()) * static_cast<double>(T);
  const int64_t grain = work < 48 * 1024 ? rows : 16;
  parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> buf;
    if (T > 1 && buf.size() < static_cast<size_t>(cols)) buf.resize(static_cast<size_t>(cols));
    int64_t r = r0;
    if (!xb.empty()) {  // four rows per call and token
      const int64_t padded = (cols + 31) / 32 * 32;
      for (; r < r1; r += 4) {
        const int nr = static_cast<int>(r1 - r < 4 ? r1 - r : 4);
        const uint8_t* rp[4];
        const uint16_t* tp[4];
        for (int i = 0; i < nr; ++i) rp[i] = w.q->row_data(r + i), tp[i] = p.codebook_f16 + (r + i) * k;
        float o[4];
        for (int64_t i = 0; i < T; ++i) {
          kern::lut_dot4_bf16(rp, nr, cols, bits, tp, xb.data() + i * padded, o);
          for (int j = 0; j < nr; ++j) y[i * rows + r + j] = o[j];
        }
      }
    }
    if (T == 1 && a512)  // four rows per call
      for (; r < r1; r += 4) {
        const int nr = static_cast<int>(r1 - r < 4 ? r1 - r : 4);
        const uint8_t* rp[4];
        const uint16_t* tp[4];
        for (int i = 0; i < nr; ++i) rp[i] = w.q->row_data(r + i), tp[i] = p.codebook_f16 + (r + i) * k;
        kern::lut_dot4_avx512(rp, nr, cols, bits, tp, x, y + r);
      }
    for (; r < r1; ++r) {
      const uint8_t* row = w.q->row_data(r);
      const uint16_t* t = p.codebook_f16 + r * k;
      if (T == 1) {
        y[r] = dot(row, cols, bits, t, x);
        continue;
      }
      deq(row, cols, bits, t, buf.data());
      for (int64_t i = 0; i < T; ++i) y[i * rows + r] = fdot(buf.data(), x + i * cols, cols);
    }
  });
}

}  // namespace lowbit
