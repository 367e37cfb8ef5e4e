// AVX2 + FMA tier: float dot products (the generic dequantize-a-row path uses them), F16 / BF16 rows
// (dense.avx2), the 4-bit code rows of the nib route (nib.avx2) and the 8-bit ones of the byte route
// (byte.avx2).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/kernel_plan.h"
#include "kernels/lane_avx2.h"

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
  float r = hsum8(s);
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

namespace {
// Tokens [t0, t0 + NT) x the 4 rows over columns [c0, c1) (multiples of 8), added to the 8-lane partial sums
// part[8 * (i * T + t), +8). 4 x 2: 8 accumulators, 4 row vectors and 2 token vectors in registers; per 8
// columns 6 loads and 8 FMAs (FMA-bound), the chunk of 4 rows (4 KB) and of the tokens staying in L1 across
// token pairs.
template <int NT>
void rows_tile(const float* const* w, const float* x, int64_t T, int64_t n, int64_t t0, int64_t c0,
               int64_t c1, float* part) {
  __m256 acc[4][NT];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_loadu_ps(part + 8 * (i * T + t0 + j));
  for (int64_t c = c0; c < c1; c += 8) {
    __m256 xv[NT];
    for (int j = 0; j < NT; ++j) xv[j] = _mm256_loadu_ps(x + (t0 + j) * n + c);
    for (int i = 0; i < 4; ++i) {
      const __m256 wv = _mm256_loadu_ps(w[i] + c);
      for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < NT; ++j) _mm256_storeu_ps(part + 8 * (i * T + t0 + j), acc[i][j]);
}
}  // namespace

void rows_gemm_f32_avx2(const float* const* w, int nr, const float* x, int64_t T, int64_t n, float* y,
                        int64_t ystride) {
  constexpr int64_t kChunk = 256;
  // Up to 16 rows as 4-row groups; each token triple's chunk (3 KB) is loaded once for all of them, so the
  // tokens stream from L2 / L3 once per 16 rows instead of once per 4 (a long prefill or a calibration batch
  // of 2,048 tokens does not fit in L2). Every accumulator sees the same FMAs in the same order as with one
  // group, so the result depends neither on how many rows nor on how many tokens are passed.
  const int ng = (nr + 3) / 4;
  const float* w4[4][4];
  for (int g = 0; g < ng; ++g)
    for (int i = 0; i < 4; ++i) {
      const int r = 4 * g + i;
      w4[g][i] = w[r < nr ? r : 4 * g];  // missing rows repeat the group's first; their sums are dropped
    }
  thread_local std::vector<float> part_buf;
  part_buf.assign(static_cast<size_t>(32 * T * ng), 0.0f);
  float* part = part_buf.data();
  const int64_t n8 = n / 8 * 8;
  // Blocks of 60 tokens (20 triples) outermost: their partial sums (15 KB per 4 rows) and chunks (60 KB) stay
  // in L1 / L2 while the rows' chunks (16 KB) are walked; each accumulator still sums the chunks in column
  // order.
  constexpr int64_t kTokBlock = 60;
  for (int64_t tb = 0; tb < T; tb += kTokBlock) {
    const int64_t te = std::min(T, tb + kTokBlock);
    for (int64_t c0 = 0; c0 < n8; c0 += kChunk) {
      const int64_t c1 = std::min(n8, c0 + kChunk);
      int64_t t = tb;
      for (; t + 3 <= te; t += 3)
        for (int g = 0; g < ng; ++g) rows_tile<3>(w4[g], x, T, n, t, c0, c1, part + 32 * T * g);
      if (te - t == 2)
        for (int g = 0; g < ng; ++g) rows_tile<2>(w4[g], x, T, n, t, c0, c1, part + 32 * T * g);
      else if (t < te)
        for (int g = 0; g < ng; ++g) rows_tile<1>(w4[g], x, T, n, t, c0, c1, part + 32 * T * g);
    }
  }
  for (int r = 0; r < nr; ++r) {
    const float* pr = part + 32 * T * (r / 4) + 8 * (r % 4) * T;
    for (int64_t t = 0; t < T; ++t) {
      float s = hsum8(_mm256_loadu_ps(pr + 8 * t));
      for (int64_t c = n8; c < n; ++c) s += w[r][c] * x[t * n + c];
      y[t * ystride + r] = s;
    }
  }
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
  float r = hsum8(s);
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

// ---- INT4 (linear table) decode against a token laid out once (nib_linear_layout_avx2) ----
// sum_c s_g (u_c + l0 - z_g) x_c = sum_g s_g (sum_{c in g} u_c x_c + (l0 - z_g) X_g): the row only forms
// sum u x; X_g, the token's group sums, are shared by all rows. Per 32 columns (16 code bytes): the low
// nibbles are the even columns, the high ones the odd, each widened 8 at a time (vpmovzxbd, vcvtdq2ps) and
// multiplied with x in the matching order: 17 operations per 32 weights instead of ~28 (nib8's broadcast,
// shift, mask, convert and zero-point add per 8).

bool nib_linear_ok(const float* lut16, int64_t group, int64_t cols) {
  return linear_table(lut16) && (group >= cols || group % 32 == 0);
}

void nib_linear_layout_avx2(const float* x, int64_t cols, int64_t group, float* xl, float* xsum) {
  const int64_t n32 = cols / 32 * 32;
  for (int64_t c0 = 0; c0 < n32; c0 += 32)
    for (int64_t k = 0; k < 16; ++k) {
      xl[c0 + k] = x[c0 + 2 * k];
      xl[c0 + 16 + k] = x[c0 + 2 * k + 1];
    }
  for (int64_t c = n32; c < cols; ++c) xl[c] = x[c];  // a partial last chunk is read in natural order
  const int64_t G = std::min(group, cols);
  for (int64_t c0 = 0, j = 0; c0 < cols; c0 += G, ++j) {
    float sum = 0;
    for (int64_t c = c0; c < std::min(cols, c0 + G); ++c) sum += x[c];
    xsum[j] = sum;
  }
}

float nib_dot_linear_avx2(const uint8_t* row, int64_t cols, int64_t group, const float* s, const float* z,
                          float l0, const float* xl, const float* xsum) {
  const int64_t G = std::min(group, cols), n32 = cols / 32 * 32;
  const __m128i m4 = _mm_set1_epi8(0x0F);
  auto f8 = [](__m128i b) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)); };
  __m256 acc = _mm256_setzero_ps();
  float tail = 0;
  for (int64_t c0 = 0, j = 0; c0 < cols; c0 += G, ++j) {
    const int64_t c1 = std::min(cols, c0 + G), e32 = std::min(c1, n32);
    __m256 ga = _mm256_setzero_ps(), gb = _mm256_setzero_ps(), gc = _mm256_setzero_ps(),
           gd = _mm256_setzero_ps();
    int64_t c = c0;
    for (; c < e32; c += 32) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c / 2));
      const __m128i lo = _mm_and_si128(b, m4), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m4);
      const float* xc = xl + c;
      ga = _mm256_fmadd_ps(f8(lo), _mm256_loadu_ps(xc), ga);
      gb = _mm256_fmadd_ps(f8(_mm_srli_si128(lo, 8)), _mm256_loadu_ps(xc + 8), gb);
      gc = _mm256_fmadd_ps(f8(hi), _mm256_loadu_ps(xc + 16), gc);
      gd = _mm256_fmadd_ps(f8(_mm_srli_si128(hi, 8)), _mm256_loadu_ps(xc + 24), gd);
    }
    float gt = 0;  // a partial last chunk, natural order
    for (; c < c1; ++c) gt += static_cast<float>(nib_at(row, c)) * xl[c];
    const float off = (l0 - (z ? z[j] : 0.0f)) * xsum[j];
    acc = _mm256_fmadd_ps(_mm256_set1_ps(s[j]), _mm256_add_ps(_mm256_add_ps(ga, gb), _mm256_add_ps(gc, gd)),
                          acc);
    tail += s[j] * (gt + off);
  }
  return hsum8(acc) + tail;
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

