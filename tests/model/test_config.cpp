#include <gtest/gtest.h>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "arch/config.h"
#include "core/error.h"
#include "io/gguf.h"
#include "ops/rope.h"

using namespace lowbit;
using nlohmann::json;

namespace {
json llama32_1b() {
  return json::parse(R"({"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":2048,
    "intermediate_size":8192,"num_hidden_layers":16,"num_attention_heads":32,"num_key_value_heads":8,
    "vocab_size":128256,"max_position_embeddings":131072,"rms_norm_eps":1e-5,"rope_theta":500000.0,
    "rope_scaling":{"factor":32.0,"low_freq_factor":1.0,"high_freq_factor":4.0,
    "original_max_position_embeddings":8192,"rope_type":"llama3"},"tie_word_embeddings":true,
    "bos_token_id":128000,"eos_token_id":[128001,128008,128009],"torch_dtype":"bfloat16"})");
}
}  // namespace

TEST(Config, Llama32FromHf) {
  auto c = config_from_hf(llama32_1b());
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.kv_dim(), 512);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.eos_id, 128001);
  EXPECT_EQ(c.rope_style, RopeStyle::Half);
  EXPECT_EQ(c.n_params(), 1235814400);  // Llama-3.2-1B: 1.24 B parameters
}

TEST(Config, Qwen2HasBiasQwen3HasQkNorm) {
  auto j = llama32_1b();
  j["model_type"] = "qwen2";
  j.erase("rope_scaling");
  EXPECT_TRUE(config_from_hf(j).qkv_bias);
  j["model_type"] = "qwen3";
  auto c3 = config_from_hf(j);
  EXPECT_TRUE(c3.qk_norm);
  EXPECT_FALSE(c3.qkv_bias);
}

// Gemma-style models: one row of the architecture table, read from config.json (its activation key is
// hidden_activation; HF's hidden_act "gelu" is overridden like transformers does).
TEST(Config, GemmaRowFlags) {
  auto j = llama32_1b();
  j.erase("rope_scaling");
  j["model_type"] = "gemma";
  j["architectures"] = {"GemmaForCausalLM"};
  j["hidden_act"] = "gelu";
  j.erase("tie_word_embeddings");
  auto c = config_from_hf(j);
  EXPECT_EQ(c.act, Activation::GeluTanh);
  EXPECT_TRUE(c.embed_scale);
  EXPECT_EQ(c.norm_weight_offset, 1.0f);
  EXPECT_TRUE(c.tie_embeddings);  // the row's default when config.json does not say
  EXPECT_EQ(c.to_json()["hidden_act"], "gelu_pytorch_tanh");
  j["hidden_activation"] = "relu";
  try {
    config_from_hf(j);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hidden_activation"), std::string::npos) << e.what();
  }
  // A Llama-family config asking for an activation lowbit does not run is an error, not silently SiLU.
  auto l = llama32_1b();
  l["hidden_act"] = "relu";
  EXPECT_THROW(config_from_hf(l), Error);
  l["hidden_act"] = "silu";
  EXPECT_EQ(config_from_hf(l).act, Activation::Silu);
  EXPECT_FALSE(config_from_hf(l).to_json().contains("hidden_act"));
}

// Every row is reachable by each of its names, and every tensor role's names parse back to the role.
TEST(ArchTable, RowsAndRolesRoundTrip) {
  for (const ArchRow& r : arch_rows()) {
    EXPECT_EQ(&arch_row(r.name), &r);
    EXPECT_EQ(arch_by_hf_class(r.hf_class), &r);
    ASSERT_NE(arch_by_gguf(r.gguf_arch), nullptr);
    EXPECT_STREQ(arch_by_gguf(r.gguf_arch)->gguf_arch, r.gguf_arch);
    EXPECT_NE(supported_archs().find(r.name), std::string::npos);
  }
  EXPECT_EQ(arch_by_hf_class("GPTNeoXForCausalLM"), nullptr);
  EXPECT_THROW(arch_row("gpt_neox"), Error);
  for (const TensorRoleRow& row : tensor_roles()) {
    for (int64_t layer : {0L, 7L, 123L}) {
      const int64_t l = row.per_layer ? layer : -1;
      RoleRef ref{};
      ASSERT_TRUE(parse_hf_tensor_name(hf_tensor_name(row.role, l), &ref)) << hf_tensor_name(row.role, l);
      EXPECT_EQ(ref.role, row.role);
      EXPECT_EQ(ref.layer, l);
      ASSERT_TRUE(parse_lowbit_tensor_name(lowbit_tensor_name(row.role, l), &ref));
      EXPECT_EQ(ref.role, row.role);
      EXPECT_EQ(ref.layer, l);
    }
  }
  EXPECT_EQ(hf_tensor_name(TensorRole::Q, 3), "model.layers.3.self_attn.q_proj.weight");
  EXPECT_EQ(gguf_tensor_name(TensorRole::Down, 3), "blk.3.ffn_down.weight");
  EXPECT_EQ(lowbit_tensor_name(TensorRole::Gate, 3), "layers.3.w_gate");
  EXPECT_EQ(hf_module_name(TensorRole::LmHead, -1), "lm_head");
  RoleRef ref{};
  for (const char* bad : {"model.layers.x.self_attn.q_proj.weight", "model.layers.-1.self_attn.q_proj.weight",
                          "model.layers.1.self_attn.q_proj", "model.layers..mlp.up_proj.weight",
                          "model.layers.99999999.mlp.up_proj.weight", "layers.1.wz", "embed", ""})
    EXPECT_FALSE(parse_hf_tensor_name(bad, &ref) || parse_lowbit_tensor_name(bad, &ref)) << bad;
  // Shapes and presence follow the config.
  auto c = config_from_hf(llama32_1b());
  EXPECT_EQ(role_shape(TensorRole::K, c), (std::vector<int64_t>{512, 2048}));
  EXPECT_EQ(role_shape(TensorRole::AttnNorm, c), (std::vector<int64_t>{2048}));
  EXPECT_FALSE(role_present(TensorRole::BiasQ, c));
  c.qkv_bias = true;
  EXPECT_TRUE(role_present(TensorRole::BiasQ, c));
  EXPECT_EQ(layer_matrix_roles().size(), 7u);
}

