// The decoder in torch (see torch_decoder.h).
#include "train/torch_decoder.h"

#include <cmath>

#include "core/error.h"
#include "kernels/matmul.h"
#include "ops/rope.h"

namespace lowbit::train {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

Tensor from_floats(const float* p, std::vector<int64_t> shape, torch::ScalarType dt) {
  return torch::from_blob(const_cast<float*>(p), shape, torch::kFloat).to(dt, false, true);
}
Tensor matrix(const WeightMatrix& w, torch::ScalarType dt) {
  const std::vector<float> f = weight_to_f32(w);
  return from_floats(f.data(), {w.rows, w.cols}, dt);
}
Tensor vec(const std::vector<float>& v, torch::ScalarType dt) {
  if (v.empty()) return {};
  return from_floats(v.data(), {static_cast<int64_t>(v.size())}, dt);
}
// W diag(gamma): the RMSNorm gamma folded into the input side of W [out, in]; W for an empty gamma.
Tensor folded(const WeightMatrix& w, const std::vector<float>& gamma, torch::ScalarType dt) {
  return gamma.empty() ? matrix(w, dt) : matrix(w, dt) * vec(gamma, dt).unsqueeze(0);
}
// The dense matrix M with h M = the online transform of h (rows of M are H e_i, so M = H^T).
Tensor dense_hadamard(const Hadamard& h, torch::ScalarType dt) {
  std::vector<float> eye(static_cast<size_t>(h.n * h.n), 0.0f);
  for (int64_t i = 0; i < h.n; ++i) eye[static_cast<size_t>(i * h.n + i)] = 1.0f;
  hadamard_transform(h, eye.data(), h.n);
  return from_floats(eye.data(), {h.n, h.n}, dt);
}

// RMSNorm without gamma (folded), the sum of squares in double as ops/norm.cpp.
Tensor rms(const Tensor& x, double eps) {
  const Tensor r = (x.to(torch::kDouble).square().mean(-1, true) + eps).rsqrt();
  return x * r.to(x.scalar_type());
}
// x * gamma (per channel); x when gamma is undefined (folded into the linears).
Tensor times(const Tensor& x, const Tensor& gamma) {
  return gamma.defined() ? x * gamma : x;
}
Tensor rms_weighted(const Tensor& x, const Tensor& w, double eps) {
  return w.defined() ? rms(x, eps) * w : x;
}

// x [B, S, heads, hd] rotated by the angles of positions 0..S-1 in the source's pairing (ops/rope.cpp).
Tensor rope(const Tensor& x, const TorchModel& m) {
  const int64_t B = x.size(0), S = x.size(1), nh = x.size(2), hd = x.size(3), half = hd / 2;
  const Tensor c = m.cos.narrow(0, 0, S).view({1, S, 1, half}),
               s = m.sin.narrow(0, 0, S).view({1, S, 1, half});
  if (m.c.rope_style == RopeStyle::Interleaved) {
    const Tensor p = x.reshape({B, S, nh, half, 2});
    const Tensor a0 = p.select(-1, 0), a1 = p.select(-1, 1);
    return torch::stack({a0 * c - a1 * s, a0 * s + a1 * c}, -1).reshape({B, S, nh, hd});
  }
  const Tensor a0 = x.narrow(-1, 0, half), a1 = x.narrow(-1, half, half);
  return torch::cat({a0 * c - a1 * s, a0 * s + a1 * c}, -1);
}

struct ActFq : torch::autograd::Function<ActFq> {
  static Tensor forward(AutogradContext* ctx, Tensor x, int64_t format, double clip, int64_t scale) {
    if (x.scalar_type() != torch::kFloat)
      throw Error("train",
                  "fake quantization runs on float32 tensors (got another dtype); turn it off for "
                  "double-precision gradient checks");
    Tensor y = x.contiguous().clone();
    const int64_t n = y.size(-1);
    const bool nvfp4 = format == static_cast<int64_t>(FormatId::NVFP4);
    if (nvfp4)
      fake_quant_act_nvfp4(y.data_ptr<float>(), y.numel() / n, n, static_cast<float>(clip),
                           static_cast<ActScale>(scale));
    else
      fake_quant_act_int4(y.data_ptr<float>(), y.numel() / n, n, static_cast<float>(clip));
    ctx->save_for_backward({x.detach().contiguous(), y});
    ctx->saved_data["clip"] = clip;
    ctx->saved_data["nvfp4"] = nvfp4;
    ctx->saved_data["scale"] = scale;
    return y;
  }
  // y = s * c with c = clamp(round(x / s), -7, 7) and s = clip * max|x| / 7 per row. Straight-through on the
  // rounding only: dc_i/dx_i = 1 / s inside the clip range (|x_i| <= clip * max|x|), 0 outside, and the scale
  // stays a function of the row's largest value x_m, so
  //   dL/dx_j = g_j [j inside] + [j = m] (clip / 7) sign(x_m) sum_i g_i (c_i - [i inside] x_i / s).
  // The second term is what makes the gradient see outliers: it grows the error of every other value with
  // the largest one.
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &y = saved[1];
    const double clip = ctx->saved_data["clip"].toDouble();
    if (ctx->saved_data["nvfp4"].toBool()) {
      const Tensor up = g[0].contiguous().to(torch::kFloat);
      Tensor gx = torch::empty_like(x);
      const int64_t n = x.size(-1), rows = x.numel() / n;
      for (int64_t t = 0; t < rows; ++t)
        fake_quant_act_nvfp4_grad(
            x.data_ptr<float>() + t * n, up.data_ptr<float>() + t * n, n, static_cast<float>(clip),
            static_cast<ActScale>(ctx->saved_data["scale"].toInt()), gx.data_ptr<float>() + t * n);
      return {gx, Tensor(), Tensor(), Tensor()};
    }
    const Tensor a = x.abs();
    const Tensor amax = a.amax(-1, true);
    const Tensor inside = (a <= amax * static_cast<float>(clip)).to(x.scalar_type());
    const Tensor s = amax * static_cast<float>(clip / 7.0);
    const Tensor safe = torch::where(s > 0, s, torch::ones_like(s));
    const Tensor c = y / safe;
    const Tensor ds = (g[0] * (c - inside * x / safe)).sum(-1, true) * static_cast<float>(clip / 7.0);
    const Tensor at_max = torch::zeros_like(x).scatter_(-1, a.argmax(-1, true), 1.0);
    const Tensor gx = g[0] * inside + at_max * x.sign() * torch::where(s > 0, ds, torch::zeros_like(ds));
    return {gx, Tensor(), Tensor(), Tensor()};
  }
};

