#include "kv/kv_contiguous.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "kernels/attn_tiled.h"
#include "kernels/matmul.h"

namespace lowbit {

KvDtype kv_dtype_from_string(const std::string& s) {
  if (s == "f32") return KvDtype::F32;
  if (s == "f16") return KvDtype::F16;
  if (s == "bf16") return KvDtype::BF16;
  throw UsageError("model", "unknown KV cache format '" + s + "'; use f32, f16 or bf16");
}

const char* kv_dtype_name(KvDtype d) {
  switch (d) {
    case KvDtype::F32:
      return "f32";
    case KvDtype::F16:
      return "f16";
    case KvDtype::BF16:
      return "bf16";
  }
  return "?";
}

int64_t ContiguousKvStore::token_bytes(const ModelConfig& c, KvDtype dtype) {
  return 2 * static_cast<int64_t>(c.n_layers) * c.kv_dim() * (dtype == KvDtype::F32 ? 4 : 2);
}

ContiguousKvStore::ContiguousKvStore(const ModelConfig& c, int n_seqs, int64_t capacity, KvDtype dtype)
    : n_layers_(c.n_layers),
      kv_dim_(c.kv_dim()),
      head_dim_(c.head_dim),
      n_seqs_(n_seqs),
      capacity_(capacity),
      dtype_(dtype),
      elem_(dtype == KvDtype::F32 ? 4 : 2),
      token_bytes_(token_bytes(c, dtype)) {
  if (n_seqs <= 0 || capacity <= 0) fail("model", "KV cache needs at least one sequence and one position");
  const auto bytes = static_cast<size_t>(checked_size(
      {n_layers_, n_seqs_, capacity_, kv_dim_, int64_t(elem_)}, "model",
      "a KV cache of " + std::to_string(capacity) + " tokens x " + std::to_string(n_seqs) + " sequences"));
  k_ = aligned_bytes(bytes);
  v_ = aligned_bytes(bytes);
}

uint8_t* ContiguousKvStore::k_row(int layer, int seq, int64_t pos) const {
  return k_.get() + ((static_cast<size_t>(layer) * n_seqs_ + seq) * capacity_ + pos) * kv_dim_ * elem_;
}
uint8_t* ContiguousKvStore::v_row(int layer, int seq, int64_t pos) const {
  return v_.get() + ((static_cast<size_t>(layer) * n_seqs_ + seq) * capacity_ + pos) * kv_dim_ * elem_;
}

namespace {
void put(uint8_t* dst, const float* src, int64_t n, KvDtype d) {
  if (d == KvDtype::F32) {
    std::memcpy(dst, src, n * 4);
    return;
  }
  auto* h = reinterpret_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = d == KvDtype::F16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
}
}  // namespace

void ContiguousKvStore::store(int layer, int seq, int64_t pos, const float* k, const float* v) {
  put(k_row(layer, seq, pos), k, kv_dim_, dtype_);
  put(v_row(layer, seq, pos), v, kv_dim_, dtype_);
}

void ContiguousKvStore::store_rows(int layer, int64_t T, const int32_t* seqs, const int64_t* pos,
                                   const float* k, const float* v) {
  for (int64_t t = 0; t < T; ++t) store(layer, seqs[t], pos[t], k + t * kv_dim_, v + t * kv_dim_);
}

void ContiguousKvStore::attend(int layer, int seq, int64_t n_pos, int64_t kvh, const float* q, int n_group,
                               float* out, float* scratch) const {
  const int64_t hd = head_dim_, off = kvh * hd;
  // F16/BF16 rows are widened one at a time into a per-thread buffer; F32 rows are read in place.
  thread_local std::vector<float> wide;
  if (wide.size() < static_cast<size_t>(hd)) wide.resize(static_cast<size_t>(hd));
  auto row_f32 = [&](const uint8_t* base) -> const float* {
    if (dtype_ == KvDtype::F32) return reinterpret_cast<const float*>(base) + off;
    const auto* h = reinterpret_cast<const uint16_t*>(base) + off;
    if (dtype_ == KvDtype::F16)
      widen_f16(h, wide.data(), hd);
    else
      widen_bf16(h, wide.data(), hd);
    return wide.data();
  };
  // scores[g, p] = q_g · k_p  (SIMD dot from the kernels' ISA tier)
  for (int64_t p = 0; p < n_pos; ++p) {
    const float* kr = row_f32(k_row(layer, seq, p));
    for (int g = 0; g < n_group; ++g) scratch[g * n_pos + p] = dot_f32(q + g * hd, kr, hd);
  }
  for (int g = 0; g < n_group; ++g) {
    float* sc = scratch + g * n_pos;
    float mx = *std::max_element(sc, sc + n_pos);
    float sum = 0;
    for (int64_t p = 0; p < n_pos; ++p) sum += (sc[p] = std::exp(sc[p] - mx));
    float inv = 1.0f / sum;
    for (int64_t p = 0; p < n_pos; ++p) sc[p] *= inv;
    std::fill(out + g * hd, out + (g + 1) * hd, 0.0f);
  }
  for (int64_t p = 0; p < n_pos; ++p) {
    const float* vr = row_f32(v_row(layer, seq, p));
    for (int g = 0; g < n_group; ++g) {
      const float a = scratch[g * n_pos + p];
      axpy_f32(a, vr, out + g * hd, hd);
    }
  }
}

void ContiguousKvStore::attend_tiled(int layer, int seq, const int64_t* qpos, int64_t m, int64_t kvh,
                                     const float* q, int64_t q_stride, int n_group, float* out,
                                     int64_t out_stride) const {
  if (m <= 0) return;
  // Row p holds position p, so the tiles are rows [0, qpos[m-1]].
  struct Rows : AttnRows {
    const ContiguousKvStore* kv;
    int layer, seq;
    int64_t off;
    void load(int64_t j0, int64_t j1, float* k, float* v, int64_t* pos) const override {
      const int64_t hd = kv->head_dim_;
      for (int64_t p = j0; p < j1; ++p) {
        float *kr = k + (p - j0) * hd, *vr = v + (p - j0) * hd;
        pos[p - j0] = p;
        const uint8_t *kb = kv->k_row(layer, seq, p), *vb = kv->v_row(layer, seq, p);
        if (kv->dtype_ == KvDtype::F32) {
          std::memcpy(kr, reinterpret_cast<const float*>(kb) + off, hd * sizeof(float));
          std::memcpy(vr, reinterpret_cast<const float*>(vb) + off, hd * sizeof(float));
        } else {
          auto widen = kv->dtype_ == KvDtype::F16 ? widen_f16 : widen_bf16;
          widen(reinterpret_cast<const uint16_t*>(kb) + off, kr, hd);
          widen(reinterpret_cast<const uint16_t*>(vb) + off, vr, hd);
        }
      }
    }
  } rows;
  rows.kv = this, rows.layer = layer, rows.seq = seq, rows.off = kvh * head_dim_;
  attend_tiled_rows(rows, qpos[m - 1] + 1, qpos, m, n_group, head_dim_, q, q_stride, out, out_stride);
}

}  // namespace lowbit
