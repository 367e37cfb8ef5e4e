// Tokenizer loaders: llama2.c tokenizer.bin, GGUF tokenizer metadata, Hugging Face tokenizer.json.
// Every loader validates what it reads and throws Error("model") naming the file kind, the field and what to
// do.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "io/gguf.h"
#include "io/llama2c.h"
#include "tokenizer/tokenizer.h"

namespace lowbit {

namespace {

using nlohmann::json;

// Texts of end-of-turn tokens used by chat models; when present as control tokens they also end generation.
const std::set<std::string>& eog_texts() {
  static const std::set<std::string> s = {"<|eot_id|>",    "<|im_end|>", "<|endoftext|>",  "<|end|>",
                                          "<end_of_turn>", "<|eom_id|>", "<|end_of_text|>"};
  return s;
}

void add_known_eog(Tokenizer& tok) {
  for (int32_t i = 0; i < tok.vocab_size(); ++i) {
    if (tok.attr(i) == TokenAttr::Control && eog_texts().count(tok.piece(i))) tok.add_eog_id(i);
  }
}

// ---- GGUF ----

PreTokenizer gguf_pretokenizer(const std::string& pre, TokenizerOptions& opts) {
  if (pre == "default" || pre == "gpt-2" || pre == "gpt2") return PreTokenizer::Gpt2;
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
    opts.ignore_merges = true;  // llama.cpp sets ignore_merges for the Llama-3 pre-tokenizer
    return PreTokenizer::Llama3;
  }
  if (pre == "qwen2") return PreTokenizer::Qwen2;
  if (pre == "smollm") {
    opts.split_digits = true;
    return PreTokenizer::Gpt2;
  }
  fail("model",
       "GGUF tokenizer.ggml.pre = \"" + pre +
           "\" is not supported; supported byte-level pre-tokenizers: default, gpt-2, llama-bpe (llama3), "
           "qwen2, smollm");
}

int32_t gguf_id(const io::GgufFile& g, const std::string& key, int32_t def, size_t n_vocab) {
  if (!g.has(key)) return def;
  const int64_t v = g.get(key).as_int();
  if (v == -1 || v == 0xFFFFFFFFLL) return -1;  // llama.cpp writes -1 (as u32 all-ones) for "none"
  if (v < 0 || static_cast<uint64_t>(v) >= n_vocab) {
    fail("model", g.path + ": " + key + " = " + std::to_string(v) + " is outside the vocabulary (" +
                      std::to_string(n_vocab) + " tokens); the GGUF metadata is corrupt");
  }
  return static_cast<int32_t>(v);
}

}  // namespace

Tokenizer load_tokenizer_llama2c(const io::Llama2cTokenizerData& data, int32_t bos_id, int32_t eos_id) {
  const size_t n = data.pieces.size();
  if (n == 0 || data.scores.size() != n) {
    fail("model", "llama2.c tokenizer has " + std::to_string(n) + " pieces and " +
                      std::to_string(data.scores.size()) +
                      " scores; pass the tokenizer.bin that matches the model");
  }
  if (bos_id >= static_cast<int32_t>(n)) bos_id = -1;
  if (eos_id >= static_cast<int32_t>(n)) eos_id = -1;
  std::vector<TokenAttr> attrs(n, TokenAttr::Normal);
  const int32_t unk = data.pieces[0] == "<unk>" ? 0 : -1;
  if (unk == 0) attrs[0] = TokenAttr::Unknown;
  if (bos_id >= 0) attrs[bos_id] = TokenAttr::Control;
  if (eos_id >= 0) attrs[eos_id] = TokenAttr::Control;
  TokenizerOptions opts;
  opts.algo = TokenizerAlgo::ScoreMerge;
  opts.name = "llama2c";
  opts.prefix = PrefixMode::AfterSpecial;  // llama2.c: one space in front of non-empty text
  opts.escape_spaces = false;              // llama2.c's export already turned "▁" into ' '
  opts.byte_fallback = true;
  opts.strip_decoded_prefix = true;  // llama2.c decode: a token after BOS drops its leading space
  Tokenizer tok(opts, data.pieces, data.scores, std::move(attrs), {}, bos_id, eos_id, unk);
  // llama2.c stores BOS/EOS as "\n<s>\n" and "\n</s>\n"; the conventional texts are what users type.
  if (bos_id >= 0) tok.add_special_text("<s>", bos_id, true);
  if (eos_id >= 0) tok.add_special_text("</s>", eos_id, true);
  return tok;
}

