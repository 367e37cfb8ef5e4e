// The paged, quantized KV cache: one of the two KvStores (kv/kv_store.h) behind KvCache, and the one the
// engine also reaches directly (KvCache::paged_cache()) for page accounting and prefix sharing.
//
// Memory: one pool of fixed-size pages allocated up front from a budget (tokens or bytes) and shared by all
// sequences. A page holds `block_tokens` token slots of EVERY layer:
//   page = [layer 0: K rows [B, k.row_bytes] | K block extra (per-channel scales) | V rows [B, v.row_bytes] |
//           V block extra] [layer 1: ...] ...
// so bytes per token = page bytes / B exactly (scales included). Each sequence owns a list of pages (its
// block table); inside them each layer keeps its own slot free-list, because eviction decides per (sequence,
// layer). Running out of pages throws Error("model") naming the budget; clear() (or storing position 0 again
// at layer 0, i.e. starting a new sequence in the slot) returns a sequence's pages to the pool.
//
// Staging (KIVI's residual): layers whose keys are quantized per channel across a page's tokens, or any
// quantized layer when window > 0, first store tokens as F16 in a per-sequence staging area (allocated up
// front, reported separately). When `window + B` tokens are staged (per-channel keys) or more than `window`
// (per-token formats), the oldest ones are quantized into a page. Attention reads both.
//
// Per (sequence, layer) the live tokens are an ordered list of (position, slot); attention reads them in
// place, dequantizing one head row at a time into registers / a head-sized tile (never widening the cache).
// Positions are the original ones: after eviction a kept token keeps its RoPE angle.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "arch/config.h"
#include "core/memory.h"
#include "kv/kv_formats.h"
#include "kv/kv_store.h"

namespace lowbit {

class Rope;

class PagedKvCache final : public KvStore {
 public:
  // capacity: tokens per sequence the caller intends (sizes the default budget and resolves h2o percentages).
  // allocate = false lays everything out without allocating the pool or staging (kv_footprint uses it).
  PagedKvCache(const ModelConfig& c, int n_seqs, int64_t capacity, const KvCacheSpec& spec,
               bool allocate = true);

