#include "eval/eval_text.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/hash.h"

namespace lowbit::eval {

PplMethod ppl_method_from_string(const std::string& s) {
  if (s == "chunks") return PplMethod::Chunks;
  if (s == "window") return PplMethod::Window;
  if (s == "first-window") return PplMethod::FirstWindow;
  throw UsageError("eval", "unknown --method '" + s + "'; use chunks (llama.cpp), window or first-window");
}

const char* ppl_method_name(PplMethod m) {
  switch (m) {
    case PplMethod::Chunks:
      return "chunks";
    case PplMethod::Window:
      return "window";
    case PplMethod::FirstWindow:
      return "first-window";
  }
  return "?";
}

std::string read_text_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UsageError("eval",
                     "--text '" + path + "' is a directory; give a text file (e.g. " + path + "/val.txt)");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("eval", "cannot open text file '" + path + "'; check the --text path");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw Error("eval", "error while reading text file '" + path + "'");
  std::string s = ss.str();
  if (s.empty())
    throw Error("eval", "text file '" + path +
                            "' is empty; give a text with at least one window of "
                            "--ctx tokens");
  return s;
}

std::string first_chars(const std::string& text, int64_t n) {
  size_t i = 0;
  int64_t chars = 0;
  while (i < text.size() && chars < n) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 1;
    // A truncated or invalid sequence counts its lead byte as one character.
    size_t j = 1;
    while (j < len && i + j < text.size() && (static_cast<unsigned char>(text[i + j]) & 0xc0) == 0x80) ++j;
    i += j;
    ++chars;
  }
  return text.substr(0, i);
}

int64_t EvalText::scored_tokens() const {
  int64_t n = 0;
  for (const auto& c : chunks) n += static_cast<int64_t>(c.tokens.size()) - 1 - c.score_from;
  return n;
}

EvalText prepare_eval_text(const Tokenizer& tok, const std::string& text, const std::string& path,
                           const TextOptions& o) {
  if (text.empty()) throw Error("eval", "text '" + path + "' is empty; nothing to evaluate");
  if (o.ctx < 2) throw UsageError("eval", "--ctx " + std::to_string(o.ctx) + " is too small; use at least 2");
  EvalText t;
  t.path = path;
  t.text_sha256 = sha256_hex(text);
  t.ctx = o.ctx;
  t.method = o.method;
  t.first_chars = o.first_chars;
  const int32_t bos = tok.bos_id();
  if (o.method == PplMethod::FirstWindow) {
    if (o.first_chars <= 0) throw UsageError("eval", "--first-chars must be positive");
    t.bos = bos >= 0;
    auto ids = tok.encode(first_chars(text, o.first_chars), t.bos);
    t.text_tokens = static_cast<int64_t>(ids.size());
    if (t.text_tokens < o.ctx)
      throw Error("eval", "the first " + std::to_string(o.first_chars) + " characters of '" + path +
                              "' tokenize to only " + std::to_string(t.text_tokens) + " tokens, but --ctx " +
                              std::to_string(o.ctx) + " needs " + std::to_string(o.ctx) +
                              "; use a smaller --ctx or a larger --first-chars");
    EvalChunk c;
    c.tokens.assign(ids.begin(), ids.begin() + o.ctx);
    t.chunks.push_back(std::move(c));
  } else {
    t.bos = bos >= 0 && tok.add_bos_default();
    auto ids = tok.encode(text, t.bos);
    t.text_tokens = static_cast<int64_t>(ids.size());
    int64_t n = t.text_tokens / o.ctx;
    if (n < 1)
      throw Error("eval", "text '" + path + "' tokenizes to only " + std::to_string(t.text_tokens) +
                              " tokens, but one window of --ctx " + std::to_string(o.ctx) + " needs " +
                              std::to_string(o.ctx) + "; use a longer text or a smaller --ctx");
    if (o.max_chunks > 0) n = std::min(n, o.max_chunks);
    for (int64_t i = 0; i < n; ++i) {
      EvalChunk c;
      c.start = i * o.ctx;
      c.tokens.assign(ids.begin() + c.start, ids.begin() + c.start + o.ctx);
      if (t.bos) c.tokens[0] = bos;
      c.score_from = o.method == PplMethod::Chunks ? o.ctx / 2 : 0;
      t.chunks.push_back(std::move(c));
    }
  }
  std::string bytes;
  for (const auto& c : t.chunks)
    bytes.append(reinterpret_cast<const char*>(c.tokens.data()), c.tokens.size() * sizeof(int32_t));
  t.tokens_sha256 = sha256_hex(bytes);
  return t;
}

}  // namespace lowbit::eval
