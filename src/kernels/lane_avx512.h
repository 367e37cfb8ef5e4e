// Pieces shared by the lane-major decode kernels: `nib` (matmul_avx512_q.cpp) and `nib16` / `byte16`
// (matmul_avx512bf16.cpp). A row is read in chunks of one 64-byte code load; each 32-bit accumulator lane
// sums products of elements that lie inside one scale group, so group scales are applied per lane once per
// chunk and asymmetric zero points once per row (−Σ_g z_g s_g X_g with the token's group sums X_g).
//
// Only for AVX-512 translation units. Everything here has internal linkage on purpose: the including files
// are compiled with different ISA flags, and one shared inline definition could be emitted with the wider
// ISA.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace lowbit::kern {
namespace {

inline __mmask16 mask16(int64_t n) {
  return n >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << n) - 1);
}
inline __mmask64 mask64(int64_t n) {
  return n >= 64 ? ~__mmask64{0} : ((__mmask64{1} << n) - 1);
}

struct LaneGeom {
  int64_t nch = 0;     // chunks per row
  int64_t rbytes = 0;  // code bytes per row (the last chunk's load is masked to them)
  int64_t gcols = 0;   // scale groups per row
  int64_t gpc = 0;     // groups per chunk (groups smaller than a chunk), else 0
  int64_t cpg = 0;     // chunks per group (groups of k chunks, or one group per row)
  __m512i sidx;        // lane -> group within the chunk (groups smaller than a chunk)
};

// chunk: elements per chunk (one 64-byte load of codes); lane_first(l): the first element of lane l inside
// its chunk (every element of the lane is in the same group as that one).
// Kernels call this per block of rows, so the last geometry is kept per thread and call site (the lane ->
// group table costs 16 divisions for small groups; with reduce_add4 below, int4:g32:asym decode gained 6-9 %
// per core in cache, docs/kernels.md).
template <typename LaneFirst>
LaneGeom lane_geom(int64_t cols, int64_t group, int64_t chunk, LaneFirst lane_first) {
  struct Last {
    int64_t cols = -1, group = -1, chunk = -1;
    LaneGeom g;
  };
  thread_local Last last;
  if (last.cols == cols && last.group == group && last.chunk == chunk) return last.g;
  LaneGeom g;
  g.nch = (cols + chunk - 1) / chunk;
  g.rbytes = (cols * 64 + chunk - 1) / chunk;
  g.gcols = (cols + group - 1) / group;
  const bool small = group < chunk && group < cols;
  g.gpc = small ? chunk / group : 0;
  g.cpg = small ? 0 : (group >= cols ? g.nch : group / chunk);
  alignas(64) int32_t idx[16];
  for (int l = 0; l < 16; ++l) idx[l] = small ? static_cast<int32_t>(lane_first(l) / group) : 0;
  g.sidx = _mm512_load_si512(idx);
  last.cols = cols, last.group = group, last.chunk = chunk, last.g = g;
  return g;
}

// The horizontal sums of four vectors as one: {Σa, Σb, Σc, Σd} (~20 operations instead of 4 x 8 + 4 stores; a
// 4-row tile over 896 columns runs only 7 chunks, so its epilogue counts).
inline __m128 reduce_add4(__m512 a, __m512 b, __m512 c, __m512 d) {
  auto half = [](__m512 v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  };
  const __m256 ab = _mm256_hadd_ps(half(a), half(b)), cd = _mm256_hadd_ps(half(c), half(d));
  const __m256 abcd = _mm256_hadd_ps(ab, cd);  // lanes 0-3: partial sums of a, b, c, d; lanes 4-7 the rest
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// y[r + t * ystride] = Σ acc[r][t] for an R-row x T-token tile; 4 rows x 1 token in one reduce_add4.
template <int T, int R>
inline void store_tile_sums(__m512 (&acc)[R][T], float* y, int64_t ystride) {
  if constexpr (R == 4 && T == 1) {
    _mm_storeu_ps(y, reduce_add4(acc[0][0], acc[1][0], acc[2][0], acc[3][0]));
  } else {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) y[r + t * ystride] = _mm512_reduce_add_ps(acc[r][t]);
  }
}

// The 64 code bytes of chunk c of a row (the last chunk masked to the row's bytes, the rest zero).
inline __m512i load_chunk(const LaneGeom& g, const uint8_t* row, int64_t c) {
  const int64_t left = g.rbytes - 64 * c;
  return left >= 64 ? _mm512_loadu_si512(row + 64 * c) : _mm512_maskz_loadu_epi8(mask64(left), row + 64 * c);
}

// The nib layout (nib, nib16): chunks of 128 4-bit codes, lane l holds elements 8l..8l+7.
inline LaneGeom nib_lane_geom(int64_t cols, int64_t group) {
  return lane_geom(cols, group, 128, [](int l) { return 8 * l; });
}

