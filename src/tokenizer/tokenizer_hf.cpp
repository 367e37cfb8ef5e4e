// Hugging Face tokenizer.json (+ tokenizer_config.json) -> Tokenizer. Only the BPE model is supported, in its
// two common shapes:
//  * SentencePiece style (Llama-2, TinyStories): normalizer Prepend("▁") + Replace(" " -> "▁"), or a
//  Metaspace
//    pre-tokenizer; byte_fallback; merges applied by rank.
//  * byte-level style (GPT-2, Llama-3, Qwen2, SmolLM): ByteLevel pre-tokenizer, optionally after a Split with
//  one
//    of the known regexes and/or Digits(individual_digits); merges applied by rank.
// Anything else (Unigram, WordPiece, unknown normalizers or regexes) is rejected with Error("model") rather
// than silently producing different ids.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace lowbit {

namespace {

using nlohmann::json;

constexpr const char* kSpaceMarker = "\xE2\x96\x81";  // "▁"

const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

[[noreturn]] void bad(const std::string& what) {
  fail("model", "tokenizer.json: " + what);
}

std::string type_of(const json& j) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) return "";
  return j["type"].get<std::string>();
}

// Flattens {"type": "Sequence", <key>: [...]} into its elements (or the object itself).
std::vector<json> flatten(const json& j, const char* key, int depth = 0) {
  std::vector<json> out;
  if (j.is_null()) return out;
  if (depth > 8) bad(std::string(key) + ": Sequence nested more than 8 deep");
  if (!j.is_object()) bad(std::string(key) + " entry is not an object");
  if (type_of(j) == "Sequence") {
    if (!j.contains(key) || !j[key].is_array()) bad(std::string("Sequence without a \"") + key + "\" array");
    for (const auto& e : j[key]) {
      auto sub = flatten(e, key, depth + 1);
      out.insert(out.end(), sub.begin(), sub.end());
    }
  } else {
    out.push_back(j);
  }
  return out;
}

std::string string_or_content(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string())
    return j["content"].get<std::string>();
  return "";
}

void configure_spm(const json& tj, TokenizerOptions& opts) {
  opts.algo = TokenizerAlgo::RankMerge;
  opts.name = "hf-bpe";
  bool known_shape = false;
  for (const json& n : flatten(tj.value("normalizer", json()), "normalizers")) {
    const std::string t = type_of(n);
    if (t == "Prepend") {
      if (n.value("prepend", std::string()) != kSpaceMarker)
        bad("Prepend normalizer with a prefix other than \"▁\"");
      opts.prefix = PrefixMode::Always;
      known_shape = true;
    } else if (t == "Replace") {
      const json& pat = n.value("pattern", json::object());
      if (!pat.is_object() || pat.value("String", std::string()) != " " ||
          n.value("content", std::string()) != kSpaceMarker) {
        bad("only the Replace normalizer \" \" -> \"▁\" is supported");
      }
      opts.escape_spaces = true;
      known_shape = true;
    } else if (t == "NFC") {
      // Accepted without applying it: inputs are almost always NFC already (documented in
      // docs/tokenizers.md).
    } else {
      bad("normalizer \"" + t + "\" is not supported (supported: Prepend, Replace, NFC, Sequence of those)");
    }
  }
  for (const json& p : flatten(tj.value("pre_tokenizer", json()), "pretokenizers")) {
    const std::string t = type_of(p);
    if (t != "Metaspace")
      bad("pre_tokenizer \"" + t + "\" is not supported with a SentencePiece-style vocabulary");
    if (p.value("replacement", std::string(kSpaceMarker)) != kSpaceMarker)
      bad("Metaspace replacement must be \"▁\"");
    std::string scheme = p.value("prepend_scheme", std::string());
    if (scheme.empty()) scheme = p.value("add_prefix_space", true) ? "always" : "never";
    opts.prefix = scheme == "always"  ? PrefixMode::Always
                  : scheme == "first" ? PrefixMode::First
                                      : PrefixMode::Never;
    if (scheme != "always" && scheme != "first" && scheme != "never")
      bad("Metaspace prepend_scheme \"" + scheme + "\"");
    opts.prefix_if_missing = true;
    opts.escape_spaces = true;
    opts.metaspace_split = p.value("split", true);
    known_shape = true;
  }
  if (!known_shape) {
    bad("BPE without a ByteLevel pre-tokenizer needs SentencePiece-style normalization (Prepend/Replace "
        "\"▁\" or Metaspace); this tokenizer has neither and is not supported");
  }
  opts.strip_decoded_prefix = opts.prefix != PrefixMode::Never;
}

