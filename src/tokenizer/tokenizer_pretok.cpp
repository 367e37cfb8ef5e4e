// Byte-level BPE helpers: GPT-2's byte -> printable character table, and the regex pre-tokenizers.
//
// The pre-tokenizer regexes use \p{L}, \p{N} and \s, which std::regex cannot express, so each one is matched
// by a small hand-written matcher over code points that follows the regex alternatives in order, with the
// same backtracking outcome (e.g. "\s+(?!\S)" gives back the last whitespace character when a word follows):
//
//  GPT-2:  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//  Llama-3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//           \s*[\r\n]+|\s+(?!\S)|\s+
//  Qwen2:  as Llama-3 with \p{N} (one digit at a time) instead of \p{N}{1,3}
//
// Invalid UTF-8 bytes count as one character of "other" class ([^\s\p{L}\p{N}]), so they stay in the text and
// reach the byte-level encoding unchanged.
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace lowbit {

const std::array<std::string, 256>& bytelevel_encoding() {
  // GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to U+0100.. in
  // order.
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : 256u + static_cast<uint32_t>(next++);
      unicode::append_utf8(t[b], cp);
    }
    return t;
  }();
  return table;
}

namespace {

struct Cps {
  std::vector<uint32_t> cp;    // code points (kInvalidCodePoint for invalid bytes)
  std::vector<size_t> offset;  // byte offset of each code point; offset[n] == text size
  std::vector<uint8_t> cls;    // 0 other, 1 letter, 2 number, 3 whitespace
};

enum : uint8_t { kClsOther = 0, kClsLetter = 1, kClsNumber = 2, kClsSpace = 3 };

Cps decode_all(std::string_view text) {
  Cps c;
  c.cp.reserve(text.size());
  c.offset.reserve(text.size() + 1);
  c.cls.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const auto ch = unicode::decode_utf8(text, pos);
    c.cp.push_back(ch.cp);
    c.offset.push_back(pos);
    uint8_t k = kClsOther;
    if (ch.cp != unicode::kInvalidCodePoint) {
      if (unicode::is_whitespace(ch.cp)) {
        k = kClsSpace;
      } else {
        const auto cat = unicode::category(ch.cp);
        k = cat == unicode::kLetter ? kClsLetter : cat == unicode::kNumber ? kClsNumber : kClsOther;
      }
    }
    c.cls.push_back(k);
    pos += ch.len;
  }
  c.offset.push_back(text.size());
  return c;
}

uint32_t ascii_lower(uint32_t c) {
  return (c >= 'A' && c <= 'Z') ? c + 32 : c;
}

// Length of a contraction ('s 't 're 've 'm 'll 'd) at i, or 0.
size_t match_contraction(const Cps& c, size_t i, bool ignore_case) {
  const size_t n = c.cp.size();
  if (c.cp[i] != '\'' || i + 1 >= n) return 0;
  auto low = [&](size_t k) { return ignore_case ? ascii_lower(c.cp[k]) : c.cp[k]; };
  const uint32_t a = low(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 < n) {
    const uint32_t b = low(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  return 0;
}

// End of the whitespace alternatives "\s+(?!\S)|\s+" starting at a whitespace character i.
size_t match_trailing_space(const Cps& c, size_t i) {
  const size_t n = c.cp.size();
  size_t k = i;
  while (k < n && c.cls[k] == kClsSpace) ++k;
  if (k == n) return k;         // whitespace up to the end: (?!\S) holds
  if (k - i > 1) return k - 1;  // leave the last whitespace character to the following word
  return k;                     // a single whitespace before a word: plain \s+
}

size_t next_gpt2(const Cps& c, size_t i) {
  const size_t n = c.cp.size();
  if (size_t m = match_contraction(c, i, false)) return i + m;
  const size_t j = (c.cp[i] == ' ' && i + 1 < n) ? i + 1 : i;
  for (uint8_t want : {kClsLetter, kClsNumber, kClsOther}) {
    if (c.cls[j] == want) {
      size_t k = j;
      while (k < n && c.cls[k] == want) ++k;
      return k;
    }
  }
  return match_trailing_space(c, i);
}

size_t next_llama3(const Cps& c, size_t i, size_t max_digits) {
  const size_t n = c.cp.size();
  if (size_t m = match_contraction(c, i, true)) return i + m;
  auto is_crlf = [&](size_t k) { return c.cp[k] == '\r' || c.cp[k] == '\n'; };
  // [^\r\n\p{L}\p{N}]?\p{L}+
  {
    size_t j = i;
    if (c.cls[i] != kClsLetter && c.cls[i] != kClsNumber && !is_crlf(i) && i + 1 < n &&
        c.cls[i + 1] == kClsLetter)
      j = i + 1;
    if (c.cls[j] == kClsLetter) {
      while (j < n && c.cls[j] == kClsLetter) ++j;
      return j;
    }
  }
  // \p{N}{1,3}
  if (c.cls[i] == kClsNumber) {
    size_t k = i;
    while (k < n && k - i < max_digits && c.cls[k] == kClsNumber) ++k;
    return k;
  }
  // ' '?[^\s\p{L}\p{N}]+[\r\n]*
  {
    const size_t j = (c.cp[i] == ' ' && i + 1 < n) ? i + 1 : i;
    if (c.cls[j] == kClsOther) {
      size_t k = j;
      while (k < n && c.cls[k] == kClsOther) ++k;
      while (k < n && is_crlf(k)) ++k;
      return k;
    }
  }
  // \s*[\r\n]+ : the whitespace run up to and including its last \r or \n
  size_t k = i, last_crlf = n;
  while (k < n && c.cls[k] == kClsSpace) {
    if (is_crlf(k)) last_crlf = k;
    ++k;
  }
  if (last_crlf != n) return last_crlf + 1;
  return match_trailing_space(c, i);
}

}  // namespace

std::vector<std::pair<size_t, size_t>> pretokenize(PreTokenizer kind, std::string_view text) {
  std::vector<std::pair<size_t, size_t>> words;
  if (text.empty()) return words;
  if (kind == PreTokenizer::None) {
    words.emplace_back(0, text.size());
    return words;
  }
  const Cps c = decode_all(text);
  const size_t n = c.cp.size();
  size_t i = 0;
  while (i < n) {
    size_t end;
    switch (kind) {
      case PreTokenizer::Gpt2:
        end = next_gpt2(c, i);
        break;
      case PreTokenizer::Llama3:
        end = next_llama3(c, i, 3);
        break;
      case PreTokenizer::Qwen2:
        end = next_llama3(c, i, 1);
        break;
      default:
        end = n;
        break;
    }
    if (end <= i) end = i + 1;  // defensive: every matcher consumes at least one character
    words.emplace_back(c.offset[i], c.offset[end]);
    i = end;
  }
  return words;
}

}  // namespace lowbit