// The group of the current chunk for groups of k chunks / one group per row (next() after each chunk).
struct GroupWalk {
  int64_t gi = 0, cnt = 0;
  void next(const LaneGeom& g) {
    if (!g.gpc && ++cnt == g.cpg) {
      cnt = 0;
      ++gi;
    }
  }
};

// Cells as the kernels read them: the plan's FP32 tables, or the stored cells (KernelPlan::scales_f16
// binary16, scales_e8m0 powers of two, zeros_u8), each converted exactly. cells16: 16 cells (m: the valid
// ones); cell1: one.
inline __m512 cells16(const float* c, __mmask16 m) {
  return _mm512_maskz_loadu_ps(m, c);
}
inline __m512 cells16(const uint16_t* c, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, c));
}
inline __m512 cells16(const uint8_t* c, __mmask16 m) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, c)));
}
// The plan reads E8M0 / E4M3 cells only when none is special (KernelPlan::scales_e8m0 / scales_e4m3), so each
// takes two or three operations instead of six or eight (MXFP4 / NVFP4 decode 2-11 % faster in the per-call
// A/B, docs/kernels.md, "Stored scale cells").
inline __m512 cells16(const E8m0Cell* c, __mmask16 m) {
  // 2^(e-127) as FP32 bits e << 23 (e in 1..254).
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, c)), 23));
}
inline __m512 cells16(const E4m3Cell* c, __mmask16 m) {
  // The binary16 with bits c << 7 (c in 0..0x7E: sign clear, not NaN) is e4m3(c) / 2^8.
  return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(m, c)), 7));
}
inline float cell1(const float* c) {
  return *c;
}
inline float cell1(const uint16_t* c) {
  uint16_t h;  // the cells are bytes of a QuantizedMatrix: read, do not alias
  std::memcpy(&h, c, sizeof h);
  return _cvtsh_ss(h);
}
inline float cell1(const E8m0Cell* c) {
  return _mm512_cvtss_f32(cells16(c, 1));
}
inline float cell1(const E4m3Cell* c) {
  return _mm512_cvtss_f32(cells16(c, 1));
}

// Per-lane values of chunk c from a row's per-group cells [g.gcols] (scales, zero points).
template <typename S>
inline __m512 chunk_cells(const LaneGeom& g, const S* cells, int64_t c, const GroupWalk& w) {
  return g.gpc ? _mm512_permutexvar_ps(g.sidx, cells16(cells + c * g.gpc, mask16(g.gcols - c * g.gpc)))
               : _mm512_set1_ps(cell1(cells + w.gi));
}

// 16 zero-point / scale products z_j s_j.
template <typename S, typename Z>
inline __m512 zero_scale16(const S* s, const Z* z, int64_t j, __mmask16 m) {
  return _mm512_mul_ps(cells16(z + j, m), cells16(s + j, m));
}

// Asymmetric weights whose value table holds u: acc[t] -= Σ_g z_g s_g X_g for each token (x[t].gsum: X_g).
template <int T, typename X, typename S, typename Z>
inline void sub_zero_points(const LaneGeom& g, const S* s, const Z* z, const X* x, __m512* acc) {
  for (int64_t j = 0; j < g.gcols; j += 16) {
    const __mmask16 m = mask16(g.gcols - j);
    const __m512 zs = zero_scale16(s, z, j, m);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t)
      acc[t] = _mm512_fnmadd_ps(zs, _mm512_maskz_loadu_ps(m, x[t].gsum + j), acc[t]);
  }
}

// In-register transpose of a 16 x 16 matrix of 32-bit words (v[i] = row i on entry, column i on exit).
inline void transpose16(__m512i (&v)[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    v[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    v[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    v[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    v[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // Now v[4a + b] holds, in 128-bit lane L, column 4L + b of rows 4a..4a+3 (for b in the order 0, 1, 2, 3).
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_i32x4(v[i], v[4 + i], 0x88);      // lanes 0, 2 of v[i], then of v[4+i]
    t[4 + i] = _mm512_shuffle_i32x4(v[i], v[4 + i], 0xDD);  // lanes 1, 3
    t[8 + i] = _mm512_shuffle_i32x4(v[8 + i], v[12 + i], 0x88);
    t[12 + i] = _mm512_shuffle_i32x4(v[8 + i], v[12 + i], 0xDD);
  }
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm512_shuffle_i32x4(t[i], t[8 + i], 0x88);            // column i
    v[8 + i] = _mm512_shuffle_i32x4(t[i], t[8 + i], 0xDD);        // column 8 + i
    v[4 + i] = _mm512_shuffle_i32x4(t[4 + i], t[12 + i], 0x88);   // column 4 + i
    v[12 + i] = _mm512_shuffle_i32x4(t[4 + i], t[12 + i], 0xDD);  // column 12 + i
  }
}

}  // namespace
}  // namespace lowbit::kern
