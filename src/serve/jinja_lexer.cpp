// Jinja source -> tokens. Text between tags becomes Text tokens with the environment's whitespace rules
// already applied, so the parser and evaluator never think about whitespace:
//   trim_blocks:   the first newline after a block or comment tag is removed;
//   lstrip_blocks: spaces and tabs from the start of a line up to a block or comment tag are removed;
//   {%- / -%} (and {{- -}} {#- -#}): all whitespace before / after the tag is removed; {%+ keeps it.
#include <cctype>
#include <cstring>

#include "serve/jinja_internal.h"

namespace lowbit::serve::jinja {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Jinja2 splits the source on \r\n, \r and \n, joins with \n, and (keep_trailing_newline=False) drops the
// last line break.
std::string normalise_newlines(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}

  std::vector<Token> run() {
    bool line_starting = true;  // whether the text that follows starts a line (for lstrip_blocks)
    while (pos_ < src_.size()) {
      const size_t tag = find_tag(pos_);
      std::string text = src_.substr(pos_, tag - pos_);
      if (tag == src_.size()) {
        push_text(std::move(text), pos_);
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign == '-') {
        text.erase(text.find_last_not_of(" \t\n\r\f\v") + 1);
      } else if (sign != '+' && kind != '{') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
            text.find_first_not_of(" \t\f\v", l_pos) == std::string::npos)
          text.erase(l_pos);
      }
      push_text(std::move(text), pos_);
      const size_t body = tag + 2 + (sign == '-' || sign == '+' ? 1 : 0);
      if (kind == '#') {
        line_starting = comment(tag, body);
      } else {
        line_starting = tag_tokens(tag, body, kind == '{');
      }
    }
    out_.push_back(tok(Token::K::Eof, src_.size()));
    return std::move(out_);
  }

 private:
  std::string src_;
  size_t pos_ = 0;
  std::vector<Token> out_;
  // Line starts, for line:col of an offset.
  std::vector<size_t> line_starts_ = {0};
  size_t lines_scanned_ = 0;

  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return src_.size();
  }

  void position(size_t off, int* line, int* col) {
    while (lines_scanned_ < src_.size() && lines_scanned_ < off) {
      if (src_[lines_scanned_] == '\n') line_starts_.push_back(lines_scanned_ + 1);
      ++lines_scanned_;
    }
    size_t lo = 0, hi = line_starts_.size();
    while (hi - lo > 1) {
      const size_t mid = (lo + hi) / 2;
      (line_starts_[mid] <= off ? lo : hi) = mid;
    }
    *line = static_cast<int>(lo + 1);
    *col = static_cast<int>(off - line_starts_[lo] + 1);
  }

  Token tok(Token::K k, size_t off, std::string s = {}) {
    Token t;
    t.k = k;
    t.s = std::move(s);
    position(off, &t.line, &t.col);
    return t;
  }

  void push_text(std::string text, size_t off) {
    if (!text.empty()) out_.push_back(tok(Token::K::Text, off, std::move(text)));
  }

  [[noreturn]] void error(const std::string& what, size_t off) {
    int line, col;
    position(off, &line, &col);
    fail(what, line, col);
  }

  // Skips a comment; returns whether the text after it starts a line.
  bool comment(size_t tag, size_t body) {
    for (size_t i = body; i + 1 < src_.size(); ++i) {
      if (src_[i] != '#' || src_[i + 1] != '}') continue;
      pos_ = i + 2;
      if (i > body && src_[i - 1] == '-') {
        while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
      } else if (pos_ < src_.size() && src_[pos_] == '\n') {
        ++pos_;
      }
      return pos_ > 0 && src_[pos_ - 1] == '\n';
    }
    error("unclosed comment: '{#' without '#}'", tag);
  }

  bool at(size_t i, const char* s) const { return src_.compare(i, std::strlen(s), s) == 0; }

  // The tokens of a {{ }} or {% %} tag; returns whether the text after it starts a line.
  bool tag_tokens(size_t tag, size_t i, bool var) {
    out_.push_back(tok(var ? Token::K::VarBegin : Token::K::BlockBegin, tag));
    const char* end = var ? "}}" : "%}";
    int depth = 0;  // open brackets: "}}" inside {{ {'a': {'b': 1}} }} closes a dict, not the tag
    while (true) {
      while (i < src_.size() && is_space(src_[i])) ++i;
      if (i >= src_.size())
        error(var ? "unclosed '{{': no '}}' before the end" : "unclosed '{%': no '%}' before the end", tag);
      if (depth == 0 && (at(i, end) || (src_[i] == '-' && at(i + 1, end)))) {
        const bool strip = src_[i] == '-';
        out_.push_back(tok(var ? Token::K::VarEnd : Token::K::BlockEnd, i));
        pos_ = i + (strip ? 3 : 2);
        if (strip) {
          while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
        } else if (!var && pos_ < src_.size() && src_[pos_] == '\n') {
          ++pos_;
        }
        return pos_ > 0 && src_[pos_ - 1] == '\n';
      }
      i = one_token(i, &depth);
    }
  }

  size_t one_token(size_t i, int* depth) {
    const char c = src_[i];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[j])) || src_[j] == '_')) ++j;
      out_.push_back(tok(Token::K::Name, i, src_.substr(i, j - i)));
      return j;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return number(i);
    if (c == '\'' || c == '"') return string(i);
    static const char* const kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "(",
                                       ")",  "[",  "]",  "{",  "}",  ",",  ".", ":", "|", "=", "<", ">"};
    for (const char* op : kOps) {
      if (!at(i, op)) continue;
      if (*op == '(' || *op == '[' || *op == '{') ++*depth;
      if ((*op == ')' || *op == ']' || *op == '}') && *depth > 0) --*depth;
      out_.push_back(tok(Token::K::Op, i, op));
      return i + std::strlen(op);
    }
    error(std::string("unexpected character '") + c + "' inside a tag", i);
  }

  size_t number(size_t i) {
    size_t j = i;
    auto digits = [&] {
      while (j < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[j])) || src_[j] == '_')) ++j;
    };
    digits();
    bool is_float = false;
    if (j + 1 < src_.size() && src_[j] == '.' && std::isdigit(static_cast<unsigned char>(src_[j + 1]))) {
      is_float = true;
      ++j;
      digits();
    }
    if (j < src_.size() && (src_[j] == 'e' || src_[j] == 'E')) {
      size_t k = j + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
        is_float = true;
        j = k;
        digits();
      }
    }
    std::string text;
    for (size_t k = i; k < j; ++k)
      if (src_[k] != '_') text += src_[k];
    Token t = tok(is_float ? Token::K::Float : Token::K::Int, i, text);
    if (is_float) {
      t.f = std::strtod(text.c_str(), nullptr);
    } else {
      int64_t v = 0;
      for (char d : text)
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, d - '0', &v))
          error("integer literal " + text + " is too large (64-bit integers only)", i);
      t.i = v;
    }
    out_.push_back(std::move(t));
    return j;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // A \x, \u or \U escape of `n` hex digits at src_[j]; returns the index after it, or j when malformed.
  size_t hex_escape(size_t j, int n, std::string& out) {
    uint32_t cp = 0;
    for (int k = 0; k < n; ++k) {
      if (j + k >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[j + k]))) return j;
      const char h = src_[j + k];
      cp = cp * 16 + static_cast<uint32_t>(
                         std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    if (cp > 0x10FFFF) error("escape \\U" + src_.substr(j, n) + " is not a Unicode code point", j);
    append_utf8(out, cp);
    return j + n;
  }

  // A quoted string with Python's escapes (\n \t \r \\ \' \" \0 \a \b \f \v \xHH \uHHHH \UHHHHHHHH); an
  // unknown escape keeps its backslash, as Python does.
  size_t string(size_t i) {
    const char q = src_[i];
    std::string out;
    size_t j = i + 1;
    while (true) {
      if (j >= src_.size()) error("unterminated string literal", i);
      const char c = src_[j];
      if (c == q) break;
      if (c != '\\' || j + 1 >= src_.size()) {
        out += c;
        ++j;
        continue;
      }
      const char e = src_[j + 1];
      j += 2;
      static const char kFrom[] = "ntr\\'\"0abfv\n";
      static const char kTo[] = "\n\t\r\\'\"\0\a\b\f\v";
      if (const char* p = std::strchr(kFrom, e); p && e != '\0') {
        if (e != '\n') out += kTo[p - kFrom];  // backslash-newline continues the line
      } else if (e == 'x' || e == 'u' || e == 'U') {
        const size_t k = hex_escape(j, e == 'x' ? 2 : e == 'u' ? 4 : 8, out);
        if (k == j) error(std::string("malformed \\") + e + " escape in a string literal", j - 2);
        j = k;
      } else {
        out += '\\';
        out += e;
      }
    }
    out_.push_back(tok(Token::K::Str, i, std::move(out)));
    return j + 1;
  }
};

}  // namespace

std::vector<Token> lex(std::string_view source) {
  return Lexer(normalise_newlines(source)).run();
}

}  // namespace lowbit::serve::jinja
