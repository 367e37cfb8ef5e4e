#include "arch/arch_table.h"

#include <cctype>

#include "arch/config.h"
#include "core/error.h"

namespace lowbit {

const char* activation_name(Activation a) {
  return a == Activation::GeluTanh ? "gelu_pytorch_tanh" : "silu";
}

const std::vector<ArchRow>& arch_rows() {
  using enum RopeStyle;
  using enum Activation;
  // clang-format off
  static const std::vector<ArchRow> rows = {
    // name     HF class              GGUF     GGUF rope    bias   qknorm act       act key
    //          embedding x sqrt(dim), HF norm offset, tied default
    {"llama",   "LlamaForCausalLM",   "llama", Interleaved, false, false, Silu,     "hidden_act",
                false, 0.0f, false},
    {"mistral", "MistralForCausalLM", "llama", Interleaved, false, false, Silu,     "hidden_act",
                false, 0.0f, false},
    {"qwen2",   "Qwen2ForCausalLM",   "qwen2", Half,        true,  false, Silu,     "hidden_act",
                false, 0.0f, false},
    {"qwen3",   "Qwen3ForCausalLM",   "qwen3", Half,        false, true,  Silu,     "hidden_act",
                false, 0.0f, false},
    {"gemma",   "GemmaForCausalLM",   "gemma", Half,        false, false, GeluTanh, "hidden_activation",
                true,  1.0f, true},
  };
  // clang-format on
  return rows;
}

std::string supported_archs() {
  std::string s;
  for (const ArchRow& r : arch_rows())
    s += (s.empty() ? "" : ", ") + std::string(r.name) + " (" + r.hf_class + ")";
  return s + "; SmolLM uses llama";
}

const ArchRow& arch_row(const std::string& name) {
  for (const ArchRow& r : arch_rows())
    if (name == r.name) return r;
  fail("model", "unsupported architecture '" + name + "'; supported: " + supported_archs());
}

const ArchRow* arch_by_hf_class(const std::string& cls) {
  for (const ArchRow& r : arch_rows())
    if (cls == r.hf_class) return &r;
  return nullptr;
}

const ArchRow* arch_by_gguf(const std::string& gguf_arch) {
  // mistral shares llama's GGUF name; the first row with the name (llama) reads it.
  for (const ArchRow& r : arch_rows())
    if (gguf_arch == r.gguf_arch) return &r;
  return nullptr;
}

const std::vector<TensorRoleRow>& tensor_roles() {
  using enum TensorRole;
  using enum RoleKind;
  using enum RoleDim;
  using enum Presence;
  // clang-format off
  static const std::vector<TensorRoleRow> rows = {
    // role      lowbit name   Hugging Face name (layers: after "model.layers.N.")  GGUF name (after "blk.N.")
    //           per layer, kind, rows, cols, present
    {TokEmbed,   "tok_embed",  "model.embed_tokens.weight",       "token_embd.weight",
     false, Matrix, Vocab,   Model, Always},
    {OutputNorm, "final_norm", "model.norm.weight",               "output_norm.weight",
     false, Norm,   Model,   None,  Always},
    {LmHead,     "lm_head",    "lm_head.weight",                  "output.weight",
     false, Matrix, Vocab,   Model, Always},
    {AttnNorm,   "attn_norm",  "input_layernorm.weight",          "attn_norm.weight",
     true,  Norm,   Model,   None,  Always},
    {Q,          "wq",         "self_attn.q_proj.weight",         "attn_q.weight",
     true,  Matrix, QDim,    Model, Always},
    {K,          "wk",         "self_attn.k_proj.weight",         "attn_k.weight",
     true,  Matrix, KvDim,   Model, Always},
    {V,          "wv",         "self_attn.v_proj.weight",         "attn_v.weight",
     true,  Matrix, KvDim,   Model, Always},
    {O,          "wo",         "self_attn.o_proj.weight",         "attn_output.weight",
     true,  Matrix, Model,   QDim,  Always},
    {BiasQ,      "bq",         "self_attn.q_proj.bias",           "attn_q.bias",
     true,  Bias,   QDim,    None,  QkvBias},
    {BiasK,      "bk",         "self_attn.k_proj.bias",           "attn_k.bias",
     true,  Bias,   KvDim,   None,  QkvBias},
    {BiasV,      "bv",         "self_attn.v_proj.bias",           "attn_v.bias",
     true,  Bias,   KvDim,   None,  QkvBias},
    {QNorm,      "q_norm",     "self_attn.q_norm.weight",         "attn_q_norm.weight",
     true,  Norm,   HeadDim, None,  QkNorm},
    {KNorm,      "k_norm",     "self_attn.k_norm.weight",         "attn_k_norm.weight",
     true,  Norm,   HeadDim, None,  QkNorm},
    {FfnNorm,    "ffn_norm",   "post_attention_layernorm.weight", "ffn_norm.weight",
     true,  Norm,   Model,   None,  Always},
    {Gate,       "w_gate",     "mlp.gate_proj.weight",            "ffn_gate.weight",
     true,  Matrix, Ffn,     Model, Always},
    {Up,         "w_up",       "mlp.up_proj.weight",              "ffn_up.weight",
     true,  Matrix, Ffn,     Model, Always},
    {Down,       "w_down",     "mlp.down_proj.weight",            "ffn_down.weight",
     true,  Matrix, Model,   Ffn,   Always},
  };
  // clang-format on
  return rows;
}

const TensorRoleRow& role_row(TensorRole r) {
  for (const TensorRoleRow& row : tensor_roles())
    if (row.role == r) return row;
  fail("model",
       "tensor role " + std::to_string(static_cast<int>(r)) + " has no row in the tensor-role table");
}

std::vector<TensorRole> layer_matrix_roles() {
  std::vector<TensorRole> v;
  for (const TensorRoleRow& row : tensor_roles())
    if (row.per_layer && row.kind == RoleKind::Matrix) v.push_back(row.role);
  return v;
}

namespace {

std::string named(const TensorRoleRow& row, const char* name, const char* layer_prefix, int64_t layer) {
  return row.per_layer ? layer_prefix + std::to_string(layer) + "." + name : std::string(name);
}

// "N.<rest>" at `pos` of `name` -> layer N and rest; false for anything but plain decimal digits.
bool split_layer(const std::string& name, size_t pos, int64_t* layer, std::string* rest) {
  size_t dot = name.find('.', pos);
  if (dot == std::string::npos || dot == pos || dot - pos > 6) return false;
  for (size_t i = pos; i < dot; ++i)
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return false;
  *layer = std::stoll(name.substr(pos, dot - pos));
  *rest = name.substr(dot + 1);
  return true;
}

template <typename Field>
bool parse_name(const std::string& name, const std::string& layer_prefix, Field field, RoleRef* out) {
  int64_t layer = -1;
  std::string rest;
  const bool in_layer =
      name.rfind(layer_prefix, 0) == 0 && split_layer(name, layer_prefix.size(), &layer, &rest);
  for (const TensorRoleRow& row : tensor_roles()) {
    if (row.per_layer ? (in_layer && rest == field(row)) : name == field(row)) {
      *out = {row.role, row.per_layer ? layer : -1};
      return true;
    }
  }
  return false;
}

int64_t dim_of(RoleDim d, const ModelConfig& c) {
  switch (d) {
    case RoleDim::None:
      return 0;
    case RoleDim::Vocab:
      return c.vocab_size;
    case RoleDim::Model:
      return c.dim;
    case RoleDim::QDim:
      return c.q_dim();
    case RoleDim::KvDim:
      return c.kv_dim();
    case RoleDim::Ffn:
      return c.ffn_dim;
    case RoleDim::HeadDim:
      return c.head_dim;
  }
  return 0;
}

}  // namespace

std::string hf_tensor_name(TensorRole r, int64_t layer) {
  const TensorRoleRow& row = role_row(r);
  return named(row, row.hf, "model.layers.", layer);
}

std::string gguf_tensor_name(TensorRole r, int64_t layer) {
  const TensorRoleRow& row = role_row(r);
  return named(row, row.gguf, "blk.", layer);
}

std::string lowbit_tensor_name(TensorRole r, int64_t layer) {
  const TensorRoleRow& row = role_row(r);
  return named(row, row.key, "layers.", layer);
}

std::string hf_module_name(TensorRole r, int64_t layer) {
  std::string n = hf_tensor_name(r, layer);
  const std::string suffix = ".weight";
  if (n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
    n.resize(n.size() - suffix.size());
  return n;
}

bool parse_hf_tensor_name(const std::string& name, RoleRef* out) {
  return parse_name(
      name, "model.layers.", [](const TensorRoleRow& r) { return r.hf; }, out);
}

bool parse_lowbit_tensor_name(const std::string& name, RoleRef* out) {
  return parse_name(
      name, "layers.", [](const TensorRoleRow& r) { return r.key; }, out);
}

std::vector<int64_t> role_shape(TensorRole r, const ModelConfig& c) {
  const TensorRoleRow& row = role_row(r);
  if (row.cols == RoleDim::None) return {dim_of(row.rows, c)};
  return {dim_of(row.rows, c), dim_of(row.cols, c)};
}

bool role_present(TensorRole r, const ModelConfig& c) {
  switch (role_row(r).when) {
    case Presence::Always:
      return true;
    case Presence::QkvBias:
      return c.qkv_bias;
    case Presence::QkNorm:
      return c.qk_norm;
  }
  return false;
}

}  // namespace lowbit
