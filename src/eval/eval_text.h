// Turning an evaluation text into the token windows that are scored.
//
//  chunks        llama.cpp's perplexity: tokenize the whole text once (BOS at the start when the tokenizer
//  adds
//                one), cut it into non-overlapping windows of ctx tokens, replace the first token of every
//                window by BOS, and score only the second half of each window (predictions of tokens
//                ctx/2+1 .. ctx-1), so every scored token has at least ctx/2 tokens of context.
//  window        same windows, every token after the first is scored (tokens 1 .. ctx-1).
//  first-window  GOLDEN.md's recipe: the first `first_chars` characters (Unicode code points) of the text,
//                encoded with BOS, the first ctx tokens, tokens 1 .. ctx-1 scored in one forward pass.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace lowbit::eval {

enum class PplMethod { Chunks, Window, FirstWindow };
PplMethod ppl_method_from_string(const std::string& s);  // chunks|window|first-window; UsageError otherwise
const char* ppl_method_name(PplMethod m);

// Reads a whole text file. Error("eval") when it cannot be read or is empty.
std::string read_text_file(const std::string& path);

// The first n Unicode code points of UTF-8 text (invalid bytes count as one character each).
std::string first_chars(const std::string& text, int64_t n);

struct EvalChunk {
  int64_t start = 0;            // offset of tokens[0] in the tokenized text
  std::vector<int32_t> tokens;  // [ctx] what is fed (tokens[0] may be BOS instead of the text's token)
  int64_t score_from = 0;       // logits at positions j in [score_from, ctx-1) are scored (predict j+1)
};

struct EvalText {
  std::string path;           // for messages and the baseline header
  std::string text_sha256;    // of the whole file's bytes
  std::string tokens_sha256;  // of the fed token ids of every chunk (int32 little endian), in order
  int64_t text_tokens = 0;    // tokens of the (possibly truncated) text that was tokenized
  int64_t ctx = 0;
  PplMethod method = PplMethod::Chunks;
  int64_t first_chars = 4000;
  bool bos = false;  // whether windows start with BOS
  std::vector<EvalChunk> chunks;
  int64_t scored_tokens() const;
};

struct TextOptions {
  PplMethod method = PplMethod::Chunks;
  int64_t ctx = 512;
  int64_t max_chunks = 0;      // 0 = every whole window of the text
  int64_t first_chars = 4000;  // first-window only
};

// Tokenizes and windows `text`. Throws Error("eval") when the text is empty or too short for one window of
// ctx tokens (saying how many tokens it has and what ctx needs).
EvalText prepare_eval_text(const Tokenizer& tok, const std::string& text, const std::string& path,
                           const TextOptions& o);

}  // namespace lowbit::eval
