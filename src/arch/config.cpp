#include "arch/config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "core/error.h"
#include "io/gguf.h"
#include "io/llama2c.h"

namespace lowbit {
namespace {

// v.get<T>() with the type checked. nlohmann converts any number to an integer type with a plain cast: a
// float out of range is undefined behaviour and a big integer wraps, so integers are range-checked here.
template <typename T>
T checked(const nlohmann::json& v, const char* key) {
  try {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const auto lo = static_cast<double>(std::numeric_limits<T>::min()), hi = -lo;  // [-2^(n-1), 2^(n-1))
      const bool fits = v.is_number_unsigned()  ? v.get<uint64_t>() < static_cast<uint64_t>(hi)
                        : v.is_number_integer() ? v.get<int64_t>() >= lo && v.get<int64_t>() < hi
                        : v.is_number_float()   ? v.get<double>() >= lo && v.get<double>() < hi
                                                : true;  // not a number: get<T>() throws below
      if (!fits) {
        fail("model", std::string("config.json field '") + key + "' = " + v.dump() +
                          " is out of range; the config file is probably corrupt");
      }
    }
    return v.get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("model", std::string("config.json field '") + key + "' has the wrong type");
  }
}

template <typename T>
T req(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null())
    fail("model", std::string("config.json is missing '") + key + "'; is this a decoder-only LLM config?");
  return checked<T>(j[key], key);
}

template <typename T>
T opt(const nlohmann::json& j, const char* key, T def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  return checked<T>(j[key], key);
}

// The flags an architecture always has (config.json or GGUF metadata may add to them).
void apply_arch_row(ModelConfig& c, const ArchRow& row) {
  c.arch = row.name;
  c.qkv_bias = row.qkv_bias;
  c.qk_norm = row.qk_norm;
  c.act = row.act;
  c.embed_scale = row.embed_scale;
}

Activation activation_from_hf(const std::string& name, const ArchRow& row) {
  if (name.empty()) return row.act;
  if (name == "silu" || name == "swish") return Activation::Silu;
  if (name == "gelu_pytorch_tanh" || name == "gelu_tanh") return Activation::GeluTanh;
  fail("model", std::string("config.json field '") + row.act_key + "' = '" + name +
                    "' is not supported for " + row.name + "; supported: silu, gelu_pytorch_tanh");
}

}  // namespace

int64_t ModelConfig::n_params() const {
  int64_t attn = dim * q_dim() + 2 * dim * kv_dim() + q_dim() * dim;
  if (qkv_bias) attn += q_dim() + 2 * kv_dim();
  if (qk_norm) attn += 2 * head_dim;
  int64_t ffn = 3 * dim * ffn_dim;
  int64_t per_layer = attn + ffn + 2 * dim;
  int64_t emb = vocab_size * dim * (tie_embeddings ? 1 : 2);
  return n_layers * per_layer + emb + dim;
}

void ModelConfig::validate() const {
  auto pos = [&](int64_t v, const char* n) {
    if (v <= 0)
      fail("model", std::string("config: ") + n + " must be positive (got " + std::to_string(v) + ")");
  };
  pos(dim, "hidden_size");
  pos(n_layers, "num_hidden_layers");
  pos(n_heads, "num_attention_heads");
  pos(n_kv_heads, "num_key_value_heads");
  pos(head_dim, "head_dim");
  pos(ffn_dim, "intermediate_size");
  pos(vocab_size, "vocab_size");
  pos(max_seq_len, "max_position_embeddings");
  if (n_heads % n_kv_heads)
    fail("model", "config: num_attention_heads (" + std::to_string(n_heads) +
                      ") must be a multiple of num_key_value_heads (" + std::to_string(n_kv_heads) + ")");
  if (head_dim % 2)
    fail("model", "config: head_dim must be even for RoPE (got " + std::to_string(head_dim) + ")");
  if (dim > (1 << 20) || n_layers > 4096 || vocab_size > (1 << 24) || ffn_dim > (1 << 22) || head_dim > 4096)
    fail("model", "config: dimensions are implausibly large; the config file is probably corrupt");
  // With the bounds above this keeps q_dim(), kv_dim() and n_params() far from int64 overflow.
  if (n_heads > (1 << 16)) {
    fail("model", "config: num_attention_heads " + std::to_string(n_heads) +
                      " is implausible (at most 65536); the config file is probably corrupt");
  }
  if (!(norm_eps > 0) || !(rope_theta > 0))
    fail("model", "config: rms_norm_eps and rope_theta must be positive");
}