struct KvFq : torch::autograd::Function<KvFq> {
  static Tensor forward(AutogradContext*, Tensor x, const KvFakeQuant* q, bool key) {
    if (x.scalar_type() != torch::kFloat || x.dim() != 3)
      throw Error("train", "KV fake quantization takes float32 [B, S, kv_dim] tensors");
    Tensor y = x.contiguous().clone();
    const int64_t B = y.size(0), S = y.size(1), D = y.size(2);
    for (int64_t b = 0; b < B; ++b) fake_quant_kv(*q, key, y.data_ptr<float>() + b * S * D, S);
    return y;
  }
  static tensor_list backward(AutogradContext*, tensor_list g) { return {g[0], Tensor(), Tensor()}; }
};

}  // namespace

Tensor fake_quant_act(const Tensor& x, FormatId format, float clip, ActScale scale) {
  if (format != FormatId::INT4 && format != FormatId::NVFP4)
    throw UsageError("train", std::string("activations in ") + format_info(format).name +
                                  " cannot be fake-quantized for training; int4 and nvfp4 can");
  return ActFq::apply(x, static_cast<int64_t>(format), static_cast<double>(clip),
                      static_cast<int64_t>(scale));
}
Tensor fake_quant_kv(const Tensor& x, const KvFakeQuant& q, bool key) {
  return KvFq::apply(x, &q, key);
}

