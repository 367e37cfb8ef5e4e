// The attention KV cache. Holds keys (after RoPE) and values for several sequences and computes attention
// directly from its storage, so a quantized cache can dequantize in registers instead of widening pages.
//
// This implementation stores F32, F16 or BF16 rows: per layer, per sequence, [capacity, n_kv_heads*head_dim]
// for K and the same for V, allocated up front.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "arch/config.h"
#include "kv/kv_formats.h"

namespace lowbit {

class PagedKvCache;
class Rope;

enum class KvDtype { F32, F16, BF16 };
KvDtype kv_dtype_from_string(const std::string& s);  // f32|f16|bf16; UsageError otherwise
const char* kv_dtype_name(KvDtype d);

// What a cache of a given spec allocates, without allocating it (the planner's exact KV bytes):
//   plain (contiguous) specs: n_seqs x capacity x bytes_per_token
//   paged specs (default budget): n_seqs x ceil(capacity / block_tokens) x block_bytes + n_seqs x staging_per_seq
// KvCache(c, n, cap, spec).total_bytes() == kv_footprint(c, spec).bytes(n, cap) (tested).
struct KvFootprint {
  bool paged = false;
  int64_t block_tokens = 1;     // tokens per page (1 for the contiguous cache)
  int64_t block_bytes = 0;      // bytes of one page, every layer, K and V, scales included
  int64_t staging_per_seq = 0;  // F16 staging (KIVI window / per-channel keys) per sequence
  int64_t bytes(int64_t n_seqs, int64_t capacity) const;
  double bytes_per_token() const { return static_cast<double>(block_bytes) / static_cast<double>(block_tokens); }
};
KvFootprint kv_footprint(const ModelConfig& c, const KvCacheSpec& spec);

class KvCache {
 public:
  KvCache(const ModelConfig& c, int n_seqs, int64_t capacity, KvDtype dtype);
  // From a parsed --kv-cache/--kv-evict spec (model/kv_formats.h). A plain spec (f32/f16/bf16, no option) uses the
  // contiguous storage; anything else the paged, quantized cache (model/kv_paged.h), which this class forwards to.
  KvCache(const ModelConfig& c, int n_seqs, int64_t capacity, const KvCacheSpec& spec);
  bool paged() const { return paged_ != nullptr; }
  PagedKvCache* paged_cache() const { return paged_.get(); }
  bool keys_pre_rope() const;           // the decoder must store keys before RoPE
  void bind_rope(const Rope* r);        // RoPE used at attention time for pre-RoPE keys
  double bytes_per_token_exact() const; // scales included (may be fractional for odd shapes)
  int64_t capacity_tokens() const;      // tokens the cache holds over all sequences
  std::string describe() const;         // e.g. "k=int4/channel v=int4/group32 window=128 (paged)"; FP8
                                        // layers with checkpoint scales add "calibrated scales: N layer sides"

  int n_seqs() const { return n_seqs_; }
  int64_t capacity() const { return capacity_; }
  KvDtype dtype() const { return dtype_; }
  // Exact bytes one token occupies across all layers: 2 * layers * kv_heads * head_dim * bytes per element.
  int64_t bytes_per_token() const;
  int64_t total_bytes() const;  // everything allocated (pages, staging)

  // Stores k[kv_dim] and v[kv_dim] of `seq` at position `pos` in `layer`. pos < capacity (checked by callers).
  void store(int layer, int seq, int64_t pos, const float* k, const float* v);
  // T rows of one layer: seqs[T], pos[T], k/v [T, kv_dim] (the paged cache takes dynamic scales from the first).
  void store_rows(int layer, int64_t T, const int32_t* seqs, const int64_t* pos, const float* k, const float* v);

  // Attention for the query heads that share kv head `kvh`:
  //   q: [n_group, head_dim] (already rotated and scaled by 1/sqrt(head_dim)), out: [n_group, head_dim].
  // Attends to positions [0, n_pos) of `seq`. scratch must hold n_group * n_pos floats.
  void attend(int layer, int seq, int64_t n_pos, int64_t kvh, const float* q, int n_group, float* out,
              float* scratch) const;

  // Prefill attention for m query tokens of `seq` at nondecreasing positions qpos[0..m), each seeing the
  // stored positions <= its own (kernels/attn_tiled.h: K/V decoded once per tile for all m x n_group rows,
  // online softmax). Query i's heads at q + i * q_stride ([n_group, head_dim], pre-scaled and in the same
  // domain as attend()'s q), its output at out + i * out_stride. Equals m attend() calls up to float rounding
  // (tests/kv/test_kv_tiled.cpp).
  void attend_tiled(int layer, int seq, const int64_t* qpos, int64_t m, int64_t kvh, const float* q,
                    int64_t q_stride, int n_group, float* out, int64_t out_stride) const;
  // False when attend() has side effects the tiled path does not reproduce (H2O's per-token attention sums).
  bool tiled_ok() const;

  // Forget a sequence's tokens (its slots are reused from position 0).
  void clear(int seq);

  // Calibrated FP8 scales from a quantized checkpoint (scale(layer, key): that layer side's k_scale /
  // v_scale, 1 or n_kv_heads values, x_fp8 = x / scale, as compressed-tensors stores them; empty: none).
  // Applied once, to the FP8 tensor/head layers of a paged cache that have no explicit `scale=` and no
  // rotation; other layers keep their scales. The decoder calls it on every forward through
  // use_checkpoint_kv_scales (model/weights.h; a no-op after the first). Returns the number of layer sides
  // that took a calibrated scale.
  int use_checkpoint_scales(const std::function<const std::vector<float>&(int64_t layer, bool key)>& scale);
  int calibrated_sides() const { return calibrated_sides_; }

 private:
  const uint8_t* k_row(int layer, int seq, int64_t pos) const;
  const uint8_t* v_row(int layer, int seq, int64_t pos) const;

  int64_t n_layers_, kv_dim_, head_dim_;
  int n_seqs_;
  int64_t capacity_;
  KvDtype dtype_;
  size_t elem_;
  std::shared_ptr<uint8_t> k_, v_;  // [layers, seqs, capacity, kv_dim]
  std::shared_ptr<PagedKvCache> paged_;
  bool scales_checked_ = false;
  int calibrated_sides_ = 0;
};

}  // namespace lowbit
