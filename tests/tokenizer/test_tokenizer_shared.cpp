// Tokenizers against the real files: golden ids from docs/GOLDEN.md and llama.cpp's vocabulary test vectors.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "io/gguf.h"
#include "io/llama2c.h"
#include "tokenizer/tokenizer.h"

namespace lowbit {
namespace {

const std::string kShared = LOWBIT_SHARED_DIR;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

using Ids = std::vector<int32_t>;

Tokenizer stories260k() {
  return load_tokenizer_llama2c(
      io::Llama2cTokenizerData::open(kShared + "/models/stories260K/tok512.bin", 512));
}
Tokenizer kjv() {
  return load_tokenizer_llama2c(
      io::Llama2cTokenizerData::open(kShared + "/models/kjv-brown-6M/tokenizer.bin", 4096));
}
Tokenizer tinystories() {
  const std::string dir = kShared + "/models/tinystories-656K/";
  return load_tokenizer_hf(nlohmann::json::parse(read_file(dir + "tokenizer.json")),
                           nlohmann::json::parse(read_file(dir + "tokenizer_config.json")));
}
Tokenizer gguf_vocab(const std::string& name) {
  return load_tokenizer_gguf(io::GgufFile::open(kShared + "/data/tokenizer-tests/" + name));
}

// llama.cpp's test format: strings separated by "\n__ggml_vocab_test__\n" (the file ends with a separator);
// .out holds one line of space-separated ids per string.
struct Vectors {
  std::vector<std::string> inputs;
  std::vector<Ids> expected;
};
Vectors read_vectors(const std::string& name) {
  const std::string base = kShared + "/data/tokenizer-tests/" + name;
  Vectors v;
  std::string inp = read_file(base + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  size_t pos = 0;
  while (true) {
    const size_t k = inp.find(sep, pos);
    if (k == std::string::npos) break;
    v.inputs.push_back(inp.substr(pos, k - pos));
    pos = k + sep.size();
  }
  std::istringstream out(read_file(base + ".out"));
  std::string line;
  while (std::getline(out, line)) {
    std::istringstream ls(line);
    Ids ids;
    int32_t id;
    while (ls >> id) ids.push_back(id);
    v.expected.push_back(ids);
  }
  return v;
}

void check_vectors(const std::string& name) {
  const Tokenizer tok = gguf_vocab(name);
  const Vectors v = read_vectors(name);
  ASSERT_EQ(v.inputs.size(), 46u);
  ASSERT_EQ(v.inputs.size(), v.expected.size());
  int failures = 0;
  for (size_t i = 0; i < v.inputs.size(); ++i) {
    const Ids got = tok.encode(v.inputs[i], /*add_bos=*/false);
    EXPECT_EQ(got, v.expected[i]) << name << " vector " << i << ": \"" << v.inputs[i] << "\"";
    failures += got != v.expected[i];
  }
  EXPECT_EQ(failures, 0);
}

TEST(TokenizerGolden, Stories260kLlama2c) {
  const Tokenizer tok = stories260k();
  EXPECT_EQ(tok.vocab_size(), 512);
  EXPECT_EQ(tok.encode("Once upon a time", true), (Ids{1, 403, 407, 261, 378}));
  EXPECT_EQ(tok.decode(Ids{1, 403, 407, 261, 378}), "Once upon a time");
  EXPECT_EQ(tok.encode("", true), (Ids{1}));
  EXPECT_EQ(tok.encode("", false), Ids{});
}

TEST(TokenizerGolden, KjvLlama2c) {
  const Tokenizer tok = kjv();
  EXPECT_EQ(tok.encode("And it came to pass", true), (Ids{1, 350, 342, 604, 290, 794}));
}

TEST(TokenizerGolden, TinyStoriesHf) {
  const Tokenizer tok = tinystories();
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_TRUE(tok.add_bos_default());
  EXPECT_EQ(tok.encode("Once upon a time", true), (Ids{1, 80, 147, 201, 282, 57}));
  EXPECT_EQ(tok.decode(Ids{1, 80, 147, 201, 282, 57}), "Once upon a time");
}

TEST(TokenizerGolden, TinyStoriesSpecialTokens) {
  const Tokenizer tok = tinystories();
  EXPECT_EQ(tok.encode("<|start_story|>Once upon a time", false, /*parse_special=*/true),
            (Ids{1, 80, 147, 201, 282, 57}));
  const Ids plain = tok.encode("<|start_story|>Once upon a time", false, /*parse_special=*/false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  // (this vocabulary learned the literal text: "▁<|start_story|>Once▁upon▁a▁tim" is one token)
  EXPECT_EQ(tok.piece(plain[0]), "▁<|start_story|>Once▁upon▁a▁tim");
  const Ids two = tok.encode("The end.<|end_story|><|start_story|>Once", false, true);
  EXPECT_EQ(std::count(two.begin(), two.end(), 2), 1);
  EXPECT_EQ(std::count(two.begin(), two.end(), 1), 1);
  EXPECT_TRUE(tok.is_eog(2));
  EXPECT_EQ(tok.decode(two), "The end.Once");
  EXPECT_EQ(tok.decode(two, /*render_special=*/true), "The end.<|end_story|><|start_story|>Once");
}

TEST(TokenizerVectors, LlamaSpm) {
  check_vectors("ggml-vocab-llama-spm.gguf");
}
TEST(TokenizerVectors, Gpt2) {
  check_vectors("ggml-vocab-gpt-2.gguf");
}

TEST(TokenizerVectors, MetadataFromGguf) {
  const Tokenizer spm = gguf_vocab("ggml-vocab-llama-spm.gguf");
  EXPECT_EQ(spm.vocab_size(), 32000);
  EXPECT_EQ(spm.bos_id(), 1);
  EXPECT_EQ(spm.eos_id(), 2);
  EXPECT_EQ(spm.unk_id(), 0);
  EXPECT_TRUE(spm.add_bos_default());
  EXPECT_EQ(spm.encode("<s>Hello", false, true)[0], 1);
  EXPECT_EQ(spm.encode("Hello", true), (Ids{1, 15043}));
  const Tokenizer gpt2 = gguf_vocab("ggml-vocab-gpt-2.gguf");
  EXPECT_EQ(gpt2.vocab_size(), 50257);
  EXPECT_EQ(gpt2.eos_id(), 50256);
  EXPECT_EQ(gpt2.encode("a<|endoftext|>", false, true), (Ids{64, 50256}));
  EXPECT_TRUE(gpt2.is_eog(50256));
}

// The same GPT-2 vocabulary expressed as a Hugging Face tokenizer.json must give the same ids (exercises the
// byte-level path of the tokenizer.json loader with real merges).
TEST(TokenizerVectors, Gpt2ViaTokenizerJson) {
  const auto g = io::GgufFile::open(kShared + "/data/tokenizer-tests/ggml-vocab-gpt-2.gguf");
  nlohmann::json vocab = nlohmann::json::object();
  const auto& toks = g.get("tokenizer.ggml.tokens").as_array();
  for (size_t i = 0; i + 1 < toks.size(); ++i) vocab[toks[i].as_string()] = i;
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& m : g.get("tokenizer.ggml.merges").as_array()) merges.push_back(m.as_string());
  nlohmann::json tj = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
      {"added_tokens", {{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
  };
  const Tokenizer tok = load_tokenizer_hf(tj, nlohmann::json());
  const Vectors v = read_vectors("ggml-vocab-gpt-2.gguf");
  for (size_t i = 0; i < v.inputs.size(); ++i) EXPECT_EQ(tok.encode(v.inputs[i], false), v.expected[i]) << i;
}

const std::vector<std::string>& roundtrip_texts() {
  static const std::vector<std::string> t = {
      "Once upon a time, there was a little girl named Lily.",
      "  leading and trailing spaces  ",
      "tabs\tand\nnew\n\nlines\r\n",
      "Grüße aus Köln, ½ Führer, naïve café",
      "Ελληνικά, русский текст, 日本語のテキスト, 한국어",
      "emoji: 🚀 🦙 👩‍👩‍👧 🇺🇸 ✅",
      "digits 3.14159 and 1234567890",
      "mixed\u00a0nbsp\u2009thin",
  };
  return t;
}

void check_roundtrip(const Tokenizer& tok, const std::string& label) {
  for (const std::string& s : roundtrip_texts()) {
    EXPECT_EQ(tok.decode(tok.encode(s, true)), s) << label;
    EXPECT_EQ(tok.decode(tok.encode(s, false)), s) << label;
  }
}

TEST(TokenizerRoundTrip, AllByteFallbackAndByteLevelVocabularies) {
  check_roundtrip(stories260k(), "stories260K");
  check_roundtrip(kjv(), "kjv");
  check_roundtrip(gguf_vocab("ggml-vocab-llama-spm.gguf"), "llama-spm");
  check_roundtrip(gguf_vocab("ggml-vocab-gpt-2.gguf"), "gpt-2");
}

TEST(TokenizerRoundTrip, InvalidUtf8IsKeptByteExact) {
  const std::string bad =
      std::string("ok \xff\xfe bad \xe2\x82 trunc \xc0\xaf overlong \xed\xa0\x80 surrogate");
  for (const Tokenizer& tok :
       {stories260k(), gguf_vocab("ggml-vocab-llama-spm.gguf"), gguf_vocab("ggml-vocab-gpt-2.gguf")}) {
    EXPECT_EQ(tok.decode(tok.encode(bad, false)), bad) << tok.options().name;
  }
  // TinyStories has byte_fallback but no <0xXX> tokens: unknown characters become <unk> (fused when
  // adjacent).
  const Tokenizer ts = tinystories();
  const Ids ids = ts.encode("a\xff\xfe b", false);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 0), 1);
}

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (int k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

TEST(TokenizerStream, NeverSplitsACharacter) {
  for (const Tokenizer& tok :
       {stories260k(), gguf_vocab("ggml-vocab-llama-spm.gguf"), gguf_vocab("ggml-vocab-gpt-2.gguf")}) {
    for (const std::string& s : roundtrip_texts()) {
      const Ids ids = tok.encode(s, true);
      TokenStreamDecoder dec(tok);
      std::string all;
      for (int32_t id : ids) {
        const std::string piece = dec.push(id);
        EXPECT_TRUE(valid_utf8(piece)) << tok.options().name << ": " << s;
        all += piece;
      }
      all += dec.flush();
      EXPECT_EQ(all, s) << tok.options().name;
    }
  }
}

TEST(TokenizerStream, ByteFallbackTokensOneByOne) {
  const Tokenizer tok = stories260k();
  // "🚀" is not in the 512-token vocabulary: it is encoded as four byte-fallback tokens
  // <0xF0><0x9F><0x9A><0x80>.
  const Ids ids = tok.encode("🚀", false);
  ASSERT_GE(ids.size(), 4u);
  TokenStreamDecoder dec(tok);
  std::string out;
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    const std::string part = dec.push(ids[i]);
    if (tok.attr(ids[i]) == TokenAttr::Byte) {
      EXPECT_TRUE(valid_utf8(part));
    }
    out += part;
  }
  EXPECT_EQ(out.find("\xF0"), std::string::npos);  // nothing of the emoji before its last byte
  out += dec.push(ids.back());
  EXPECT_EQ(out + dec.flush(), "🚀");
  // A truncated character at the end flushes as one U+FFFD.
  TokenStreamDecoder d2(tok);
  EXPECT_EQ(d2.push(tok.piece_to_id("<0xF0>")), "");
  EXPECT_EQ(d2.push(tok.piece_to_id("<0x9F>")), "");
  EXPECT_EQ(d2.flush(), "\xEF\xBF\xBD");
  // An invalid byte is replaced immediately.
  TokenStreamDecoder d3(tok);
  EXPECT_EQ(d3.push(tok.piece_to_id("<0xFF>")), "\xEF\xBF\xBD");
}

TEST(TokenizerPerf, LargeTextEncodesAndRoundTrips) {
  // No timing assertion (see bench/ for speed): this checks that a 200 KB input goes through every algorithm.
  std::string text = read_file(kShared + "/data/tinystories/tinystories_train_head.txt");
  while (text.size() < 200000) text += text;
  text.resize(200000);
  while (!text.empty() && (static_cast<unsigned char>(text.back()) & 0xC0) == 0x80) text.pop_back();
  for (const Tokenizer& tok : {stories260k(), gguf_vocab("ggml-vocab-gpt-2.gguf")}) {
    const Ids ids = tok.encode(text, false);
    EXPECT_GT(ids.size(), 20000u);
    EXPECT_EQ(tok.decode(ids), text);
  }
  EXPECT_GT(tinystories().encode(text, true).size(), 20000u);
}

}  // namespace
}  // namespace lowbit