TorchModel torch_model(const Model& model, torch::ScalarType dt, const Hadamard* r4, bool fold_norms) {
  const ModelConfig& c = model.config;
  const ModelWeights& W = model.weights;
  TorchModel m;
  m.c = c;
  m.embed = matrix(W.tok_embed, dt);
  m.head = fold_norms ? folded(W.lm_head, W.final_norm, dt) : matrix(W.lm_head, dt);
  if (!fold_norms) m.final_gamma = vec(W.final_norm, dt);
  const bool own_r4 = W.down_rotation.valid();
  if (own_r4 && r4)
    throw UsageError("train", "'" + model.path +
                                  "' has an online down_proj rotation already; train on the "
                                  "16-bit source");
  if (own_r4) m.down_h = dense_hadamard(W.down_rotation, dt);
  if (r4) m.down_h = dense_hadamard(*r4, dt);
  for (const LayerWeights& L : W.layers) {
    TorchLayer t;
    const std::vector<float> none;
    const std::vector<float>& an = fold_norms ? L.attn_norm : none;
    const std::vector<float>& fn = fold_norms ? L.ffn_norm : none;
    t.wq = folded(L.wq, an, dt), t.wk = folded(L.wk, an, dt), t.wv = folded(L.wv, an, dt);
    t.wo = matrix(L.wo, dt);
    t.gate = folded(L.w_gate, fn, dt), t.up = folded(L.w_up, fn, dt);
    if (!fold_norms) t.attn_gamma = vec(L.attn_norm, dt), t.ffn_gamma = vec(L.ffn_norm, dt);
    t.down = matrix(L.w_down, dt);
    // A given R4 is new to the model: W_down <- W_down H^T as rotate_model stores it.
    if (r4) t.down = t.down.matmul(m.down_h);
    if (c.qkv_bias) t.bq = vec(L.bq, dt), t.bk = vec(L.bk, dt), t.bv = vec(L.bv, dt);
    if (c.qk_norm) t.q_norm = vec(L.q_norm, dt), t.k_norm = vec(L.k_norm, dt);
    m.layers.push_back(std::move(t));
  }
  const Rope rope(c, W.rope_freq_factors);
  const int64_t half = c.head_dim / 2, S = c.max_seq_len;
  std::vector<float> cs(static_cast<size_t>(S * half)), sn(cs.size());
  for (int64_t p = 0; p < S; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double a = static_cast<double>(p) * rope.inv_freq()[static_cast<size_t>(i)];
      cs[static_cast<size_t>(p * half + i)] = static_cast<float>(std::cos(a));
      sn[static_cast<size_t>(p * half + i)] = static_cast<float>(std::sin(a));
    }
  m.cos = from_floats(cs.data(), {S, half}, dt);
  m.sin = from_floats(sn.data(), {S, half}, dt);
  return m;
}

