// Tokenizer core: vocabulary tables, special-token splitting, normalization, decoding and streaming decoding.
// The merge loops live in tokenizer_bpe.cpp, the pre-tokenizers in tokenizer_pretok.cpp, the loaders in
// tokenizer_load.cpp.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace lowbit {

namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581 "▁", SentencePiece's visible space

// "<0xAB>" -> 0xAB, or -1.
int parse_byte_piece(std::string_view p) {
  if (p.size() != 6 || p.substr(0, 3) != "<0x" || p[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(p[3]), lo = hex(p[4]);
  return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (true) {
    const size_t k = s.find(from, pos);
    if (k == std::string_view::npos) break;
    out.append(s.substr(pos, k - pos)).append(to);
    pos = k + from.size();
  }
  out.append(s.substr(pos));
  return out;
}

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

}  // namespace

Tokenizer::Tokenizer(TokenizerOptions opts, std::vector<std::string> pieces, std::vector<float> scores,
                     std::vector<TokenAttr> attrs,
                     const std::vector<std::pair<std::string, std::string>>& merges, int32_t bos_id,
                     int32_t eos_id, int32_t unk_id)
    : opts_(std::move(opts)),
      pieces_(std::move(pieces)),
      scores_(std::move(scores)),
      attrs_(std::move(attrs)) {
  const size_t n = pieces_.size();
  if (n == 0) fail("model", "tokenizer has an empty vocabulary; the tokenizer file is empty or was not read");
  if (n > (1u << 30)) fail("model", "tokenizer vocabulary has " + std::to_string(n) + " tokens, too many");
  if (scores_.empty()) scores_.assign(n, 0.0f);
  if (attrs_.empty()) attrs_.assign(n, TokenAttr::Normal);
  if (scores_.size() != n || attrs_.size() != n) {
    fail("model", "tokenizer has " + std::to_string(n) + " pieces but " + std::to_string(scores_.size()) +
                      " scores and " + std::to_string(attrs_.size()) +
                      " token types; the vocabulary is corrupt");
  }
  for (float& s : scores_) {
    // NaN would break the strict ordering the merge queue relies on; a NaN-scored piece never wins a merge.
    if (s != s) s = -std::numeric_limits<float>::infinity();
  }
  auto check_id = [&](int32_t id, const char* what) {
    if (id < -1 || id >= static_cast<int32_t>(n)) {
      fail("model", std::string("tokenizer ") + what + " id " + std::to_string(id) +
                        " is outside the vocabulary (" + std::to_string(n) +
                        " tokens); fix the tokenizer metadata");
    }
    return id;
  };
  bos_id_ = check_id(bos_id, "BOS");
  eos_id_ = check_id(eos_id, "EOS");
  unk_id_ = check_id(unk_id, "unknown-token");
  if (eos_id_ >= 0) eog_ids_.push_back(eos_id_);

  piece_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (!pieces_[i].empty()) piece_to_id_.emplace(pieces_[i], static_cast<int32_t>(i));  // first wins
  }

  const bool bytelevel = opts_.algo == TokenizerAlgo::ByteLevel;
  byte_token_.fill(-1);
  if (bytelevel) {
    const auto& enc = bytelevel_encoding();
    for (int b = 0; b < 256; ++b) byte_token_[b] = lookup(enc[b]);
  } else {
    static const char* kHex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      const std::string p = std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";
      byte_token_[b] = lookup(p);
    }
  }

  // Raw bytes of every token, computed once so decoding is a table lookup.
  decoded_.resize(n);
  std::unordered_map<std::string, uint8_t> bytelevel_decode;
  if (bytelevel) {
    const auto& enc = bytelevel_encoding();
    for (int b = 0; b < 256; ++b) bytelevel_decode.emplace(enc[b], static_cast<uint8_t>(b));
  }
  for (size_t i = 0; i < n; ++i) {
    const std::string& p = pieces_[i];
    const TokenAttr a = attrs_[i];
    if (bytelevel) {
      if (a == TokenAttr::Control || a == TokenAttr::UserDefined) {
        decoded_[i] = p;  // added tokens are stored as plain text, not byte-level characters
        continue;
      }
      std::string out;
      bool ok = true;
      for (size_t pos = 0; pos < p.size() && ok;) {
        const auto ch = unicode::decode_utf8(p, pos);
        auto it = bytelevel_decode.find(p.substr(pos, ch.len));
        if (it == bytelevel_decode.end()) {
          ok = false;
        } else {
          out.push_back(static_cast<char>(it->second));
        }
        pos += ch.len;
      }
      decoded_[i] = ok ? out : p;
    } else {
      const int byte = parse_byte_piece(p);
      if (byte >= 0 && (a == TokenAttr::Byte || a == TokenAttr::Normal)) {
        decoded_[i] = std::string(1, static_cast<char>(byte));
        if (attrs_[i] == TokenAttr::Normal && byte_token_[byte] == static_cast<int32_t>(i)) {
          attrs_[i] = TokenAttr::Byte;
        }
      } else {
        decoded_[i] = opts_.escape_spaces ? replace_all(p, kSpaceMarker, " ") : p;
      }
    }
  }

  if (opts_.algo != TokenizerAlgo::ScoreMerge) {
    merges_.reserve(merges.size());
    for (size_t r = 0; r < merges.size(); ++r) {
      const int32_t a = lookup(merges[r].first), b = lookup(merges[r].second);
      if (a < 0 || b < 0) continue;  // merges naming pieces outside the vocabulary can never apply
      const int32_t m = lookup(merges[r].first + merges[r].second);
      if (m < 0) continue;
      const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
      merges_.emplace(key, Merge{static_cast<int32_t>(r), m});  // the first (best-ranked) occurrence wins
    }
  }
}

