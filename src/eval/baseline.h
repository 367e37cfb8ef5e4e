// The saved evaluation baseline: everything a later `lowbit eval kld` needs to compare a model variant with a
// reference run without re-running the reference: per scored token the top-k ids and log-probs, the tail mass
// outside them, the log-sum-exp, the log-prob of the correct token, the entropy and the top-1, plus a header
// naming the model (path + sha256), the text (sha256 of its bytes and of the token ids), the method, ctx,
// windows, vocabulary size and tool version, and the score histograms.
//
// File layout (little endian; docs/eval.md has the full description and the error bound of the top-k KL):
//   "LBBASE01" | u32 version=1 | u32 header_len | header JSON (UTF-8, <= 1 MiB)
//   | u64 rows | u32 k | u32 record_bytes (= 56 + 12k) | rows x record | sha256 of all previous bytes (32
//   raw) | "LBEND\0\0\0"
// record: i32 target, i32 pos, i32 window, i32 top1, f64 lse, f64 tail, f64 logprob, f64 top1_logprob,
//         f32 entropy, f32 reserved(0), i32 ids[k], f64 logprobs[k]
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "eval/eval_text.h"
#include "eval/perplexity.h"
#include "model/model.h"

namespace lowbit::eval {

constexpr uint32_t kBaselineVersion = 1;
constexpr int kBaselineMaxK = 4096;

struct BaselineMeta {
  std::string model_path, model_format, model_sha256;
  std::string dtype = "f32", kv_cache = "f32";  // how the reference was run
  std::string variant;                          // free text (e.g. a quantization recipe), may be empty
  std::string text_path, text_sha256, tokens_sha256;
  int64_t text_tokens = 0;
  PplMethod method = PplMethod::Chunks;
  int64_t ctx = 0, windows = 0, first_chars = 4000, vocab_size = 0, rows = 0;
  bool bos = false;
  int k = 0;
  std::string tool;  // "lowbit 0.1.0 (commit abc)"
  Perplexity ppl;
  ScoreHistograms histograms;

  nlohmann::json to_json() const;
  static BaselineMeta from_json(const nlohmann::json& j);  // throws Error("eval") on missing / bad fields
};

struct Baseline {
  BaselineMeta meta;
  ScoreTable table;
};

// sha256 identifying the weights: of the file (llama2.c .bin, .gguf), or for a Hugging Face directory of the
// list "name sha256" of its *.safetensors files. Error("eval") when nothing can be hashed.
std::string model_sha256(const Model& m);

// Fills the meta of a run (everything except the model hash / dtype, which the caller sets).
BaselineMeta make_baseline_meta(const Model& m, const EvalText& t, const ScoreTable& table);

void save_baseline(const std::string& path, const Baseline& b);
// Throws Error("eval") naming the file and what is wrong: not a baseline, unsupported version, truncated,
// corrupt (checksum), inconsistent header, out-of-range records.
Baseline load_baseline(const std::string& path);
Baseline parse_baseline(const uint8_t* data, size_t n, const std::string& name);

// Throws Error("eval") listing every difference (text, tokens, ctx, method, windows, vocabulary) between a
// baseline and the run about to be compared with it.
void check_baseline_matches(const BaselineMeta& b, const EvalText& t, int64_t vocab_size);

}  // namespace lowbit::eval
