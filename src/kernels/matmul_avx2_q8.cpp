// AVX2 + FMA tier: GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 rows against activations rounded to Q8 blocks of 32
// (the tier's "q8dot" kernel, decode and prefill). Without VNNI the integer product is vpmaddubsw (unsigned x
// signed bytes -> saturating int16 pairs) then vpmaddwd by ones (-> int32). No pair can saturate here:
//   Q4_0: unsigned nibble u (0..15) x q (|q| <= 127), the offset 8 taken off with 8 * sum(q) per lane;
//   Q4_1 / Q5_0 / Q5_1: unsigned u (0..31), the min (or Q5_0's -16 d) times sum(q) per lane;
//   Q8_0: signed w, so |w| (as unsigned, 0..128) x sign(w) * q: at most 2 * 128 * 127 = 32512.
// Each block adds dw * dx * (its int32 lanes as float); the lanes are summed at the end, so the result equals
// the scalar reference up to float summation order (tests/kernels/test_q8_avx2.cpp).
#include <immintrin.h>

#include <cstring>

#include "formats/ggml_kquants.h"
#include "formats/ggml_types.h"
#include "kernels/kernel_plan.h"
#include "kernels/lane_avx2.h"

namespace lowbit::kern {

namespace {

inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// The 32 nibbles of a 16-byte block as bytes 0..15 in element order: element j < 16 is the low nibble of
// byte j, element j + 16 its high nibble (the GGUF layout of Q4_0 / Q4_1 / Q5_0 / Q5_1).
inline __m256i nibbles(const uint8_t* qs) {
  // The 16 bytes in both halves (one load), the upper half shifted right by 4 per 64-bit lane: each byte's
  // low 4 bits are then its low nibble (lower half) or its high nibble (upper half); the mask drops what
  // the shift carried in from the next byte.
  const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0F));
}

// Byte j = 0x10 where bit j of the 32-bit qh is set, else 0 (the fifth bit of Q5_0 / Q5_1 element j).
inline __m256i fifth_bits(const uint8_t* qh) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return bits_to_bytes(h, 0x10);
}

// int32 lanes of sum u[i] * q[i] for u unsigned (0..255, pairs within int16), q signed.
inline __m256i udot(__m256i u, __m256i q) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, q), _mm256_set1_epi16(1));
}

// int32 lanes of sum w[i] * q[i] for w signed (-128..127), q signed (-127..127).
inline __m256i sdot(__m256i w, __m256i q) {
  return udot(_mm256_sign_epi8(w, w), _mm256_sign_epi8(q, w));
}

inline __m256i load32(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

}  // namespace

bool ggml_q8_avx2_supported(int ggml_type) {
  return ggml_type == ggml::Q4_0 || ggml_type == ggml::Q4_1 || ggml_type == ggml::Q5_0 ||
         ggml_type == ggml::Q5_1 || ggml_type == ggml::Q8_0 || ggml_k_avx2_supported(ggml_type);
}

bool ggml_k_avx2_supported(int ggml_type) {
  return ggml_type == ggml::Q4_K || ggml_type == ggml::Q6_K;
}

void quantize_q8_blocks_avx2(const float* x, int64_t n, int8_t* q, float* d) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + 32 * b;
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(xb + 8 * i);
    // max of |x|: max_ps keeps its second operand on NaN, as the scalar fmax keeps the number.
    __m256 m = _mm256_and_ps(v[0], abs_mask);
    for (int i = 1; i < 4; ++i) m = _mm256_max_ps(_mm256_and_ps(v[i], abs_mask), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float amax = _mm_cvtss_f32(h);
    const float db = amax / 127.0f;
    d[b] = db;
    const __m256 id = _mm256_set1_ps(db > 0 ? 1.0f / db : 0.0f);
    // Round to nearest even (std::nearbyint in the default rounding mode), then narrow with saturation.
    __m256i qi[4];
    for (int i = 0; i < 4; ++i)
      qi[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], id), _MM_FROUND_TO_NEAREST_INT));
    const __m256i p16 = _mm256_packs_epi32(qi[0], qi[1]), q16 = _mm256_packs_epi32(qi[2], qi[3]);
    // packs works per 128-bit lane: bytes come out as dwords 0 2 4 6 1 3 5 7 of the element order.
    const __m256i p8 = _mm256_packs_epi16(p16, q16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b),
                        _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  }
}

