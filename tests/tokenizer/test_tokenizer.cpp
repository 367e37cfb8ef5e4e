// Tokenizer unit tests on synthetic vocabularies: merge order, normalization, special tokens, pre-tokenizer
// matchers (against splits computed by Python's `regex` module), Unicode tables, and hostile tokenizer.json.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace lowbit {
namespace {

using Ids = std::vector<int32_t>;
using nlohmann::json;

// ---- Unicode ----

TEST(Unicode, DecodeUtf8RejectsInvalidSequences) {
  using unicode::decode_utf8;
  using unicode::kInvalidCodePoint;
  EXPECT_EQ(decode_utf8("A", 0).cp, 0x41u);
  EXPECT_EQ(decode_utf8("\xC3\xA9", 0).cp, 0xE9u);
  EXPECT_EQ(decode_utf8("\xF0\x9F\x9A\x80", 0).cp, 0x1F680u);
  EXPECT_EQ(decode_utf8("\xF0\x9F\x9A\x80", 0).len, 4u);
  for (const char* bad :
       {"\x80", "\xC0\xAF", "\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xE2\x82", "\xFF"}) {
    const auto c = decode_utf8(bad, 0);
    EXPECT_EQ(c.cp, kInvalidCodePoint) << bad;
    EXPECT_EQ(c.len, 1u);
  }
}

TEST(Unicode, Categories) {
  EXPECT_TRUE(unicode::is_letter('a'));
  EXPECT_TRUE(unicode::is_letter(0xE9));    // é
  EXPECT_TRUE(unicode::is_letter(0x65E5));  // 日
  EXPECT_TRUE(unicode::is_number('7'));
  EXPECT_TRUE(unicode::is_number(0xBD));    // ½ (No)
  EXPECT_TRUE(unicode::is_number(0x663));   // Arabic-Indic three
  EXPECT_FALSE(unicode::is_letter(0x301));  // combining acute (Mn)
  EXPECT_EQ(unicode::category(0x301), unicode::kMark);
  EXPECT_EQ(unicode::category('!'), unicode::kPunct);
  EXPECT_EQ(unicode::category(0x1F680), unicode::kSymbol);
  EXPECT_EQ(unicode::category(0x10FFFF), unicode::kOther);
  EXPECT_TRUE(unicode::is_whitespace(' '));
  EXPECT_TRUE(unicode::is_whitespace(0xA0));
  EXPECT_TRUE(unicode::is_whitespace(0x3000));
  EXPECT_FALSE(unicode::is_whitespace(0x200B));  // zero-width space is not White_Space
  EXPECT_FALSE(unicode::is_whitespace('x'));
}

// ---- pre-tokenizers vs Python regex ----

TEST(PreTokenizer, MatchesPythonRegexModule) {
  std::ifstream f(std::string(LOWBIT_SOURCE_DIR) + "/tests/tokenizer/pretok_vectors.json");
  ASSERT_TRUE(f.good());
  const json doc = json::parse(f);
  const std::pair<const char*, PreTokenizer> kinds[] = {
      {"gpt2", PreTokenizer::Gpt2}, {"llama3", PreTokenizer::Llama3}, {"qwen2", PreTokenizer::Qwen2}};
  size_t checked = 0;
  for (const json& v : doc["vectors"]) {
    const std::string text = v["text"];
    for (const auto& [name, kind] : kinds) {
      std::vector<std::pair<size_t, size_t>> want;
      for (const json& p : v[name]) want.emplace_back(p[0].get<size_t>(), p[1].get<size_t>());
      EXPECT_EQ(pretokenize(kind, text), want) << name << ": \"" << text << "\"";
      ++checked;
    }
  }
  EXPECT_GT(checked, 150u);
}

TEST(PreTokenizer, Gpt2Examples) {
  auto words = [](std::string_view s) {
    std::vector<std::string> out;
    for (auto [b, e] : pretokenize(PreTokenizer::Gpt2, s)) out.emplace_back(s.substr(b, e - b));
    return out;
  };
  EXPECT_EQ(words("  Hello world"), (std::vector<std::string>{" ", " Hello", " world"}));
  EXPECT_EQ(words("I've 42 apples!!"), (std::vector<std::string>{"I", "'ve", " 42", " apples", "!!"}));
  EXPECT_EQ(words("end  "), (std::vector<std::string>{"end", "  "}));
  EXPECT_EQ(words("a\xff"
                  "b"),
            (std::vector<std::string>{"a", "\xff", "b"}));  // invalid byte: "other" class
}

// ---- synthetic vocabularies ----

Tokenizer tiny_spm(TokenizerAlgo algo = TokenizerAlgo::ScoreMerge) {
  // ids: 0 <unk>, 1 <s>, 2 </s>, 3.. bytes <0x00>..<0xFF>, then pieces.
  std::vector<std::string> pieces = {"<unk>", "<s>", "</s>"};
  static const char* kHex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) pieces.push_back(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">");
  const std::vector<std::string> words = {"▁", "a", "b", "c", "ab", "bc", "▁a", "▁ab", "abc"};
  for (const auto& w : words) pieces.push_back(w);
  std::vector<float> scores(pieces.size(), 0.0f);
  auto id = [&](const std::string& p) {
    return static_cast<int32_t>(std::find(pieces.begin(), pieces.end(), p) - pieces.begin());
  };
  scores[id("ab")] = -1.0f;
  scores[id("bc")] = -0.5f;  // "bc" beats "ab" by score
  scores[id("▁a")] = -2.0f;
  scores[id("▁ab")] = -3.0f;
  scores[id("abc")] = -4.0f;
  std::vector<TokenAttr> attrs(pieces.size(), TokenAttr::Normal);
  attrs[0] = TokenAttr::Unknown;
  attrs[1] = attrs[2] = TokenAttr::Control;
  TokenizerOptions o;
  o.algo = algo;
  o.prefix = PrefixMode::AfterSpecial;
  o.escape_spaces = true;
  o.strip_decoded_prefix = true;
  // Rank order for RankMerge: "a b" first, then "▁ a", "▁a b", "b c", "ab c".
  std::vector<std::pair<std::string, std::string>> merges = {
      {"a", "b"}, {"▁", "a"}, {"▁a", "b"}, {"b", "c"}, {"ab", "c"}};
  Tokenizer t(o, pieces, scores, attrs, merges, 1, 2, 0);
  t.add_special_text("<s>", 1, true);
  t.add_special_text("</s>", 2, true);
  return t;
}