nlohmann::json ModelConfig::to_json() const {
  nlohmann::json j = {{"arch", arch},
                      {"source_format", source_format},
                      {"hidden_size", dim},
                      {"num_hidden_layers", n_layers},
                      {"num_attention_heads", n_heads},
                      {"num_key_value_heads", n_kv_heads},
                      {"head_dim", head_dim},
                      {"intermediate_size", ffn_dim},
                      {"vocab_size", vocab_size},
                      {"max_position_embeddings", max_seq_len},
                      {"rms_norm_eps", norm_eps},
                      {"rope_theta", rope_theta},
                      {"rope_scaling", rope_scaling.type},
                      {"rope_style", rope_style == RopeStyle::Half ? "half" : "interleaved"},
                      {"qkv_bias", qkv_bias},
                      {"qk_norm", qk_norm},
                      {"tie_word_embeddings", tie_embeddings},
                      {"n_params", n_params()}};
  // Gemma-style flags only where they differ from the Llama family's (reports stay as they were for it).
  if (act != Activation::Silu) j["hidden_act"] = activation_name(act);
  if (embed_scale) j["embed_scale"] = "sqrt(hidden_size)";
  if (norm_weight_offset != 0.0f) j["hf_norm_weight_offset"] = norm_weight_offset;
  return j;
}

ModelConfig config_from_hf(const nlohmann::json& j) {
  if (!j.is_object()) fail("model", "config.json is not a JSON object");
  ModelConfig c;
  c.source_format = "hf";
  std::string mt = opt<std::string>(j, "model_type", "");
  if (mt.empty() && j.contains("architectures") && j["architectures"].is_array() &&
      !j["architectures"].empty() && j["architectures"][0].is_string()) {
    if (const ArchRow* r = arch_by_hf_class(j["architectures"][0].get<std::string>())) mt = r->name;
  }
  const ArchRow& row = arch_row(mt);  // names the supported architectures when mt is not one of them
  apply_arch_row(c, row);
  c.dim = req<int64_t>(j, "hidden_size");
  c.n_layers = req<int64_t>(j, "num_hidden_layers");
  c.n_heads = req<int64_t>(j, "num_attention_heads");
  c.n_kv_heads = opt<int64_t>(j, "num_key_value_heads", c.n_heads);
  c.head_dim = opt<int64_t>(j, "head_dim", c.n_heads > 0 ? c.dim / c.n_heads : 0);
  c.ffn_dim = req<int64_t>(j, "intermediate_size");
  c.vocab_size = req<int64_t>(j, "vocab_size");
  c.max_seq_len = opt<int64_t>(j, "max_position_embeddings", 2048);
  c.norm_eps = opt<double>(j, "rms_norm_eps", 1e-6);
  c.rope_theta = opt<double>(j, "rope_theta", 10000.0);
  c.tie_embeddings = opt<bool>(j, "tie_word_embeddings", row.tie_default);
  c.qkv_bias = row.qkv_bias || opt<bool>(j, "attention_bias", false);
  c.act = activation_from_hf(opt<std::string>(j, row.act_key, ""), row);
  c.norm_weight_offset = row.hf_norm_offset;
  c.rope_style = RopeStyle::Half;  // Hugging Face's rotate_half, whatever the architecture
  c.bos_id = opt<int32_t>(j, "bos_token_id", 1);
  if (j.contains("eos_token_id") && j["eos_token_id"].is_array() && !j["eos_token_id"].empty())
    c.eos_id = checked<int32_t>(j["eos_token_id"][0], "eos_token_id");
  else
    c.eos_id = opt<int32_t>(j, "eos_token_id", 2);
  c.torch_dtype = opt<std::string>(j, "torch_dtype", "float32");
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
    const auto& r = j["rope_scaling"];
    std::string t = opt<std::string>(r, "rope_type", opt<std::string>(r, "type", "none"));
    if (t == "default") t = "none";
    if (t != "none" && t != "linear" && t != "llama3")
      fail("model", "unsupported rope_scaling type '" + t + "'; supported: linear, llama3");
    c.rope_scaling.type = t;
    c.rope_scaling.factor = opt<double>(r, "factor", 1.0);
    c.rope_scaling.low_freq_factor = opt<double>(r, "low_freq_factor", 1.0);
    c.rope_scaling.high_freq_factor = opt<double>(r, "high_freq_factor", 4.0);
    c.rope_scaling.original_max_position = opt<int64_t>(r, "original_max_position_embeddings", 8192);
  }
  c.validate();
  return c;
}

