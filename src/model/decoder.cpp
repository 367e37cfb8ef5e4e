#include "model/decoder.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/parallel.h"
#include "kernels/hadamard.h"
#include "kernels/matmul.h"
#include "kernels/reduce.h"
#include "ops/activation.h"
#include "ops/norm.h"

namespace lowbit {

const char* act_site_name(ActSite s) {
  switch (s) {
    case ActSite::AttnIn:
      return "attn_in";
    case ActSite::OIn:
      return "o_in";
    case ActSite::MlpIn:
      return "mlp_in";
    case ActSite::DownIn:
      return "down_in";
    case ActSite::KeyOut:
      return "k";
    case ActSite::ValueOut:
      return "v";
    case ActSite::LayerOut:
      return "layer_out";
  }
  return "?";
}

Decoder::Decoder(const ModelConfig& c, const ModelWeights& w) : c_(c), w_(w), rope_(c, w.rope_freq_factors) {
  if (w.down_rotation.valid() && w.down_rotation.n != c.ffn_dim)
    fail("model", "the online down_proj rotation has order " + std::to_string(w.down_rotation.n) +
                      " but the model's FFN width is " + std::to_string(c.ffn_dim) +
                      "; the rotated checkpoint is inconsistent, quantize it again");
}

namespace {
void check_finite(const float* x, int64_t T, int64_t n, const std::vector<BatchEntry>& b,
                  const std::string& where) {
  // The tokens' rows checked in parallel (16 sequences' logits are ~10 MB), then the first bad one located.
  std::atomic<bool> ok{true};
  parallel_for(T, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      if (!all_finite_f32(x + t * n, n)) ok.store(false, std::memory_order_relaxed);
  });
  if (ok.load()) return;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(x[t * n + i]))
        fail("model", std::string(std::isnan(x[t * n + i]) ? "NaN" : "Inf") + " in " + where +
                          " at sequence " + std::to_string(b[t].seq) + " position " +
                          std::to_string(b[t].pos) + " (element " + std::to_string(i) +
                          "); the weights or the KV cache format overflow here");
}
}  // namespace

namespace {
// A unit of attention work for one kv head: m entries of one sequence (idx: their batch indices), through the
// tiled kernel (a prefill block, or one decode entry) or per-token attend (m = 1, H2O eviction).
struct AttnJob {
  const int64_t* idx;
  int64_t m, h, cost;
  bool tiled;
};
// Query tokens per tiled job: each K/V tile is decoded once for 32 x group rows.
constexpr int64_t kQueryBlock = 32;
}  // namespace

