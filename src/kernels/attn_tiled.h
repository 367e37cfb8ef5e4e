// Tiled (flash-style) attention for prefill: a block of query tokens of one sequence attends to one kv head's
// cached rows, walking them in tiles of kAttnTile positions. Each K/V tile is dequantized once for all
// (query x group head) rows of the block instead of once per query token, and the softmax is online (running
// maximum and sum per row, the accumulator rescaled when the maximum grows), so no O(n) score buffer exists.
// Causal mask: query i sees the rows whose position is <= qpos[i].
//
// The caches (ContiguousKvStore, PagedKvCache) supply the rows through AttnRows; they own the formats, RoPE
// of pre-RoPE keys and the Hadamard rotation. AVX-512 when the kernels' ISA tier is AVX-512 and head_dim % 16
// == 0, else a portable path built on dot_f32 / axpy_f32 (itself SIMD on AVX2). Tested against
// attend_reference (tests/kv).
#pragma once
#include <cstdint>

namespace lowbit {

constexpr int64_t kAttnTile = 64;  // cached positions per tile: K^T (64 x head_dim) and V stay in L1

// One kv head's cached rows in position order (nondecreasing pos).
class AttnRows {
 public:
  virtual ~AttnRows() = default;
  // Rows [j0, j1) (j1 - j0 <= kAttnTile): keys in q's domain into k[(j - j0) * head_dim], values into v,
  // positions into pos[j - j0].
  virtual void load(int64_t j0, int64_t j1, float* k, float* v, int64_t* pos) const = 0;
};

// For i in [0, m), g in [0, n_group): out row (i, g) = softmax_j(q(i, g) . k_j) v_j over the rows j < n_rows
// with pos_j <= qpos[i]; zeros when there is none. q(i, g) = q + i * q_stride + g * head_dim, pre-scaled by
// 1/sqrt(head_dim); out likewise with out_stride. qpos must be nondecreasing.
void attend_tiled_rows(const AttnRows& rows, int64_t n_rows, const int64_t* qpos, int64_t m, int n_group,
                       int64_t head_dim, const float* q, int64_t q_stride, float* out, int64_t out_stride);

// y[i] = exp(x[i]) as the tiled softmax computes it (AVX-512 polynomial on that tier, std::exp otherwise);
// exposed for its test against std::exp. The polynomial clamps its input to [kExpMinInput, 88.37626]: below
// kExpMinInput it gives ~1e-38 where std::exp gives a denormal or 0.
constexpr float kExpMinInput = -87.33654f;
void attn_exp(const float* x, float* y, int64_t n);

}  // namespace lowbit