void configure_bytelevel(const std::vector<json>& pres, TokenizerOptions& opts) {
  opts.algo = TokenizerAlgo::ByteLevel;
  opts.name = "hf-bytelevel";
  opts.byte_fallback = false;
  bool regex_seen = false;
  for (const json& p : pres) {
    const std::string t = type_of(p);
    if (t == "ByteLevel") {
      if (p.value("add_prefix_space", false)) {
        opts.prefix = PrefixMode::Always;
        opts.prefix_if_missing = true;
      }
      if (p.value("use_regex", true)) {
        if (regex_seen) bad("two regex pre-tokenizers (Split and ByteLevel use_regex) are not supported");
        opts.pretok = PreTokenizer::Gpt2;
        regex_seen = true;
      }
    } else if (t == "Split") {
      const json& pat = p.value("pattern", json::object());
      const std::string re = pat.is_object() ? pat.value("Regex", std::string()) : std::string();
      if (p.value("behavior", std::string("Isolated")) != "Isolated" || p.value("invert", false)) {
        bad("Split pre-tokenizer: only behavior Isolated without invert is supported");
      }
      if (regex_seen) bad("two regex pre-tokenizers are not supported");
      if (re == kGpt2Regex) {
        opts.pretok = PreTokenizer::Gpt2;
      } else if (re == kLlama3Regex) {
        opts.pretok = PreTokenizer::Llama3;
      } else if (re == kQwen2Regex) {
        opts.pretok = PreTokenizer::Qwen2;
      } else {
        bad("Split regex \"" + re.substr(0, 120) +
            "\" is not one of the supported pre-tokenizers (GPT-2, Llama-3, Qwen2 regexes)");
      }
      regex_seen = true;
    } else if (t == "Digits") {
      if (!p.value("individual_digits", false)) bad("Digits pre-tokenizer needs individual_digits = true");
      opts.split_digits = true;
    } else {
      bad("pre_tokenizer \"" + t + "\" is not supported (supported: ByteLevel, Split, Digits, Sequence)");
    }
  }
}

}  // namespace

