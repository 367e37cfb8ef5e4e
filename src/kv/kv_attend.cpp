// Attention over the paged, quantized KV cache: one head row at a time is dequantized into a head-sized tile
// (AVX-512 for the common formats, kernels/kv_rows.h; scalar otherwise), so the cache is never widened. The
// scalar reference is PagedKvCache::attend_reference (kv_paged.cpp), the oracle of tests/kv.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "kernels/attn_tiled.h"
#include "kernels/dispatch.h"
#include "kernels/kv_rows.h"
#include "kernels/matmul.h"
#include "kv/kv_paged.h"
#include "kv/kv_rotation.h"
#include "ops/rope.h"

namespace lowbit {

// Fast head-row decode. Falls back to the reference codec for the less common layouts.
void PagedKvCache::head_row(int layer, int seq, const Entry& e, bool key, int64_t off, float* out) const {
  const int64_t hd = head_dim_;
  const LayerState& st_ = seqs_[seq].layers[layer];
  const bool simd = kernel_isa() >= Isa::Avx512 && hd % 16 == 0;  // the kernels' tier (LOWBIT_ISA)
  if (e.slot < 0) {
    const uint16_t* s =
        (key ? staged_k(seq, layer, -(e.slot + 1)) : staged_v(seq, layer, -(e.slot + 1))) + off;
    return widen_f16(s, out, hd);  // kernels: SIMD tier chosen by kernel_isa()
  }
  const LayerInfo& L = layers_[layer];
  const KvSideLayout& S = key ? L.k : L.v;
  const uint8_t* base = page_layer(e.slot / B_, layer);
  const int slot = e.slot % B_;
  const uint8_t* row = key ? base + slot * S.row_bytes : base + L.v_off + slot * S.row_bytes;
  const uint8_t* extra = key ? base + L.k_extra : base + L.v_extra;
  switch (S.format) {
    case KvFormat::F32:
      std::memcpy(out, row + off * 4, hd * 4);
      return;
    case KvFormat::F16: {
      const auto* h = reinterpret_cast<const uint16_t*>(row) + off;
      return widen_f16(h, out, hd);
    }
    case KvFormat::INT8: {
      const float s = f16_to_f32(ld16(row + S.kv_dim + 2 * (off / hd)));
      const auto* c = reinterpret_cast<const int8_t*>(row) + off;
      if (simd) return kern::kv_int8_row_avx512(c, hd, s, out);
      for (int64_t i = 0; i < hd; ++i) out[i] = static_cast<float>(c[i]) * s;
      return;
    }
    case KvFormat::INT4:
    case KvFormat::INT2:
      if (S.per_channel && simd) {
        const auto* sc = reinterpret_cast<const uint16_t*>(extra);
        return kern::kv_intch_row_avx512(row + off * S.bits / 8, S.bits, sc + off,
                                         S.asym ? sc + S.kv_dim + off : nullptr, hd, out);
      }
      if (!S.per_channel) {
        // Per-token asymmetric groups: one scale/minimum per group, codes unpacked a byte at a time.
        const int64_t G = S.group, ng = S.kv_dim / G, bits = S.bits, per = 8 / bits, mask = (1 << bits) - 1;
        const uint8_t* sc = row + S.code_bytes;
        if (simd && bits == 4 && G % 16 == 0 && off % 32 == 0)
          return kern::kv_int4tok_row_avx512(row, sc, ng, G, off, hd, out);
        for (int64_t c0 = off; c0 < off + hd;) {
          const int64_t g = c0 / G, c1 = std::min(off + hd, (g + 1) * G);
          const float s = f16_to_f32(ld16(sc + 2 * g)), m = f16_to_f32(ld16(sc + 2 * (ng + g)));
          for (int64_t c = c0; c < c1; ++c)
            out[c - off] = m + static_cast<float>((row[c / per] >> ((c % per) * bits)) & mask) * s;
          c0 = c1;
        }
        return;
      }
      break;
    case KvFormat::E4M3:
    case KvFormat::E5M2: {
      const int64_t h = off / hd;
      const float s = S.fp8_scale == KvScaleMode::Token ? f16_to_f32(ld16(row + S.kv_dim + 2 * h))
                                                        : (key ? st_.kls : st_.vls).s[h];
      return widen_fp8(row + off, S.format == KvFormat::E4M3, s, out,
                       hd);  // kernels: SIMD tier by kernel_isa()
    }
    case KvFormat::FP4: {
      const float* lut = kv_fp4_lut();
      const auto& ls = key ? st_.kls : st_.vls;
      const float g = ls.s.empty() ? 1.0f : ls.s[0];
      const float* e4 = kv_fp8_lut(true);
      for (int64_t c0 = off; c0 < off + hd; c0 += 16) {
        const int64_t c1 = std::min(off + hd, c0 + 16);
        const float s = e4[row[S.code_bytes + c0 / 16]] / g;
        for (int64_t c = c0; c < c1; ++c) out[c - off] = lut[(row[c / 2] >> ((c & 1) * 4)) & 15] * s;
      }
      return;
    }
    default:
      break;
  }
  kv_decode_range(S, row, extra, key ? L.kls : L.vls, off, hd, out);
}

void PagedKvCache::key_row(int layer, int seq, const Entry& e, int64_t off, float* out) const {
  head_row(layer, seq, e, true, off, out);
  if (spec_.pre_rope) {
    if (spec_.rotate) fwht_normalized(out, head_dim_);
    rope_->apply(out, 1, e.pos);
  }
}

void PagedKvCache::attend(int layer, int seq, int64_t n_pos, int64_t kvh, const float* q, int n_group,
                          float* out, float* scratch) const {
  const LayerState& st = seqs_[seq].layers[layer];
  const int64_t hd = head_dim_, off = kvh * hd;
  const auto end = std::lower_bound(st.entries.begin(), st.entries.end(), n_pos,
                                    [](const Entry& e, int64_t p) { return e.pos < p; });
  const int64_t n = end - st.entries.begin();
  thread_local std::vector<float> qbuf, tile;
  qbuf.resize(static_cast<size_t>(n_group * hd));
  tile.resize(static_cast<size_t>(hd));
  const float* qq = q;
  if (spec_.rotate && !spec_.pre_rope) {
    std::memcpy(qbuf.data(), q, n_group * hd * sizeof(float));
    rotate_heads(qbuf.data(), n_group, hd);
    qq = qbuf.data();
  }
  if (spec_.pre_rope && !rope_) fail("model", "KV cache with pre-RoPE keys has no RoPE bound (bind_rope)");
  for (int64_t p = 0; p < n; ++p) {
    const Entry& e = st.entries[p];
    key_row(layer, seq, e, off, tile.data());
    for (int g = 0; g < n_group; ++g) scratch[g * n + p] = dot_f32(qq + g * hd, tile.data(), hd);
  }
  for (int g = 0; g < n_group; ++g) {
    float* sc = scratch + g * n;
    std::fill(out + g * hd, out + (g + 1) * hd, 0.0f);
    if (n == 0) continue;
    const float mx = *std::max_element(sc, sc + n);
    float sum = 0;
    for (int64_t p = 0; p < n; ++p) sum += (sc[p] = std::exp(sc[p] - mx));
    const float inv = 1.0f / sum;
    for (int64_t p = 0; p < n; ++p) sc[p] *= inv;
  }
  if (spec_.evict.policy == KvEvictPolicy::H2O) {
    // Heavy-hitter statistics: attention probability summed over the query heads; attend() runs concurrently
    // for different (token, kv head) jobs of the same layer, hence the atomic adds.
    for (int64_t p = 0; p < n; ++p) {
      float a = 0;
      for (int g = 0; g < n_group; ++g) a += scratch[g * n + p];
      std::atomic_ref<float>(st.score[p]).fetch_add(a, std::memory_order_relaxed);
    }
  }
  for (int64_t p = 0; p < n; ++p) {
    head_row(layer, seq, st.entries[p], false, off, tile.data());
    for (int g = 0; g < n_group; ++g) axpy_f32(scratch[g * n + p], tile.data(), out + g * hd, hd);
  }
  if (spec_.rotate) rotate_heads(out, n_group, hd);
}

// Same domains as attend(): keys come out of head_row in the stored domain (rotated unless pre-RoPE, where
// they are un-rotated and RoPE'd here), q is rotated in when the stored keys are, and values stay rotated
// until the output is rotated back (attention is linear in V).
void PagedKvCache::attend_tiled(int layer, int seq, const int64_t* qpos, int64_t m, int64_t kvh,
                                const float* q, int64_t q_stride, int n_group, float* out,
                                int64_t out_stride) const {
  if (m <= 0) return;
  if (spec_.evict.policy == KvEvictPolicy::H2O) fail("model", "tiled attention cannot keep H2O scores");
  if (spec_.pre_rope && !rope_) fail("model", "KV cache with pre-RoPE keys has no RoPE bound (bind_rope)");
  const LayerState& st = seqs_[seq].layers[layer];
  const int64_t hd = head_dim_;
  const int64_t n = std::upper_bound(st.entries.begin(), st.entries.end(), qpos[m - 1],
                                     [](int64_t p, const Entry& e) { return p < e.pos; }) -
                    st.entries.begin();
  struct Rows : AttnRows {
    const PagedKvCache* kv;
    const LayerState* st;
    int layer, seq;
    int64_t off;
    void load(int64_t j0, int64_t j1, float* k, float* v, int64_t* pos) const override {
      const int64_t hd = kv->head_dim_;
      const LayerInfo& L = kv->layers_[layer];
      // The tile's rows lie in pages of their own (16 sequences' pages do not stay in cache between layers):
      // their addresses first, every row's lines requested before the first is read, so the misses overlap
      // instead of arriving one row at a time. Plain F16 / F32 rows (whose layers stage nothing) then widen
      // or copy in one call per side; other formats decode per row (head_row). +8 % tokens/s at 16 decode
      // sequences of the 0.5B Q4_0 with F16 pages (docs/serve.md).
      const uint8_t* kr[kAttnTile];
      const uint8_t* vr[kAttnTile];
      bool staged = false;
      for (int64_t j = j0; j < j1; ++j) {
        const Entry& e = st->entries[j];
        pos[j - j0] = e.pos;
        if (e.slot < 0) {
          staged = true;
          continue;
        }
        const uint8_t* base = kv->page_layer(e.slot / kv->B_, layer);
        const int slot = e.slot % kv->B_;
        kr[j - j0] = base + slot * L.k.row_bytes;
        vr[j - j0] = base + L.v_off + slot * L.v.row_bytes;
        for (int64_t o = 0; o < L.k.row_bytes; o += 64) __builtin_prefetch(kr[j - j0] + o);
        for (int64_t o = 0; o < L.v.row_bytes; o += 64) __builtin_prefetch(vr[j - j0] + o);
      }
      const KvFormat kf = L.k.format, vf = L.v.format;
      if (!staged && kf == vf && (kf == KvFormat::F16 || kf == KvFormat::F32) && !kv->spec_.pre_rope) {
        const int64_t n = j1 - j0;
        if (kf == KvFormat::F16) {
          const uint16_t* kh[kAttnTile];
          const uint16_t* vh[kAttnTile];
          for (int64_t i = 0; i < n; ++i) {
            kh[i] = reinterpret_cast<const uint16_t*>(kr[i]) + off;
            vh[i] = reinterpret_cast<const uint16_t*>(vr[i]) + off;
          }
          widen_f16_rows(kh, n, hd, k);
          widen_f16_rows(vh, n, hd, v);
        } else {
          for (int64_t i = 0; i < n; ++i) {
            std::memcpy(k + i * hd, reinterpret_cast<const float*>(kr[i]) + off, hd * sizeof(float));
            std::memcpy(v + i * hd, reinterpret_cast<const float*>(vr[i]) + off, hd * sizeof(float));
          }
        }
        return;
      }
      for (int64_t j = j0; j < j1; ++j) {
        const Entry& e = st->entries[j];
        kv->key_row(layer, seq, e, off, k + (j - j0) * hd);
        kv->head_row(layer, seq, e, false, off, v + (j - j0) * hd);
      }
    }
  } rows;
  rows.kv = this, rows.st = &st, rows.layer = layer, rows.seq = seq, rows.off = kvh * hd;
  thread_local std::vector<float> qbuf;
  if (spec_.rotate && !spec_.pre_rope) {
    const int64_t qn = n_group * hd;
    if (qbuf.size() < static_cast<size_t>(m * qn)) qbuf.resize(static_cast<size_t>(m * qn));
    for (int64_t i = 0; i < m; ++i) {
      std::memcpy(qbuf.data() + i * qn, q + i * q_stride, qn * sizeof(float));
      rotate_heads(qbuf.data() + i * qn, n_group, hd);
    }
    q = qbuf.data(), q_stride = qn;
  }
  attend_tiled_rows(rows, n, qpos, m, n_group, hd, q, q_stride, out, out_stride);
  if (spec_.rotate)
    for (int64_t i = 0; i < m; ++i) rotate_heads(out + i * out_stride, n_group, hd);
}

}  // namespace lowbit