  int n_seqs() const override { return n_seqs_; }
  int64_t capacity() const override;  // highest position + 1 accepted (unbounded with eviction)
  int block_tokens() const { return B_; }
  int64_t n_blocks() const { return n_blocks_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t block_bytes() const { return block_bytes_; }
  int64_t bytes_per_token() const override { return block_bytes_ / B_; }
  double bytes_per_token_exact() const override { return static_cast<double>(block_bytes_) / B_; }
  int64_t capacity_tokens() const override { return n_blocks_ * B_; }  // tokens the pool holds
  int64_t pool_bytes() const { return n_blocks_ * block_bytes_; }
  int64_t staging_bytes() const { return staging_seq_bytes_ * n_seqs_; }
  int64_t total_bytes() const override { return pool_bytes() + staging_bytes(); }
  int64_t evict_budget() const { return evict_budget_; }
  const KvCacheSpec& spec() const { return spec_; }
  const KvSideLayout& layout(int layer, bool key) const { return key ? layers_[layer].k : layers_[layer].v; }
  bool layer_kept(int layer) const { return layers_[layer].kept; }

  std::string describe() const override;  // the spec, " (paged)", and checkpoint scales if any

  bool keys_pre_rope() const override { return spec_.pre_rope; }
  void bind_rope(const Rope* r) override { rope_ = r; }  // required for pre-RoPE keys
  // Calibrated FP8 scales of one layer's side: 1 value (per tensor) or n_kv_heads (per head).
  void set_calibrated_scales(int layer, bool key, const std::vector<float>& s);
  // KvCache::use_checkpoint_scales: set_calibrated_scales for the FP8 tensor/head layers without `scale=`,
  // unless the cache rotates; once per cache (later calls return the first count).
  int use_checkpoint_scales(
      const std::function<const std::vector<float>&(int64_t layer, bool key)>& scale) override;
  int calibrated_sides() const override { return calibrated_sides_; }

  // k, v: [kv_dim] (post-RoPE keys, or pre-RoPE when keys_pre_rope()). Storing a position <= the last stored
  // one of (seq, layer) rewinds: the tokens from that position on are dropped first.
  void store(int layer, int seq, int64_t pos, const float* k, const float* v) override;
  // T rows at once (dynamic FP8/FP4 scales are taken from the first such call of a layer): k, v [T, kv_dim].
  void store_rows(int layer, int64_t T, const int32_t* seqs, const int64_t* pos, const float* k,
                  const float* v) override;

  // Same contract as KvCache::attend: q [n_group, head_dim] pre-scaled, out [n_group, head_dim], attends to
  // the live tokens of `seq` with position < n_pos; scratch holds n_group * n_pos floats. H2O scores
  // accumulate here.
  void attend(int layer, int seq, int64_t n_pos, int64_t kvh, const float* q, int n_group, float* out,
              float* scratch) const override;
  // KvCache::attend_tiled for this cache (not with H2O eviction: its scores need every per-token
  // probability).
  void attend_tiled(int layer, int seq, const int64_t* qpos, int64_t m, int64_t kvh, const float* q,
                    int64_t q_stride, int n_group, float* out, int64_t out_stride) const override;
  bool tiled_ok() const override { return spec_.evict.policy != KvEvictPolicy::H2O; }
  // Scalar oracle: dequantizes the head's live rows with the reference codecs, then attends in double.
  void attend_reference(int layer, int seq, int64_t n_pos, int64_t kvh, const float* q, int n_group,
                        float* out) const;

  void clear(int seq) override;  // returns the sequence's pages to the pool
  // Copies positions [0, n) of `src` into `dst` bit for bit, with src's per-sequence scales; dst is emptied
  // first. Prefix sharing between sequences (engine/engine.h). Only for caches whose stored rows do not
  // depend on later tokens: no F16 staging window, no per-channel keys, no eviction (Error("model")
  // otherwise).
  void copy_prefix(int src, int dst, int64_t n);
  int64_t seq_pages(int seq) const { return static_cast<int64_t>(seqs_[seq].pages.size()); }  // pages it owns
  std::vector<int64_t> positions(int layer, int seq) const;
  std::vector<float> scores(int layer, int seq) const;  // H2O accumulated attention per live token
  // Live rows dequantized back to the model's domain (rotation undone, RoPE applied to pre-RoPE keys): [n,
  // kv_dim].
  void read_rows(int layer, int seq, std::vector<float>* k, std::vector<float>* v) const;

 private:
  struct Entry {
    int64_t pos;
    int32_t slot;  // >= 0: pool slot (page * B + i); < 0: staging slot -(1 + j)
  };
  struct LayerState {
    std::vector<Entry> entries;        // ordered by position: sealed prefix, staged suffix
    mutable std::vector<float> score;  // H2O, parallel to entries
    int64_t n_sealed = 0;
    std::vector<int32_t> free_slots;  // per-token layers: free pool slots of this sequence's pages
    std::vector<int32_t> free_pages;  // per-channel layers: pages whose slots are all free in this layer
    std::vector<int32_t> free_staging;
    // FP8 tensor/head scales and the FP4 global factor of this sequence: calibrated ones are copied from the
    // layer; dynamic ones come from the sequence's own first stored batch, so a sequence's numbers never
    // depend on which other sequences share the cache or the batch.
    KvLayerScales kls, vls;
  };
  struct SeqState {
    std::vector<int32_t> pages;
    std::vector<LayerState> layers;
  };
  struct LayerInfo {
    KvSideLayout k, v;
    KvSideSpec ks, vs;
    bool kept = false, per_channel = false;
    int64_t off = 0, k_extra = 0, v_off = 0, v_extra = 0;  // byte offsets inside a page
    int64_t staging = 0, staging_off = 0;  // staged tokens; offset in a sequence's staging area
    KvLayerScales kls, vls;  // template for new sequences: calibrated (ready) or to be set per sequence
  };

  void store_one(int layer, int seq, int64_t pos, const float* k, const float* v);
  void reset_seq(int seq);
  void alloc_page(int seq);
  int32_t take_slot(int seq, int layer);
  void release(int seq, int layer, const Entry& e);
  void erase_entry(int seq, int layer, int64_t i);
  void seal(int seq, int layer);
  uint8_t* page_layer(int32_t page, int layer) const {
    return pool_.get() + page * block_bytes_ + layers_[layer].off;
  }
  uint16_t* staged_k(int seq, int layer, int32_t j) const;
  uint16_t* staged_v(int seq, int layer, int32_t j) const;
  // Head row of entry e into out[head_dim] in the stored domain (fast path for attention).
  void head_row(int layer, int seq, const Entry& e, bool key, int64_t off, float* out) const;
  // Key head row in the domain attention scores against: head_row, and for pre-RoPE keys un-rotated
  // (rotation) and RoPE'd at the entry's position (attend and attend_tiled).
  void key_row(int layer, int seq, const Entry& e, int64_t off, float* out) const;
  void head_row_ref(int layer, int seq, const Entry& e, bool key, int64_t off, int64_t n, float* out) const;

  ModelConfig c_;
  KvCacheSpec spec_;
  int n_seqs_;
  int64_t capacity_;
  int B_;
  int64_t kv_dim_, head_dim_, n_layers_;
  std::vector<LayerInfo> layers_;
  int64_t block_bytes_ = 0, n_blocks_ = 0, staging_seq_bytes_ = 0;
  int64_t evict_budget_ = 0;
  std::unique_ptr<uint8_t[], AlignedFree> pool_, staging_;
  std::vector<int32_t> free_;       // free pages of the pool
  std::vector<uint8_t> page_live_;  // [n_blocks, n_layers] live tokens of per-channel layers
  std::vector<SeqState> seqs_;
  const Rope* rope_ = nullptr;
  bool scales_checked_ = false;  // use_checkpoint_scales ran
  int calibrated_sides_ = 0;
};

}  // namespace lowbit
