// The architecture table and the tensor-role table: every decoder-only architecture lowbit reads is one row
// of kArchRows, and every tensor a layer or the model holds is one row of kTensorRoles. Config parsing, the
// weight mapper, the quantized-checkpoint writer and reader, GGUF export, fixtures, the planner and the
// quantizer read these rows instead of spelling names or flags out (llama.cpp's arch / tensor-name tables
// play the same role).
//
// Adding a Llama-family architecture that differs only in flags is one ArchRow (docs/architecture.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lowbit {

struct ModelConfig;

// How RoPE pairs dimensions inside a head.
//  Interleaved: pairs (0,1), (2,3), ... (llama2.c, GGUF "llama" after llama.cpp's q/k permutation).
//  Half:        pairs (i, i + head_dim/2) (Hugging Face rotate_half, GGUF qwen2/qwen3/gemma "neox").
enum class RopeStyle { Interleaved, Half };

// The gated MLP's activation: act(gate) * up.
enum class Activation { Silu, GeluTanh };
const char* activation_name(Activation a);  // "silu" | "gelu_pytorch_tanh" (Hugging Face's names)

struct ArchRow {
  const char* name;       // lowbit's name = Hugging Face model_type ("llama", "qwen2", "gemma")
  const char* hf_class;   // config.json "architectures"[0] ("LlamaForCausalLM")
  const char* gguf_arch;  // GGUF general.architecture as llama.cpp writes it ("llama" for mistral)
  RopeStyle gguf_rope;    // RoPE pairing of llama.cpp's GGUF (Interleaved: its converter permuted q/k rows)
  bool qkv_bias;          // q/k/v projections always carry biases (config "attention_bias" can add them too)
  bool qk_norm;           // per-head RMSNorm on q and k before RoPE
  Activation act;         // default MLP activation
  const char* act_key;    // config.json key that may name another activation ("hidden_act")
  bool embed_scale;       // embeddings are multiplied by sqrt(hidden_size) before the first layer
  // Hugging Face stores RMSNorm weights as w - offset (the layer computes x_hat * (offset + w)); llama.cpp's
  // GGUF stores w itself. lowbit holds w in memory.
  float hf_norm_offset;
  bool tie_default;  // tie_word_embeddings when config.json does not say
};

// Every supported architecture, one row each.
const std::vector<ArchRow>& arch_rows();
// The row of lowbit name / model_type `name`; Error("model") listing the supported ones when there is none.
const ArchRow& arch_row(const std::string& name);
const ArchRow* arch_by_hf_class(const std::string& cls);  // nullptr when unknown
const ArchRow* arch_by_gguf(const std::string& gguf_arch);
std::string supported_archs();  // "llama (LlamaForCausalLM), mistral (...), ..."

// Tensor roles of the Llama family. Per-layer roles live under "model.layers.N." (HF), "blk.N." (GGUF) and
// "layers.N." (lowbit's own names, used in recipes, reports and manifests).
enum class TensorRole {
  TokEmbed,
  OutputNorm,
  LmHead,
  AttnNorm,
  Q,
  K,
  V,
  O,
  BiasQ,
  BiasK,
  BiasV,
  QNorm,
  KNorm,
  FfnNorm,
  Gate,
  Up,
  Down
};
enum class RoleKind { Matrix, Norm, Bias };
// The config size a tensor dimension is; None for the missing second dimension of a vector.
enum class RoleDim { None, Vocab, Model, QDim, KvDim, Ffn, HeadDim };
// When a role is present in a checkpoint of a given config.
enum class Presence { Always, QkvBias, QkNorm };

struct TensorRoleRow {
  TensorRole role;
  const char* key;   // lowbit name: "tok_embed", "wq", "attn_norm", ... (per layer after "layers.N.")
  const char* hf;    // Hugging Face name (per layer after "model.layers.N.")
  const char* gguf;  // llama.cpp name (per layer after "blk.N.")
  bool per_layer;
  RoleKind kind;
  RoleDim rows, cols;  // a matrix is [rows, cols]; a vector [rows]
  Presence when;
};

const std::vector<TensorRoleRow>& tensor_roles();  // in checkpoint order: model-level first, then a layer's
const TensorRoleRow& role_row(TensorRole r);
std::vector<TensorRole> layer_matrix_roles();  // Q, K, V, O, Gate, Up, Down: the quantized linears of a layer

// Names of a role's tensor (layer ignored for model-level roles).
std::string hf_tensor_name(TensorRole r, int64_t layer);
std::string gguf_tensor_name(TensorRole r, int64_t layer);
std::string lowbit_tensor_name(TensorRole r, int64_t layer);
// The HF module a matrix belongs to (its name without ".weight"), as compressed-tensors' ignore lists write
// it.
std::string hf_module_name(TensorRole r, int64_t layer);

struct RoleRef {
  TensorRole role;
  int64_t layer;  // -1 for model-level roles
};
// Parses a name in one of the three namings; false when it names no role (or a layer index that is not a
// plain non-negative number).
bool parse_hf_tensor_name(const std::string& name, RoleRef* out);
bool parse_lowbit_tensor_name(const std::string& name, RoleRef* out);

std::vector<int64_t> role_shape(TensorRole r, const ModelConfig& c);
bool role_present(TensorRole r, const ModelConfig& c);

}  // namespace lowbit
