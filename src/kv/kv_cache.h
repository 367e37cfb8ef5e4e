// The attention KV cache. Holds keys and values for several sequences and computes attention directly from
// its storage, so a quantized cache can dequantize in registers instead of widening pages.
//
// KvCache owns one KvStore (kv/kv_store.h) chosen from the spec and forwards every operation to it: a plain
// spec (f32/f16/bf16, no option) gets the contiguous store (kv/kv_contiguous.h), anything else the paged,
// quantized cache (kv/kv_paged.h), which the engine also reaches directly for page accounting
// (paged_cache()).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "arch/config.h"
#include "kv/kv_contiguous.h"
#include "kv/kv_formats.h"
#include "kv/kv_store.h"

namespace lowbit {

class PagedKvCache;
class Rope;

// What a cache of a given spec allocates, without allocating it (the planner's exact KV bytes):
//   plain (contiguous) specs: n_seqs x capacity x bytes_per_token
//   paged specs (default budget): n_seqs x ceil(capacity / block_tokens) x block_bytes + n_seqs x
//   staging_per_seq
// KvCache(c, n, cap, spec).total_bytes() == kv_footprint(c, spec).bytes(n, cap) (tested).
struct KvFootprint {
  bool paged = false;
  int64_t block_tokens = 1;     // tokens per page (1 for the contiguous cache)
  int64_t block_bytes = 0;      // bytes of one page, every layer, K and V, scales included
  int64_t staging_per_seq = 0;  // F16 staging (KIVI window / per-channel keys) per sequence
  int64_t bytes(int64_t n_seqs, int64_t capacity) const;
  double bytes_per_token() const {
    return static_cast<double>(block_bytes) / static_cast<double>(block_tokens);
  }
};
KvFootprint kv_footprint(const ModelConfig& c, const KvCacheSpec& spec);

class KvCache {
 public:
  KvCache(const ModelConfig& c, int n_seqs, int64_t capacity, KvDtype dtype);
  // From a parsed --kv-cache/--kv-evict spec (kv/kv_formats.h). A plain spec (f32/f16/bf16, no option) uses
  // the contiguous store; anything else the paged, quantized cache (kv/kv_paged.h).
  KvCache(const ModelConfig& c, int n_seqs, int64_t capacity, const KvCacheSpec& spec);
  bool paged() const { return paged_ != nullptr; }
  PagedKvCache* paged_cache() const { return paged_; }  // null for the contiguous store
  const KvStore& store() const { return *store_; }
  bool keys_pre_rope() const { return store_->keys_pre_rope(); }  // the decoder must store keys before RoPE
  void bind_rope(const Rope* r) { store_->bind_rope(r); }  // RoPE used at attention time for pre-RoPE keys
  // Scales included (may be fractional for odd shapes).
  double bytes_per_token_exact() const { return store_->bytes_per_token_exact(); }
  int64_t capacity_tokens() const { return store_->capacity_tokens(); }  // tokens held over all sequences
  // e.g. "k=int4/channel v=int4/group32 window=128 (paged)"; FP8 layers with checkpoint scales add
  // "checkpoint k/v scales on N layer sides".
  std::string describe() const { return store_->describe(); }

  int n_seqs() const { return store_->n_seqs(); }
  int64_t capacity() const { return store_->capacity(); }  // highest position + 1 accepted
  // The contiguous element type; for a paged cache, the one its key format names (F32 unless f16/bf16).
  KvDtype dtype() const { return dtype_; }
  // Bytes one token occupies across all layers: contiguous 2 * layers * kv_heads * head_dim * bytes per
  // element; paged a page's bytes / its tokens, rounded down.
  int64_t bytes_per_token() const { return store_->bytes_per_token(); }
  int64_t total_bytes() const { return store_->total_bytes(); }  // everything allocated (pages, staging)

  // Stores k[kv_dim] and v[kv_dim] of `seq` at position `pos` in `layer`. pos < capacity (checked by
  // callers).
  void store(int layer, int seq, int64_t pos, const float* k, const float* v) {
    store_->store(layer, seq, pos, k, v);
  }
  // T rows of one layer: seqs[T], pos[T], k/v [T, kv_dim] (the paged cache takes dynamic scales from the
  // first).
  void store_rows(int layer, int64_t T, const int32_t* seqs, const int64_t* pos, const float* k,
                  const float* v) {
    store_->store_rows(layer, T, seqs, pos, k, v);
  }

  // Attention for the query heads that share kv head `kvh`:
  //   q: [n_group, head_dim] (already rotated and scaled by 1/sqrt(head_dim)), out: [n_group, head_dim].
  // Attends to positions [0, n_pos) of `seq`. scratch must hold n_group * n_pos floats.
  void attend(int layer, int seq, int64_t n_pos, int64_t kvh, const float* q, int n_group, float* out,
              float* scratch) const {
    store_->attend(layer, seq, n_pos, kvh, q, n_group, out, scratch);
  }

  // Prefill attention for m query tokens of `seq` at nondecreasing positions qpos[0..m), each seeing the
  // stored positions <= its own (kernels/attn_tiled.h: K/V decoded once per tile for all m x n_group rows,
  // online softmax). Query i's heads at q + i * q_stride ([n_group, head_dim], pre-scaled and in the same
  // domain as attend()'s q), its output at out + i * out_stride. Equals m attend() calls up to float rounding
  // (tests/kv/test_kv_tiled.cpp).
  void attend_tiled(int layer, int seq, const int64_t* qpos, int64_t m, int64_t kvh, const float* q,
                    int64_t q_stride, int n_group, float* out, int64_t out_stride) const {
    store_->attend_tiled(layer, seq, qpos, m, kvh, q, q_stride, n_group, out, out_stride);
  }
  // False when attend() has side effects the tiled path does not reproduce (H2O's per-token attention sums).
  bool tiled_ok() const { return store_->tiled_ok(); }

  // Forget a sequence's tokens (its slots are reused from position 0).
  void clear(int seq) { store_->clear(seq); }

  // Calibrated FP8 scales from a quantized checkpoint (scale(layer, key): that layer side's k_scale /
  // v_scale, 1 or n_kv_heads values, x_fp8 = x / scale, as compressed-tensors stores them; empty: none).
  // Applied once, to the FP8 tensor/head layers of a paged cache that have no explicit `scale=` and no
  // rotation; other layers keep their scales. The decoder calls it on every forward through
  // use_checkpoint_kv_scales (model/weights.h; a no-op after the first). Returns the number of layer sides
  // that took a calibrated scale.
  int use_checkpoint_scales(const std::function<const std::vector<float>&(int64_t layer, bool key)>& scale) {
    return store_->use_checkpoint_scales(scale);
  }
  int calibrated_sides() const { return store_->calibrated_sides(); }

 private:
  // Shared, as the storage was before the store split: a copied KvCache refers to the same cache.
  std::shared_ptr<KvStore> store_;
  PagedKvCache* paged_ = nullptr;  // store_ itself when it is the paged cache
  KvDtype dtype_;
};

}  // namespace lowbit
