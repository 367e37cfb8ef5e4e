// The contiguous KV store: F32, F16 or BF16 rows, per layer and sequence [capacity, n_kv_heads * head_dim]
// for K and the same for V, allocated up front. Row p holds position p, so attention reads rows [0, n_pos) in
// place (F32) or widened one head row at a time (F16/BF16). The default store of KvCache for plain specs.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "arch/config.h"
#include "core/memory.h"
#include "kv/kv_store.h"

namespace lowbit {

enum class KvDtype { F32, F16, BF16 };
KvDtype kv_dtype_from_string(const std::string& s);  // f32|f16|bf16; UsageError otherwise
const char* kv_dtype_name(KvDtype d);

class ContiguousKvStore final : public KvStore {
 public:
  ContiguousKvStore(const ModelConfig& c, int n_seqs, int64_t capacity, KvDtype dtype);
  // 2 * layers * kv_heads * head_dim * bytes per element, without allocating (kv_footprint).
  static int64_t token_bytes(const ModelConfig& c, KvDtype dtype);

  KvDtype dtype() const { return dtype_; }

  int n_seqs() const override { return n_seqs_; }
  int64_t capacity() const override { return capacity_; }
  void store(int layer, int seq, int64_t pos, const float* k, const float* v) override;
  void store_rows(int layer, int64_t T, const int32_t* seqs, const int64_t* pos, const float* k,
                  const float* v) override;
  void attend(int layer, int seq, int64_t n_pos, int64_t kvh, const float* q, int n_group, float* out,
              float* scratch) const override;
  void attend_tiled(int layer, int seq, const int64_t* qpos, int64_t m, int64_t kvh, const float* q,
                    int64_t q_stride, int n_group, float* out, int64_t out_stride) const override;
  bool tiled_ok() const override { return true; }
  void clear(int) override {}  // rows are overwritten from position 0; nothing to free
  bool keys_pre_rope() const override { return false; }
  void bind_rope(const Rope*) override {}  // keys are stored after RoPE
  int64_t bytes_per_token() const override { return token_bytes_; }
  double bytes_per_token_exact() const override { return static_cast<double>(token_bytes_); }
  int64_t capacity_tokens() const override { return capacity_ * n_seqs_; }
  int64_t total_bytes() const override { return token_bytes_ * capacity_ * n_seqs_; }
  std::string describe() const override { return kv_dtype_name(dtype_); }

 private:
  uint8_t* k_row(int layer, int seq, int64_t pos) const;
  uint8_t* v_row(int layer, int seq, int64_t pos) const;

  int64_t n_layers_, kv_dim_, head_dim_;
  int n_seqs_;
  int64_t capacity_;
  KvDtype dtype_;
  size_t elem_;
  int64_t token_bytes_;
  std::unique_ptr<uint8_t[], AlignedFree> k_, v_;  // [layers, seqs, capacity, kv_dim]
};

}  // namespace lowbit
