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

WeightMatrix* ModelWeights::matrix(TensorRole r, int64_t layer) {
  using enum TensorRole;
  if (r == TokEmbed) return &tok_embed;
  if (r == LmHead) return &lm_head;
  LayerWeights& L = layers.at(static_cast<size_t>(layer));
  switch (r) {
    case Q:
      return &L.wq;
    case K:
      return &L.wk;
    case V:
      return &L.wv;
    case O:
      return &L.wo;
    case Gate:
      return &L.w_gate;
    case Up:
      return &L.w_up;
    case Down:
      return &L.w_down;
    default:
      return nullptr;
  }
}

std::vector<float>* ModelWeights::vector(TensorRole r, int64_t layer) {
  using enum TensorRole;
  if (r == OutputNorm) return &final_norm;
  if (role_row(r).kind == RoleKind::Matrix) return nullptr;
  LayerWeights& L = layers.at(static_cast<size_t>(layer));
  switch (r) {
    case AttnNorm:
      return &L.attn_norm;
    case FfnNorm:
      return &L.ffn_norm;
    case BiasQ:
      return &L.bq;
    case BiasK:
      return &L.bk;
    case BiasV:
      return &L.bv;
    case QNorm:
      return &L.q_norm;
    case KNorm:
      return &L.k_norm;
    default:
      return nullptr;
  }
}

std::vector<std::pair<std::string, WeightMatrix*>> ModelWeights::named_matrices() {
  std::vector<std::pair<std::string, WeightMatrix*>> out;
  out.emplace_back(lowbit_tensor_name(TensorRole::TokEmbed, -1), &tok_embed);
  for (size_t i = 0; i < layers.size(); ++i)
    for (TensorRole r : layer_matrix_roles())
      out.emplace_back(lowbit_tensor_name(r, static_cast<int64_t>(i)), matrix(r, static_cast<int64_t>(i)));
  out.emplace_back(lowbit_tensor_name(TensorRole::LmHead, -1), &lm_head);
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
    b += vec(L.attn_norm) + vec(L.ffn_norm) + vec(L.bq) + vec(L.bk) + vec(L.bv) + vec(L.q_norm) +
         vec(L.k_norm);
  }
  return b;
}

int64_t ModelWeights::parameters() const {
  auto mat = [](const WeightMatrix& w) { return w.rows * w.cols; };
  auto vec = [](const std::vector<float>& v) { return static_cast<int64_t>(v.size()); };
  int64_t n = mat(tok_embed) + (tied() ? 0 : mat(lm_head)) + vec(final_norm);
  for (auto& L : layers)
    n += mat(L.wq) + mat(L.wk) + mat(L.wv) + mat(L.wo) + mat(L.w_gate) + mat(L.w_up) + mat(L.w_down) +
         vec(L.attn_norm) + vec(L.ffn_norm) + vec(L.bq) + vec(L.bk) + vec(L.bv) + vec(L.q_norm) +
         vec(L.k_norm);
  return n;
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

  std::string name(TensorRole r, int64_t layer) const {
    return gguf ? gguf_tensor_name(r, layer) : hf_tensor_name(r, layer);
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
      case DType::F32:
        native = WeightKind::F32;
        break;
      case DType::F16:
        native = WeightKind::F16;
        break;
      case DType::BF16:
        native = WeightKind::BF16;
        break;
      default:
        native = WeightKind::F32;
        break;  // other dtypes are widened
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
    return want == WeightKind::F32 ? make_f32_weight(f.data(), rows, cols)
                                   : make_half_weight(f.data(), rows, cols, want);
  }
};

}  // namespace

ModelWeights map_weights(const ModelConfig& c, const std::map<std::string, TensorView>& tensors,
                         bool gguf_names, std::shared_ptr<const void> owner, DenseMode mode,
                         const std::string& source, const WeightHook& hook) {
  Mapper m{c, tensors, gguf_names, std::move(owner), mode, source, &hook};
  ModelWeights w;
  using enum TensorRole;
  auto mat = [&](TensorRole r, int64_t layer) {
    const auto s = role_shape(r, c);
    return m.mat(m.name(r, layer), s[0], s[1]);
  };
  const bool has_embed = tensors.count(m.name(TokEmbed, -1)) != 0;
  const bool has_head = tensors.count(m.name(LmHead, -1)) != 0;
  // Tied checkpoints may store only the embedding or only lm_head.weight (TinyStories-656K does the latter).
  if (has_embed) w.tok_embed = mat(TokEmbed, -1);
  if (has_head && (!c.tie_embeddings || !has_embed)) w.lm_head = mat(LmHead, -1);
  if (!has_embed && has_head) w.tok_embed = w.lm_head;
  if (!has_embed && !has_head) mat(TokEmbed, -1);  // throws the missing-tensor error
  if (w.lm_head.rows == 0) w.lm_head = w.tok_embed;
  w.layers.resize(static_cast<size_t>(c.n_layers));
  auto load = [&](const TensorRoleRow& row, int64_t layer) {
    if (!role_present(row.role, c)) return;
    if (row.kind == RoleKind::Matrix) {
      *w.matrix(row.role, layer) = mat(row.role, layer);
      return;
    }
    std::vector<float>& v = *w.vector(row.role, layer);
    v = m.vec(m.name(row.role, layer), role_shape(row.role, c)[0]);
    // Gemma's HF norms hold w - 1; the decoder multiplies by w (config_from_gguf leaves the offset 0).
    if (row.kind == RoleKind::Norm && c.norm_weight_offset != 0.0f)
      for (float& x : v) x += c.norm_weight_offset;
  };
  for (const TensorRoleRow& row : tensor_roles())
    if (!row.per_layer && row.kind != RoleKind::Matrix) load(row, -1);  // the final norm
  for (int64_t i = 0; i < c.n_layers; ++i)
    for (const TensorRoleRow& row : tensor_roles())
      if (row.per_layer) load(row, i);
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
