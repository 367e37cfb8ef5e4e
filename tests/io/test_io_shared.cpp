// Integration: the real checkpoints, tokenizers and GGUF vocabularies in LOWBIT_SHARED_DIR.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "io/hf_checkpoint.h"
#include "io/llama2c.h"
#include "io/safetensors.h"

namespace lowbit::io {
namespace {

const std::string kShared = LOWBIT_SHARED_DIR;

float first_f32(const TensorView& v) {
  float x;
  std::memcpy(&x, v.data, 4);
  return x;
}

TEST(IoShared, Stories260kCheckpoint) {
  auto ck = Llama2cCheckpoint::open(kShared + "/models/stories260K/stories260K.bin");
  const Llama2cHeader& h = ck.header;
  EXPECT_EQ(h.dim, 64);
  EXPECT_EQ(h.hidden_dim, 172);
  EXPECT_EQ(h.n_layers, 5);
  EXPECT_EQ(h.n_heads, 8);
  EXPECT_EQ(h.n_kv_heads, 4);
  EXPECT_EQ(h.vocab_size, 512);
  EXPECT_EQ(h.seq_len, 512);
  EXPECT_TRUE(h.shared_classifier);
  EXPECT_EQ(ck.tensors.count("lm_head.weight"), 0u);
  // 1 embedding + 9 per layer + final norm.
  EXPECT_EQ(ck.tensors.size(), 1u + 9u * 5u + 1u);
  const TensorView& emb = ck.tensors.at("model.embed_tokens.weight");
  EXPECT_EQ(emb.shape, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(emb.data, ck.file->data() + 28);  // zero-copy view right after the header
  const TensorView& k = ck.tensors.at("model.layers.4.self_attn.k_proj.weight");
  EXPECT_EQ(k.shape, (std::vector<int64_t>{32, 64}));  // kv_dim = 4 * (64 / 8)
  EXPECT_EQ(ck.tensors.at("model.layers.0.mlp.down_proj.weight").shape, (std::vector<int64_t>{64, 172}));
  EXPECT_EQ(ck.tensors.at("model.layers.0.mlp.gate_proj.weight").shape, (std::vector<int64_t>{172, 64}));
  // RMSNorm weights of a trained model are finite and mostly positive.
  const TensorView& norm = ck.tensors.at("model.norm.weight");
  EXPECT_EQ(norm.shape, (std::vector<int64_t>{64}));
  EXPECT_TRUE(std::isfinite(first_f32(norm)));
  // The final norm ends exactly where the freq_cis tables (2 * 512 * 4 floats) begin.
  EXPECT_EQ(norm.data + norm.nbytes + 2 * 512 * 4 * 4, ck.file->data() + ck.file->size());
}

TEST(IoShared, KjvBrownCheckpoint) {
  auto ck = Llama2cCheckpoint::open(kShared + "/models/kjv-brown-6M/model.bin");
  const Llama2cHeader& h = ck.header;
  EXPECT_EQ(h.dim, 256);
  EXPECT_EQ(h.hidden_dim, 768);
  EXPECT_EQ(h.n_layers, 6);
  EXPECT_EQ(h.n_heads, 4);
  EXPECT_EQ(h.n_kv_heads, 4);
  EXPECT_EQ(h.vocab_size, 4096);
  EXPECT_EQ(h.seq_len, 256);
  EXPECT_TRUE(h.shared_classifier);
  int64_t params = 0;
  for (const auto& [name, v] : ck.tensors) params += v.numel();
  EXPECT_EQ(params, 6163712);  // GOLDEN.md
}

TEST(IoShared, Llama2cTokenizers) {
  auto t = Llama2cTokenizerData::open(kShared + "/models/stories260K/tok512.bin", 512);
  ASSERT_EQ(t.pieces.size(), 512u);
  ASSERT_EQ(t.scores.size(), 512u);
  EXPECT_EQ(t.pieces[3], "<0x00>");  // byte fallback tokens start at id 3
  EXPECT_EQ(t.pieces[258], "<0xFF>");
  size_t longest = 0;
  for (auto& p : t.pieces) longest = std::max(longest, p.size());
  EXPECT_LE(longest, static_cast<size_t>(t.max_token_length));

  auto k = Llama2cTokenizerData::open(kShared + "/models/kjv-brown-6M/tokenizer.bin", 4096);
  EXPECT_EQ(k.pieces.size(), 4096u);
  EXPECT_EQ(k.pieces[3], "<0x00>");
  // The wrong vocabulary size is caught in both directions.
  EXPECT_THROW(Llama2cTokenizerData::open(kShared + "/models/kjv-brown-6M/tokenizer.bin", 512), Error);
  EXPECT_THROW(Llama2cTokenizerData::open(kShared + "/models/stories260K/tok512.bin", 4096), Error);
}

TEST(IoShared, TinyStoriesHfDirectory) {
  auto ck = HfCheckpoint::open(kShared + "/models/tinystories-656K");
  EXPECT_EQ(ck.config.at("hidden_size").get<int>(), 128);
  EXPECT_FALSE(ck.tokenizer.is_null());
  EXPECT_FALSE(ck.tokenizer_config.is_null());
  EXPECT_FALSE(ck.generation_config.is_null());
  ASSERT_EQ(ck.shards.size(), 1u);
  ASSERT_TRUE(ck.tensors.count("lm_head.weight"));
  const TensorView& lm = ck.tensors.at("lm_head.weight");
  EXPECT_EQ(lm.shape, (std::vector<int64_t>{2048, 128}));
  EXPECT_EQ(ck.tensors.count("model.layers.1.mlp.down_proj.weight"), 1u);
  // The single-file form finds the same tensors.
  auto one = HfCheckpoint::open(kShared + "/models/tinystories-656K/model.safetensors");
  EXPECT_EQ(one.tensors.size(), ck.tensors.size());
}

TEST(IoShared, GgufVocabLlamaSpm) {
  auto g = GgufFile::open(kShared + "/data/tokenizer-tests/ggml-vocab-llama-spm.gguf");
  EXPECT_EQ(g.version, 3u);
  EXPECT_TRUE(g.tensors.empty());
  EXPECT_EQ(g.kv.size(), g.kv_order.size());
  EXPECT_EQ(g.kv.size(), 22u);  // header kv count of this file
  EXPECT_EQ(g.alignment, 32u);
  EXPECT_EQ(g.get("tokenizer.ggml.model").as_string(), "llama");
  const GgufArray& tokens = g.get("tokenizer.ggml.tokens").as_array();
  EXPECT_EQ(tokens.size(), 32000u);
  EXPECT_EQ(tokens[3].as_string(), "<0x00>");
  EXPECT_EQ(g.get("tokenizer.ggml.scores").as_array().size(), 32000u);
  EXPECT_EQ(g.get("tokenizer.ggml.token_type").as_array().size(), 32000u);
  EXPECT_EQ(g.get("tokenizer.ggml.bos_token_id").as_int(), 1);
  EXPECT_THROW(g.get("no.such.key"), Error);
  EXPECT_THROW(g.get("tokenizer.ggml.model").as_int(), Error);
}

TEST(IoShared, GgufVocabGpt2) {
  auto g = GgufFile::open(kShared + "/data/tokenizer-tests/ggml-vocab-gpt-2.gguf");
  EXPECT_EQ(g.version, 3u);
  EXPECT_EQ(g.kv.size(), 16u);
  EXPECT_EQ(g.kv_order.size(), 16u);
  EXPECT_EQ(g.get("tokenizer.ggml.model").as_string(), "gpt2");
  const GgufArray& tokens = g.get("tokenizer.ggml.tokens").as_array();
  EXPECT_EQ(tokens.size(), 50257u);
  EXPECT_EQ(g.get("tokenizer.ggml.merges").as_array().size(), 50000u);
  EXPECT_EQ(g.get("tokenizer.ggml.token_type").as_array().size(), tokens.size());
}

// Copying every key of a real file through GgufWriter::set_value reproduces the metadata exactly.
TEST(IoShared, GgufVocabRewriteRoundTrip) {
  auto g = GgufFile::open(kShared + "/data/tokenizer-tests/ggml-vocab-llama-spm.gguf");
  GgufWriter w;
  for (const std::string& k : g.kv_order) w.set_value(k, g.kv.at(k));
  const auto out =
      std::filesystem::temp_directory_path() / ("lowbit_io_rewrite_" + std::to_string(::getpid()));
  w.write(out.string());
  auto h = GgufFile::open(out.string());
  std::filesystem::remove(out);
  EXPECT_EQ(h.kv_order, g.kv_order);
  // Same bytes for the metadata section: the original has no tensors, so the files match up to padding.
  ASSERT_GE(g.file->size(), 24u);
  const size_t n = std::min(g.file->size(), h.file->size());
  EXPECT_EQ(std::memcmp(g.file->data(), h.file->data(), n), 0);
  const GgufArray& a = g.get("tokenizer.ggml.scores").as_array();
  const GgufArray& b = h.get("tokenizer.ggml.scores").as_array();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); i += 997) EXPECT_EQ(a[i].as_float(), b[i].as_float());
}

}  // namespace
}  // namespace lowbit::io