Tokenizer load_tokenizer_hf(const json& tj, const json& tc) {
  try {
    if (!tj.is_object()) bad("the top level is not a JSON object; pass the model's tokenizer.json");
    if (!tj.contains("model") || !tj["model"].is_object())
      bad("no \"model\" object; the file is not a tokenizer.json");
    const json& m = tj["model"];
    const std::string mtype = m.value("type", std::string(m.contains("merges") ? "BPE" : ""));
    if (mtype != "BPE") {
      bad("model type \"" + mtype +
          "\" is not supported; lowbit supports BPE tokenizers (SentencePiece-style and "
          "byte-level)");
    }
    if (!m.contains("vocab") || !m["vocab"].is_object()) bad("model.vocab is missing or not an object");
    if (m.contains("continuing_subword_prefix") && !m["continuing_subword_prefix"].is_null() &&
        !m["continuing_subword_prefix"].get<std::string>().empty()) {
      bad("model.continuing_subword_prefix is not supported");
    }
    if (m.contains("end_of_word_suffix") && !m["end_of_word_suffix"].is_null() &&
        !m["end_of_word_suffix"].get<std::string>().empty()) {
      bad("model.end_of_word_suffix is not supported");
    }

    // Vocabulary: model.vocab plus added_tokens (which may extend it).
    const json& vocab = m["vocab"];
    const json added = tj.value("added_tokens", json::array());
    if (!added.is_array()) bad("added_tokens is not an array");
    const size_t max_entries = vocab.size() + added.size();
    int64_t max_id = -1;
    auto check_id = [&](const json& idj, const std::string& what) {
      if (!idj.is_number_integer()) bad("id of " + what + " is not an integer");
      const int64_t id = idj.get<int64_t>();
      // Ids are dense in real files; allow small holes but refuse ids that would allocate absurd tables.
      if (id < 0 || static_cast<uint64_t>(id) >= max_entries + 1024) {
        bad("id " + std::to_string(id) + " of " + what + " is out of range for " +
            std::to_string(max_entries) + " entries");
      }
      max_id = std::max(max_id, id);
      return static_cast<int32_t>(id);
    };
    std::vector<std::pair<std::string, int32_t>> entries;
    entries.reserve(vocab.size());
    for (auto it = vocab.begin(); it != vocab.end(); ++it)
      entries.emplace_back(it.key(), check_id(it.value(), it.key()));
    for (const auto& a : added) {
      if (!a.is_object() || !a.contains("content") || !a["content"].is_string() || !a.contains("id")) {
        bad("added_tokens entry without content/id");
      }
      check_id(a["id"], a["content"].get<std::string>());
    }
    if (max_id < 0) bad("the vocabulary is empty");
    const size_t n = static_cast<size_t>(max_id) + 1;
    std::vector<std::string> pieces(n);
    std::vector<TokenAttr> attrs(n, TokenAttr::Normal);
    for (auto& [text, id] : entries) pieces[id] = std::move(text);
    for (size_t i = 0; i < n; ++i) {
      if (pieces[i].empty()) attrs[i] = TokenAttr::Unused;  // a hole in the id space
    }
    for (const auto& a : added) {
      const int32_t id = a["id"].get<int32_t>();
      pieces[id] = a["content"].get<std::string>();
      attrs[id] = a.value("special", false) ? TokenAttr::Control : TokenAttr::UserDefined;
    }

    // Merges: "left right" strings (older files) or ["left", "right"] pairs (tokenizers >= 0.20).
    std::vector<std::pair<std::string, std::string>> merges;
    const json merges_j = m.value("merges", json::array());
    if (!merges_j.is_array()) bad("model.merges is not an array");
    merges.reserve(merges_j.size());
    for (const auto& e : merges_j) {
      if (e.is_string()) {
        const std::string s = e.get<std::string>();
        const size_t sp = s.find(' ', 1);
        if (sp == std::string::npos) bad("merge \"" + s.substr(0, 64) + "\" is not \"left right\"");
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
      } else {
        bad("a model.merges entry is neither \"left right\" nor [left, right]");
      }
    }

    // Which of the two shapes: byte-level when any pre-tokenizer is ByteLevel.
    TokenizerOptions opts;
    const auto pres = flatten(tj.value("pre_tokenizer", json()), "pretokenizers");
    const bool bytelevel =
        std::any_of(pres.begin(), pres.end(), [](const json& p) { return type_of(p) == "ByteLevel"; });
    if (bytelevel) {
      for (const json& nrm : flatten(tj.value("normalizer", json()), "normalizers")) {
        if (type_of(nrm) != "NFC")
          bad("normalizer \"" + type_of(nrm) + "\" with a byte-level BPE is not supported");
      }
      configure_bytelevel(pres, opts);
    } else {
      configure_spm(tj, opts);
    }
    opts.byte_fallback = m.value("byte_fallback", false);
    opts.fuse_unk = m.value("fuse_unk", false);
    opts.ignore_merges = m.value("ignore_merges", false);

    auto id_of = [&](const std::string& text) -> int32_t {
      if (text.empty()) return -1;
      for (size_t i = 0; i < n; ++i) {
        if (pieces[i] == text) return static_cast<int32_t>(i);
      }
      return -1;
    };
    const json cfg = tc.is_object() ? tc : json::object();
    const int32_t unk =
        id_of(m.contains("unk_token") && m["unk_token"].is_string() ? m["unk_token"].get<std::string>()
                                                                    : std::string());
    // BOS: tokenizer_config's bos_token, else the special token the post-processor puts first.
    int32_t template_bos = -1;
    for (const json& pp : flatten(tj.value("post_processor", json()), "processors")) {
      if (type_of(pp) != "TemplateProcessing" || !pp.contains("single") || !pp["single"].is_array()) continue;
      const json& single = pp["single"];
      if (!single.empty() && single[0].is_object() && single[0].contains("SpecialToken")) {
        template_bos = id_of(single[0]["SpecialToken"].value("id", std::string()));
      }
    }
    int32_t bos = cfg.contains("bos_token") ? id_of(string_or_content(cfg["bos_token"])) : -1;
    if (bos < 0) bos = template_bos;
    const int32_t eos = cfg.contains("eos_token") ? id_of(string_or_content(cfg["eos_token"])) : -1;
    const int32_t pad = cfg.contains("pad_token") ? id_of(string_or_content(cfg["pad_token"])) : -1;
    bool add_bos = template_bos >= 0;
    if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean())
      add_bos = cfg["add_bos_token"].get<bool>();

    Tokenizer tok(opts, std::move(pieces), {}, std::move(attrs), merges, bos, eos, unk);
    tok.set_pad_id(pad);
    tok.set_add_bos_default(add_bos);
    for (const auto& a : added) {
      tok.add_special_text(a["content"].get<std::string>(), a["id"].get<int32_t>(), a.value("special", false),
                           a.value("lstrip", false), a.value("rstrip", false));
    }
    for (int32_t i = 0; i < tok.vocab_size(); ++i) {
      static const char* kEog[] = {"<|eot_id|>",    "<|im_end|>", "<|endoftext|>",  "<|end|>",
                                   "<end_of_turn>", "<|eom_id|>", "<|end_of_text|>"};
      if (tok.attr(i) != TokenAttr::Control) continue;
      for (const char* t : kEog) {
        if (tok.piece(i) == t) tok.add_eog_id(i);
      }
    }
    return tok;
  } catch (const nlohmann::json::exception& e) {
    bad(std::string("unexpected structure (") + e.what() + "); the file is not a valid tokenizer.json");
  }
}

}  // namespace lowbit
