// AVX2 + FMA tier: float dot products (the generic dequantize-a-row path uses them), F16 / BF16 rows
// (dense.avx2) and the 4-bit code rows of the nib route (nib.avx2).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/kernel_plan.h"

namespace lowbit::kern {

float dot_f32_avx2(const float* a, const float* b, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),
         a3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
  __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  float r = _mm_cvtss_f32(h);
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

namespace {
// 8 F16 / BF16 values widened to FP32 (F16C vcvtph2ps; BF16 is the top half of an FP32).
inline __m256 wide8(const uint16_t* h, bool bf16) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h));
  return bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16)) : _mm256_cvtph_ps(v);
}
}  // namespace

float dot_half_avx2(const uint16_t* w, bool bf16, const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),
         a3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(wide8(w + i, bf16), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(wide8(w + i + 8, bf16), _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(wide8(w + i + 16, bf16), _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(wide8(w + i + 24, bf16), _mm256_loadu_ps(x + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(wide8(w + i, bf16), _mm256_loadu_ps(x + i), a0);
  __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  float r = _mm_cvtss_f32(h);
  for (; i < n; ++i) {
    float v;
    if (bf16) {
      const uint32_t u = static_cast<uint32_t>(w[i]) << 16;
      std::memcpy(&v, &u, 4);
    } else {
      v = _cvtsh_ss(w[i]);
    }
    r += v * x[i];
  }
  return r;
}

void widen_f16_avx2(const uint16_t* h, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
  if (i < n) widen_f16_generic(h + i, out + i, n - i);
}

void axpy_f32_avx2(float a, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

namespace {

inline float hsum8(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// Elements c..c+7 of a 4-bit code row (c even; code i is nibble i, low nibble first) through the 16-entry
// value table held as two halves: each dword lane shifts the 32 bits of the four bytes right by 4k, vpermps
// reads the low 3 bits of the index, and bit 3 (moved to the sign) chooses the half.
inline __m256 nib8(const uint8_t* row, int64_t c, __m256 lo, __m256 hi, __m256i shifts) {
  uint32_t v;
  std::memcpy(&v, row + c / 2, 4);
  const __m256i idx = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(v)), shifts);
  return _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, idx), _mm256_permutevar8x32_ps(hi, idx),
                          _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

inline uint32_t nib_at(const uint8_t* row, int64_t c) {
  return (row[c / 2] >> ((c & 1) * 4)) & 15u;
}

}  // namespace

namespace {
// The table of the INT4 formats is linear, lut16[u] = lut16[0] + u: the codes convert directly (vcvtdq2ps),
// two instructions per 8 codes fewer than the two-table lookup.
bool linear_table(const float* lut16) {
  for (int u = 1; u < 16; ++u)
    if (lut16[u] != lut16[0] + static_cast<float>(u)) return false;
  return true;
}

template <bool kLinear>
float nib_dot_avx2_t(const uint8_t* row, int64_t cols, int64_t group, const float* s, const float* z,
                     const float* lut16, const float* x) {
  const __m256 lo = _mm256_loadu_ps(lut16), hi = _mm256_loadu_ps(lut16 + 8);
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28), m4 = _mm256_set1_epi32(15);
  const int64_t G = std::min(group, cols);
  // Elements c..c+7 minus the zero point (linear tables: u + lut16[0] - z).
  auto w8 = [&](int64_t c, __m256 zv) {
    if constexpr (kLinear) {
      uint32_t v;
      std::memcpy(&v, row + c / 2, 4);
      const __m256i u =
          _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(v)), shifts), m4);
      return _mm256_add_ps(_mm256_cvtepi32_ps(u), zv);
    } else {
      return _mm256_sub_ps(nib8(row, c, lo, hi, shifts), zv);
    }
  };
  __m256 acc = _mm256_setzero_ps();
  float tail = 0;
  for (int64_t c0 = 0, j = 0; c0 < cols; c0 += G, ++j) {
    const int64_t c1 = std::min(cols, c0 + G);
    const float zj = z ? z[j] : 0.0f;
    const __m256 zv = _mm256_set1_ps(kLinear ? lut16[0] - zj : zj);
    __m256 ga = _mm256_setzero_ps(), gb = _mm256_setzero_ps();
    int64_t c = c0;
    for (; c + 16 <= c1; c += 16) {
      ga = _mm256_fmadd_ps(w8(c, zv), _mm256_loadu_ps(x + c), ga);
      gb = _mm256_fmadd_ps(w8(c + 8, zv), _mm256_loadu_ps(x + c + 8), gb);
    }
    for (; c + 8 <= c1; c += 8) ga = _mm256_fmadd_ps(w8(c, zv), _mm256_loadu_ps(x + c), ga);
    float gt = 0;  // a row end that is not a multiple of 8
    for (; c < c1; ++c) gt += (lut16[nib_at(row, c)] - zj) * x[c];
    acc = _mm256_fmadd_ps(_mm256_set1_ps(s[j]), _mm256_add_ps(ga, gb), acc);
    tail += s[j] * gt;
  }
  return hsum8(acc) + tail;
}
}  // namespace

// sum_c s[g] * (lut16[code c] - z[g]) * x[c] over the row, g = c / group (groups of 16k columns, or one
// group); the same contract as nib_dot_avx512.
float nib_dot_avx2(const uint8_t* row, int64_t cols, int64_t group, const float* s, const float* z,
                   const float* lut16, const float* x) {
  return linear_table(lut16) ? nib_dot_avx2_t<true>(row, cols, group, s, z, lut16, x)
                             : nib_dot_avx2_t<false>(row, cols, group, s, z, lut16, x);
}

// The row as floats: out[c] = s[g] * (lut16[code c] - z[g]) (nib_deq_avx512's contract).
void nib_deq_avx2(const uint8_t* row, int64_t cols, int64_t group, const float* s, const float* z,
                  const float* lut16, float* out) {
  const __m256 lo = _mm256_loadu_ps(lut16), hi = _mm256_loadu_ps(lut16 + 8);
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  const int64_t G = std::min(group, cols);
  for (int64_t c0 = 0, j = 0; c0 < cols; c0 += G, ++j) {
    const int64_t c1 = std::min(cols, c0 + G);
    const float zj = z ? z[j] : 0.0f;
    const __m256 sv = _mm256_set1_ps(s[j]), zv = _mm256_set1_ps(zj);
    int64_t c = c0;
    for (; c + 8 <= c1; c += 8)
      _mm256_storeu_ps(out + c, _mm256_mul_ps(_mm256_sub_ps(nib8(row, c, lo, hi, shifts), zv), sv));
    for (; c < c1; ++c) out[c] = (lut16[nib_at(row, c)] - zj) * s[j];
  }
}

}  // namespace lowbit::kern
