#include "kv/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/memory.h"
#include "kernels/attn_tiled.h"
#include "kernels/matmul.h"
#include "kv/kv_paged.h"

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
  const auto bytes = static_cast<size_t>(checked_size(
      {n_layers_, n_seqs_, capacity_, kv_dim_, int64_t(elem_)}, "model",
      "a KV cache of " + std::to_string(capacity) + " tokens x " + std::to_string(n_seqs) + " sequences"));
  auto a = aligned_bytes(bytes), b = aligned_bytes(bytes);
  k_ = std::shared_ptr<uint8_t>(a.release(), AlignedFree{});
  v_ = std::shared_ptr<uint8_t>(b.release(), AlignedFree{});
}

int64_t KvCache::bytes_per_token() const {
  if (paged_) return paged_->block_bytes() / paged_->block_tokens();
  return 2 * n_layers_ * kv_dim_ * static_cast<int64_t>(elem_);
}

namespace {
KvDtype plain_dtype(KvFormat f) {
  return f == KvFormat::F16 ? KvDtype::F16 : f == KvFormat::BF16 ? KvDtype::BF16 : KvDtype::F32;
}
}  // namespace

KvCache::KvCache(const ModelConfig& c, int n_seqs, int64_t capacity, const KvCacheSpec& spec)
    : KvCache(c, spec.is_plain() ? n_seqs : 1, spec.is_plain() ? capacity : 1, plain_dtype(spec.k.format)) {
  if (spec.is_plain()) return;
  k_.reset(), v_.reset();
  paged_ = std::make_shared<PagedKvCache>(c, n_seqs, capacity, spec);
  n_seqs_ = n_seqs;
  capacity_ = paged_->capacity();
}

int64_t KvFootprint::bytes(int64_t n_seqs, int64_t capacity) const {
  return n_seqs * ((capacity + block_tokens - 1) / block_tokens) * block_bytes + n_seqs * staging_per_seq;
}

KvFootprint kv_footprint(const ModelConfig& c, const KvCacheSpec& spec) {
  KvFootprint f;
  if (spec.is_plain()) {
    f.block_bytes = KvCache(c, 1, 1, plain_dtype(spec.k.format)).bytes_per_token();
    return f;
  }
  const PagedKvCache p(c, 1, 1, spec, /*allocate=*/false);
  f.paged = true;
  f.block_tokens = p.block_tokens();
  f.block_bytes = p.block_bytes();
  f.staging_per_seq = p.staging_bytes();
  return f;
}

bool KvCache::keys_pre_rope() const { return paged_ && paged_->keys_pre_rope(); }
void KvCache::bind_rope(const Rope* r) {
  if (paged_) paged_->bind_rope(r);
}
double KvCache::bytes_per_token_exact() const {
  return paged_ ? paged_->bytes_per_token() : static_cast<double>(bytes_per_token());
}
int64_t KvCache::capacity_tokens() const { return paged_ ? paged_->capacity_tokens() : capacity_ * n_seqs_; }
int64_t KvCache::total_bytes() const {
  return paged_ ? paged_->allocated_bytes() : bytes_per_token() * capacity_ * n_seqs_;
}
std::string KvCache::describe() const {
  if (!paged_) return kv_dtype_name(dtype_);
  std::string d = paged_->spec().describe() + " (paged)";
  if (calibrated_sides_ > 0) d += ", checkpoint k/v scales on " + std::to_string(calibrated_sides_) + " layer sides";
  return d;
}
int KvCache::use_checkpoint_scales(const std::function<const std::vector<float>&(int64_t, bool)>& scale) {
  if (scales_checked_) return calibrated_sides_;
  scales_checked_ = true;
  if (!paged_) return 0;
  const KvCacheSpec& spec = paged_->spec();
  if (spec.rotate) return 0;  // the scales were calibrated on unrotated keys/values
  for (int64_t l = 0; l < n_layers_; ++l) {
    for (bool key : {true, false}) {
      const std::vector<float>& s = scale(l, key);
      const KvSideLayout& L = paged_->layout(static_cast<int>(l), key);
      const KvSideSpec& side = key ? spec.k : spec.v;
      const bool fp8 = L.format == KvFormat::E4M3 || L.format == KvFormat::E5M2;
      if (s.empty() || !fp8 || L.fp8_scale == KvScaleMode::Token || side.fixed_scale > 0) continue;
      paged_->set_calibrated_scales(static_cast<int>(l), key, s);
      ++calibrated_sides_;
    }
  }
  return calibrated_sides_;
}

void KvCache::clear(int seq) {
  if (paged_) paged_->free_seq(seq);
}

void KvCache::store_rows(int layer, int64_t T, const int32_t* seqs, const int64_t* pos, const float* k,
                         const float* v) {
  if (paged_) return paged_->store_rows(layer, T, seqs, pos, k, v);
  for (int64_t t = 0; t < T; ++t) store(layer, seqs[t], pos[t], k + t * kv_dim_, v + t * kv_dim_);
}

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
}  // namespace

void KvCache::store(int layer, int seq, int64_t pos, const float* k, const float* v) {
  if (paged_) return paged_->store(layer, seq, pos, k, v);
  put(const_cast<uint8_t*>(k_row(layer, seq, pos)), k, kv_dim_, dtype_);
  put(const_cast<uint8_t*>(v_row(layer, seq, pos)), v, kv_dim_, dtype_);
}

void KvCache::attend(int layer, int seq, int64_t n_pos, int64_t kvh, const float* q, int n_group, float* out,
                     float* scratch) const {
  if (paged_) return paged_->attend(layer, seq, n_pos, kvh, q, n_group, out, scratch);
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

bool KvCache::tiled_ok() const {
  return !paged_ || paged_->spec().evict.policy != KvEvictPolicy::H2O;
}

void KvCache::attend_tiled(int layer, int seq, const int64_t* qpos, int64_t m, int64_t kvh, const float* q,
                           int64_t q_stride, int n_group, float* out, int64_t out_stride) const {
  if (paged_) return paged_->attend_tiled(layer, seq, qpos, m, kvh, q, q_stride, n_group, out, out_stride);
  if (m <= 0) return;
  // Contiguous rows: row p holds position p, so the tiles are rows [0, qpos[m-1]].
  struct Rows : AttnRows {
    const KvCache* kv;
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
