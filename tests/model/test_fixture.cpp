// Architecture variants: random tiny fixtures (every flag: QKV bias, q/k norm, llama3 rope scaling,
// tied/untied, lm_head-only, GQA ratios, MQA) match an independent numpy reference forward pass to 1e-4
// relative; HF -> GGUF F32 conversion gives identical logits; fixtures are written in the real layouts and
// are reproducible.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/hash.h"
#include "formats/format.h"
#include "io/gguf.h"
#include "io/hf_checkpoint.h"
#include "kernels/dispatch.h"
#include "kernels/matmul.h"
#include "kernels/weight.h"
#include "model/decoder.h"
#include "model/fixture.h"
#include "model/gguf_export.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using namespace lowbit;

namespace {

std::string tmpdir(const std::string& tag) {
  auto p = fs::temp_directory_path() / ("lowbit_test_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

std::vector<float> engine_logits(const Model& m, const std::vector<int32_t>& ids) {
  KvCache kv(m.config, 1, static_cast<int64_t>(ids.size()), KvDtype::F32);
  Decoder dec(m.config, m.weights);
  std::vector<BatchEntry> b;
  for (size_t i = 0; i < ids.size(); ++i)
    b.push_back({ids[i], 0, static_cast<int64_t>(i), i + 1 == ids.size()});
  std::vector<float> out(m.config.vocab_size);
  dec.forward(b, kv, out.data());
  return out;
}

std::vector<double> reference_logits(const std::string& dir, const std::vector<int32_t>& ids) {
  std::string arg;
  for (auto i : ids) arg += (arg.empty() ? "" : ",") + std::to_string(i);
  std::string cmd = "timeout -k 5 240 /usr/bin/python3 " LOWBIT_SOURCE_DIR
                    "/tests/reference/reference_forward.py " +
                    dir + " " + arg;
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  std::vector<double> v;
  std::array<char, 128> buf{};
  while (p && fgets(buf.data(), buf.size(), p.get())) v.push_back(std::strtod(buf.data(), nullptr));
  return v;
}

class FixtureVsReference : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureVsReference, LogitsMatchNumpy) {
  const std::string dir = tmpdir(GetParam());
  FixtureOptions o;
  o.seed = 7;
  o.dtype = "f32";
  write_fixture_hf(fixture_shape(GetParam()), o, dir);
  auto m = load_model(dir, {DenseMode::F32, {}});
  std::vector<int32_t> ids = {1, 17, 42, 99, 5, 300, 7, 250, 3, 77, 128};
  auto got = engine_logits(*m, ids);
  auto ref = reference_logits(dir, ids);
  ASSERT_EQ(ref.size(), got.size()) << "reference script failed (needs /usr/bin/python3 with numpy)";
  double max_abs = 0;
  for (double r : ref) max_abs = std::max(max_abs, std::abs(r));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], ref[i], 1e-4 * max_abs + 1e-6) << GetParam() << " logit " << i;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Arch, FixtureVsReference,
                         ::testing::Values("tiny-llama", "tiny-mqa", "tiny-llama3", "tiny-qwen2",
                                           "tiny-qwen3", "tiny-mistral", "tiny-gemma", "tiny-lmhead-only"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (auto& c : s)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });

class GgufConversion : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufConversion, F32GgufGivesIdenticalLogits) {
  const std::string dir = tmpdir("conv_" + GetParam());
  FixtureOptions o;
  o.seed = 3;
  o.dtype = "f32";
  write_fixture_hf(fixture_shape(GetParam()), o, dir);
  auto ck = io::HfCheckpoint::open(dir);
  std::string gguf = dir + ".gguf";
  export_gguf(config_from_hf(ck.config), ck.tensors, ck.tokenizer, {}, gguf);
  auto a = load_model(dir, {DenseMode::F32, {}});
  auto b = load_model(gguf, {DenseMode::F32, {}});
  EXPECT_EQ(b->format, "gguf");
  std::vector<int32_t> ids = {1, 20, 40, 60, 80, 100, 120};
  auto la = engine_logits(*a, ids), lb = engine_logits(*b, ids);
  for (size_t i = 0; i < la.size(); ++i) ASSERT_NEAR(la[i], lb[i], 1e-5f * (1 + std::abs(la[i]))) << i;
  // The embedded tokenizer encodes like the tokenizer.json it came from.
  ASSERT_TRUE(a->tokenizer && b->tokenizer);
  const std::string text = "The clockmaker measured 3600 seconds, twice.";
  EXPECT_EQ(a->tokenizer->encode(text, false), b->tokenizer->encode(text, false));
  fs::remove_all(dir);
  fs::remove(gguf);
}

