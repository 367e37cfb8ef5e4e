// The storage behind KvCache: one interface, two layouts.
//   ContiguousKvStore (kv/kv_contiguous.h): F32/F16/BF16 rows at fixed offsets, allocated up front.
//   PagedKvCache (kv/kv_paged.h): a page pool shared by all sequences, quantized formats, staging, eviction.
// KvCache (kv/kv_cache.h) picks one from the spec and forwards to it. Each store computes attention from its
// own storage (a quantized store dequantizes in registers instead of widening pages), so the virtual boundary
// sits at one call per (layer, sequence, kv head) attention job or per stored batch, never per element.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace lowbit {

class Rope;

class KvStore {
 public:
  virtual ~KvStore() = default;

  virtual int n_seqs() const = 0;
  virtual int64_t capacity() const = 0;  // highest position + 1 a sequence accepts (unbounded with eviction)

  // Stores k[kv_dim] and v[kv_dim] of `seq` at position `pos` in `layer` (post-RoPE keys, or pre-RoPE when
  // keys_pre_rope()).
  virtual void store(int layer, int seq, int64_t pos, const float* k, const float* v) = 0;
  // T rows of one layer: seqs[T], pos[T], k/v [T, kv_dim].
  virtual void store_rows(int layer, int64_t T, const int32_t* seqs, const int64_t* pos, const float* k,
                          const float* v) = 0;

  // KvCache::attend / attend_tiled (kv/kv_cache.h has the contract).
  virtual void attend(int layer, int seq, int64_t n_pos, int64_t kvh, const float* q, int n_group, float* out,
                      float* scratch) const = 0;
  virtual void attend_tiled(int layer, int seq, const int64_t* qpos, int64_t m, int64_t kvh, const float* q,
                            int64_t q_stride, int n_group, float* out, int64_t out_stride) const = 0;
  virtual bool tiled_ok() const = 0;

  virtual void clear(int seq) = 0;  // forget a sequence's tokens

  virtual bool keys_pre_rope() const = 0;
  virtual void bind_rope(const Rope* r) = 0;

  virtual int64_t bytes_per_token()
      const = 0;  // whole bytes (a page's bytes / its tokens for the paged store)
  virtual double bytes_per_token_exact() const = 0;
  virtual int64_t capacity_tokens() const = 0;  // over all sequences
  virtual int64_t total_bytes() const = 0;      // everything allocated
  virtual std::string describe() const = 0;

  // KvCache::use_checkpoint_scales. Only FP8 layers of the paged store take calibrated scales; other stores
  // have nothing to calibrate.
  virtual int use_checkpoint_scales(
      const std::function<const std::vector<float>&(int64_t layer, bool key)>&) {
    return 0;
  }
  virtual int calibrated_sides() const { return 0; }
};

}  // namespace lowbit
