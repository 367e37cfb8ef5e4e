// GGUF k-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) x activations rounded to Q8 blocks of 32, AVX-512 VNNI
// (decode, T < 4). Compiled with -mavx512* -mavx512vnni; called only when the Avx512 tier is active (see
// dispatch.h).
//
// Activations: the same Q8 blocks of 32 as Q4_0/Q8_0 (quantize_q8_blocks: one FP32 scale dx per 32 values),
// so the test oracle is the same Q8-rounded x (matmul_rounds_to_q8). Per-32 activation scales are finer than
// llama.cpp's Q8_K (one scale per 256): the integer sums cannot be combined across sub-blocks before the
// float step, so every 16-lane int32 vector gets its own float factor per lane (one vpermps + one FMA per 64
// weights).
//
// Per token, ggml_k_prep_x lays the int8 codes out so that one 64-byte load meets one 64-byte load of weight
// codes, and precomputes per super-block 16 (Q4_K/Q5_K) or 32 (Q6_K) floats used by the scale/min terms:
//   Q4_K/Q5_K: [dx_j (j = 0..7 sub-blocks of 32), -dx_j * sum(q_j)]  -> y += d*sc_j*dx_j*<w,q> -
//   dmin*m_j*dx_j*sum Q6_K:      [dx of sub-block i (i = 0..15 sub-blocks of 16), -32 * sum(q_i)] -> codes
//   are stored + 32, so
//              y += d*sc_i*dx*(<u,q> - 32*sum(q_i)) with u = stored 6-bit code in [0, 63].
//   Q3_K:      [dx_i, -4 * sum(q_i)]: u = low 2 bits + 4 * high bit in [0, 7], value u - 4, scale sc_i - 32.
//   Q2_K:      [dx_i, -dx_i * sum(q_i)]: y += d*sc_i*dx_i*<u,q> - dmin*m_i*dx_i*sum(q_i), u in [0, 3].
// Weight codes are unsigned (Q2_K 0..3, Q3_K 0..7, Q4_K 0..15, Q5_K 0..31, Q6_K 0..63), which is what
// vpdpbusd wants (u8 x s8).
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "formats/ggml_types.h"
#include "kernels/kernel_plan.h"
#include "kernels/matmul.h"

namespace lowbit::kern {
namespace {

// Q4_K / Q5_K: the 8 six-bit scales and mins of a super-block (12 bytes, layout in formats/ggml_kquants.h),
// unpacked with 32-bit integer ops into 8 scale bytes (low qword) and 8 min bytes (high qword):
//   j < 4:  sc = q[j] & 63,                        m = q[j+4] & 63
//   j >= 4: sc = (q[j+4] & 15) | (q[j-4] >> 6) << 4, m = (q[j+4] >> 4) | (q[j] >> 6) << 4
inline __m128i k4_scales_mins(const uint8_t* q) {
  uint32_t u0, u1, u2;
  std::memcpy(&u0, q, 4);
  std::memcpy(&u1, q + 4, 4);
  std::memcpy(&u2, q + 8, 4);
  const uint32_t sc_lo = u0 & 0x3F3F3F3Fu, m_lo = u1 & 0x3F3F3F3Fu;
  const uint32_t sc_hi = (u2 & 0x0F0F0F0Fu) | ((u0 >> 2) & 0x30303030u);
  const uint32_t m_hi = ((u2 >> 4) & 0x0F0F0F0Fu) | ((u1 >> 2) & 0x30303030u);
  const uint64_t sc = sc_lo | (uint64_t{sc_hi} << 32), m = m_lo | (uint64_t{m_hi} << 32);
  return _mm_set_epi64x(static_cast<int64_t>(m), static_cast<int64_t>(sc));
}

inline __m512i lanes_from_halves(uint8_t a, uint8_t b) {
  return _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(a)), _mm256_set1_epi8(static_cast<char>(b)),
                            1);
}