Tensor forward_logits(const TorchModel& m, const Tensor& tokens, const Tensor& r1, const Tensor& r2,
                      const FakeQuantOptions& fq) {
  const ModelConfig& c = m.c;
  const int64_t B = tokens.size(0), S = tokens.size(1), D = c.dim, H = c.n_heads, Hk = c.n_kv_heads;
  const int64_t hd = c.head_dim, group = H / Hk;
  if (S > c.max_seq_len)
    throw UsageError("train", "sequences of " + std::to_string(S) + " tokens exceed the model's context (" +
                                  std::to_string(c.max_seq_len) + ")");
  // W <- W r1^T on the input side, W <- r1 W on the output side (quant/rotate.cpp's input_side/output_side).
  auto in_rot = [&](const Tensor& w) { return r1.defined() ? w.matmul(r1.t()) : w; };
  auto out_rot = [&](const Tensor& w) { return r1.defined() ? r1.matmul(w) : w; };
  auto act = [&](const Tensor& x) {
    return fq.act != FormatId::F32 ? fake_quant_act(x, fq.act, fq.act_clip, fq.act_scale) : x;
  };
  auto lin = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    return b.defined() ? torch::addmm(b, x.reshape({-1, x.size(-1)}), w.t()).view({x.size(0), x.size(1), -1})
                       : x.matmul(w.t());
  };
  Tensor x = m.embed.index_select(0, tokens.reshape({-1})).view({B, S, D});
  if (r1.defined()) x = x.matmul(r1.t());
  if (c.embed_scale) x = x * static_cast<float>(std::sqrt(static_cast<double>(D)));
  const Tensor causal =
      torch::ones({S, S}, torch::TensorOptions().dtype(torch::kBool)).triu(1).view({1, 1, S, S});
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (const TorchLayer& L : m.layers) {
    const Tensor xn = act(times(rms(x, c.norm_eps), L.attn_gamma));
    Tensor q = lin(xn, in_rot(L.wq), L.bq).view({B, S, H, hd});
    Tensor k = lin(xn, in_rot(L.wk), L.bk).view({B, S, Hk, hd});
    Tensor v = lin(xn, in_rot(L.wv), L.bv).view({B, S, Hk, hd});
    if (r2.defined()) v = v.matmul(r2.t());  // v_h <- r2 v_h for every KV head
    if (c.qk_norm) q = rms_weighted(q, L.q_norm, c.norm_eps), k = rms_weighted(k, L.k_norm, c.norm_eps);
    q = rope(q, m) * static_cast<float>(scale);
    k = rope(k, m);
    if (fq.kv && fq.kv->enabled()) {
      k = fake_quant_kv(k.reshape({B, S, Hk * hd}), *fq.kv, true).view({B, S, Hk, hd});
      v = fake_quant_kv(v.reshape({B, S, Hk * hd}), *fq.kv, false).view({B, S, Hk, hd});
    }
    // Query head j reads KV head j / group (model/decoder.cpp's run_attention).
    const Tensor qh = q.permute({0, 2, 1, 3});
    const Tensor kh = k.permute({0, 2, 1, 3}).repeat_interleave(group, 1);
    const Tensor vh = v.permute({0, 2, 1, 3}).repeat_interleave(group, 1);
    const Tensor p = qh.matmul(kh.transpose(-1, -2)).masked_fill(causal, -INFINITY).softmax(-1);
    const Tensor att = act(p.matmul(vh).permute({0, 2, 1, 3}).reshape({B, S, H * hd}));
    // o_proj: every query head's columns by r2^T (input side), then r1 on the output side.
    Tensor wo = L.wo;
    if (r2.defined()) wo = wo.view({D, H, hd}).matmul(r2.t()).reshape({D, H * hd});
    x = x + att.matmul(out_rot(wo).t());

    const Tensor xm = act(times(rms(x, c.norm_eps), L.ffn_gamma));
    const Tensor g = xm.matmul(in_rot(L.gate).t()), u = xm.matmul(in_rot(L.up).t());
    Tensor h = (c.act == Activation::Silu ? torch::silu(g) : torch::gelu(g, "tanh")) * u;
    if (m.down_h.defined()) h = h.matmul(m.down_h);
    x = x + act(h).matmul(out_rot(L.down).t());
  }
  return times(rms(x, c.norm_eps), m.final_gamma).matmul(in_rot(m.head).t());
}

Tensor window_tokens(const std::vector<std::vector<int32_t>>& windows, int64_t n) {
  const int64_t S = static_cast<int64_t>(windows.front().size());
  std::vector<int64_t> ids;
  ids.reserve(static_cast<size_t>(n * S));
  for (int64_t w = 0; w < n; ++w) {
    const std::vector<int32_t>& win = windows[static_cast<size_t>(w)];
    if (static_cast<int64_t>(win.size()) != S)
      throw UsageError("train", "calibration windows differ in length (" + std::to_string(S) + " and " +
                                    std::to_string(win.size()) +
                                    " tokens); use a calibration file long enough for every window");
    ids.insert(ids.end(), win.begin(), win.end());
  }
  return torch::from_blob(ids.data(), {n, S}, torch::kLong).clone();
}

Tensor next_token_loss(const Tensor& logits, const Tensor& tokens) {
  const int64_t S = logits.size(1);
  const Tensor lp = logits.narrow(1, 0, S - 1).log_softmax(-1);
  return -lp.gather(-1, tokens.narrow(1, 1, S - 1).unsqueeze(-1)).mean();
}

Tensor kl_to_teacher(const Tensor& teacher_logp, const Tensor& logits) {
  return (teacher_logp.exp() * (teacher_logp - logits.log_softmax(-1))).sum(-1).mean();
}

}  // namespace lowbit::train
