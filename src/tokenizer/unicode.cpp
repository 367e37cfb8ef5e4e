#include "tokenizer/unicode.h"

#include <algorithm>

namespace lowbit::unicode {

int utf8_sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xC2) return 0;  // continuation byte, or C0/C1 (always overlong)
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF5) return 4;
  return 0;
}

Utf8Char decode_utf8(std::string_view s, size_t pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + pos;
  const size_t left = s.size() - pos;
  const uint8_t b0 = p[0];
  const int n = utf8_sequence_length(b0);
  if (n == 1) return {b0, 1};
  if (n == 0 || static_cast<size_t>(n) > left) return {kInvalidCodePoint, 1};
  uint32_t cp = b0 & (0x7F >> n);
  for (int i = 1; i < n; ++i) {
    if ((p[i] & 0xC0) != 0x80) return {kInvalidCodePoint, 1};
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  // Reject overlong encodings, UTF-16 surrogates and values past the Unicode range.
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return {kInvalidCodePoint, 1};
  return {cp, static_cast<uint32_t>(n)};
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

Category category(uint32_t cp) {
  if (cp < 0x80) {  // fast path for ASCII, the bulk of most text
    if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return kLetter;
    if (cp >= '0' && cp <= '9') return kNumber;
  }
  using detail::kCategoryRanges;
  const auto* end = kCategoryRanges + detail::kCategoryRangeCount;
  const auto* it = std::upper_bound(kCategoryRanges, end, cp,
                                    [](uint32_t v, const detail::CategoryRange& r) { return v < r.first; });
  if (it == kCategoryRanges) return kOther;
  --it;
  return cp <= it->last ? it->cat : kOther;
}

bool is_whitespace(uint32_t cp) {
  for (size_t i = 0; i < detail::kWhitespaceRangeCount; ++i) {
    if (cp < detail::kWhitespaceRanges[i].first) return false;
    if (cp <= detail::kWhitespaceRanges[i].last) return true;
  }
  return false;
}

const char* tables_version() {
  return detail::kUnicodeVersion;
}

}  // namespace lowbit::unicode
