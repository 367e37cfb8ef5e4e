// Tiled prefill attention (see attn_tiled.h). Per tile of kAttnTile cached rows:
//   1. the cache decodes K and V once (AttnRows::load); K is transposed so 16 positions are one vector,
//   2. scores S[r, j] = q_r . k_j for all rows r = (query, group head) that see part of the tile,
//   3. online softmax per row over the visible prefix of the tile (positions are sorted, so the causal
//      mask of a query is a prefix count), P written back into S with zeros past the prefix,
//   4. O_r = alpha_r O_r + P_r V.
// The final division by the softmax sum happens once per row at the end.
#include "kernels/attn_tiled.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/exp_avx512.h"
#include "kernels/matmul.h"

namespace lowbit {

namespace {
using kern::exp512;

constexpr int64_t KT = kAttnTile;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Per-thread buffers, kept across calls: prefill runs one call per (layer, kv head, query block).
struct Buffers {
  std::vector<float> k, v, kt, s, o, mx, l, alpha;
  std::vector<int64_t> pos, cnt;
};

template <typename T>
void grow(std::vector<T>& x, int64_t n) {
  if (x.size() < static_cast<size_t>(n)) x.resize(static_cast<size_t>(n));
}

// ---- portable path (dot_f32 / axpy_f32 follow the kernels' ISA tier) ----
void tile_generic(Buffers& b, int64_t i0, int64_t m, int ng, int64_t hd, const float* q, int64_t q_stride) {
  for (int64_t i = i0; i < m; ++i) {
    const int64_t c = b.cnt[i];
    for (int g = 0; g < ng; ++g) {
      const int64_t r = i * ng + g;
      const float* qr = q + i * q_stride + g * hd;
      float* s = b.s.data() + r * KT;
      float mt = kNegInf;
      for (int64_t j = 0; j < c; ++j) mt = std::max(mt, s[j] = dot_f32(qr, b.k.data() + j * hd, hd));
      const float mnew = std::max(b.mx[r], mt), a = std::exp(b.mx[r] - mnew);
      float* o = b.o.data() + r * hd;
      if (a != 1.0f)
        for (int64_t d = 0; d < hd; ++d) o[d] *= a;
      float sum = 0;
      for (int64_t j = 0; j < c; ++j) {
        const float p = std::exp(s[j] - mnew);
        sum += p;
        axpy_f32(p, b.v.data() + j * hd, o, hd);
      }
      b.l[r] = b.l[r] * a + sum;
      b.mx[r] = mnew;
    }
  }
}

// ---- AVX-512 path (head_dim % 16 == 0) ----
#define LOWBIT_AVX512 __attribute__((target("avx512f,avx512dq")))

LOWBIT_AVX512 void exp_avx512(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, k, exp512(_mm512_maskz_loadu_ps(k, x + i)));
  }
}

// S[rr, 0..64) = q_rr . K^T for RB rows; kt is [hd, KT].
template <int RB>
LOWBIT_AVX512 void scores_avx512(const float* const* qr, const float* kt, int64_t hd, float* s) {
  __m512 acc[RB][4];
  for (int rr = 0; rr < RB; ++rr)
    for (int c = 0; c < 4; ++c) acc[rr][c] = _mm512_setzero_ps();
  for (int64_t d = 0; d < hd; ++d) {
    const float* kd = kt + d * KT;
    const __m512 k0 = _mm512_loadu_ps(kd), k1 = _mm512_loadu_ps(kd + 16), k2 = _mm512_loadu_ps(kd + 32),
                 k3 = _mm512_loadu_ps(kd + 48);
    for (int rr = 0; rr < RB; ++rr) {
      const __m512 qb = _mm512_set1_ps(qr[rr][d]);
      acc[rr][0] = _mm512_fmadd_ps(qb, k0, acc[rr][0]);
      acc[rr][1] = _mm512_fmadd_ps(qb, k1, acc[rr][1]);
      acc[rr][2] = _mm512_fmadd_ps(qb, k2, acc[rr][2]);
      acc[rr][3] = _mm512_fmadd_ps(qb, k3, acc[rr][3]);
    }
  }
  for (int rr = 0; rr < RB; ++rr)
    for (int c = 0; c < 4; ++c) _mm512_storeu_ps(s + rr * KT + 16 * c, acc[rr][c]);
}