// Adds `v` to the code bytes of u[k] whose bit t[k] is set in h (the Q3_K / Q5_K high bit of each code).
inline void add_high_bit(__m512i (&u)[4], __m512i h, const __m512i (&t)[4], __m512i v) {
  for (int k = 0; k < 4; ++k) u[k] = _mm512_mask_add_epi8(u[k], _mm512_test_epi8_mask(h, t[k]), u[k], v);
}

// The four int32 sums of a super-block (one vpdpbusd per 64 codes u[k] x activations q[64k..]), each lane
// scaled by its sub-block's factor (f spread over the lanes with idx[k]), accumulated per k; m collects the
// min / offset terms.
struct KAcc {
  __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  __m512 m = _mm512_setzero_ps();
  void add(const __m512i (&u)[4], const int8_t* q, __m512 f, const __m512i (&idx)[4]) {
    for (int k = 0; k < 4; ++k) {
      const __m512i sk = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[k], _mm512_loadu_si512(q + 64 * k));
      a[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sk), _mm512_permutexvar_ps(idx[k], f), a[k]);
    }
  }
  float sum() const {
    return _mm512_reduce_add_ps(
        _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(_mm512_add_ps(a[2], a[3]), m)));
  }
};

// Q4_K (kFive = false) and Q5_K (kFive = true). Super-block: d, dmin (f16), scales[12], [qh[32]], qs[128].
// A 64-byte load of qs covers two 32-byte chunks c, c+1: its low nibbles are elements 64c+0..31 and
// 64(c+1)+0..31 (sub-blocks 2c, 2c+2), its high nibbles elements 64c+32.. and 64(c+1)+32.. (sub-blocks 2c+1,
// 2c+3); ggml_k_prep_x orders the activation codes the same way. The 16 int32 lanes of one vpdpbusd are then
// 8 lanes of one sub-block followed by 8 lanes of another, and vpermps spreads the 8 per-sub-block factors
// over them.
template <bool kFive>
float k4_dot(const uint8_t* row, int64_t cols, const int8_t* qx, const float* xk) {
  constexpr int64_t kBytes = kFive ? 176 : 144, kQs = kFive ? 48 : 16;
  const int64_t nsb = cols / 256;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i i0 = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i i1 = _mm512_add_epi32(i0, _mm512_set1_epi32(1));
  const __m512i i2 = _mm512_add_epi32(i0, _mm512_set1_epi32(4));
  const __m512i i3 = _mm512_add_epi32(i0, _mm512_set1_epi32(5));
  const __m512i idd = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  // Q5_K fifth bits: qh[l] bit 2c (low nibble) / 2c+1 (high nibble) for element l of chunk c.
  const __m512i t0 = lanes_from_halves(0x01, 0x04), t1 = lanes_from_halves(0x02, 0x08);
  const __m512i t2 = lanes_from_halves(0x10, 0x40), t3 = lanes_from_halves(0x20, 0x80);
  const __m512i b16 = _mm512_set1_epi8(16);
  const __m512i idx[4] = {i0, i1, i2, i3};
  KAcc acc;
  for (int64_t s = 0; s < nsb; ++s) {
    const uint8_t* p = row + kBytes * s;
    const int8_t* q = qx + 256 * s;
    uint32_t dw;
    std::memcpy(&dw, p, 4);
    // [d x8, dmin x8] * [sc_j x8, m_j x8] * [dx_j, -dx_j*sum_j]: lanes 0..7 scale each sub-block's integer
    // dot, lanes 8..15 are the min terms themselves (accumulated under a mask).
    const __m512 dd = _mm512_permutexvar_ps(
        idd, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dw)))));
    const __m512 sm = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(k4_scales_mins(p + 4)));
    const __m512 f = _mm512_mul_ps(_mm512_mul_ps(sm, dd), _mm512_loadu_ps(xk + 16 * s));
    acc.m = _mm512_mask_add_ps(acc.m, 0xFF00, acc.m, f);
    const __m512i a = _mm512_loadu_si512(p + kQs), b = _mm512_loadu_si512(p + kQs + 64);
    __m512i u[4] = {_mm512_and_si512(a, m4), _mm512_and_si512(_mm512_srli_epi16(a, 4), m4),
                    _mm512_and_si512(b, m4), _mm512_and_si512(_mm512_srli_epi16(b, 4), m4)};
    if constexpr (kFive)
      add_high_bit(u, _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16))),
                   {t0, t1, t2, t3}, b16);
    acc.add(u, q, f, idx);
  }
  return acc.sum();
}