TEST(Config, RejectsBadConfigs) {
  auto j = llama32_1b();
  j["model_type"] = "gpt_neox";
  EXPECT_THROW(config_from_hf(j), Error);
  j = llama32_1b();
  j.erase("hidden_size");
  try {
    config_from_hf(j);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hidden_size"), std::string::npos);
  }
  j = llama32_1b();
  j["num_key_value_heads"] = 5;
  EXPECT_THROW(config_from_hf(j), Error);
  j = llama32_1b();
  j["hidden_size"] = "big";
  EXPECT_THROW(config_from_hf(j), Error);
}

// Found by fuzz_hf_checkpoint: each of these escaped as a json exception or undefined behaviour (a float cast
// out of range, an int64 overflow in n_params) instead of a clear Error("model").
TEST(Config, RejectsOutOfRangeNumbersAndBadEosLists) {
  auto message = [](const json& j) {
    try {
      config_from_hf(j);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  auto j = llama32_1b();
  j["eos_token_id"] = {"x"};
  EXPECT_NE(message(j).find("'eos_token_id' has the wrong type"), std::string::npos) << message(j);
  j = llama32_1b();
  j["hidden_size"] = 1e300;
  EXPECT_NE(message(j).find("'hidden_size' = 1e+300 is out of range"), std::string::npos) << message(j);
  j = llama32_1b();
  j["bos_token_id"] = 1ll << 40;  // would wrap to 0 as int32
  EXPECT_NE(message(j).find("'bos_token_id' = 1099511627776 is out of range"), std::string::npos)
      << message(j);
  j = llama32_1b();
  j["num_attention_heads"] = 1ll << 62;
  j["num_key_value_heads"] = 1;
  j["head_dim"] = 2;
  EXPECT_NE(message(j).find("num_attention_heads 4611686018427387904 is implausible"), std::string::npos)
      << message(j);
  j = llama32_1b();
  j["hidden_size"] = 2048.0;  // an integral float still reads
  EXPECT_EQ(config_from_hf(j).dim, 2048);
}

// Found by fuzz_gguf_model: head_count 0 without key_length divided by zero before validate() could say so.
TEST(Config, GgufZeroHeadsIsAnError) {
  io::GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.embedding_length", 64);
  w.set_u32("llama.block_count", 1);
  w.set_u32("llama.attention.head_count", 0);
  w.set_u32("llama.feed_forward_length", 128);
  const auto path = std::filesystem::temp_directory_path() /
                    ("lowbit_config_heads0_" + std::to_string(::getpid()) + ".gguf");
  w.write(path.string());
  const auto g = io::GgufFile::open(path.string());
  std::filesystem::remove(path);
  try {
    config_from_gguf(g);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_attention_heads must be positive"), std::string::npos)
        << e.what();
  }
}

TEST(Rope, Llama3ScalingMatchesFormula) {
  auto c = config_from_hf(llama32_1b());
  Rope r(c, {});
  const auto& f = r.inv_freq();
  // Highest frequency (wavelength 2*pi < 8192/4) is unchanged; lowest (wavelength > 8192) divided by 32.
  EXPECT_DOUBLE_EQ(f[0], 1.0);
  double base_last = 1.0 / std::pow(500000.0, 2.0 * 31 / 64);
  EXPECT_NEAR(f[31], base_last / 32, 1e-15);
}

TEST(Rope, ConventionsRotatePairs) {
  ModelConfig c;
  c.head_dim = 4;
  c.rope_theta = 10000;
  c.rope_style = RopeStyle::Interleaved;
  Rope ri(c, {});
  float x[4] = {1, 0, 1, 0};
  ri.apply(x, 1, 1);  // pair (0,1) rotated by 1 rad, pair (2,3) by 0.01 rad
  EXPECT_NEAR(x[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(x[1], std::sin(1.0), 1e-6);
  c.rope_style = RopeStyle::Half;
  Rope rh(c, {});
  float y[4] = {1, 1, 0, 0};
  rh.apply(y, 1, 1);  // pairs (0,2) and (1,3)
  EXPECT_NEAR(y[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(y[2], std::sin(1.0), 1e-6);
}

// The decoder rotates with angles computed once per step (Rope::angles + apply(x, heads, cs)): the same bits
// as apply(x, heads, pos), in both conventions, at positions up to 100k.
TEST(Rope, AnglesOnceGiveTheSameBits) {
  for (RopeStyle style : {RopeStyle::Interleaved, RopeStyle::Half}) {
    ModelConfig c;
    c.head_dim = 64;
    c.rope_theta = 1e6;
    c.rope_style = style;
    Rope r(c, {});
    std::vector<float> cs(64);
    for (int64_t pos : {0, 1, 7, 4095, 100000}) {
      std::vector<float> a(3 * 64), b;
      for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
      b = a;
      r.apply(a.data(), 3, pos);
      r.angles(pos, cs.data());
      r.apply(b.data(), 3, cs.data());
      for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "pos " << pos << " i " << i;
    }
  }
}
