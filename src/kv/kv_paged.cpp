#include "kv/kv_paged.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/half.h"
#include "core/memory.h"
#include "kernels/matmul.h"
#include "kv/kv_rotation.h"
#include "ops/rope.h"

namespace lowbit {

namespace {
std::string mib(int64_t b) {
  return std::to_string((b + (1 << 19)) >> 20) + " MiB";
}
}  // namespace

PagedKvCache::PagedKvCache(const ModelConfig& c, int n_seqs, int64_t capacity, const KvCacheSpec& spec,
                           bool allocate)
    : c_(c),
      spec_(spec),
      n_seqs_(n_seqs),
      capacity_(capacity),
      B_(spec.block_tokens),
      kv_dim_(c.kv_dim()),
      head_dim_(c.head_dim),
      n_layers_(c.n_layers) {
  if (n_seqs <= 0 || capacity <= 0) fail("model", "KV cache needs at least one sequence and one position");
  if (B_ < 1 || B_ > 256) throw UsageError("model", "KV block size must be in [1, 256] tokens");
  if (spec.rotate && !kv_rotation_supported(head_dim_))
    throw UsageError("model", "KV rotation (+rot) needs a power-of-two head_dim; this model has " +
                                  std::to_string(head_dim_) + "; drop +rot");
  layers_.resize(static_cast<size_t>(n_layers_));
  for (int l : spec.keep_layers) {
    const int64_t li = l < 0 ? n_layers_ + l : l;
    if (li < 0 || li >= n_layers_)
      throw UsageError("model", "KV keep layer " + std::to_string(l) + " is outside the model's " +
                                    std::to_string(n_layers_) + " layers (negative counts from the end)");
    layers_[li].kept = true;
  }
  int64_t off = 0, stage_off = 0;
  for (int64_t l = 0; l < n_layers_; ++l) {
    LayerInfo& L = layers_[l];
    L.ks = spec.k;
    L.vs = spec.v;
    if (L.kept) L.ks = L.vs = KvSideSpec{KvFormat::F16};
    L.k = kv_side_layout(L.ks, true, c);
    L.v = kv_side_layout(L.vs, false, c);
    L.per_channel = L.k.per_channel;
    const bool quantized = !kv_format_is_plain(L.k.format) || !kv_format_is_plain(L.v.format);
    if (L.per_channel)
      L.staging = spec.window + B_;
    else if (quantized && spec.window > 0)
      L.staging = spec.window + 1;
    L.off = off;
    L.k_extra = B_ * L.k.row_bytes;
    L.v_off = L.k_extra + L.k.block_extra;
    L.v_extra = L.v_off + B_ * L.v.row_bytes;
    off += L.v_extra + L.v.block_extra;
    L.staging_off = stage_off;
    stage_off += L.staging * kv_dim_ * 2 * 2;
    const bool needs_cal =
        L.k.format == KvFormat::E4M3 || L.k.format == KvFormat::E5M2 || L.k.format == KvFormat::FP4;
    L.kls.ready = !needs_cal;
    L.vls.ready =
        !(L.v.format == KvFormat::E4M3 || L.v.format == KvFormat::E5M2 || L.v.format == KvFormat::FP4);
  }
  block_bytes_ = off;
  staging_seq_bytes_ = stage_off;
  evict_budget_ = kv_evict_budget(spec.evict, capacity);
  if (spec.budget_bytes > 0)
    n_blocks_ = spec.budget_bytes / block_bytes_;
  else if (spec.budget_tokens > 0)
    n_blocks_ = (spec.budget_tokens + B_ - 1) / B_;
  else
    n_blocks_ = checked_size(
        {n_seqs, capacity / B_ + (capacity % B_ != 0)}, "model",
        "a KV cache of " + std::to_string(capacity) + " tokens x " + std::to_string(n_seqs) + " sequences");
  if (n_blocks_ < 1)
    throw UsageError("model", "KV budget of " + std::to_string(spec.budget_bytes) +
                                  " bytes holds no page of " + std::to_string(B_) + " tokens (" +
                                  std::to_string(block_bytes_) + " bytes); raise budget=");
  if (n_blocks_ > (int64_t(1) << 30) / B_)
    throw UsageError("model", "KV budget is too large (over 2^30 tokens)");
  if (!allocate) return;
  pool_ = aligned_bytes(static_cast<size_t>(n_blocks_ * block_bytes_));
  staging_ = aligned_bytes(static_cast<size_t>(std::max<int64_t>(1, staging_seq_bytes_ * n_seqs_)));
  free_.resize(static_cast<size_t>(n_blocks_));
  for (int64_t i = 0; i < n_blocks_; ++i) free_[i] = static_cast<int32_t>(n_blocks_ - 1 - i);
  page_live_.assign(static_cast<size_t>(n_blocks_ * n_layers_), 0);
  seqs_.resize(static_cast<size_t>(n_seqs));
  for (int s = 0; s < n_seqs; ++s) reset_seq(s);
}

int64_t PagedKvCache::capacity() const {
  return evict_budget_ > 0 ? (int64_t(1) << 40) : capacity_;
}

void PagedKvCache::set_calibrated_scales(int layer, bool key, const std::vector<float>& s) {
  if (layer < 0 || layer >= n_layers_)
    fail("model", "KV scales for layer " + std::to_string(layer) + " out of range");
  const int64_t H = c_.n_kv_heads;
  if (s.size() != 1 && static_cast<int64_t>(s.size()) != H)
    fail("model", "KV scales need 1 or n_kv_heads (" + std::to_string(H) + ") values");
  for (float x : s)
    if (!(x > 0) || !std::isfinite(x)) fail("model", "KV scale must be positive and finite");
  KvLayerScales& ls = key ? layers_[layer].kls : layers_[layer].vls;
  const KvFormat f = key ? layers_[layer].k.format : layers_[layer].v.format;
  if (f == KvFormat::FP4)
    ls.s = {s[0]};
  else
    ls.s.assign(static_cast<size_t>(H), 0),
        std::transform(ls.s.begin(), ls.s.end(), ls.s.begin(), [&](float) { return s[0]; });
  if (static_cast<int64_t>(s.size()) == H && f != KvFormat::FP4) ls.s = s;
  ls.ready = true;
  for (auto& S : seqs_)
    if (!S.layers.empty()) (key ? S.layers[layer].kls : S.layers[layer].vls) = ls;
}

int PagedKvCache::use_checkpoint_scales(
    const std::function<const std::vector<float>&(int64_t, bool)>& scale) {
  if (scales_checked_) return calibrated_sides_;
  scales_checked_ = true;
  if (spec_.rotate) return 0;  // the scales were calibrated on unrotated keys/values
  for (int64_t l = 0; l < n_layers_; ++l) {
    for (bool key : {true, false}) {
      const std::vector<float>& s = scale(l, key);
      const KvSideLayout& L = layout(static_cast<int>(l), key);
      const KvSideSpec& side = key ? spec_.k : spec_.v;
      const bool fp8 = L.format == KvFormat::E4M3 || L.format == KvFormat::E5M2;
      if (s.empty() || !fp8 || L.fp8_scale == KvScaleMode::Token || side.fixed_scale > 0) continue;
      set_calibrated_scales(static_cast<int>(l), key, s);
      ++calibrated_sides_;
    }
  }
  return calibrated_sides_;
}

std::string PagedKvCache::describe() const {
  std::string d = spec_.describe() + " (paged)";
  if (calibrated_sides_ > 0)
    d += ", checkpoint k/v scales on " + std::to_string(calibrated_sides_) + " layer sides";
  return d;
}

void PagedKvCache::reset_seq(int seq) {
  SeqState& S = seqs_[seq];
  for (int32_t p : S.pages) {
    free_.push_back(p);
    for (int64_t l = 0; l < n_layers_; ++l) page_live_[p * n_layers_ + l] = 0;
  }
  S.pages.clear();
  S.layers.assign(static_cast<size_t>(n_layers_), LayerState{});
  for (int64_t l = 0; l < n_layers_; ++l) {
    S.layers[l].kls = layers_[l].kls;
    S.layers[l].vls = layers_[l].vls;
    auto& fs = S.layers[l].free_staging;
    for (int64_t j = layers_[l].staging - 1; j >= 0; --j) fs.push_back(static_cast<int32_t>(j));
  }
}

void PagedKvCache::clear(int seq) {
  if (seq < 0 || seq >= n_seqs_) fail("model", "KV clear: sequence " + std::to_string(seq) + " out of range");
  reset_seq(seq);
}

void PagedKvCache::copy_prefix(int src, int dst, int64_t n) {
  if (src < 0 || src >= n_seqs_ || dst < 0 || dst >= n_seqs_ || src == dst)
    fail("model",
         "copy_prefix: sequences " + std::to_string(src) + " -> " + std::to_string(dst) + " out of range");
  if (spec_.window > 0 || evict_budget_ > 0)
    fail("model", "copy_prefix: a cache with an F16 window or eviction cannot share prefixes");
  for (const LayerInfo& L : layers_)
    if (L.per_channel || L.staging > 0) fail("model", "copy_prefix: per-channel keys cannot share prefixes");
  reset_seq(dst);
  for (int l = 0; l < static_cast<int>(n_layers_); ++l) {
    const LayerInfo& L = layers_[l];
    const LayerState& a = seqs_[src].layers[l];
    seqs_[dst].layers[l].kls = a.kls;
    seqs_[dst].layers[l].vls = a.vls;
    for (const Entry& e : a.entries) {
      if (e.pos >= n) break;
      const int32_t slot = take_slot(dst, l);  // may allocate a page for dst; `a` stays valid
      const uint8_t* from = page_layer(e.slot / B_, l);
      uint8_t* to = page_layer(slot / B_, l);
      std::memcpy(to + (slot % B_) * L.k.row_bytes, from + (e.slot % B_) * L.k.row_bytes, L.k.row_bytes);
      std::memcpy(to + L.v_off + (slot % B_) * L.v.row_bytes, from + L.v_off + (e.slot % B_) * L.v.row_bytes,
                  L.v.row_bytes);
      LayerState& b = seqs_[dst].layers[l];
      b.entries.push_back({e.pos, slot});
      b.score.push_back(0.0f);
      ++b.n_sealed;
    }
  }
}

void PagedKvCache::alloc_page(int seq) {
  if (free_.empty()) {
    fail("model",
         "KV cache is full: all " + std::to_string(n_blocks_) + " pages of " + std::to_string(B_) +
             " tokens (" + mib(pool_bytes()) + ", " + std::to_string(capacity_tokens()) +
             " tokens) are in use by " + std::to_string(n_seqs_) + " sequence(s) (sequence " +
             std::to_string(seq) + " holds " + std::to_string(seqs_[seq].pages.size()) +
             "); raise the budget (--kv-cache ...:budget=N), shorten the context, free sequences, or "
             "use --kv-evict");
  }
  const int32_t p = free_.back();
  free_.pop_back();
  SeqState& S = seqs_[seq];
  S.pages.push_back(p);
  for (int64_t l = 0; l < n_layers_; ++l) {
    LayerState& st = S.layers[l];
    page_live_[p * n_layers_ + l] = 0;
    if (layers_[l].per_channel)
      st.free_pages.push_back(p);
    else
      for (int i = B_ - 1; i >= 0; --i) st.free_slots.push_back(p * B_ + i);  // popped in slot order
  }
}

int32_t PagedKvCache::take_slot(int seq, int layer) {
  auto& fs = seqs_[seq].layers[layer].free_slots;
  if (fs.empty()) alloc_page(seq);
  const int32_t s = fs.back();
  fs.pop_back();
  return s;
}

uint16_t* PagedKvCache::staged_k(int seq, int layer, int32_t j) const {
  const LayerInfo& L = layers_[layer];
  return reinterpret_cast<uint16_t*>(staging_.get() + seq * staging_seq_bytes_ + L.staging_off) + j * kv_dim_;
}
uint16_t* PagedKvCache::staged_v(int seq, int layer, int32_t j) const {
  const LayerInfo& L = layers_[layer];
  return reinterpret_cast<uint16_t*>(staging_.get() + seq * staging_seq_bytes_ + L.staging_off) +
         (L.staging + j) * kv_dim_;
}

void PagedKvCache::release(int seq, int layer, const Entry& e) {
  LayerState& st = seqs_[seq].layers[layer];
  if (e.slot < 0) {
    st.free_staging.push_back(-(e.slot + 1));
  } else if (layers_[layer].per_channel) {
    const int32_t p = e.slot / B_;
    if (--page_live_[p * n_layers_ + layer] == 0) st.free_pages.push_back(p);
  } else {
    st.free_slots.push_back(e.slot);
  }
}

void PagedKvCache::erase_entry(int seq, int layer, int64_t i) {
  LayerState& st = seqs_[seq].layers[layer];
  release(seq, layer, st.entries[i]);
  st.entries.erase(st.entries.begin() + i);
  st.score.erase(st.score.begin() + i);
  if (i < st.n_sealed) --st.n_sealed;
}

void PagedKvCache::seal(int seq, int layer) {
  LayerInfo& L = layers_[layer];
  LayerState& st = seqs_[seq].layers[layer];
  std::vector<float> kx, vx(kv_dim_);
  if (!L.per_channel) {
    kx.resize(kv_dim_);
    while (static_cast<int64_t>(st.entries.size()) - st.n_sealed > spec_.window) {
      Entry& e = st.entries[st.n_sealed];
      const int32_t j = -(e.slot + 1);
      const uint16_t *ks = staged_k(seq, layer, j), *vs = staged_v(seq, layer, j);
      for (int64_t i = 0; i < kv_dim_; ++i) kx[i] = f16_to_f32(ks[i]), vx[i] = f16_to_f32(vs[i]);
      const int32_t slot = take_slot(seq, layer);
      uint8_t* base = page_layer(slot / B_, layer);
      kv_encode_row(L.k, kx.data(), base + (slot % B_) * L.k.row_bytes, st.kls);
      kv_encode_row(L.v, vx.data(), base + L.v_off + (slot % B_) * L.v.row_bytes, st.vls);
      st.free_staging.push_back(j);
      e.slot = slot;
      ++st.n_sealed;
    }
    return;
  }
  kx.resize(B_ * kv_dim_);
  while (static_cast<int64_t>(st.entries.size()) - st.n_sealed >= spec_.window + B_) {
    if (st.free_pages.empty()) alloc_page(seq);
    const int32_t p = st.free_pages.back();
    st.free_pages.pop_back();
    uint8_t* base = page_layer(p, layer);
    for (int i = 0; i < B_; ++i) {
      Entry& e = st.entries[st.n_sealed + i];
      const int32_t j = -(e.slot + 1);
      const uint16_t *ks = staged_k(seq, layer, j), *vs = staged_v(seq, layer, j);
      for (int64_t d = 0; d < kv_dim_; ++d)
        kx[i * kv_dim_ + d] = f16_to_f32(ks[d]), vx[d] = f16_to_f32(vs[d]);
      kv_encode_row(L.v, vx.data(), base + L.v_off + i * L.v.row_bytes, st.vls);
      st.free_staging.push_back(j);
      e.slot = p * B_ + i;
    }
    kv_encode_block(L.k, kx.data(), B_, base, L.k.row_bytes, base + L.k_extra);
    page_live_[p * n_layers_ + layer] = static_cast<uint8_t>(B_);
    st.n_sealed += B_;
  }
}

void PagedKvCache::store_one(int layer, int seq, int64_t pos, const float* k, const float* v) {
  LayerInfo& L = layers_[layer];
  LayerState& st = seqs_[seq].layers[layer];
  if (!st.entries.empty() && pos <= st.entries.back().pos) {  // rewind
    auto it = std::lower_bound(st.entries.begin(), st.entries.end(), pos,
                               [](const Entry& e, int64_t p) { return e.pos < p; });
    for (int64_t i = static_cast<int64_t>(st.entries.size()) - 1; i >= it - st.entries.begin(); --i)
      erase_entry(seq, layer, i);
  }
  if (evict_budget_ > 0)
    while (static_cast<int64_t>(st.entries.size()) >= evict_budget_)
      erase_entry(
          seq, layer,
          kv_choose_victim(spec_.evict, static_cast<int64_t>(st.entries.size()), st.score.data(), capacity_));
  if (L.staging > 0) {
    if (st.free_staging.empty()) fail("model", "KV staging area overflow (internal)");
    const int32_t j = st.free_staging.back();
    st.free_staging.pop_back();
    uint16_t *ks = staged_k(seq, layer, j), *vs = staged_v(seq, layer, j);
    for (int64_t i = 0; i < kv_dim_; ++i) ks[i] = f32_to_f16(k[i]), vs[i] = f32_to_f16(v[i]);
    st.entries.push_back({pos, -(j + 1)});
    st.score.push_back(0.0f);
    seal(seq, layer);
  } else {
    const int32_t slot = take_slot(seq, layer);
    uint8_t* base = page_layer(slot / B_, layer);
    kv_encode_row(L.k, k, base + (slot % B_) * L.k.row_bytes, st.kls);
    kv_encode_row(L.v, v, base + L.v_off + (slot % B_) * L.v.row_bytes, st.vls);
    st.entries.push_back({pos, slot});
    st.score.push_back(0.0f);
    ++st.n_sealed;
  }
}

void PagedKvCache::store_rows(int layer, int64_t T, const int32_t* seqs, const int64_t* pos, const float* k,
                              const float* v) {
  if (layer < 0 || layer >= n_layers_)
    fail("model", "KV store: layer " + std::to_string(layer) + " out of range");
  std::vector<float> kr(k, k + T * kv_dim_), vr(v, v + T * kv_dim_);
  const int64_t H = c_.n_kv_heads;
  if (spec_.rotate) {
    rotate_heads(kr.data(), T * H, head_dim_);
    rotate_heads(vr.data(), T * H, head_dim_);
  }
  LayerInfo& L = layers_[layer];
  for (int64_t t = 0; t < T; ++t) {
    if (seqs[t] < 0 || seqs[t] >= n_seqs_ || pos[t] < 0)
      fail("model", "KV store: sequence " + std::to_string(seqs[t]) + " / position " +
                        std::to_string(pos[t]) + " out of range");
    if (layer == 0 && pos[t] == 0) reset_seq(seqs[t]);  // a new sequence in this slot
  }
  // Dynamic scales: per sequence, from that sequence's rows in the first batch that stores it.
  std::vector<float> sk, sv;
  for (int64_t t = 0; t < T; ++t) {
    LayerState& st = seqs_[seqs[t]].layers[layer];
    if (st.kls.ready && st.vls.ready) continue;
    sk.clear(), sv.clear();
    for (int64_t u = t; u < T; ++u)
      if (seqs[u] == seqs[t]) {
        sk.insert(sk.end(), kr.begin() + u * kv_dim_, kr.begin() + (u + 1) * kv_dim_);
        sv.insert(sv.end(), vr.begin() + u * kv_dim_, vr.begin() + (u + 1) * kv_dim_);
      }
    const int64_t n = static_cast<int64_t>(sk.size()) / kv_dim_;
    kv_calibrate(L.k, L.ks, sk.data(), n, st.kls);
    kv_calibrate(L.v, L.vs, sv.data(), n, st.vls);
  }
  for (int64_t t = 0; t < T; ++t)
    store_one(layer, seqs[t], pos[t], kr.data() + t * kv_dim_, vr.data() + t * kv_dim_);
}

void PagedKvCache::store(int layer, int seq, int64_t pos, const float* k, const float* v) {
  store_rows(layer, 1, &seq, &pos, k, v);
}

std::vector<int64_t> PagedKvCache::positions(int layer, int seq) const {
  std::vector<int64_t> r;
  for (const auto& e : seqs_[seq].layers[layer].entries) r.push_back(e.pos);
  return r;
}

std::vector<float> PagedKvCache::scores(int layer, int seq) const {
  return seqs_[seq].layers[layer].score;
}

void PagedKvCache::head_row_ref(int layer, int seq, const Entry& e, bool key, int64_t off, int64_t n,
                                float* out) const {
  const LayerInfo& L = layers_[layer];
  if (e.slot < 0) {
    const uint16_t* s = key ? staged_k(seq, layer, -(e.slot + 1)) : staged_v(seq, layer, -(e.slot + 1));
    for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(s[off + i]);
    return;
  }
  const uint8_t* base = page_layer(e.slot / B_, layer);
  const int i = e.slot % B_;
  const LayerState& st = seqs_[seq].layers[layer];
  if (key)
    kv_decode_range(L.k, base + i * L.k.row_bytes, base + L.k_extra, st.kls, off, n, out);
  else
    kv_decode_range(L.v, base + L.v_off + i * L.v.row_bytes, base + L.v_extra, st.vls, off, n, out);
}

void PagedKvCache::read_rows(int layer, int seq, std::vector<float>* k, std::vector<float>* v) const {
  const auto& ents = seqs_[seq].layers[layer].entries;
  const int64_t n = static_cast<int64_t>(ents.size()), H = c_.n_kv_heads;
  k->assign(n * kv_dim_, 0.0f);
  v->assign(n * kv_dim_, 0.0f);
  for (int64_t r = 0; r < n; ++r) {
    float *kr = k->data() + r * kv_dim_, *vr = v->data() + r * kv_dim_;
    head_row_ref(layer, seq, ents[r], true, 0, kv_dim_, kr);
    head_row_ref(layer, seq, ents[r], false, 0, kv_dim_, vr);
    if (spec_.rotate) rotate_heads(kr, H, head_dim_), rotate_heads(vr, H, head_dim_);
    if (spec_.pre_rope) {
      if (!rope_) fail("model", "KV cache with pre-RoPE keys has no RoPE bound (bind_rope)");
      rope_->apply(kr, H, ents[r].pos);
    }
  }
}

void PagedKvCache::attend_reference(int layer, int seq, int64_t n_pos, int64_t kvh, const float* q,
                                    int n_group, float* out) const {
  const auto& ents = seqs_[seq].layers[layer].entries;
  const int64_t hd = head_dim_;
  std::vector<float> K, V;
  read_rows(layer, seq, &K, &V);
  std::vector<int64_t> idx;
  for (int64_t r = 0; r < static_cast<int64_t>(ents.size()); ++r)
    if (ents[r].pos < n_pos) idx.push_back(r);
  for (int g = 0; g < n_group; ++g) {
    std::vector<double> s(idx.size());
    double mx = -INFINITY;
    for (size_t j = 0; j < idx.size(); ++j) {
      double d = 0;
      for (int64_t i = 0; i < hd; ++i)
        d += static_cast<double>(q[g * hd + i]) * K[idx[j] * kv_dim_ + kvh * hd + i];
      s[j] = d;
      mx = std::max(mx, d);
    }
    double sum = 0;
    for (auto& x : s) sum += (x = std::exp(x - mx));
    for (int64_t i = 0; i < hd; ++i) {
      double o = 0;
      for (size_t j = 0; j < idx.size(); ++j) o += s[j] / sum * V[idx[j] * kv_dim_ + kvh * hd + i];
      out[g * hd + i] = static_cast<float>(o);
    }
  }
}

}  // namespace lowbit