// Q6_K. Super-block: ql[128], qh[64], scales[16] (int8), d (f16). Per half h (128 elements), a 64-byte load
// of ql[64h..] gives elements 128h+0..63 in its low nibbles and 128h+64..127 in its high nibbles, both in
// natural order; the 2 high bits come from the 32 bytes qh[32h..] (bits 0-1 / 2-3 for the low nibbles of
// bytes 0-31 / 32-63, bits 4-5 / 6-7 for the high nibbles), moved to bit 4-5 with one per-half variable
// 16-bit shift (the masks keep bits from crossing into the neighbouring byte). Sub-block i (16 elements,
// scale[i]) is 4 int32 lanes.
float q6k_dot(const uint8_t* row, int64_t cols, const int8_t* qx, const float* xk) {
  const int64_t nsb = cols / 256;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i mlo = lanes_from_halves(0x03, 0x0C), mhi = lanes_from_halves(0x30, 0xC0);
  const __m512i clo = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i chi = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  const __m512i i0 = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  const __m512i i1 = _mm512_add_epi32(i0, _mm512_set1_epi32(4));
  const __m512i i2 = _mm512_add_epi32(i0, _mm512_set1_epi32(8));
  const __m512i i3 = _mm512_add_epi32(i0, _mm512_set1_epi32(12));
  const __m512i idx[4] = {i0, i1, i2, i3};
  KAcc acc;
  for (int64_t s = 0; s < nsb; ++s) {
    const uint8_t* p = row + 210 * s;
    const int8_t* q = qx + 256 * s;
    uint16_t dh;
    std::memcpy(&dh, p + 208, 2);
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(dh));
    const __m512 sc =
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192))));
    const __m512 f = _mm512_mul_ps(_mm512_mul_ps(sc, d), _mm512_loadu_ps(xk + 32 * s));
    acc.m = _mm512_fmadd_ps(f, _mm512_loadu_ps(xk + 32 * s + 16), acc.m);
    __m512i u[4];
    for (int h = 0; h < 2; ++h) {
      const __m512i l = _mm512_loadu_si512(p + 64 * h);
      const __m512i hb =
          _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128 + 32 * h)));
      u[2 * h] = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_sllv_epi16(_mm512_and_si512(hb, mlo), clo));
      u[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                     _mm512_srlv_epi16(_mm512_and_si512(hb, mhi), chi));
    }
    // u[0] = elements 0..63, u[1] = 64..127, u[2] = 128..191, u[3] = 192..255.
    acc.add({u[0], u[1], u[2], u[3]}, q, f, idx);
  }
  return acc.sum();
}