namespace {
// 8 code bytes -> 8 floats in element units, as byte16 in matmul_avx512_q.cpp: INT8 symmetric codes are
// stored offset by 128; FP8 codes become IEEE halves (E5M2: the top byte; E4M3FN: code << 7 with the sign
// carried from bit 14 into bit 15, i.e. the value times 2^-8, see byte_scale; NaN codes are not masked, as
// there: the quantizer never writes them).
inline __m256 byte8(const uint8_t* p, ByteDec dec) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  switch (dec) {
    case ByteDec::Int8Sym:
      return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_xor_si128(b, _mm_set1_epi8(-128))));
    case ByteDec::Int8Asym:
      return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
    case ByteDec::E4M3: {
      const __m128i t = _mm_slli_epi16(_mm_cvtepu8_epi16(b), 7);
      return _mm256_cvtph_ps(_mm_add_epi16(t, _mm_and_si128(t, _mm_set1_epi16(0x4000))));
    }
    case ByteDec::E5M2:
      return _mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(b), 8));
  }
  return _mm256_setzero_ps();
}
inline float byte_scale(ByteDec dec, float s) {
  return dec == ByteDec::E4M3 ? s * 256.0f : s;
}
}  // namespace

// byte_dot_avx512's contract: sum_c s[g] * (value(code c) - z[g]) * x[c], groups of 16k columns or one group.
float byte_dot_avx2(const uint8_t* row, int64_t cols, int64_t group, const float* s, const float* z,
                    ByteDec dec, const float* x) {
  const int64_t G = std::min(group, cols);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t c0 = 0, j = 0; c0 < cols; c0 += G, ++j) {
    const int64_t c1 = std::min(cols, c0 + G);
    const __m256 zv = _mm256_set1_ps(z ? z[j] : 0.0f);
    __m256 ga = _mm256_setzero_ps(), gb = _mm256_setzero_ps();
    int64_t c = c0;
    for (; c + 16 <= c1; c += 16) {
      ga = _mm256_fmadd_ps(_mm256_sub_ps(byte8(row + c, dec), zv), _mm256_loadu_ps(x + c), ga);
      gb = _mm256_fmadd_ps(_mm256_sub_ps(byte8(row + c + 8, dec), zv), _mm256_loadu_ps(x + c + 8), gb);
    }
    for (; c < c1; c += 8) {  // the last 1..15 columns, padded with zero activations
      alignas(32) uint8_t cb[8] = {};
      alignas(32) float xb[8] = {};
      const int64_t n = std::min<int64_t>(8, c1 - c);
      std::memcpy(cb, row + c, static_cast<size_t>(n));
      std::memcpy(xb, x + c, static_cast<size_t>(n) * sizeof(float));
      ga = _mm256_fmadd_ps(_mm256_sub_ps(byte8(cb, dec), zv), _mm256_load_ps(xb), ga);
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(byte_scale(dec, s[j])), _mm256_add_ps(ga, gb), acc);
  }
  return hsum8(acc);
}

