// GGUF export of a real SentencePiece-style Hugging Face tokenizer (tinystories-656K: BPE with byte_fallback
// but no <0xXX> tokens in its 2048-piece vocabulary). llama.cpp's SPM tokenizer spells a character missing
// from the vocabulary as the tokens <0x00>..<0xFF> and throws when they are absent, so the export appends the
// missing ones as BYTE tokens with rows copied from <unk>; lowbit reads the file back with the source's
// tokens and logits.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "io/gguf.h"
#include "io/hf_checkpoint.h"
#include "model/decoder.h"
#include "model/gguf_export.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using namespace lowbit;

namespace {

const std::string kModel = std::string(LOWBIT_SHARED_DIR) + "/models/tinystories-656K";

std::vector<float> last_logits(const Model& m, const std::vector<int32_t>& ids) {
  KvCache kv(m.config, 1, static_cast<int64_t>(ids.size()), KvDtype::F32);
  Decoder dec(m.config, m.weights);
  std::vector<BatchEntry> b;
  for (size_t i = 0; i < ids.size(); ++i)
    b.push_back({ids[i], 0, static_cast<int64_t>(i), i + 1 == ids.size()});
  std::vector<float> out(static_cast<size_t>(m.config.vocab_size));
  dec.forward(b, kv, out.data());
  return out;
}

class SpmExport : public ::testing::TestWithParam<std::string> {};

TEST_P(SpmExport, EveryByteHasItsTokenAndLowbitReadsTheSourceBack) {
  if (!fs::exists(kModel + "/tokenizer.json")) GTEST_SKIP() << kModel << " is not available";
  const std::string type = GetParam();
  const std::string gguf =
      (fs::temp_directory_path() / ("lowbit_test_spm_" + type + "_" + std::to_string(::getpid()) + ".gguf"))
          .string();
  auto ck = io::HfCheckpoint::open(kModel);
  const int64_t V = config_from_hf(ck.config).vocab_size;
  ASSERT_EQ(V, 2048);
  GgufExportOptions eo;
  eo.type = type;
  export_gguf(config_from_hf(ck.config), ck.tensors, ck.tokenizer, eo, gguf);

  // The metadata llama.cpp reads: the SPM model, the 2048 source pieces in place, then <0x00>..<0xFF> as BYTE
  // tokens; no text twice (llama.cpp asserts unique token texts); the matrices have a row per token.
  {
    auto g = io::GgufFile::open(gguf);
    EXPECT_EQ(g.get("tokenizer.ggml.model").as_string(), "llama");
    EXPECT_TRUE(g.get("tokenizer.ggml.add_space_prefix").as_bool());
    EXPECT_EQ(g.get("tokenizer.ggml.unknown_token_id").as_int(), 0);
    const auto& tokens = g.get("tokenizer.ggml.tokens").as_array();
    const auto& types = g.get("tokenizer.ggml.token_type").as_array();
    ASSERT_EQ(tokens.size(), static_cast<size_t>(V + 256));
    ASSERT_EQ(types.size(), tokens.size());
    EXPECT_EQ(g.get("tokenizer.ggml.scores").as_array().size(), tokens.size());
    EXPECT_EQ(g.get("llama.vocab_size").as_int(), V + 256);
    std::set<std::string> seen;
    for (const auto& t : tokens) EXPECT_TRUE(seen.insert(t.as_string()).second) << t.as_string();
    const auto& src_vocab = ck.tokenizer["model"]["vocab"];
    for (auto& [piece, id] : src_vocab.items()) EXPECT_EQ(tokens[id.get<size_t>()].as_string(), piece) << id;
    static const char* kHex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      const std::string p = std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";
      EXPECT_EQ(tokens[static_cast<size_t>(V + b)].as_string(), p);
      EXPECT_EQ(types[static_cast<size_t>(V + b)].as_int(), 6) << p;  // BYTE
    }
    EXPECT_EQ(g.tensors.at("token_embd.weight").shape[0], V + 256);
    EXPECT_EQ(g.tensors.count("output.weight"), 0u);  // tied
  }

  auto a = load_model(kModel, {DenseMode::F32, {}});
  auto b = load_model(gguf, {DenseMode::F32, {}});
  ASSERT_EQ(b->config.vocab_size, V + 256);
  ASSERT_TRUE(a->tokenizer && b->tokenizer);
  // Text the vocabulary covers tokenizes as the source does.
  for (const char* text : {"Once upon a time, there was a little dog named Max.",
                           "Tom said, \"Let's play!\" They ran to the park.\nThe end.", "  two  spaces  "}) {
    EXPECT_EQ(a->tokenizer->encode(text, true), b->tokenizer->encode(text, true)) << text;
  }
  // Characters the vocabulary lacks: the source gives <unk>, the export their bytes (as llama.cpp does), and
  // decoding gives the text back.
  const std::string oov = "The caf\xc3\xa9 saw \xe4\xb8\xad and \xf0\x9f\x98\x80 #1 (x) 50%.";
  const auto ids = b->tokenizer->encode(oov, false);
  for (int32_t id : ids) EXPECT_NE(id, 0) << "no <unk> once the byte tokens exist";
  EXPECT_EQ(b->tokenizer->decode(ids), oov);
  const auto cafe = b->tokenizer->encode("caf\xc3\xa9", false);
  ASSERT_GE(cafe.size(), 2u);
  EXPECT_EQ(cafe[cafe.size() - 2], V + 0xC3);
  EXPECT_EQ(cafe.back(), V + 0xA9);

  // Logits: the source's for its 2048 tokens (F32 up to summation order; Q8_0 within 3 % of the largest, same
  // top-1), and each byte token scored as <unk> (its row is <unk>'s).
  const std::vector<int32_t> prompt = {1, 80, 147, 201, 282, 57};
  const auto la = last_logits(*a, prompt), lb = last_logits(*b, prompt);
  float max_abs = 0;
  for (float x : la) max_abs = std::max(max_abs, std::abs(x));
  for (int64_t i = 0; i < V; ++i) {
    const float tol = type == "f32" ? 1e-5f * (1 + std::abs(la[i])) : 0.03f * max_abs;
    ASSERT_NEAR(la[i], lb[i], tol) << type << " " << i;
  }
  EXPECT_EQ(std::max_element(la.begin(), la.end()) - la.begin(),
            std::max_element(lb.begin(), lb.end()) - lb.begin());
  for (int64_t i = V; i < V + 256; ++i) ASSERT_EQ(lb[i], lb[0]) << type << " " << i;
  fs::remove(gguf);
}

INSTANTIATE_TEST_SUITE_P(Type, SpmExport, ::testing::Values("f32", "q8_0"));

}  // namespace
