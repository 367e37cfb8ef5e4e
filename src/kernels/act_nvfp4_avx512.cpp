// The NVFP4 activation route's block-scale search (act_scale=mse) on AVX-512: nvfp4_block_errors
// (kernels/matmul.h) with an even and an odd input side by side, 8 steps each, so a block of 16 takes 8
// iterations instead of 16; every lane sums its terms in the scalar order (bit-identical).
#include <immintrin.h>

#include <algorithm>

#include "kernels/kernel_plan.h"
#include "kernels/matmul.h"

namespace lowbit::kern {

void nvfp4_block_errors_avx512(const float* x, int64_t n, const float* d, int nd, float* err) {
  if (n != 16) return nvfp4_block_errors(x, n, d, nd, err);
  const __m512 table = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512 sign = _mm512_set1_ps(-0.0f);
  const __m512 xb = _mm512_loadu_ps(x);
  const __m512i one = _mm512_set1_epi32(1);
  // E2M1 with round-to-nearest-even and saturation as counts of thresholds passed (as e2m1_codes_avx2):
  // |q| > 0.25, >= 0.75, > 1.25, >= 1.75, > 2.5, >= 3.5, > 5.
  const float gt_t[4] = {0.25f, 1.25f, 2.5f, 5.0f}, ge_t[3] = {0.75f, 1.75f, 3.5f};
  for (int k0 = 0; k0 < nd; k0 += 8) {
    alignas(64) float dl[16], out[16];
    for (int k = 0; k < 8; ++k) dl[k] = dl[k + 8] = d[std::min(nd - 1, k0 + k)];  // spare lanes repeat
    const __m512 dv = _mm512_load_ps(dl), rv = _mm512_div_ps(_mm512_set1_ps(1.0f), dv);
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < 16; i += 2) {
      // lanes 0..7: x[i], lanes 8..15: x[i + 1]
      const __m512i idx =
          _mm512_set_epi32(i + 1, i + 1, i + 1, i + 1, i + 1, i + 1, i + 1, i + 1, i, i, i, i, i, i, i, i);
      const __m512 v = _mm512_permutexvar_ps(idx, xb);
      const __m512 a = _mm512_andnot_ps(sign, _mm512_mul_ps(v, rv));
      __m512i c = _mm512_setzero_si512();
      for (float t : gt_t)
        c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(a, _mm512_set1_ps(t), _CMP_GT_OQ), c, one);
      for (float t : ge_t)
        c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(a, _mm512_set1_ps(t), _CMP_GE_OQ), c, one);
      const __m512 val = _mm512_or_ps(_mm512_permutexvar_ps(c, table), _mm512_and_ps(v, sign));
      const __m512 e = _mm512_fnmadd_ps(val, dv, v);
      acc = _mm512_fmadd_ps(e, e, acc);
    }
    // S_even (lanes 0..7) + S_odd (lanes 8..15)
    const __m256 s = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
    _mm256_store_ps(out, s);
    for (int k = 0; k < 8 && k0 + k < nd; ++k) err[k0 + k] = out[k];
  }
}

}  // namespace lowbit::kern