// byte_deq_avx512's contract: out[c] = s[g] * (value(code c) - z[g]).
void byte_deq_avx2(const uint8_t* row, int64_t cols, int64_t group, const float* s, const float* z,
                   ByteDec dec, float* out) {
  const int64_t G = std::min(group, cols);
  for (int64_t c0 = 0, j = 0; c0 < cols; c0 += G, ++j) {
    const int64_t c1 = std::min(cols, c0 + G);
    const __m256 sv = _mm256_set1_ps(byte_scale(dec, s[j])), zv = _mm256_set1_ps(z ? z[j] : 0.0f);
    for (int64_t c = c0; c < c1; c += 8) {
      const int64_t n = std::min<int64_t>(8, c1 - c);
      alignas(32) uint8_t cb[8] = {};
      const uint8_t* src = row + c;
      if (n < 8) {
        std::memcpy(cb, row + c, static_cast<size_t>(n));
        src = cb;
      }
      const __m256 v = _mm256_mul_ps(_mm256_sub_ps(byte8(src, dec), zv), sv);
      if (n == 8) {
        _mm256_storeu_ps(out + c, v);
      } else {
        alignas(32) float tmp[8];
        _mm256_store_ps(tmp, v);
        std::memcpy(out + c, tmp, static_cast<size_t>(n) * sizeof(float));
      }
    }
  }
}

}  // namespace lowbit::kern