int32_t Tokenizer::lookup(std::string_view s) const {
  auto it = piece_to_id_.find(s);
  return it == piece_to_id_.end() ? -1 : it->second;
}

int32_t Tokenizer::piece_to_id(std::string_view piece) const {
  return lookup(piece);
}

float Tokenizer::score(int32_t id) const {
  piece(id);  // range check
  return static_cast<size_t>(id) < scores_.size() ? scores_[static_cast<size_t>(id)] : 0.0f;
}

const std::string& Tokenizer::piece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    fail("model", "token id " + std::to_string(id) + " is outside the vocabulary (" +
                      std::to_string(vocab_size()) + " tokens)");
  }
  return pieces_[id];
}

TokenAttr Tokenizer::attr(int32_t id) const {
  piece(id);  // range check
  return attrs_[id];
}

bool Tokenizer::is_control(int32_t id) const {
  return attr(id) == TokenAttr::Control;
}

bool Tokenizer::is_eog(int32_t id) const {
  return std::find(eog_ids_.begin(), eog_ids_.end(), id) != eog_ids_.end();
}

void Tokenizer::add_eog_id(int32_t id) {
  piece(id);
  if (!is_eog(id)) eog_ids_.push_back(id);
}

void Tokenizer::add_special_text(std::string text, int32_t id, bool special, bool lstrip, bool rstrip) {
  piece(id);
  if (text.empty()) return;
  auto found = special_pos_.find(text);
  if (found != special_pos_.end()) {  // re-registration updates the entry instead of adding a duplicate
    specials_[found->second] = SpecialText{std::move(text), id, special, lstrip, rstrip};
    return;
  }
  const auto idx = static_cast<uint32_t>(specials_.size());
  special_pos_.emplace(text, idx);
  specials_.push_back(SpecialText{std::move(text), id, special, lstrip, rstrip});
  // Each first-byte bucket is kept longest first (stable), so that at one position the longest registered
  // text wins ("<|im_end|>" over "<|im"). Inserting in place keeps loading a vocabulary with many added
  // tokens linear per bucket instead of re-sorting everything on every insert.
  auto& bucket = special_index_[static_cast<uint8_t>(specials_[idx].text[0])];
  const size_t len = specials_[idx].text.size();
  auto at = std::upper_bound(bucket.begin(), bucket.end(), len,
                             [&](size_t l, uint32_t k) { return l > specials_[k].text.size(); });
  bucket.insert(at, idx);
}