ModelConfig config_from_llama2c(const io::Llama2cHeader& h) {
  ModelConfig c;
  c.arch = "llama";
  c.source_format = "llama2c";
  c.dim = h.dim;
  c.ffn_dim = h.hidden_dim;
  c.n_layers = h.n_layers;
  c.n_heads = h.n_heads;
  c.n_kv_heads = h.n_kv_heads;
  c.head_dim = h.n_heads > 0 ? h.dim / h.n_heads : 0;
  c.vocab_size = std::abs(h.vocab_size);
  c.max_seq_len = h.seq_len;
  c.norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.rope_style = RopeStyle::Interleaved;
  c.tie_embeddings = h.shared_classifier;
  c.bos_id = 1;
  c.eos_id = 2;
  c.validate();
  return c;
}

ModelConfig config_from_gguf(const io::GgufFile& g) {
  ModelConfig c;
  c.source_format = "gguf";
  std::string arch = g.get("general.architecture").as_string();
  const ArchRow* row = arch_by_gguf(arch);
  if (!row)
    fail("model",
         "unsupported GGUF architecture '" + arch + "' in " + g.path + "; supported: " + supported_archs());
  apply_arch_row(c, *row);
  auto geti = [&](const std::string& k) { return g.get(arch + "." + k).as_int(); };
  auto has = [&](const std::string& k) { return g.has(arch + "." + k); };
  c.dim = geti("embedding_length");
  c.n_layers = geti("block_count");
  c.n_heads = geti("attention.head_count");
  c.n_kv_heads = has("attention.head_count_kv") ? geti("attention.head_count_kv") : c.n_heads;
  c.head_dim = has("attention.key_length") ? geti("attention.key_length")
               : c.n_heads > 0             ? c.dim / c.n_heads
                                           : 0;
  c.ffn_dim = geti("feed_forward_length");
  c.max_seq_len = has("context_length") ? geti("context_length") : 2048;
  c.norm_eps = has("attention.layer_norm_rms_epsilon")
                   ? g.get(arch + ".attention.layer_norm_rms_epsilon").as_float()
                   : 1e-5;
  c.rope_theta = has("rope.freq_base") ? g.get(arch + ".rope.freq_base").as_float() : 10000.0;
  if (has("rope.scaling.type")) {
    std::string t = g.get(arch + ".rope.scaling.type").as_string();
    if (t == "linear") {
      c.rope_scaling.type = "linear";
      c.rope_scaling.factor = g.get(arch + ".rope.scaling.factor").as_float();
    }
  }
  // llama.cpp permutes HF q/k rows for llama so the interleaved (NORM) rope applies; qwen/gemma use NEOX
  // (half).
  c.rope_style = row->gguf_rope;
  c.tie_embeddings = g.tensors.count("output.weight") == 0;
  if (has("vocab_size"))
    c.vocab_size = geti("vocab_size");
  else if (g.has("tokenizer.ggml.tokens"))
    c.vocab_size = static_cast<int64_t>(g.get("tokenizer.ggml.tokens").as_array().size());
  if (g.has("tokenizer.ggml.bos_token_id"))
    c.bos_id = static_cast<int32_t>(g.get("tokenizer.ggml.bos_token_id").as_int());
  if (g.has("tokenizer.ggml.eos_token_id"))
    c.eos_id = static_cast<int32_t>(g.get("tokenizer.ggml.eos_token_id").as_int());
  c.validate();
  return c;
}

}  // namespace lowbit