std::vector<std::string> as_pieces(const Tokenizer& t, const Ids& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(t.piece(id));
  return out;
}

TEST(TokenizerSynthetic, ScoreMergeTakesHighestScoreFirst) {
  const Tokenizer t = tiny_spm();
  // "▁abc": candidates ▁a(-2), ab(-1), bc(-0.5) -> bc first; then ▁a; then no "▁abc" piece.
  EXPECT_EQ(as_pieces(t, t.encode("abc", false)), (std::vector<std::string>{"▁a", "bc"}));
  EXPECT_EQ(as_pieces(t, t.encode("ab", false)), (std::vector<std::string>{"▁ab"}));
  EXPECT_EQ(t.encode("ab", true)[0], 1);
  EXPECT_EQ(t.decode(t.encode("abc ab", true)), "abc ab");
}

TEST(TokenizerSynthetic, RankMergeTakesLowestRankFirst) {
  const Tokenizer t = tiny_spm(TokenizerAlgo::RankMerge);
  // ranks: a b (0) first -> ▁ ab; "▁ ab" is not a merge; "ab c" (4) -> abc.
  EXPECT_EQ(as_pieces(t, t.encode("abc", false)), (std::vector<std::string>{"▁", "abc"}));
  EXPECT_EQ(as_pieces(t, t.encode("ab", false)), (std::vector<std::string>{"▁", "ab"}));
}