float ggml_q8_dot_avx2(int ggml_type, const uint8_t* row, int64_t cols, const int8_t* qx, const float* dx) {
  const int64_t nb = cols / 32;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  if (ggml_type == ggml::Q4_0) {  // d (f16), qs[16]; w = d * (u - 8)
    const __m256i eight = _mm256_set1_epi8(8);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* p = row + 18 * b;
      const __m256i xq = load32(qx + 32 * b);
      const __m256i is = _mm256_sub_epi32(udot(nibbles(p + 2), xq), udot(eight, xq));
      const __m256 d = _mm256_set1_ps(f16_at(p) * dx[b]);
      if (b & 1)
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), d, acc1);
      else
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), d, acc0);
    }
  } else if (ggml_type == ggml::Q8_0) {  // d (f16), qs[32] int8
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* p = row + 34 * b;
      const __m256i is = sdot(load32(p + 2), load32(qx + 32 * b));
      const __m256 d = _mm256_set1_ps(f16_at(p) * dx[b]);
      if (b & 1)
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), d, acc1);
      else
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), d, acc0);
    }
  } else {
    // Q4_1: d, m (f16), qs[16]          w = d * u + m
    // Q5_0: d (f16), qh[4], qs[16]      w = d * (u - 16), u = nibble | fifth bit << 4
    // Q5_1: d, m (f16), qh[4], qs[16]   w = d * u + m
    // sum_i w_i x_i = dx * (d * sum u q + m * sum q), Q5_0 with m = -16 d.
    const bool has_m = ggml_type != ggml::Q5_0, has_h = ggml_type != ggml::Q4_1;
    const int64_t bs = ggml_type == ggml::Q4_1 ? 20 : ggml_type == ggml::Q5_0 ? 22 : 24;
    const int64_t qs_off = (has_m ? 4 : 2) + (has_h ? 4 : 0);
    const __m256i ones = _mm256_set1_epi8(1);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* p = row + bs * b;
      __m256i u = nibbles(p + qs_off);
      if (has_h) u = _mm256_or_si256(u, fifth_bits(p + (has_m ? 4 : 2)));
      const __m256i xq = load32(qx + 32 * b);
      const __m256 qdot = _mm256_cvtepi32_ps(udot(u, xq));
      const __m256 xsum = _mm256_cvtepi32_ps(udot(ones, xq));
      const float d = f16_at(p), m = has_m ? f16_at(p + 2) : -16.0f * d;
      const __m256 t =
          _mm256_fmadd_ps(qdot, _mm256_set1_ps(d * dx[b]), _mm256_mul_ps(xsum, _mm256_set1_ps(m * dx[b])));
      if (b & 1)
        acc1 = _mm256_add_ps(acc1, t);
      else
        acc0 = _mm256_add_ps(acc0, t);
    }
  }
  return hsum8(_mm256_add_ps(acc0, acc1));
}

// Four Q4_0 or Q8_0 rows against one token: the rows share each activation load (and Q4_0's offset term, one
// 8 * sum(q) per block), and the core gets four independent accumulation chains.
void ggml_q8_dot4_avx2(int ggml_type, const uint8_t* const* rows, int64_t cols, const int8_t* qx,
                       const float* dx, float* out) {
  const int64_t nb = cols / 32;
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  if (ggml_type == ggml::Q4_0) {
    const __m256i eight = _mm256_set1_epi8(8);
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i xq = load32(qx + 32 * b);
      const __m256i xo = udot(eight, xq);
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const uint8_t* p = rows[i] + 18 * b;
        const __m256i is = _mm256_sub_epi32(udot(nibbles(p + 2), xq), xo);
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_set1_ps(f16_at(p) * dx[b]), acc[i]);
      }
    }
  } else {  // Q8_0
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i xq = load32(qx + 32 * b);
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const uint8_t* p = rows[i] + 34 * b;
        const __m256i is = sdot(load32(p + 2), xq);
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_set1_ps(f16_at(p) * dx[b]), acc[i]);
      }
    }
  }
  for (int i = 0; i < 4; ++i) out[i] = hsum8(acc[i]);
}

