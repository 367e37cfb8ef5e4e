#include "model/weights.h"

#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "core/memory.h"
#include "core/parallel.h"
#include "formats/ggml_types.h"

namespace lowbit {

DenseMode dense_mode_from_string(const std::string& s) {
  if (s == "native") return DenseMode::Native;
  if (s == "f32") return DenseMode::F32;
  if (s == "f16") return DenseMode::F16;
  if (s == "bf16") return DenseMode::BF16;
  throw UsageError("model", "unknown weight dtype '" + s + "'; use native, f32, f16 or bf16");
}

std::vector<std::pair<std::string, WeightMatrix*>> ModelWeights::named_matrices() {
  std::vector<std::pair<std::string, WeightMatrix*>> out;
  out.emplace_back("tok_embed", &tok_embed);
  for (size_t i = 0; i < layers.size(); ++i) {
    auto& L = layers[i];
    std::string p = "layers." + std::to_string(i) + ".";
    out.emplace_back(p + "wq", &L.wq);
    out.emplace_back(p + "wk", &L.wk);
    out.emplace_back(p + "wv", &L.wv);
    out.emplace_back(p + "wo", &L.wo);
    out.emplace_back(p + "w_gate", &L.w_gate);
    out.emplace_back(p + "w_up", &L.w_up);
    out.emplace_back(p + "w_down", &L.w_down);
  }
  out.emplace_back("lm_head", &lm_head);
  return out;
}

size_t ModelWeights::weight_bytes() const {
  size_t b = tok_embed.nbytes();
  if (!tied()) b += lm_head.nbytes();
  auto vec = [](const std::vector<float>& v) { return v.size() * sizeof(float); };
  b += vec(final_norm);
  for (auto& L : layers) {
    b += L.wq.nbytes() + L.wk.nbytes() + L.wv.nbytes() + L.wo.nbytes() + L.w_gate.nbytes() + L.w_up.nbytes() +
         L.w_down.nbytes();
    b += vec(L.attn_norm) + vec(L.ffn_norm) + vec(L.bq) + vec(L.bk) + vec(L.bv) + vec(L.q_norm) + vec(L.k_norm);
  }
  return b;
}

namespace {

struct Mapper {
  const ModelConfig& c;
  const std::map<std::string, TensorView>& t;
  bool gguf;
  std::shared_ptr<const void> owner;
  DenseMode mode;
  std::string source;
  const WeightHook* hook = nullptr;

  std::string name(const std::string& hf, int layer) const {
    // hf role names -> GGUF names (llama.cpp tensor naming).
    static const std::map<std::string, std::string> kGguf = {
        {"embed", "token_embd.weight"},         {"norm", "output_norm.weight"},
        {"lm_head", "output.weight"},           {"q", "attn_q.weight"},
        {"k", "attn_k.weight"},                 {"v", "attn_v.weight"},
        {"o", "attn_output.weight"},            {"gate", "ffn_gate.weight"},
        {"up", "ffn_up.weight"},                {"down", "ffn_down.weight"},
        {"attn_norm", "attn_norm.weight"},      {"ffn_norm", "ffn_norm.weight"},
        {"bq", "attn_q.bias"},                  {"bk", "attn_k.bias"},
        {"bv", "attn_v.bias"},                  {"q_norm", "attn_q_norm.weight"},
        {"k_norm", "attn_k_norm.weight"}};
    static const std::map<std::string, std::string> kHf = {
        {"embed", "model.embed_tokens.weight"},
        {"norm", "model.norm.weight"},
        {"lm_head", "lm_head.weight"},
        {"q", "self_attn.q_proj.weight"},
        {"k", "self_attn.k_proj.weight"},
        {"v", "self_attn.v_proj.weight"},
        {"o", "self_attn.o_proj.weight"},
        {"gate", "mlp.gate_proj.weight"},
        {"up", "mlp.up_proj.weight"},
        {"down", "mlp.down_proj.weight"},
        {"attn_norm", "input_layernorm.weight"},
        {"ffn_norm", "post_attention_layernorm.weight"},
        {"bq", "self_attn.q_proj.bias"},
        {"bk", "self_attn.k_proj.bias"},
        {"bv", "self_attn.v_proj.bias"},
        {"q_norm", "self_attn.q_norm.weight"},
        {"k_norm", "self_attn.k_norm.weight"}};
    const auto& m = gguf ? kGguf : kHf;
    std::string base = m.at(hf);
    if (layer < 0) return base;
    return gguf ? "blk." + std::to_string(layer) + "." + base
                : "model.layers." + std::to_string(layer) + "." + base;
  }

  const TensorView& get(const std::string& n, std::vector<int64_t> shape) const {
    auto it = t.find(n);
    if (it == t.end())
      fail("model", "tensor '" + n + "' is missing from " + source + " (expected shape " + shape_str(shape) +
                        "); the checkpoint is incomplete or not a supported architecture");
    const TensorView& v = it->second;
    auto s = v.shape;
    // 1-D tensors: accept [n]; 2-D: [rows, cols].
    if (s != shape)
      fail("model", "tensor '" + n + "' in " + source + " has shape " + shape_str(s) + ", expected " +
                        shape_str(shape) + " from the config");
    return v;
  }

