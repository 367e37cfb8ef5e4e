#include "kernels/matmul_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/half.h"

#include "core/parallel.h"
#include "kernels/exp_avx512.h"
#include "kernels/kernel_plan.h"
#include "kernels/prefetch.h"

namespace lowbit {
namespace {

using kern::prefetch_far;
using kern::prefetch_to_l2;

template <WeightKind K>
constexpr int64_t kElemBytes = K == WeightKind::F32 ? 4 : 2;

// Loads 16 weights of row `p` starting at element i as float32.
template <WeightKind K>
inline __m512 load16(const uint8_t* p, int64_t i) {
  if constexpr (K == WeightKind::F32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(p) + i);
  } else if constexpr (K == WeightKind::F16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * i)));
  } else {
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
  }
}

template <WeightKind K>
inline __m512 load_tail(const uint8_t* p, int64_t i, __mmask16 m) {
  if constexpr (K == WeightKind::F32) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(p) + i);
  } else if constexpr (K == WeightKind::F16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p + 2 * i));
  } else {
    __m256i b = _mm256_maskz_loadu_epi16(m, p + 2 * i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
  }
}

// 4 rows x up to 4 tokens register tile: each weight vector is loaded once and used for every token.
template <WeightKind K, int NT>
void tile(const uint8_t* w, size_t rb, int64_t cols, const float* x, int64_t r, int64_t t, int64_t nrows_here,
          float* y, int64_t ystride) {
  __m512 acc[4][NT];
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < NT; ++b) acc[a][b] = _mm512_setzero_ps();
  const uint8_t* rows[4];
  for (int a = 0; a < 4; ++a) rows[a] = w + (r + std::min<int64_t>(a, nrows_here - 1)) * rb;
  const bool l2 = prefetch_to_l2(4 * static_cast<int64_t>(rb), 4 * NT * cols);  // FP32 activations
  int64_t i = 0;
  for (; i + 16 <= cols; i += 16) {
    __m512 xv[NT];
    for (int b = 0; b < NT; ++b) xv[b] = _mm512_loadu_ps(x + (t + b) * cols + i);
    for (int a = 0; a < 4; ++a) {
      // Token tails (T = 2, 3) stream the weights from DRAM once: software prefetch 4 KiB ahead in each row
      // keeps more lines in flight than the hardware prefetcher does for four interleaved rows (+30 % when
      // this tile served T = 1 too; 2 KiB gave +12 %, 8 KiB the same as 4 KiB). Prefetching past the end is
      // harmless.
      if constexpr (NT == 1) prefetch_far(rows[a] + kElemBytes<K> * i + 4096, l2);
      __m512 wv = load16<K>(rows[a], i);
      for (int b = 0; b < NT; ++b) acc[a][b] = _mm512_fmadd_ps(wv, xv[b], acc[a][b]);
    }
  }
  if (i < cols) {
    __mmask16 m = static_cast<__mmask16>((1u << (cols - i)) - 1);
    __m512 xv[NT];
    for (int b = 0; b < NT; ++b) xv[b] = _mm512_maskz_loadu_ps(m, x + (t + b) * cols + i);
    for (int a = 0; a < 4; ++a) {
      __m512 wv = load_tail<K>(rows[a], i, m);
      for (int b = 0; b < NT; ++b) acc[a][b] = _mm512_fmadd_ps(wv, xv[b], acc[a][b]);
    }
  }
  for (int a = 0; a < nrows_here && a < 4; ++a)
    for (int b = 0; b < NT; ++b) y[(t + b) * ystride + r + a] = _mm512_reduce_add_ps(acc[a][b]);
}