// Q2_K (kQ3 = false) and Q3_K (kQ3 = true). Super-blocks (layouts in formats/ggml_q2_k.cpp, ggml_q3_k.cpp):
//   Q2_K: scales[16] (low nibble scale, high nibble min), qs[64], d, dmin          84 bytes
//   Q3_K: hmask[32], qs[64], scales[12] (6-bit, +32), d                           110 bytes
// One 64-byte load of qs holds half 0 in bytes 0..31 and half 1 in bytes 32..63; step k (0..3) takes bits
// 2k..2k+1 of every byte: elements 32k + l (half 0) and 128 + 32k + l (half 1), l < 32, i.e. sub-blocks 2k,
// 2k+1 in lanes 0..7 and 8 + 2k, 9 + 2k in lanes 8..15 of the vpdpbusd result. Q3_K's third bit is bit 4h + k
// of hmask[l], tested on the 32 hmask bytes broadcast to both halves. ggml_k_prep_x orders the activation
// codes the same way.
template <bool kQ3>
float k23_dot(const uint8_t* row, int64_t cols, const int8_t* qx, const float* xk) {
  constexpr int64_t kBytes = kQ3 ? 110 : 84, kQs = kQ3 ? 32 : 16;
  const int64_t nsb = cols / 256;
  const __m512i m3 = _mm512_set1_epi8(3), b4 = _mm512_set1_epi8(4);
  const __m512i i0 = _mm512_set_epi32(9, 9, 9, 9, 8, 8, 8, 8, 1, 1, 1, 1, 0, 0, 0, 0);
  const __m512i i1 = _mm512_add_epi32(i0, _mm512_set1_epi32(2));
  const __m512i i2 = _mm512_add_epi32(i0, _mm512_set1_epi32(4));
  const __m512i i3 = _mm512_add_epi32(i0, _mm512_set1_epi32(6));
  const __m512i t0 = lanes_from_halves(0x01, 0x10), t1 = lanes_from_halves(0x02, 0x20);
  const __m512i t2 = lanes_from_halves(0x04, 0x40), t3 = lanes_from_halves(0x08, 0x80);
  const __m512i idx[4] = {i0, i1, i2, i3};
  KAcc acc;
  for (int64_t s = 0; s < nsb; ++s) {
    const uint8_t* p = row + kBytes * s;
    const int8_t* q = qx + 256 * s;
    __m512 f;
    if constexpr (kQ3) {
      uint16_t dh;
      std::memcpy(&dh, p + 108, 2);
      // 16 six-bit scales from 12 bytes (formats/ggml_q3_k.cpp), minus 32.
      uint32_t a, b, c;
      std::memcpy(&a, p + 96, 4);
      std::memcpy(&b, p + 100, 4);
      std::memcpy(&c, p + 104, 4);
      constexpr uint32_t k4 = 0x0F0F0F0Fu, k2 = 0x03030303u;
      const __m128i sc8 = _mm_sub_epi8(_mm_set_epi32(static_cast<int>(((b >> 4) & k4) | ((c >> 6) & k2) << 4),
                                                     static_cast<int>(((a >> 4) & k4) | ((c >> 4) & k2) << 4),
                                                     static_cast<int>((b & k4) | ((c >> 2) & k2) << 4),
                                                     static_cast<int>((a & k4) | (c & k2) << 4)),
                                       _mm_set1_epi8(32));
      const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc8));
      f = _mm512_mul_ps(_mm512_mul_ps(sc, _mm512_set1_ps(_cvtsh_ss(dh))), _mm512_loadu_ps(xk + 32 * s));
      acc.m = _mm512_fmadd_ps(f, _mm512_loadu_ps(xk + 32 * s + 16), acc.m);  // -4 * sum(q_i) * factor
    } else {
      uint16_t dh, mh;
      std::memcpy(&dh, p + 80, 2);
      std::memcpy(&mh, p + 82, 2);
      const __m512i sm = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      const __m512 sc = _mm512_cvtepi32_ps(_mm512_and_si512(sm, _mm512_set1_epi32(15)));
      const __m512 mn = _mm512_cvtepi32_ps(_mm512_srli_epi32(sm, 4));
      f = _mm512_mul_ps(_mm512_mul_ps(sc, _mm512_set1_ps(_cvtsh_ss(dh))), _mm512_loadu_ps(xk + 32 * s));
      acc.m =
          _mm512_fmadd_ps(_mm512_mul_ps(mn, _mm512_set1_ps(_cvtsh_ss(mh))), _mm512_loadu_ps(xk + 32 * s + 16),
                          acc.m);  // -dmin * m_i * dx_i * sum(q_i)
    }
    const __m512i qs = _mm512_loadu_si512(p + kQs);
    __m512i u[4] = {_mm512_and_si512(qs, m3), _mm512_and_si512(_mm512_srli_epi16(qs, 2), m3),
                    _mm512_and_si512(_mm512_srli_epi16(qs, 4), m3),
                    _mm512_and_si512(_mm512_srli_epi16(qs, 6), m3)};
    if constexpr (kQ3)
      add_high_bit(u, _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))),
                   {t0, t1, t2, t3}, b4);
    acc.add(u, q, f, idx);
  }
  return acc.sum();
}

}  // namespace