// Q4_K (144 bytes per 256: d, dmin, 12 bytes of 6-bit scales / mins, 128 bytes of nibbles; sub-block j of 32
// has w = d sc_j u - dmin m_j) and Q6_K (210 bytes: ql[128], qh[64], int8 scales[16], d; sub-blocks of 16,
// w = d sc_i (u - 32), u = 4 low bits from ql | 2 high bits from qh << 4) against Q8 blocks of 32 (bsum: each
// block's code sum, for Q4_K's mins).
float ggml_k_dot_avx2(int ggml_type, const uint8_t* row, int64_t cols, const int8_t* qx, const float* dx,
                      const int32_t* bsum) {
  const int64_t ns = cols / 256;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  if (ggml_type == ggml::Q4_K) {
    float mins = 0;
    for (int64_t s = 0; s < ns; ++s) {
      const uint8_t* p = row + 144 * s;
      const float d = f16_at(p), dmin = f16_at(p + 2);
      uint8_t sc[8], m[8];
      for (int j = 0; j < 8; ++j) formats_detail::k4_scale_min(j, p + 4, &sc[j], &m[j]);
      float ms = 0;
      for (int c = 0; c < 4; ++c) {
        const __m256i v = load32(p + 16 + 32 * c);
        const int64_t b0 = 8 * s + 2 * c, b1 = b0 + 1;
        const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(udot(lo, load32(qx + 32 * b0))),
                               _mm256_set1_ps(d * sc[2 * c] * dx[b0]), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(udot(hi, load32(qx + 32 * b1))),
                               _mm256_set1_ps(d * sc[2 * c + 1] * dx[b1]), acc1);
        ms += m[2 * c] * dx[b0] * static_cast<float>(bsum[b0]) +
              m[2 * c + 1] * dx[b1] * static_cast<float>(bsum[b1]);
      }
      mins += dmin * ms;
    }
    return hsum8(_mm256_add_ps(acc0, acc1)) - mins;
  }
  // Q6_K
  const __m256i m2 = _mm256_set1_epi8(3), k32 = _mm256_set1_epi8(32);
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* p = row + 210 * s;
    const float d = f16_at(p + 208);
    const auto* sc = reinterpret_cast<const int8_t*>(p + 192);
    for (int n = 0; n < 2; ++n) {
      const __m256i l0 = load32(p + 64 * n), l1 = load32(p + 64 * n + 32), h = load32(p + 128 + 32 * n);
      // Elements 128n + 32k .. +31 (k = 0..3): low nibbles of ql[0..31] / ql[32..63], then their high
      // nibbles, with bits 2k..2k+1 of qh as bits 4..5.
      const __m256i u[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(h, m2), 4)),
          _mm256_or_si256(_mm256_and_si256(l1, m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4))};
      for (int k = 0; k < 4; ++k) {
        const int64_t b = 8 * s + 4 * n + k;
        const __m256i xq = load32(qx + 32 * b);
        const __m256i is = _mm256_sub_epi32(udot(u[k], xq), udot(k32, xq));
        // int32 lanes 0..3 hold elements 0..15 of the block (scale sc[8n + 2k]), lanes 4..7 elements 16..31.
        const float f = d * dx[b];
        const __m256 sv =
            _mm256_set_m128(_mm_set1_ps(f * sc[8 * n + 2 * k + 1]), _mm_set1_ps(f * sc[8 * n + 2 * k]));
        if (k & 1)
          acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), sv, acc1);
        else
          acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), sv, acc0);
      }
    }
  }
  return hsum8(_mm256_add_ps(acc0, acc1));
}

}  // namespace lowbit::kern