// Online softmax step of one row over its first c (1..KT) scores: P = exp(S - m_new) in place, zero past c.
LOWBIT_AVX512 void softmax_row_avx512(float* s, int64_t c, float& mx, float& l, float& alpha) {
  __mmask16 mk[4];
  __m512 vmax = _mm512_set1_ps(kNegInf);
  for (int k = 0; k < 4; ++k) {
    const int64_t n = std::clamp<int64_t>(c - 16 * k, 0, 16);
    mk[k] = n == 16 ? 0xFFFF : static_cast<__mmask16>((1u << n) - 1);
    vmax = _mm512_mask_max_ps(vmax, mk[k], vmax, _mm512_loadu_ps(s + 16 * k));
  }
  const float mnew = std::max(mx, _mm512_reduce_max_ps(vmax));
  alpha = std::exp(mx - mnew);
  const __m512 vm = _mm512_set1_ps(mnew);
  __m512 vsum = _mm512_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    const __m512 p = _mm512_maskz_mov_ps(mk[k], exp512(_mm512_sub_ps(_mm512_loadu_ps(s + 16 * k), vm)));
    _mm512_storeu_ps(s + 16 * k, p);
    vsum = _mm512_add_ps(vsum, p);
  }
  l = l * alpha + _mm512_reduce_add_ps(vsum);
  mx = mnew;
}

// O[rr, c0 .. c0 + 16 NC) = alpha_rr O + sum_{j < jmax} P[rr, j] V[j] for RB rows.
template <int RB, int NC>
LOWBIT_AVX512 void pv_avx512(const float* p, const float* v, int64_t hd, int64_t jmax, const float* alpha,
                             float* o, int64_t c0) {
  __m512 acc[RB][NC];
  for (int rr = 0; rr < RB; ++rr)
    for (int c = 0; c < NC; ++c)
      acc[rr][c] = _mm512_mul_ps(_mm512_loadu_ps(o + rr * hd + c0 + 16 * c), _mm512_set1_ps(alpha[rr]));
  for (int64_t j = 0; j < jmax; ++j) {
    __m512 vv[NC];
    for (int c = 0; c < NC; ++c) vv[c] = _mm512_loadu_ps(v + j * hd + c0 + 16 * c);
    for (int rr = 0; rr < RB; ++rr) {
      const __m512 pb = _mm512_set1_ps(p[rr * KT + j]);
      for (int c = 0; c < NC; ++c) acc[rr][c] = _mm512_fmadd_ps(pb, vv[c], acc[rr][c]);
    }
  }
  for (int rr = 0; rr < RB; ++rr)
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(o + rr * hd + c0 + 16 * c, acc[rr][c]);
}

template <int RB>
void pv_rows(const float* p, const float* v, int64_t hd, int64_t jmax, const float* alpha, float* o) {
  for (int64_t c0 = 0; c0 < hd; c0 += 64) {
    switch (std::min<int64_t>(4, (hd - c0) / 16)) {
      case 4:
        pv_avx512<RB, 4>(p, v, hd, jmax, alpha, o, c0);
        break;
      case 3:
        pv_avx512<RB, 3>(p, v, hd, jmax, alpha, o, c0);
        break;
      case 2:
        pv_avx512<RB, 2>(p, v, hd, jmax, alpha, o, c0);
        break;
      default:
        pv_avx512<RB, 1>(p, v, hd, jmax, alpha, o, c0);
        break;
    }
  }
}

