#include "model/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "core/memory.h"

namespace lowbit {

KvDtype kv_dtype_from_string(const std::string& s) {
  if (s == "f32") return KvDtype::F32;
  if (s == "f16") return KvDtype::F16;
  if (s == "bf16") return KvDtype::BF16;
  throw UsageError("model", "unknown KV cache format '" + s + "'; use f32, f16 or bf16");
}

const char* kv_dtype_name(KvDtype d) {
  switch (d) {
    case KvDtype::F32: return "f32";
    case KvDtype::F16: return "f16";
    case KvDtype::BF16: return "bf16";
  }
  return "?";
}

KvCache::KvCache(const ModelConfig& c, int n_seqs, int64_t capacity, KvDtype dtype)
    : n_layers_(c.n_layers), kv_dim_(c.kv_dim()), head_dim_(c.head_dim), n_seqs_(n_seqs), capacity_(capacity),
      dtype_(dtype), elem_(dtype == KvDtype::F32 ? 4 : 2) {
  if (n_seqs <= 0 || capacity <= 0) fail("model", "KV cache needs at least one sequence and one position");
  size_t bytes = static_cast<size_t>(n_layers_) * n_seqs_ * capacity_ * kv_dim_ * elem_;
  auto a = aligned_bytes(bytes), b = aligned_bytes(bytes);
  k_ = std::shared_ptr<uint8_t>(a.release(), AlignedFree{});
  v_ = std::shared_ptr<uint8_t>(b.release(), AlignedFree{});
}

int64_t KvCache::bytes_per_token() const { return 2 * n_layers_ * kv_dim_ * static_cast<int64_t>(elem_); }

const uint8_t* KvCache::k_row(int layer, int seq, int64_t pos) const {
  return k_.get() + ((static_cast<size_t>(layer) * n_seqs_ + seq) * capacity_ + pos) * kv_dim_ * elem_;
}
const uint8_t* KvCache::v_row(int layer, int seq, int64_t pos) const {
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
inline float get(const uint8_t* p, int64_t i, KvDtype d) {
  if (d == KvDtype::F32) return reinterpret_cast<const float*>(p)[i];
  uint16_t h = reinterpret_cast<const uint16_t*>(p)[i];
  return d == KvDtype::F16 ? f16_to_f32(h) : bf16_to_f32(h);
}
}  // namespace

void KvCache::store(int layer, int seq, int64_t pos, const float* k, const float* v) {
  put(const_cast<uint8_t*>(k_row(layer, seq, pos)), k, kv_dim_, dtype_);
  put(const_cast<uint8_t*>(v_row(layer, seq, pos)), v, kv_dim_, dtype_);
}

void KvCache::attend(int layer, int seq, int64_t n_pos, int64_t kvh, const float* q, int n_group, float* out,
                     float* scratch) const {
  const int64_t hd = head_dim_, off = kvh * hd;
  // scores[g, p] = q_g · k_p
  std::vector<float> krow(hd);
  for (int64_t p = 0; p < n_pos; ++p) {
    const uint8_t* kp = k_row(layer, seq, p);
    for (int64_t i = 0; i < hd; ++i) krow[i] = get(kp, off + i, dtype_);
    for (int g = 0; g < n_group; ++g) {
      const float* qg = q + g * hd;
      float s = 0;
      for (int64_t i = 0; i < hd; ++i) s += qg[i] * krow[i];
      scratch[g * n_pos + p] = s;
    }
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
    const uint8_t* vp = v_row(layer, seq, p);
    for (int64_t i = 0; i < hd; ++i) krow[i] = get(vp, off + i, dtype_);
    for (int g = 0; g < n_group; ++g) {
      float a = scratch[g * n_pos + p];
      float* o = out + g * hd;
      for (int64_t i = 0; i < hd; ++i) o[i] += a * krow[i];
    }
  }
}

}  // namespace lowbit