  std::vector<float> vec(const std::string& n, int64_t len) const {
    const TensorView& v = get(n, {len});
    if (v.dtype == DType::GGML_BLOCK) fail("model", "tensor '" + n + "' must not be block-quantized");
    std::vector<float> out(len);
    to_f32(v, out.data());
    return out;
  }

  WeightMatrix mat(const std::string& n, int64_t rows, int64_t cols) const {
    const TensorView& v = get(n, {rows, cols});
    WeightMatrix w;
    if (hook && *hook && (*hook)(n, v, &w)) return w;
    w.rows = rows;
    w.cols = cols;
    if (v.dtype == DType::GGML_BLOCK) {
      w = make_ggml_weight(owner, v.data, v.ggml_type, rows, cols);
      if (w.nbytes() != v.nbytes) fail("model", "tensor '" + n + "' byte size does not match its ggml type");
      return w;
    }
    WeightKind native;
    switch (v.dtype) {
      case DType::F32: native = WeightKind::F32; break;
      case DType::F16: native = WeightKind::F16; break;
      case DType::BF16: native = WeightKind::BF16; break;
      default: native = WeightKind::F32; break;  // other dtypes are widened
    }
    WeightKind want = mode == DenseMode::Native ? native
                      : mode == DenseMode::F32  ? WeightKind::F32
                      : mode == DenseMode::F16  ? WeightKind::F16
                                                : WeightKind::BF16;
    bool widen_needed = !(v.dtype == DType::F32 || v.dtype == DType::F16 || v.dtype == DType::BF16);
    if (want == native && !widen_needed) {
      w.kind = native;
      w.data = v.data;
      w.owner = owner;
      return w;
    }
    std::vector<float> f(static_cast<size_t>(rows * cols));
    to_f32(v, f.data());
    return want == WeightKind::F32 ? make_f32_weight(f.data(), rows, cols) : make_half_weight(f.data(), rows, cols, want);
  }
};

}  // namespace

ModelWeights map_weights(const ModelConfig& c, const std::map<std::string, TensorView>& tensors, bool gguf_names,
                         std::shared_ptr<const void> owner, DenseMode mode, const std::string& source,
                         const WeightHook& hook) {
  Mapper m{c, tensors, gguf_names, std::move(owner), mode, source, &hook};
  ModelWeights w;
  const int64_t D = c.dim, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn_dim, V = c.vocab_size;
  bool has_embed = tensors.count(m.name("embed", -1)) != 0;
  bool has_head = tensors.count(m.name("lm_head", -1)) != 0;
  // Tied checkpoints may store only the embedding or only lm_head.weight (TinyStories-656K does the latter).
  if (has_embed) w.tok_embed = m.mat(m.name("embed", -1), V, D);
  if (has_head && (!c.tie_embeddings || !has_embed)) w.lm_head = m.mat(m.name("lm_head", -1), V, D);
  if (!has_embed && has_head) w.tok_embed = w.lm_head;
  if (!has_embed && !has_head) m.mat(m.name("embed", -1), V, D);  // throws the missing-tensor error
  if (w.lm_head.rows == 0) w.lm_head = w.tok_embed;
  w.final_norm = m.vec(m.name("norm", -1), D);
  w.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    auto& L = w.layers[i];
    L.attn_norm = m.vec(m.name("attn_norm", i), D);
    L.ffn_norm = m.vec(m.name("ffn_norm", i), D);
    L.wq = m.mat(m.name("q", i), Q, D);
    L.wk = m.mat(m.name("k", i), KV, D);
    L.wv = m.mat(m.name("v", i), KV, D);
    L.wo = m.mat(m.name("o", i), D, Q);
    L.w_gate = m.mat(m.name("gate", i), F, D);
    L.w_up = m.mat(m.name("up", i), F, D);
    L.w_down = m.mat(m.name("down", i), D, F);
    if (c.qkv_bias) {
      L.bq = m.vec(m.name("bq", i), Q);
      L.bk = m.vec(m.name("bk", i), KV);
      L.bv = m.vec(m.name("bv", i), KV);
    }
    if (c.qk_norm) {
      L.q_norm = m.vec(m.name("q_norm", i), c.head_dim);
      L.k_norm = m.vec(m.name("k_norm", i), c.head_dim);
    }
  }
  if (gguf_names && tensors.count("rope_freqs.weight"))
    w.rope_freq_factors = m.vec("rope_freqs.weight", c.head_dim / 2);
  return w;
}

int use_checkpoint_kv_scales(KvCache& kv, const ModelWeights& w) {
  static const std::vector<float> none;
  return kv.use_checkpoint_scales([&](int64_t l, bool key) -> const std::vector<float>& {
    if (l >= static_cast<int64_t>(w.layers.size())) return none;
    return key ? w.layers[static_cast<size_t>(l)].k_scale : w.layers[static_cast<size_t>(l)].v_scale;
  });
}

}  // namespace lowbit