void tile_avx512(Buffers& b, int64_t len, int64_t i0, int64_t m, int ng, int64_t hd, const float* q,
                 int64_t q_stride) {
  // Padding rows: their scores are computed (the micro-kernel always does 64 columns) and then masked, and P
  // = 0 there, but stale NaNs in V would still poison 0 * v, hence zeros.
  if (len < KT) {
    std::fill(b.k.begin() + len * hd, b.k.begin() + KT * hd, 0.0f);
    std::fill(b.v.begin() + len * hd, b.v.begin() + KT * hd, 0.0f);
  }
  for (int64_t j = 0; j < KT; ++j)
    for (int64_t d = 0; d < hd; ++d) b.kt[d * KT + j] = b.k[j * hd + d];
  const int64_t r0 = i0 * ng, R = m * ng;
  for (int64_t r = r0; r < R; r += 4) {
    const int rb = static_cast<int>(std::min<int64_t>(4, R - r));
    const float* qr[4];
    for (int rr = 0; rr < rb; ++rr) qr[rr] = q + (r + rr) / ng * q_stride + (r + rr) % ng * hd;
    float* s = b.s.data() + r * KT;
    switch (rb) {
      case 4:
        scores_avx512<4>(qr, b.kt.data(), hd, s);
        break;
      case 3:
        scores_avx512<3>(qr, b.kt.data(), hd, s);
        break;
      case 2:
        scores_avx512<2>(qr, b.kt.data(), hd, s);
        break;
      default:
        scores_avx512<1>(qr, b.kt.data(), hd, s);
        break;
    }
    for (int rr = 0; rr < rb; ++rr)
      softmax_row_avx512(s + rr * KT, b.cnt[(r + rr) / ng], b.mx[r + rr], b.l[r + rr], b.alpha[r + rr]);
    // Rows are ordered by query, so the last row of the block sees the longest prefix.
    const int64_t jmax = b.cnt[(r + rb - 1) / ng];
    float* o = b.o.data() + r * hd;
    const float* al = b.alpha.data() + r;
    switch (rb) {
      case 4:
        pv_rows<4>(s, b.v.data(), hd, jmax, al, o);
        break;
      case 3:
        pv_rows<3>(s, b.v.data(), hd, jmax, al, o);
        break;
      case 2:
        pv_rows<2>(s, b.v.data(), hd, jmax, al, o);
        break;
      default:
        pv_rows<1>(s, b.v.data(), hd, jmax, al, o);
        break;
    }
  }
}

}  // namespace

void attn_exp(const float* x, float* y, int64_t n) {
  if (kernel_isa() >= Isa::Avx512) return exp_avx512(x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}

void attend_tiled_rows(const AttnRows& rows, int64_t n_rows, const int64_t* qpos, int64_t m, int n_group,
                       int64_t hd, const float* q, int64_t q_stride, float* out, int64_t out_stride) {
  if (m <= 0) return;
  const int64_t R = m * n_group;
  thread_local Buffers b;
  grow(b.k, KT * hd), grow(b.v, KT * hd), grow(b.kt, KT * hd), grow(b.s, R * KT), grow(b.o, R * hd);
  grow(b.mx, R), grow(b.l, R), grow(b.alpha, R), grow(b.pos, KT), grow(b.cnt, m);
  std::fill(b.o.begin(), b.o.begin() + R * hd, 0.0f);
  std::fill(b.mx.begin(), b.mx.begin() + R, kNegInf);
  std::fill(b.l.begin(), b.l.begin() + R, 0.0f);
  const bool simd = kernel_isa() >= Isa::Avx512 && hd % 16 == 0;
  for (int64_t j0 = 0; j0 < n_rows; j0 += KT) {
    const int64_t len = std::min(KT, n_rows - j0);
    rows.load(j0, j0 + len, b.k.data(), b.v.data(), b.pos.data());
    // Queries before i0 see nothing of this tile (nor of later ones: positions only grow).
    const int64_t i0 = std::lower_bound(qpos, qpos + m, b.pos[0]) - qpos;
    if (i0 == m) break;
    for (int64_t i = i0; i < m; ++i)
      b.cnt[i] = std::upper_bound(b.pos.data(), b.pos.data() + len, qpos[i]) - b.pos.data();
    if (simd)
      tile_avx512(b, len, i0, m, n_group, hd, q, q_stride);
    else
      tile_generic(b, i0, m, n_group, hd, q, q_stride);
  }
  for (int64_t r = 0; r < R; ++r) {
    const float inv = b.l[r] > 0 ? 1.0f / b.l[r] : 0.0f;
    float* dst = out + r / n_group * out_stride + r % n_group * hd;
    const float* o = b.o.data() + r * hd;
    for (int64_t d = 0; d < hd; ++d) dst[d] = o[d] * inv;
  }
}

}  // namespace lowbit