INSTANTIATE_TEST_SUITE_P(Arch, GgufConversion,
                         ::testing::Values("tiny-llama", "tiny-qwen2", "tiny-gemma", "tiny-lmhead-only"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (auto& c : s)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });

// GGUF Q4_0 / Q8_0 / Q4_K models on AVX2 and AVX-512 serve their products from the load-time packs (kernels'
// QBlkPack / KPack) and the loader drops the packed tensors' file pages: decode logits equal those of the
// same model with plans rebuilt without the pack (the row-at-a-time kernels round activations to the same Q8
// blocks), a tied embedding shares lm_head's plan, and embedding rows read after the page drop still equal
// the file's bytes decoded.
TEST(GgufPack, PackedModelMatchesRowKernelsAndKeepsEmbeddingRows) {
  if (best_isa() < Isa::Avx2) GTEST_SKIP() << "the packs are only built for the AVX2 and AVX-512 kernels";
  FixtureOptions o;
  o.seed = 9;
  o.dtype = "f32";
  // Q4_K (the k-quant pack) needs rows of whole 256-element super-blocks: the same model, widened.
  FixtureShape wide = fixture_shape("tiny-qwen2");
  wide.config["hidden_size"] = 256;
  wide.config["intermediate_size"] = 512;
  for (const char* type : {"q4_0", "q8_0", "q4_k"}) {
    const bool k = std::string(type) == "q4_k";
    const std::string dir = tmpdir(std::string("pack_") + type);
    write_fixture_hf(k ? wide : fixture_shape("tiny-qwen2"), o, dir);  // tied embeddings, QKV bias
    auto ck = io::HfCheckpoint::open(dir);
    const std::string gguf = dir + "." + type + ".gguf";
    GgufExportOptions eo;
    eo.type = type;
    export_gguf(config_from_hf(ck.config), ck.tensors, ck.tokenizer, eo, gguf);
    auto packed = load_model(gguf, {DenseMode::F32, {}});
    auto rows = load_model(gguf, {DenseMode::F32, {}});
    ModelWeights& W = packed->weights;
    ASSERT_TRUE(weight_is_repacked(W.lm_head)) << type;
    EXPECT_EQ(W.tok_embed.plan, W.lm_head.plan) << type;  // tied: one plan, one pack
    for (auto& [name, w] : rows->weights.named_matrices()) {
      w->plan = nullptr;
      prepare_weight(*w, /*repack=*/false);
      EXPECT_FALSE(weight_is_repacked(*w));
    }
    // Decode (one token per step) through both.
    const std::vector<int32_t> ids = {1, 20, 40, 60, 80};
    for (Model* m : {packed.get(), rows.get()}) ASSERT_EQ(m->config.vocab_size, packed->config.vocab_size);
    const int64_t V = packed->config.vocab_size;
    KvCache ka(packed->config, 1, 8, KvDtype::F32), kb(rows->config, 1, 8, KvDtype::F32);
    Decoder da(packed->config, packed->weights), db(rows->config, rows->weights);
    std::vector<float> la(V), lb(V);
    for (size_t i = 0; i < ids.size(); ++i) {
      da.forward({{ids[i], 0, static_cast<int64_t>(i), true}}, ka, la.data());
      db.forward({{ids[i], 0, static_cast<int64_t>(i), true}}, kb, lb.data());
      for (int64_t v = 0; v < V; ++v)
        ASSERT_NEAR(la[v], lb[v], 1e-4f * (1 + std::abs(lb[v]))) << type << " " << v;
    }
    // Embedding rows after the page drop: the file's bytes, decoded.
    auto g = io::GgufFile::open(gguf);
    const TensorView& te = g.tensors.at("token_embd.weight");
    const int64_t D = packed->config.dim, rb = static_cast<int64_t>(W.tok_embed.row_bytes());
    std::vector<float> got(static_cast<size_t>(D)), want(got.size());
    for (int64_t r : {int64_t{0}, int64_t{7}, V - 1}) {
      weight_row_f32(W.tok_embed, r, got.data());
      dequantize_row_ggml(W.tok_embed.ggml_type, te.data + r * rb, want.data(), D);
      EXPECT_EQ(got, want) << type << " row " << r;
    }
    fs::remove(gguf);
    fs::remove_all(dir);
  }
}