// BF16 decode: 32 weights per 64-byte load; the even elements are the low halves of the dwords (shift left
// 16), the odd ones the high halves (mask), against activations split once into even/odd halves per 32 (xeo).
float row_dot_bf16eo(const uint8_t* row, int64_t cols, const float* xeo) {
  const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(),
         a3 = _mm512_setzero_ps();
  int64_t i = 0;
  const bool l2 = prefetch_to_l2(2 * cols, 4 * cols);  // the row, FP32 activations (xeo)
  for (; i + 64 <= cols; i += 64) {
    // 4 KiB ahead: +5-15 % from DRAM here (each iteration has more instructions per byte than the F32 loop,
    // so fewer loads are in flight); the F32 / F16 loops measured faster without.
    prefetch_far(row + 2 * i + 4096, l2);
    prefetch_far(row + 2 * i + 4096 + 64, l2);
    const __m512i v0 = _mm512_loadu_si512(row + 2 * i), v1 = _mm512_loadu_si512(row + 2 * i + 64);
    a0 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v0, 16)), _mm512_loadu_ps(xeo + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(v0, hi)), _mm512_loadu_ps(xeo + i + 16), a1);
    a2 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v1, 16)), _mm512_loadu_ps(xeo + i + 32), a2);
    a3 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(v1, hi)), _mm512_loadu_ps(xeo + i + 48), a3);
  }
  for (; i + 32 <= cols; i += 32) {
    const __m512i v0 = _mm512_loadu_si512(row + 2 * i);
    a0 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v0, 16)), _mm512_loadu_ps(xeo + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(v0, hi)), _mm512_loadu_ps(xeo + i + 16), a1);
  }
  float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  for (; i < cols; ++i) {  // xeo holds the tail in natural order
    uint16_t h;
    std::memcpy(&h, row + 2 * i, 2);
    s += bf16_to_f32(h) * xeo[i];
  }
  return s;
}

// Decode (one token): one row at a time, so a thread reads its rows as one sequential stream. Streaming a
// 151936 x 896 matrix from DRAM on one core: F32 13.5 -> 19-25 GB/s, BF16 10.3 -> 19-21 GB/s (with the
// even/odd split below) against the 4-row tile, whose four interleaved row streams the prefetchers follow
// worse.
template <WeightKind K>
float row_dot(const uint8_t* row, int64_t cols, const float* x) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(),
         a3 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= cols; i += 64) {
    a0 = _mm512_fmadd_ps(load16<K>(row, i), _mm512_loadu_ps(x + i), a0);
    a1 = _mm512_fmadd_ps(load16<K>(row, i + 16), _mm512_loadu_ps(x + i + 16), a1);
    a2 = _mm512_fmadd_ps(load16<K>(row, i + 32), _mm512_loadu_ps(x + i + 32), a2);
    a3 = _mm512_fmadd_ps(load16<K>(row, i + 48), _mm512_loadu_ps(x + i + 48), a3);
  }
  for (; i + 16 <= cols; i += 16) a0 = _mm512_fmadd_ps(load16<K>(row, i), _mm512_loadu_ps(x + i), a0);
  if (i < cols) {
    const __mmask16 m = static_cast<__mmask16>((1u << (cols - i)) - 1);
    a1 = _mm512_fmadd_ps(load_tail<K>(row, i, m), _mm512_maskz_loadu_ps(m, x + i), a1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

template <WeightKind K>
void run(const WeightMatrix& w, const float* x, int64_t T, float* y) {
  const size_t rb = w.row_bytes();
  const int64_t rows = w.rows, cols = w.cols;
  // Parallel over row blocks; within a block, all tokens, so each weight row is read from memory once per
  // call.
  const int64_t rblock = 64;
  // Small products stay on the calling thread (waking the pool costs more than ~48 KiB of weight traffic).
  const int64_t nblocks = (rows + rblock - 1) / rblock;
  const bool serial =
      static_cast<double>(rb) * static_cast<double>(rows) * static_cast<double>(T) < 48 * 1024;
  thread_local std::vector<float> xeo_buf;
  const float* xeo = nullptr;
  if (K == WeightKind::BF16 && T == 1) {
    xeo_buf.resize(static_cast<size_t>(cols));
    int64_t i = 0;
    for (; i + 32 <= cols; i += 32)
      for (int j = 0; j < 16; ++j) xeo_buf[i + j] = x[i + 2 * j], xeo_buf[i + 16 + j] = x[i + 2 * j + 1];
    for (; i < cols; ++i) xeo_buf[i] = x[i];
    xeo = xeo_buf.data();
  }
  parallel_for(nblocks, serial ? nblocks : 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int64_t r0 = b * rblock, r1 = std::min(rows, r0 + rblock);
      if (T == 1) {
        if constexpr (K == WeightKind::BF16)
          for (int64_t r = r0; r < r1; ++r) y[r] = row_dot_bf16eo(w.data + r * rb, cols, xeo);
        else
          for (int64_t r = r0; r < r1; ++r) y[r] = row_dot<K>(w.data + r * rb, cols, x);
        continue;
      }
      for (int64_t t0 = 0; t0 < T; t0 += 64) {
        int64_t t1 = std::min(T, t0 + 64);
        for (int64_t r = r0; r < r1; r += 4) {
          int64_t nr = std::min<int64_t>(4, r1 - r);
          int64_t t = t0;
          for (; t + 4 <= t1; t += 4) tile<K, 4>(w.data, rb, cols, x, r, t, nr, y, rows);
          for (; t < t1; ++t) tile<K, 1>(w.data, rb, cols, x, r, t, nr, y, rows);
        }
      }
    }
  });
}

}  // namespace