std::vector<Tokenizer::Segment> Tokenizer::split_special(std::string_view text, bool parse_special) const {
  std::vector<Segment> segs;
  size_t raw_begin = 0, i = 0;
  while (i < text.size()) {
    const auto& cands = special_index_[static_cast<uint8_t>(text[i])];
    const SpecialText* hit = nullptr;
    for (uint32_t k : cands) {
      const SpecialText& s = specials_[k];
      if ((s.special && !parse_special) || text.compare(i, s.text.size(), s.text) != 0) continue;
      hit = &s;
      break;
    }
    if (!hit) {
      ++i;
      continue;
    }
    size_t raw_end = i;
    if (hit->lstrip) {
      while (raw_end > raw_begin && is_ascii_space(text[raw_end - 1])) --raw_end;
    }
    if (raw_end > raw_begin) segs.push_back(Segment{text.substr(raw_begin, raw_end - raw_begin), -1});
    segs.push_back(Segment{{}, hit->id});
    i += hit->text.size();
    if (hit->rstrip) {
      while (i < text.size() && is_ascii_space(text[i])) ++i;
    }
    raw_begin = i;
  }
  if (raw_begin < text.size()) segs.push_back(Segment{text.substr(raw_begin), -1});
  return segs;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && bos_id_ >= 0) out.push_back(bos_id_);
  bool after_special = true;  // the start of the input counts as "after a special token" (llama.cpp SPM)
  for (const Segment& seg : split_special(text, parse_special)) {
    if (seg.id >= 0) {
      out.push_back(seg.id);
      after_special = true;
      continue;
    }
    encode_segment(seg.text, seg.text.data() == text.data(), after_special, out);
    after_special = false;
  }
  return out;
}

void Tokenizer::encode_segment(std::string_view text, bool at_start, bool after_special,
                               std::vector<int32_t>& out) const {
  if (text.empty()) return;
  bool prefix = false;
  switch (opts_.prefix) {
    case PrefixMode::Never:
      prefix = false;
      break;
    case PrefixMode::Always:
      prefix = true;
      break;
    case PrefixMode::First:
      prefix = at_start;
      break;
    case PrefixMode::AfterSpecial:
      prefix = at_start || after_special;
      break;
  }
  if (prefix && opts_.prefix_if_missing && text[0] == ' ') prefix = false;

  if (opts_.algo == TokenizerAlgo::ByteLevel) {
    std::string buf;
    if (prefix) {
      buf.reserve(text.size() + 1);
      buf.push_back(' ');
      buf.append(text);
      text = buf;
    }
    auto encode_run = [&](std::string_view run) {
      for (const auto& [b, e] : pretokenize(opts_.pretok, run))
        encode_bytelevel_word(run.substr(b, e - b), out);
    };
    if (!opts_.split_digits) {
      encode_run(text);
      return;
    }
    // HF Digits(individual_digits) / llama.cpp "\p{N}" first pass: every digit is a word of its own.
    size_t run_begin = 0, pos = 0;
    while (pos < text.size()) {
      const auto ch = unicode::decode_utf8(text, pos);
      if (ch.cp != unicode::kInvalidCodePoint && unicode::is_number(ch.cp)) {
        encode_run(text.substr(run_begin, pos - run_begin));
        encode_bytelevel_word(text.substr(pos, ch.len), out);
        run_begin = pos + ch.len;
      }
      pos += ch.len;
    }
    encode_run(text.substr(run_begin));
    return;
  }

  // SentencePiece style: dummy prefix, spaces -> "▁", then merge (optionally word by word).
  const std::string_view space = opts_.escape_spaces ? kSpaceMarker : std::string_view(" ");
  std::string norm;
  norm.reserve(text.size() + text.size() / 4 + 4);
  if (prefix) norm.append(space);
  if (opts_.escape_spaces) {
    for (char c : text) {
      if (c == ' ') {
        norm.append(kSpaceMarker);
      } else {
        norm.push_back(c);
      }
    }
  } else {
    norm.append(text);
  }
  if (!opts_.metaspace_split) {
    encode_sp_word(norm, out);
    return;
  }
  // Metaspace split: each word starts at a "▁" (the marker is merged with the text that follows it).
  const std::string_view all = norm;
  size_t begin = 0;
  while (begin < all.size()) {
    size_t next = all.find(space, begin + 1);
    if (next == std::string_view::npos) next = all.size();
    encode_sp_word(all.substr(begin, next - begin), out);
    begin = next;
  }
}