void Decoder::run_attention(int layer, const std::vector<BatchEntry>& batch, const KvCache& kv,
                            const float* q, float* att) const {
  const int64_t T = static_cast<int64_t>(batch.size()), Q = c_.q_dim(), hd = c_.head_dim, H = c_.n_kv_heads;
  const int group = static_cast<int>(c_.n_heads / c_.n_kv_heads);
  const int64_t G = group * hd;  // one token's query heads of one kv head
  // Each sequence's entries, wherever they sit in the batch: a sequence then takes the same path (and gets
  // the same bits) alone or interleaved with others. Tiled when it has one entry or entries with increasing
  // positions, except with H2O eviction, whose scores need every query's normalised probabilities (the online
  // softmax never forms them).
  std::vector<std::vector<int64_t>> by_seq(static_cast<size_t>(kv.n_seqs()));
  std::vector<int64_t> pos(T);
  int64_t max_pos = 0;
  for (int64_t t = 0; t < T; ++t) {
    by_seq[batch[t].seq].push_back(t);
    pos[t] = batch[t].pos, max_pos = std::max(max_pos, batch[t].pos + 1);
  }
  auto tiled = [&](const std::vector<int64_t>& ix) {
    if (ix.empty() || !kv.tiled_ok()) return false;
    // Decode (one entry) too: one query x the group's heads per tile scores 16 positions per vector instead
    // of one horizontal dot per (head, position) (Qwen2.5-0.5B Q4_0, 2 threads: F16 KV 1.8x / 2.0x the
    // per-token path's decode at 4K / 16K tokens of context; 16 sequences at 8-136 positions: +10 to +13 %;
    // docs/kv_cache.md, "Prefill: tiled attention").
    if (ix.size() == 1) return true;
    for (size_t i = 1; i < ix.size(); ++i)
      if (pos[ix[i]] <= pos[ix[i - 1]]) return false;
    return true;
  };
  // Smaller query blocks when a short prompt would otherwise leave threads without a job.
  auto n_blocks = [&](int64_t qb) {
    int64_t n = 0;
    for (const auto& ix : by_seq) n += tiled(ix) ? (static_cast<int64_t>(ix.size()) + qb - 1) / qb : 0;
    return n;
  };
  int64_t qb = kQueryBlock;
  while (qb > 8 && H * n_blocks(qb) < 4 * num_threads()) qb /= 2;
  std::vector<AttnJob> jobs;
  int64_t work = 0;
  for (const auto& ix : by_seq) {
    const bool tl = tiled(ix);
    const int64_t n = static_cast<int64_t>(ix.size()), step = tl ? qb : 1;
    for (int64_t b = 0; b < n; b += step) {
      const int64_t m = std::min(step, n - b), cost = m * (pos[ix[b + m - 1]] + 1);
      for (int64_t h = 0; h < H; ++h) jobs.push_back({ix.data() + b, m, h, cost, tl});
      work += cost * H * G;
    }
  }
  // Heaviest first, taken from a shared counter: the causal blocks at the end of a long prompt cost the most.
  std::stable_sort(jobs.begin(), jobs.end(),
                   [](const AttnJob& a, const AttnJob& b) { return a.cost > b.cost; });
  auto run = [&](const AttnJob& j) {
    const int64_t t0 = j.idx[0], ho = j.h * G;
    const int seq = batch[t0].seq;
    if (!j.tiled) {
      thread_local std::vector<float> scratch;
      if (scratch.size() < static_cast<size_t>(group * max_pos))
        scratch.resize(static_cast<size_t>(group * max_pos));
      return kv.attend(layer, seq, pos[t0] + 1, j.h, q + t0 * Q + ho, group, att + t0 * Q + ho,
                       scratch.data());
    }
    // Consecutive in the batch (a plain prefill): read and write in place.
    if (j.idx[j.m - 1] - t0 == j.m - 1)
      return kv.attend_tiled(layer, seq, pos.data() + t0, j.m, j.h, q + t0 * Q + ho, Q, group,
                             att + t0 * Q + ho, Q);
    // Interleaved with other sequences: gather the block's queries and positions, scatter the outputs.
    thread_local std::vector<float> qg, og;
    thread_local std::vector<int64_t> pg;
    qg.resize(static_cast<size_t>(j.m * G)), og.resize(static_cast<size_t>(j.m * G)), pg.resize(j.m);
    for (int64_t i = 0; i < j.m; ++i) {
      std::memcpy(qg.data() + i * G, q + j.idx[i] * Q + ho, G * sizeof(float));
      pg[i] = pos[j.idx[i]];
    }
    kv.attend_tiled(layer, seq, pg.data(), j.m, j.h, qg.data(), G, group, og.data(), G);
    for (int64_t i = 0; i < j.m; ++i)
      std::memcpy(att + j.idx[i] * Q + ho, og.data() + i * G, G * sizeof(float));
  };
  // Tiny attention (decode over the first ~20 positions of a 0.5B-shaped model) runs on the calling thread: a
  // parallel_for costs ~0.3 us, and the other thread would otherwise idle through the serial part (at 2^17,
  // the earlier cut, serial attention was ~2.6 % of 2-thread tg128 on the 0.5B shape).
  if (work < (int64_t{1} << 14)) {
    for (const auto& j : jobs) run(j);
    return;
  }
  std::atomic<size_t> next{0};
  parallel_for(num_threads(), 1, [&](int64_t, int64_t) {
    for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < jobs.size();) run(jobs[i]);
  });
}

void Decoder::embed(const std::vector<BatchEntry>& batch, float* x) const {
  const int64_t D = c_.dim, T = static_cast<int64_t>(batch.size());
  for (int64_t t = 0; t < T; ++t) {
    if (batch[t].token < 0 || batch[t].token >= c_.vocab_size)
      throw UsageError("model", "token id " + std::to_string(batch[t].token) +
                                    " is outside the vocabulary (size " + std::to_string(c_.vocab_size) +
                                    ")");
    weight_row_f32(w_.tok_embed, batch[t].token, x + t * D);
  }
  if (c_.embed_scale) {  // Gemma: the embedding times sqrt(dim), rounded to float as Hugging Face does
    const float s = static_cast<float>(std::sqrt(static_cast<double>(D)));
    for (int64_t i = 0; i < T * D; ++i) x[i] *= s;
  }
}