namespace kern {
float dot_f32_avx512(const float* a, const float* b, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(),
         a3 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), a1);
    a2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), a2);
    a3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), a3);
  }
  for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), a0);
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), a1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

// Every binary16 is exactly a binary32, so this equals f16_to_f32 bit for bit, subnormals included; only
// signalling NaNs come back quietened.
void widen_f16_avx512(const uint16_t* h, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + i))));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(out + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, h + i)));
  }
}

void widen_bf16_avx512(const uint16_t* h, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + i)));
    _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
  if (i < n) widen_bf16_generic(h + i, out + i, n - i);
}

void silu_mul_f32_avx512(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 a = _mm512_maskz_loadu_ps(k, g + i);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), a));
    const __m512 s = _mm512_div_ps(a, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    _mm512_mask_storeu_ps(g + i, k, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(k, u + i)));
  }
}

void axpy_f32_avx512(float a, const float* x, float* y, int64_t n) {
  const __m512 va = _mm512_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(
        y + i, m, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

void gemm_rows_f32_avx512(const float* w, int64_t nr, int64_t cols, const float* x, int64_t T, float* y,
                          int64_t ystride) {
  const auto* wb = reinterpret_cast<const uint8_t*>(w);
  const size_t rb = static_cast<size_t>(cols) * 4;
  for (int64_t t0 = 0; t0 < T; t0 += 64) {
    const int64_t t1 = std::min(T, t0 + 64);
    for (int64_t r = 0; r < nr; r += 4) {
      const int64_t n = std::min<int64_t>(4, nr - r);
      int64_t t = t0;
      for (; t + 4 <= t1; t += 4) tile<WeightKind::F32, 4>(wb, rb, cols, x, r, t, n, y, ystride);
      for (; t < t1; ++t) tile<WeightKind::F32, 1>(wb, rb, cols, x, r, t, n, y, ystride);
    }
  }
}
}  // namespace kern

void matmul_dense_avx512(const WeightMatrix& w, const float* x, int64_t T, float* y) {
  switch (w.kind) {
    case WeightKind::F32:
      run<WeightKind::F32>(w, x, T, y);
      return;
    case WeightKind::F16:
      run<WeightKind::F16>(w, x, T, y);
      return;
    case WeightKind::BF16:
      run<WeightKind::BF16>(w, x, T, y);
      return;
    default:
      return;
  }
}

}  // namespace lowbit