std::string Tokenizer::decode_token(int32_t id, bool render_special) const {
  piece(id);
  if (attrs_[id] == TokenAttr::Control) return render_special ? pieces_[id] : std::string();
  return decoded_[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  std::string out;
  bool at_start = true;
  for (int32_t id : ids) {
    piece(id);
    if (attrs_[id] == TokenAttr::Control) {
      if (render_special) out += pieces_[id];
      at_start = true;  // a segment after a special token got its own dummy prefix
      continue;
    }
    std::string_view s = decoded_[id];
    if (at_start && opts_.strip_decoded_prefix && !s.empty() && s[0] == ' ') s.remove_prefix(1);
    at_start = false;
    out.append(s);
  }
  return out;
}

// ---- streaming ----

TokenStreamDecoder::TokenStreamDecoder(const Tokenizer& tok, bool render_special)
    : tok_(tok), render_special_(render_special) {}

void TokenStreamDecoder::continue_from(std::span<const int32_t> prefix) {
  at_start_ = prefix.empty() || tok_.is_control(prefix.back());
}

std::string TokenStreamDecoder::push(int32_t id) {
  tok_.piece(id);
  if (tok_.attrs_[id] == TokenAttr::Control) {
    if (render_special_) pending_ += tok_.pieces_[id];
    at_start_ = true;
  } else {
    std::string_view s = tok_.decoded_[id];
    if (at_start_ && tok_.opts_.strip_decoded_prefix && !s.empty() && s[0] == ' ') s.remove_prefix(1);
    at_start_ = false;
    pending_.append(s);
  }
  return take_complete(false);
}

std::string TokenStreamDecoder::flush() {
  std::string out = take_complete(true);
  at_start_ = true;
  return out;
}

std::string TokenStreamDecoder::take_complete(bool final) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  out.reserve(pending_.size());
  size_t i = 0;
  const size_t n = pending_.size();
  while (i < n) {
    const auto lead = static_cast<uint8_t>(pending_[i]);
    const int len = unicode::utf8_sequence_length(lead);
    if (len == 0) {
      out.append(kReplacement);
      ++i;
      continue;
    }
    if (i + len > n) {
      // Incomplete at the end: hold it while every byte so far is a continuation byte (it may still
      // complete).
      bool plausible = true;
      for (size_t k = i + 1; k < n; ++k)
        plausible = plausible && (static_cast<uint8_t>(pending_[k]) & 0xC0) == 0x80;
      if (plausible && !final) break;
      out.append(kReplacement);
      i = plausible ? n : i + 1;  // a truncated character at the very end is one U+FFFD
      continue;
    }
    const auto ch = unicode::decode_utf8(pending_, i);
    if (ch.cp == unicode::kInvalidCodePoint) {
      out.append(kReplacement);
      ++i;
    } else {
      out.append(pending_, i, ch.len);
      i += ch.len;
    }
  }
  pending_.erase(0, i);
  return out;
}

}  // namespace lowbit