void Decoder::forward_layers(const std::vector<BatchEntry>& batch, KvCache& kv, float* x, int first,
                             int last) {
  if (batch.empty()) return;
  if (first < 0 || last >= c_.n_layers || first > last)
    fail("model", "forward_layers: layer range [" + std::to_string(first) + ", " + std::to_string(last) +
                      "] is outside the model's " + std::to_string(c_.n_layers) + " layers");
  for (const auto& e : batch)
    if (e.seq < 0 || e.seq >= kv.n_seqs() || e.pos < 0 || e.pos >= kv.capacity())
      throw UsageError("model", "position " + std::to_string(e.pos) + " of sequence " +
                                    std::to_string(e.seq) + " does not fit the KV cache");
  use_checkpoint_kv_scales(kv, w_);
  run_layers(batch, kv, x, first, last, {});
}

void Decoder::run_layers(const std::vector<BatchEntry>& batch, KvCache& kv, float* x, int first, int last,
                         const ForwardOptions& o) {
  const int64_t T = static_cast<int64_t>(batch.size());
  const int64_t D = c_.dim, Q = c_.q_dim(), KV = c_.kv_dim(), F = c_.ffn_dim, hd = c_.head_dim;
  struct Scratch {
    std::vector<float> xn, q, k, v, att, tmp, g, u;
  };
  thread_local Scratch sc;
  auto grow = [](std::vector<float>& b, int64_t n) {
    if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
  };
  grow(sc.xn, T * D), grow(sc.q, T * Q), grow(sc.k, T * KV), grow(sc.v, T * KV);
  grow(sc.att, T * Q), grow(sc.tmp, T * D), grow(sc.g, T * F), grow(sc.u, T * F);
  auto &xn = sc.xn, &q = sc.q, &k = sc.k, &v = sc.v, &att = sc.att, &tmp = sc.tmp, &g = sc.g, &u = sc.u;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  // KV cache inputs: per-row sequence/position, and (for caches that keep keys before RoPE) un-rotated keys.
  kv.bind_rope(&rope_);
  const bool kv_pre_rope = kv.keys_pre_rope();
  std::vector<int32_t> kv_seq(T);
  std::vector<int64_t> kv_pos(T);
  for (int64_t t = 0; t < T; ++t) kv_seq[t] = batch[t].seq, kv_pos[t] = batch[t].pos;
  std::vector<float> k_pre(kv_pre_rope ? T * KV : 0);
  // Each entry's RoPE cos / sin, once for all layers (computing them per layer, queries and keys, took ~2 %
  // of a 16-sequence decode step). [T, hd]
  thread_local std::vector<float> rope_cs;
  grow(rope_cs, T * hd);
  for (int64_t t = 0; t < T; ++t) rope_.angles(batch[t].pos, rope_cs.data() + t * hd);
  for (int64_t l = first; l <= last; ++l) {
    const LayerWeights& L = w_.layers[l];
    rms_norm(x, L.attn_norm.data(), xn.data(), T, D, c_.norm_eps);
    if (observer_) observer_->observe(static_cast<int>(l), ActSite::AttnIn, xn.data(), T, D);
    matmul(L.wq, xn.data(), T, q.data());
    matmul(L.wk, xn.data(), T, k.data());
    matmul(L.wv, xn.data(), T, v.data());
    for (int64_t t = 0; t < T; ++t) {
      float* qt = q.data() + t * Q;
      float* kt = k.data() + t * KV;
      float* vt = v.data() + t * KV;
      if (c_.qkv_bias) {
        for (int64_t i = 0; i < Q; ++i) qt[i] += L.bq[i];
        for (int64_t i = 0; i < KV; ++i) kt[i] += L.bk[i], vt[i] += L.bv[i];
      }
      if (c_.qk_norm) {
        rms_norm(qt, L.q_norm.data(), qt, c_.n_heads, hd, c_.norm_eps);
        rms_norm(kt, L.k_norm.data(), kt, c_.n_kv_heads, hd, c_.norm_eps);
      }
      const float* cs = rope_cs.data() + t * hd;
      rope_.apply(qt, c_.n_heads, cs);
      if (kv_pre_rope) std::memcpy(k_pre.data() + t * KV, kt, KV * sizeof(float));
      rope_.apply(kt, c_.n_kv_heads, cs);
      for (int64_t i = 0; i < Q; ++i) qt[i] *= scale;  // attention takes pre-scaled queries
    }
    if (observer_) {
      observer_->observe(static_cast<int>(l), ActSite::KeyOut, k.data(), T, KV);
      observer_->observe(static_cast<int>(l), ActSite::ValueOut, v.data(), T, KV);
    }
    kv.store_rows(static_cast<int>(l), T, kv_seq.data(), kv_pos.data(), kv_pre_rope ? k_pre.data() : k.data(),
                  v.data());
    // Every token attends to its own sequence's positions [0, pos]: entries of a sequence are stored before
    // attention runs, so causality holds inside a prefill batch too.
    run_attention(static_cast<int>(l), batch, kv, q.data(), att.data());
    if (observer_) observer_->observe(static_cast<int>(l), ActSite::OIn, att.data(), T, Q);
    matmul(L.wo, att.data(), T, tmp.data());
    for (int64_t i = 0; i < T * D; ++i) x[i] += tmp[i];

    rms_norm(x, L.ffn_norm.data(), xn.data(), T, D, c_.norm_eps);
    if (observer_) observer_->observe(static_cast<int>(l), ActSite::MlpIn, xn.data(), T, D);
    matmul(L.w_gate, xn.data(), T, g.data());
    matmul(L.w_up, xn.data(), T, u.data());
    glu_f32(c_.act, g.data(), u.data(), T * F);
    // Online R4 (rotated models): every forward path (prefill, decode, batched) passes through here.
    if (w_.down_rotation.valid()) hadamard_transform(w_.down_rotation, g.data(), T);
    if (observer_) observer_->observe(static_cast<int>(l), ActSite::DownIn, g.data(), T, F);
    matmul(L.w_down, g.data(), T, tmp.data());
    for (int64_t i = 0; i < T * D; ++i) x[i] += tmp[i];
    if (observer_) observer_->observe(static_cast<int>(l), ActSite::LayerOut, x, T, D);
    if (o.check_layers) check_finite(x, T, D, batch, "the output of layer " + std::to_string(l));
  }
}