// general.file_type follows llama.cpp's llama_ftype numbering (llama-bench labels files with it), and
// quantized files carry general.quantization_version = 2.
TEST(GgufExport, FileTypeUsesLlamaNumbering) {
  const std::string dir = tmpdir("ftype");
  FixtureOptions o;
  o.seed = 5;
  o.dtype = "f32";
  write_fixture_hf(fixture_shape("tiny-llama"), o, dir);
  auto ck = io::HfCheckpoint::open(dir);
  const std::pair<const char*, int64_t> cases[] = {
      {"f32", 0}, {"f16", 1}, {"q4_0", 2}, {"q8_0", 7}, {"bf16", 32}};
  for (const auto& [type, ftype] : cases) {
    const std::string gguf = dir + "." + type + ".gguf";
    GgufExportOptions eo;
    eo.type = type;
    export_gguf(config_from_hf(ck.config), ck.tensors, ck.tokenizer, eo, gguf);
    auto g = io::GgufFile::open(gguf);
    EXPECT_EQ(g.get("general.file_type").as_int(), ftype) << type;
    EXPECT_EQ(g.has("general.quantization_version"), std::string(type).rfind("q", 0) == 0) << type;
    fs::remove(gguf);
  }
  fs::remove_all(dir);
}

// A SentencePiece-style tokenizer.json (Prepend/Replace "▁" normalizer, byte_fallback) whose vocabulary has
// only <0x0A> of the 256 byte tokens: the export appends the other 255 as BYTE tokens (llama.cpp's SPM
// tokenizer throws on a character it cannot spell as <0xXX>), with rows copied from <unk> in token_embd and
// output (untied), and nothing else changes: the source's logits for its tokens, <unk>'s for each appended
// one.
TEST(GgufExport, SpmVocabularyGetsEveryByteToken) {
  const std::string dir = tmpdir("spm_bytes");
  FixtureOptions o;
  o.seed = 4;
  o.dtype = "f32";
  write_fixture_hf(fixture_shape("tiny-llama"), o, dir);  // untied, vocabulary 512
  auto ck = io::HfCheckpoint::open(dir);
  const ModelConfig c = config_from_hf(ck.config);
  const int64_t V = c.vocab_size;
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}, {"<0x0A>", 3}, {"▁", 4},
                          {"a", 5},     {"b", 6},   {"▁a", 7},   {"ab", 8}};
  for (int64_t i = 9; i < V; ++i) vocab["p" + std::to_string(i)] = i;
  nlohmann::json added = nlohmann::json::array();
  for (int i = 0; i < 3; ++i)
    added.push_back({{"id", i}, {"content", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>"}, {"special", true}});
  const nlohmann::json tj = {{"added_tokens", added},
                             {"normalizer",
                              {{"type", "Sequence"},
                               {"normalizers",
                                {{{"type", "Prepend"}, {"prepend", "▁"}},
                                 {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}}},
                             {"pre_tokenizer", nullptr},
                             {"model",
                              {{"type", "BPE"},
                               {"unk_token", "<unk>"},
                               {"byte_fallback", true},
                               {"fuse_unk", true},
                               {"vocab", vocab},
                               {"merges", {"▁ a", "a b"}}}}};
  const std::string gguf = dir + ".spm.gguf";
  export_gguf(c, ck.tensors, tj, {}, gguf);
  {
    auto g = io::GgufFile::open(gguf);
    EXPECT_EQ(g.get("tokenizer.ggml.model").as_string(), "llama");
    const auto& tokens = g.get("tokenizer.ggml.tokens").as_array();
    const auto& types = g.get("tokenizer.ggml.token_type").as_array();
    ASSERT_EQ(tokens.size(), static_cast<size_t>(V + 255));
    EXPECT_EQ(g.get("llama.vocab_size").as_int(), V + 255);
    EXPECT_EQ(types[3].as_int(), 6);
    EXPECT_EQ(tokens[static_cast<size_t>(V)].as_string(), "<0x00>");
    EXPECT_EQ(tokens[static_cast<size_t>(V + 0x0A)].as_string(), "<0x0B>");  // <0x0A> is not written twice
    for (size_t i = static_cast<size_t>(V); i < tokens.size(); ++i) EXPECT_EQ(types[i].as_int(), 6) << i;
    EXPECT_EQ(g.tensors.at("token_embd.weight").shape[0], V + 255);
    EXPECT_EQ(g.tensors.at("output.weight").shape[0], V + 255);
  }
  auto a = load_model(dir, {DenseMode::F32, {}});
  auto b = load_model(gguf, {DenseMode::F32, {}});
  ASSERT_EQ(b->config.vocab_size, V + 255);
  const std::vector<int32_t> ids = {1, 5, 6, 7, 8, 3, 0};
  auto la = engine_logits(*a, ids), lb = engine_logits(*b, ids);
  for (int64_t i = 0; i < V; ++i) ASSERT_NEAR(la[i], lb[i], 1e-5f * (1 + std::abs(la[i]))) << i;
  for (int64_t i = V; i < V + 255; ++i) ASSERT_EQ(lb[i], lb[0]) << i;
  // "▁ab\n#": "▁ a" merges first (rank 1), then "▁a" + "b" is no token; "\n" is the existing <0x0A>, "#"
  // (0x23, not in the vocabulary) the appended <0x23> at V + 0x22.
  ASSERT_TRUE(b->tokenizer);
  EXPECT_EQ(b->tokenizer->encode("ab\n#", false),
            (std::vector<int32_t>{7, 6, 3, static_cast<int32_t>(V + 0x22)}));
  fs::remove(gguf);
  fs::remove_all(dir);
}

TEST(Fixture, ReproducibleAndRealLayout) {
  const std::string a = tmpdir("repro_a"), b = tmpdir("repro_b");
  FixtureOptions o;
  o.seed = 11;
  write_fixture_hf(fixture_shape("tiny-qwen2"), o, a);
  write_fixture_hf(fixture_shape("tiny-qwen2"), o, b);
  EXPECT_EQ(sha256_file_hex(a + "/model.safetensors"), sha256_file_hex(b + "/model.safetensors"));
  for (auto f : {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    EXPECT_TRUE(fs::exists(fs::path(a) / f)) << f;
  auto ck = io::HfCheckpoint::open(a);
  EXPECT_EQ(ck.tensors.at("model.layers.0.self_attn.q_proj.bias").dtype, DType::BF16);
  EXPECT_EQ(ck.tensors.count("lm_head.weight"), 0u);                              // tied
  EXPECT_THROW(write_fixture_hf(fixture_shape("tiny-qwen2"), o, a), UsageError);  // exists
  EXPECT_THROW(fixture_shape("gpt-5"), UsageError);
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(Fixture, RealShapeParameterCounts) {
  // Published parameter counts of the real models these shapes stand in for.
  EXPECT_EQ(config_from_hf(fixture_shape("smollm2-135m").config).n_params(), 134515008);
  EXPECT_EQ(config_from_hf(fixture_shape("qwen2.5-0.5b").config).n_params(), 494032768);
  EXPECT_EQ(config_from_hf(fixture_shape("llama-3.2-1b").config).n_params(), 1235814400);
}

}  // namespace

// The BPE trainer: most frequent pair first, ties to the smallest (left, right) pair, counts updated after
// each merge (the second merge sees the pairs the first one created), stops when no pair occurs twice.
TEST(FixtureTokenizer, BpeMergesFollowCountsAndTieRule) {
  // "ab" x4 and "cd" x4 tie at 4 -> "a b" first (smaller); then "cd" x4; then "ab" "cd" adjacent in "abcd"
  // x3.
  const std::string text = "abcd abcd abcd ab cd";
  auto j = fixture_tokenizer_json(300, "gpt2", text, 0, 0);
  const auto& merges = j["model"]["merges"];
  ASSERT_GE(merges.size(), 3u);
  EXPECT_EQ(merges[0].get<std::string>(), "a b");
  EXPECT_EQ(merges[1].get<std::string>(), "c d");
  EXPECT_EQ(merges[2].get<std::string>(), "ab cd");
  for (const auto& m : merges) EXPECT_NE(m.get<std::string>(), "Ġ ab") << "a pair seen once must not merge";
}
