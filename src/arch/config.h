// Model configuration: the architecture facts every rung above reads (decoder, planner, quantizer).
// One struct for the whole LLaMA family; architectures differ only in flags, taken from their row of the
// architecture table (arch/arch_table.h).
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "arch/arch_table.h"

namespace lowbit {

namespace io {
struct GgufFile;
struct Llama2cHeader;
}  // namespace io

struct RopeScaling {
  std::string type = "none";  // none | linear | llama3
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  int64_t original_max_position = 8192;                  // llama3
};

struct ModelConfig {
  std::string arch = "llama";  // a row of arch_rows(): llama | mistral | qwen2 | qwen3 | gemma
  std::string source_format;   // hf | gguf | llama2c
  int64_t dim = 0;             // hidden_size
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;  // usually dim / n_heads (Qwen3 may differ)
  int64_t ffn_dim = 0;   // intermediate_size
  int64_t vocab_size = 0;
  int64_t max_seq_len = 2048;  // max_position_embeddings
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  RopeStyle rope_style = RopeStyle::Half;
  bool qkv_bias = false;  // Qwen2/2.5
  bool qk_norm = false;   // Qwen3: RMSNorm on q and k per head
  bool tie_embeddings = false;
  Activation act = Activation::Silu;  // MLP: act(gate) * up
  bool embed_scale = false;           // Gemma: embeddings times sqrt(dim)
  float norm_weight_offset = 0.0f;    // added to RMSNorm weights at load (Gemma's HF checkpoints store w - 1)
  int32_t bos_id = 1, eos_id = 2;
  std::string torch_dtype = "float32";  // dtype the source checkpoint stores (informational)

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  // Parameters of the dense model (embeddings counted once when tied).
  int64_t n_params() const;
  // Throws Error("model") naming the first inconsistent field.
  void validate() const;
  nlohmann::json to_json() const;
};

// Hugging Face config.json -> ModelConfig. Supported model_type: the rows of arch_rows() (SmolLM uses llama).
// Unsupported architectures give Error("model") listing the supported ones.
ModelConfig config_from_hf(const nlohmann::json& config);
ModelConfig config_from_llama2c(const io::Llama2cHeader& h);
ModelConfig config_from_gguf(const io::GgufFile& g);

}  // namespace lowbit