Tokenizer load_tokenizer_gguf(const io::GgufFile& g) {
  if (!g.has("tokenizer.ggml.model")) {
    fail("model",
         g.path + " has no tokenizer.ggml.model; this GGUF carries no tokenizer, convert it with one");
  }
  const std::string model = g.get("tokenizer.ggml.model").as_string();
  TokenizerOptions opts;
  if (model == "llama") {
    opts.algo = TokenizerAlgo::ScoreMerge;
    opts.name = "gguf-llama";
    opts.escape_spaces = true;
    opts.byte_fallback = true;
    const bool add_space =
        g.has("tokenizer.ggml.add_space_prefix") ? g.get("tokenizer.ggml.add_space_prefix").as_bool() : true;
    opts.prefix = add_space ? PrefixMode::AfterSpecial : PrefixMode::Never;
    opts.strip_decoded_prefix = add_space;
  } else if (model == "gpt2") {
    opts.algo = TokenizerAlgo::ByteLevel;
    opts.name = "gguf-gpt2";
    opts.byte_fallback = false;
    const std::string pre = g.has("tokenizer.ggml.pre") ? g.get("tokenizer.ggml.pre").as_string() : "default";
    opts.pretok = gguf_pretokenizer(pre, opts);
  } else {
    fail("model", g.path + ": tokenizer.ggml.model = \"" + model +
                      "\" is not supported; supported: llama (SentencePiece BPE), gpt2 (byte-level BPE)");
  }

  if (!g.has("tokenizer.ggml.tokens")) fail("model", g.path + " has no tokenizer.ggml.tokens array");
  const auto& tokens = g.get("tokenizer.ggml.tokens").as_array();
  const size_t n = tokens.size();
  std::vector<std::string> pieces;
  pieces.reserve(n);
  for (const auto& t : tokens) pieces.push_back(t.as_string());

  std::vector<float> scores;
  if (g.has("tokenizer.ggml.scores")) {
    const auto& a = g.get("tokenizer.ggml.scores").as_array();
    if (a.size() != n) {
      fail("model", g.path + ": tokenizer.ggml.scores has " + std::to_string(a.size()) + " entries for " +
                        std::to_string(n) + " tokens; the GGUF metadata is corrupt");
    }
    scores.reserve(n);
    for (const auto& v : a) scores.push_back(static_cast<float>(v.as_float()));
  } else if (opts.algo == TokenizerAlgo::ScoreMerge) {
    fail("model",
         g.path + ": a \"llama\" tokenizer needs tokenizer.ggml.scores (merge priorities); none found");
  }

  std::vector<TokenAttr> attrs(n, TokenAttr::Normal);
  if (g.has("tokenizer.ggml.token_type")) {
    const auto& a = g.get("tokenizer.ggml.token_type").as_array();
    if (a.size() != n) {
      fail("model", g.path + ": tokenizer.ggml.token_type has " + std::to_string(a.size()) + " entries for " +
                        std::to_string(n) + " tokens; the GGUF metadata is corrupt");
    }
    for (size_t i = 0; i < n; ++i) {
      const int64_t t = a[i].as_int();
      attrs[i] = (t >= 1 && t <= 6) ? static_cast<TokenAttr>(t) : TokenAttr::Normal;
    }
  }

  std::vector<std::pair<std::string, std::string>> merges;
  if (opts.algo == TokenizerAlgo::ByteLevel) {
    if (!g.has("tokenizer.ggml.merges"))
      fail("model", g.path + ": a \"gpt2\" tokenizer needs tokenizer.ggml.merges");
    const auto& a = g.get("tokenizer.ggml.merges").as_array();
    merges.reserve(a.size());
    for (const auto& v : a) {
      const std::string& s = v.as_string();
      const size_t sp = s.find(' ', 1);  // a piece may itself start with a space; the separator comes after
      if (sp == std::string::npos) {
        fail("model",
             g.path + ": tokenizer.ggml.merges entry \"" + s.substr(0, 64) + "\" is not \"left right\"");
      }
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    }
  }

  const bool spm = opts.algo == TokenizerAlgo::ScoreMerge;
  const int32_t bos = gguf_id(g, "tokenizer.ggml.bos_token_id", spm && n > 1 ? 1 : -1, n);
  const int32_t eos = gguf_id(g, "tokenizer.ggml.eos_token_id", spm && n > 2 ? 2 : -1, n);
  const int32_t unk = gguf_id(g, "tokenizer.ggml.unknown_token_id", spm ? 0 : -1, n);
  Tokenizer tok(opts, std::move(pieces), std::move(scores), std::move(attrs), merges, bos, eos, unk);
  tok.set_pad_id(gguf_id(g, "tokenizer.ggml.padding_token_id", -1, n));
  tok.set_add_bos_default(
      g.has("tokenizer.ggml.add_bos_token") ? g.get("tokenizer.ggml.add_bos_token").as_bool() : spm);
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    const int32_t id = gguf_id(g, key, -1, n);
    if (id >= 0) tok.add_eog_id(id);
  }
  add_known_eog(tok);
  for (int32_t i = 0; i < tok.vocab_size(); ++i) {
    const TokenAttr a = tok.attr(i);
    if (a == TokenAttr::Control) tok.add_special_text(tok.piece(i), i, true);
    if (a == TokenAttr::UserDefined) tok.add_special_text(tok.piece(i), i, false);
  }
  return tok;
}

}  // namespace lowbit