void ggml_k_prep_x(int ggml_type, const float* x, int64_t cols, int8_t* qk, float* xk) {
  thread_local std::vector<int8_t> qn;
  thread_local std::vector<float> dx;
  qn.resize(static_cast<size_t>(cols));
  dx.resize(static_cast<size_t>(cols / 32));
  quantize_q8_blocks(x, cols, qn.data(), dx.data());
  const int64_t nsb = cols / 256;
  auto sum = [&](int64_t i0, int n) {
    int s = 0;
    for (int i = 0; i < n; ++i) s += qn[i0 + i];
    return s;
  };
  for (int64_t s = 0; s < nsb; ++s) {
    const int64_t base = 256 * s;
    if (ggml_type == ggml::Q2_K || ggml_type == ggml::Q3_K) {
      // Step k meets elements 32k.. (half 0) and 128 + 32k.. (half 1).
      for (int k = 0; k < 4; ++k) {
        std::memcpy(qk + base + 64 * k, qn.data() + base + 32 * k, 32);
        std::memcpy(qk + base + 64 * k + 32, qn.data() + base + 128 + 32 * k, 32);
      }
      for (int i = 0; i < 16; ++i) {
        const float dxi = dx[8 * s + i / 2], si = static_cast<float>(sum(base + 16 * i, 16));
        xk[32 * s + i] = dxi;
        xk[32 * s + 16 + i] = ggml_type == ggml::Q3_K ? -4.0f * si : -dxi * si;
      }
      continue;
    }
    if (ggml_type == ggml::Q6_K) {
      std::memcpy(qk + base, qn.data() + base, 256);
      for (int i = 0; i < 16; ++i) {
        xk[32 * s + i] = dx[8 * s + i / 2];
        xk[32 * s + 16 + i] = -32.0f * static_cast<float>(sum(base + 16 * i, 16));
      }
      continue;
    }
    // Per 128 elements: [0..31, 64..95] meet the low nibbles of one 64-byte qs load, [32..63, 96..127] the
    // high.
    for (int64_t h = 0; h < 256; h += 128) {
      const int8_t* src = qn.data() + base + h;
      int8_t* dst = qk + base + h;
      std::memcpy(dst, src, 32);
      std::memcpy(dst + 32, src + 64, 32);
      std::memcpy(dst + 64, src + 32, 32);
      std::memcpy(dst + 96, src + 96, 32);
    }
    for (int j = 0; j < 8; ++j) {
      xk[16 * s + j] = dx[8 * s + j];
      xk[16 * s + 8 + j] = -dx[8 * s + j] * static_cast<float>(sum(base + 32 * j, 32));
    }
  }
}

float ggml_k_dot_avx512(int ggml_type, const uint8_t* row, int64_t cols, const int8_t* qk, const float* xk) {
  switch (ggml_type) {
    case ggml::Q4_K:
      return k4_dot<false>(row, cols, qk, xk);
    case ggml::Q5_K:
      return k4_dot<true>(row, cols, qk, xk);
    case ggml::Q2_K:
      return k23_dot<false>(row, cols, qk, xk);
    case ggml::Q3_K:
      return k23_dot<true>(row, cols, qk, xk);
    default:
      return q6k_dot(row, cols, qk, xk);
  }
}

}  // namespace lowbit::kern
