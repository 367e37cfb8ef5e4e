#include "model/decoder.h"

#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/parallel.h"
#include "kernels/matmul.h"

namespace lowbit {

const char* act_site_name(ActSite s) {
  switch (s) {
    case ActSite::AttnIn: return "attn_in";
    case ActSite::OIn: return "o_in";
    case ActSite::MlpIn: return "mlp_in";
    case ActSite::DownIn: return "down_in";
    case ActSite::KeyOut: return "k";
    case ActSite::ValueOut: return "v";
    case ActSite::LayerOut: return "layer_out";
  }
  return "?";
}

void rms_norm(const float* x, const float* w, float* out, int64_t T, int64_t n, double eps) {
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * n;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xt[i]) * xt[i];
    float r = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
    float* o = out + t * n;
    for (int64_t i = 0; i < n; ++i) o[i] = xt[i] * r * w[i];
  }
}

Decoder::Decoder(const ModelConfig& c, const ModelWeights& w) : c_(c), w_(w), rope_(c, w.rope_freq_factors) {}

namespace {
void check_finite(const float* x, int64_t T, int64_t n, const std::vector<BatchEntry>& b, const std::string& where) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(x[t * n + i]))
        fail("model", std::string(std::isnan(x[t * n + i]) ? "NaN" : "Inf") + " in " + where + " at sequence " +
                          std::to_string(b[t].seq) + " position " + std::to_string(b[t].pos) + " (element " +
                          std::to_string(i) + "); the weights or the KV cache format overflow here");
}
}  // namespace

void Decoder::forward(const std::vector<BatchEntry>& batch, KvCache& kv, float* logits, const ForwardOptions& o) {
  const int64_t T = static_cast<int64_t>(batch.size());
  if (T == 0) return;
  const int64_t D = c_.dim, Q = c_.q_dim(), KV = c_.kv_dim(), F = c_.ffn_dim, hd = c_.head_dim;
  const int64_t group = c_.n_heads / c_.n_kv_heads;
  for (const auto& e : batch) {
    if (e.token < 0 || e.token >= c_.vocab_size)
      throw UsageError("model", "token id " + std::to_string(e.token) + " is outside the vocabulary (size " +
                                    std::to_string(c_.vocab_size) + ")");
    if (e.seq < 0 || e.seq >= kv.n_seqs() || e.pos < 0 || e.pos >= kv.capacity())
      throw UsageError("model", "position " + std::to_string(e.pos) + " of sequence " + std::to_string(e.seq) +
                                    " does not fit the KV cache (capacity " + std::to_string(kv.capacity()) +
                                    " tokens x " + std::to_string(kv.n_seqs()) + " sequences)");
  }
  std::vector<float> x(T * D), xn(T * D), q(T * Q), k(T * KV), v(T * KV), att(T * Q), tmp(T * D);
  std::vector<float> g(T * F), u(T * F);
  for (int64_t t = 0; t < T; ++t) weight_row_f32(w_.tok_embed, batch[t].token, x.data() + t * D);

  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  for (int64_t l = 0; l < c_.n_layers; ++l) {
    const LayerWeights& L = w_.layers[l];
    rms_norm(x.data(), L.attn_norm.data(), xn.data(), T, D, c_.norm_eps);
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
      rope_.apply(qt, c_.n_heads, batch[t].pos);
      rope_.apply(kt, c_.n_kv_heads, batch[t].pos);
    }
    if (observer_) {
      observer_->observe(static_cast<int>(l), ActSite::KeyOut, k.data(), T, KV);
      observer_->observe(static_cast<int>(l), ActSite::ValueOut, v.data(), T, KV);
    }
    for (int64_t t = 0; t < T; ++t)
      kv.store(static_cast<int>(l), batch[t].seq, batch[t].pos, k.data() + t * KV, v.data() + t * KV);
    // Every token attends to its own sequence's positions [0, pos]: entries of a sequence are stored before
    // attention runs, so causality holds inside a prefill batch too.
    parallel_for(T * c_.n_kv_heads, 1, [&](int64_t a, int64_t b) {
      int64_t max_pos = 0;
      for (int64_t t = 0; t < T; ++t) max_pos = std::max(max_pos, batch[t].pos + 1);
      std::vector<float> qs(group * hd), scratch(group * max_pos);
      for (int64_t job = a; job < b; ++job) {
        int64_t t = job / c_.n_kv_heads, h = job % c_.n_kv_heads;
        const float* qt = q.data() + t * Q + h * group * hd;
        for (int64_t i = 0; i < group * hd; ++i) qs[i] = qt[i] * scale;
        kv.attend(static_cast<int>(l), batch[t].seq, batch[t].pos + 1, h, qs.data(), static_cast<int>(group),
                  att.data() + t * Q + h * group * hd, scratch.data());
      }
    });
    if (observer_) observer_->observe(static_cast<int>(l), ActSite::OIn, att.data(), T, Q);
    matmul(L.wo, att.data(), T, tmp.data());
    for (int64_t i = 0; i < T * D; ++i) x[i] += tmp[i];

    rms_norm(x.data(), L.ffn_norm.data(), xn.data(), T, D, c_.norm_eps);
    if (observer_) observer_->observe(static_cast<int>(l), ActSite::MlpIn, xn.data(), T, D);
    matmul(L.w_gate, xn.data(), T, g.data());
    matmul(L.w_up, xn.data(), T, u.data());
    for (int64_t i = 0; i < T * F; ++i) {
      float a = g[i];
      g[i] = a / (1.0f + std::exp(-a)) * u[i];
    }
    if (observer_) observer_->observe(static_cast<int>(l), ActSite::DownIn, g.data(), T, F);
    matmul(L.w_down, g.data(), T, tmp.data());
    for (int64_t i = 0; i < T * D; ++i) x[i] += tmp[i];
    if (observer_) observer_->observe(static_cast<int>(l), ActSite::LayerOut, x.data(), T, D);
    if (o.check_layers) check_finite(x.data(), T, D, batch, "the output of layer " + std::to_string(l));
  }

  // Final norm + classifier only for the entries that want logits.
  std::vector<int64_t> want;
  for (int64_t t = 0; t < T; ++t)
    if (batch[t].logits) want.push_back(t);
  if (want.empty()) return;
  std::vector<float> xf(want.size() * D);
  std::vector<BatchEntry> wb;
  for (size_t i = 0; i < want.size(); ++i) {
    rms_norm(x.data() + want[i] * D, w_.final_norm.data(), xf.data() + i * D, 1, D, c_.norm_eps);
    wb.push_back(batch[want[i]]);
  }
  matmul(w_.lm_head, xf.data(), static_cast<int64_t>(want.size()), logits);
  check_finite(logits, static_cast<int64_t>(want.size()), c_.vocab_size, wb, "the logits");
}

}  // namespace lowbit