void Decoder::head(const float* x, int64_t T, float* logits) const {
  const int64_t D = c_.dim;
  std::vector<float> xf(static_cast<size_t>(T * D));
  rms_norm(x, w_.final_norm.data(), xf.data(), T, D, c_.norm_eps);
  matmul(w_.lm_head, xf.data(), T, logits);
}

void Decoder::forward(const std::vector<BatchEntry>& batch, KvCache& kv, float* logits,
                      const ForwardOptions& o) {
  const int64_t T = static_cast<int64_t>(batch.size());
  if (T == 0) return;
  const int64_t D = c_.dim;
  use_checkpoint_kv_scales(kv, w_);  // calibrated FP8 KV scales of a quantized checkpoint (once per cache)
  for (const auto& e : batch) {
    if (e.token < 0 || e.token >= c_.vocab_size)
      throw UsageError("model", "token id " + std::to_string(e.token) + " is outside the vocabulary (size " +
                                    std::to_string(c_.vocab_size) + ")");
    if (e.seq < 0 || e.seq >= kv.n_seqs() || e.pos < 0 || e.pos >= kv.capacity())
      throw UsageError("model", "position " + std::to_string(e.pos) + " of sequence " +
                                    std::to_string(e.seq) + " does not fit the KV cache (capacity " +
                                    std::to_string(kv.capacity()) + " tokens x " +
                                    std::to_string(kv.n_seqs()) + " sequences)");
  }
  // The residual stream persists per thread across calls (as run_layers' buffers do): decode calls forward()
  // once per token, and fresh allocations (page faults on first touch) were a measurable share of a step.
  thread_local std::vector<float> x;
  if (x.size() < static_cast<size_t>(T * D)) x.resize(static_cast<size_t>(T * D));
  embed(batch, x.data());
  run_layers(batch, kv, x.data(), 0, static_cast<int>(c_.n_layers) - 1, o);

  // Final norm + classifier only for the entries that want logits.
  std::vector<int64_t> want;
  for (int64_t t = 0; t < T; ++t)
    if (batch[t].logits) want.push_back(t);
  if (want.empty()) return;
  std::vector<float> xs(want.size() * D);
  std::vector<BatchEntry> wb;
  for (size_t i = 0; i < want.size(); ++i) {
    std::copy_n(x.data() + want[i] * D, D, xs.data() + i * D);
    wb.push_back(batch[want[i]]);
  }
  head(xs.data(), static_cast<int64_t>(want.size()), logits);
  check_finite(logits, static_cast<int64_t>(want.size()), c_.vocab_size, wb, "the logits");
}

}  // namespace lowbit