TEST(TokenizerSynthetic, ByteFallbackAndSpecials) {
  const Tokenizer t = tiny_spm();
  EXPECT_EQ(as_pieces(t, t.encode("é", false)), (std::vector<std::string>{"▁", "<0xC3>", "<0xA9>"}));
  EXPECT_EQ(t.decode_token(t.piece_to_id("<0xC3>")), "\xC3");
  EXPECT_EQ(t.decode_token(1), "");
  EXPECT_EQ(t.decode_token(1, true), "<s>");
  // parse_special: "<s>" becomes id 1 and the text after it gets its own dummy prefix (llama.cpp behaviour).
  EXPECT_EQ(as_pieces(t, t.encode("a<s>b", false, true)), (std::vector<std::string>{"▁a", "<s>", "▁", "b"}));
  // without parse_special the same text is plain characters (here byte fallback for '<', 's', '>')
  const Ids plain = t.encode("<s>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(t.decode(plain), "<s>");
  EXPECT_THROW(t.piece(99999), Error);
  EXPECT_THROW(t.decode(Ids{-1}), Error);
}

TEST(TokenizerSynthetic, StreamDecoderStripsPrefixAfterBos) {
  const Tokenizer t = tiny_spm();
  TokenStreamDecoder d(t);
  std::string s;
  for (int32_t id : t.encode("ab abc", true)) s += d.push(id);
  s += d.flush();
  EXPECT_EQ(s, "ab abc");
}

// ---- tokenizer.json ----

json small_bytelevel_json() {
  const auto& enc = bytelevel_encoding();
  json vocab = json::object();
  int id = 0;
  for (int b = 0; b < 256; ++b) vocab[enc[b]] = id++;
  for (const char* w : {"he", "ll", "hell", "hello", "Ġw", "Ġwor", "or", "ld", "Ġworld"}) vocab[w] = id++;
  json merges = json::array({"h e", "l l", "he ll", "hell o", "o r", "Ġ w", "Ġw or", "l d"});
  merges.push_back(json::array({"Ġwor", "ld"}));  // the newer [left, right] form
  return {
      {"version", "1.0"},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", false}}},
      {"added_tokens", json::array({{{"id", id}, {"content", "<|eot_id|>"}, {"special", true}},
                                    {{"id", id + 1}, {"content", "<|begin_of_text|>"}, {"special", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array(
             {{{"type", "Split"},
               {"pattern",
                {{"Regex",
                  R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})}}},
  };
}

TEST(TokenizerHf, ByteLevelLlama3Style) {
  const Tokenizer t = load_tokenizer_hf(small_bytelevel_json(), json());
  EXPECT_EQ(t.options().pretok, PreTokenizer::Llama3);
  EXPECT_EQ(t.bos_id(), t.piece_to_id("<|begin_of_text|>"));
  EXPECT_TRUE(t.add_bos_default());
  EXPECT_TRUE(t.is_eog(t.piece_to_id("<|eot_id|>")));
  EXPECT_EQ(as_pieces(t, t.encode("hello world", false)), (std::vector<std::string>{"hello", "Ġworld"}));
  const Ids ids = t.encode("hello<|eot_id|>", true, true);
  EXPECT_EQ(ids.front(), t.bos_id());
  EXPECT_EQ(ids.back(), t.piece_to_id("<|eot_id|>"));
  const std::string text = "héllo 🦙\n\n x \xff";
  EXPECT_EQ(t.decode(t.encode(text, true)), text);
}

TEST(TokenizerHf, MetaspaceSplit) {
  json vocab = {{"<unk>", 0}, {"▁", 1}, {"a", 2}, {"b", 3}, {"▁a", 4}, {"▁▁", 5}, {"▁b", 6}};
  json tj = {{"model",
              {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"▁ a", "▁ ▁", "▁ b"}}, {"unk_token", "<unk>"}}},
             {"pre_tokenizer",
              {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}, {"split", true}}}};
  const Tokenizer t = load_tokenizer_hf(tj, json());
  // split before every ▁: "▁a", "▁", "▁b" (no "▁▁" across the split)
  EXPECT_EQ(as_pieces(t, t.encode("a  b", false)), (std::vector<std::string>{"▁a", "▁", "▁b"}));
  EXPECT_EQ(t.decode(t.encode("a  b", false)), "a  b");
  // unknown characters with no byte fallback -> <unk>
  EXPECT_EQ(t.encode("c", false), (Ids{1, 0}));
}

void expect_model_error(const json& tj, const std::string& needle) {
  try {
    load_tokenizer_hf(tj, json());
    ADD_FAILURE() << "no error for " << tj.dump().substr(0, 200);
  } catch (const Error& e) {
    EXPECT_EQ(e.module(), "model");
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(TokenizerHf, MalformedJsonIsAModelError) {
  expect_model_error(json(), "not a JSON object");
  expect_model_error(json::array(), "not a JSON object");
  expect_model_error(json::object(), "no \"model\"");
  expect_model_error({{"model", 3}}, "no \"model\"");
  expect_model_error({{"model", {{"type", "Unigram"}, {"vocab", json::array()}}}}, "Unigram");
  expect_model_error({{"model", {{"type", "WordPiece"}}}}, "WordPiece");
  expect_model_error({{"model", {{"type", "BPE"}}}}, "vocab");
  expect_model_error({{"model", {{"type", "BPE"}, {"vocab", {{"a", "x"}}}}}}, "not an integer");
  expect_model_error({{"model", {{"type", "BPE"}, {"vocab", {{"a", -5}}}}}}, "out of range");
  expect_model_error({{"model", {{"type", "BPE"}, {"vocab", {{"a", 1LL << 40}}}}}}, "out of range");
  expect_model_error({{"model", {{"type", "BPE"}, {"vocab", json::object()}}}}, "empty");
  expect_model_error({{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", {"ab"}}}}}, "left right");
  expect_model_error({{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", {1, 2}}}}}, "merges");
  expect_model_error({{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}}}}, "SentencePiece-style");
  expect_model_error({{"model", {{"type", 7}, {"vocab", {{"a", 0}}}}}}, "tokenizer.json");
  json bad_regex = small_bytelevel_json();
  bad_regex["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
  expect_model_error(bad_regex, "Split regex");
  json bad_norm = small_bytelevel_json();
  bad_norm["normalizer"] = {{"type", "NFKC"}};
  expect_model_error(bad_norm, "NFKC");
  json bad_added = small_bytelevel_json();
  bad_added["added_tokens"][0]["id"] = "seven";
  expect_model_error(bad_added, "not an integer");
}

TEST(TokenizerSynthetic, ConstructorValidates) {
  TokenizerOptions o;
  EXPECT_THROW(Tokenizer(o, {}, {}, {}, {}, -1, -1, -1), Error);
  EXPECT_THROW(Tokenizer(o, {"a", "b"}, {0.0f}, {}, {}, -1, -1, -1), Error);
  EXPECT_THROW(Tokenizer(o, {"a", "b"}, {}, {}, {}, 5, -1, -1), Error);
}

}  // namespace
}  // namespace lowbit
