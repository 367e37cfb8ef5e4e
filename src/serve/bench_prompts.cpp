// What `lowbit bench serve` sends: prompts (a file or seeded random words), their arrival times and the
// request bodies.
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "serve/bench_client.h"

namespace lowbit::serve {

namespace {

constexpr int kMaxTokensLimit = 1 << 20;

// Common English words: random prompts should tokenize like text (about 1.3 BPE tokens per word), not like
// random bytes, so that "about L words" means about the same token count on every tokenizer.
constexpr const char* kWords[] = {
    "the",    "of",    "and",   "to",    "in",    "a",      "is",     "that",   "for",   "it",    "as",
    "was",    "with",  "be",    "by",    "on",    "not",    "he",     "this",   "are",   "or",    "his",
    "from",   "at",    "which", "but",   "have",  "an",     "had",    "they",   "you",   "were",  "their",
    "one",    "all",   "we",    "can",   "her",   "has",    "there",  "been",   "if",    "more",  "when",
    "will",   "would", "who",   "so",    "no",    "time",   "people", "year",   "way",   "day",   "man",
    "thing",  "woman", "life",  "child", "world", "school", "state",  "family", "story", "water", "house",
    "little", "old",   "good",  "new",   "long",  "great"};

std::string_view trim_view(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

BenchPrompt prompt_from_json_line(std::string_view line, const std::string& where, int default_max_tokens) {
  const nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr, false);
  const std::string form = "; each line is {\"prompt\": \"...\", \"max_tokens\": N} or plain text";
  if (j.is_discarded() || !j.is_object()) throw UsageError("bench", where + ": not a JSON object" + form);
  auto p = j.find("prompt");
  if (p == j.end() || !p->is_string()) throw UsageError("bench", where + ": no string \"prompt\"" + form);
  BenchPrompt bp{p->get<std::string>(), default_max_tokens};
  if (auto m = j.find("max_tokens"); m != j.end() && !m->is_null()) {
    if (!m->is_number_integer() || m->get<int64_t>() < 1 || m->get<int64_t>() > kMaxTokensLimit)
      throw UsageError("bench", where + ": \"max_tokens\" must be an integer in [1, " +
                                    std::to_string(kMaxTokensLimit) + "]");
    bp.max_tokens = static_cast<int>(m->get<int64_t>());
  }
  return bp;
}

}  // namespace

std::vector<BenchPrompt> load_prompts(const std::string& path, int default_max_tokens) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UsageError("bench", "--prompts '" + path + "' cannot be read; pass a JSONL or text file");
  std::vector<BenchPrompt> out;
  std::string line;
  for (int64_t n = 1; std::getline(f, line); ++n) {
    const std::string_view l = trim_view(line);
    if (l.empty()) continue;
    if (l[0] == '{')
      out.push_back(
          prompt_from_json_line(l, "--prompts " + path + " line " + std::to_string(n), default_max_tokens));
    else
      out.push_back({std::string(l), default_max_tokens});
  }
  if (out.empty()) throw UsageError("bench", "--prompts '" + path + "' holds no prompt (only blank lines)");
  return out;
}

std::vector<BenchPrompt> random_prompts(int n, int input_len, int output_len, double range_ratio,
                                        uint64_t seed) {
  std::mt19937_64 rng(seed);
  // vLLM's random dataset: lengths uniform in [L * (1 - r), L * (1 + r)], at least 1.
  auto length = [&](int l) {
    const int lo = std::max(1, static_cast<int>(std::floor(l * (1.0 - range_ratio))));
    const int hi = std::max(lo, static_cast<int>(std::ceil(l * (1.0 + range_ratio))));
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  std::uniform_int_distribution<size_t> word(0, std::size(kWords) - 1);
  std::vector<BenchPrompt> out;
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int words = length(input_len), max_tokens = length(output_len);
    std::string s;
    for (int w = 0; w < words; ++w) {
      if (w) s.push_back(' ');
      s += kWords[word(rng)];
    }
    out.push_back({std::move(s), max_tokens});
  }
  return out;
}

std::vector<BenchPrompt> make_prompts(BenchServeOptions& o) {
  if (o.num_requests < 0) throw UsageError("bench", "--num-requests must be >= 1");
  if (o.input_len < 1 || o.output_len < 1 || o.input_len > kMaxTokensLimit || o.output_len > kMaxTokensLimit)
    throw UsageError("bench",
                     "--input-len and --output-len must be in [1, " + std::to_string(kMaxTokensLimit) + "]");
  if (!(o.range_ratio >= 0 && o.range_ratio < 1))
    throw UsageError("bench", "--range-ratio must be in [0, 1): lengths are drawn from [L*(1-r), L*(1+r)]");
  if (o.prompts_file.empty()) {
    if (o.num_requests == 0) o.num_requests = 32;
    return random_prompts(o.num_requests, o.input_len, o.output_len, o.range_ratio, o.seed);
  }
  std::vector<BenchPrompt> file = load_prompts(o.prompts_file, o.output_len);
  if (o.num_requests == 0) o.num_requests = static_cast<int>(file.size());
  // Fewer prompts than requests: cycle through them in order (deterministic, unlike sampling).
  std::vector<BenchPrompt> out;
  out.reserve(static_cast<size_t>(o.num_requests));
  for (int i = 0; i < o.num_requests; ++i) out.push_back(file[static_cast<size_t>(i) % file.size()]);
  return out;
}

std::vector<double> arrival_times(int n, double rate, uint64_t seed) {
  std::vector<double> t(static_cast<size_t>(std::max(0, n)), 0.0);
  if (!std::isfinite(rate)) return t;
  // The first request goes at once and each later one after an exponential gap (vLLM does the same), so the
  // run measures no idle start.
  std::mt19937_64 rng(seed ^ 0x5eedf00dull);
  std::exponential_distribution<double> gap(rate);
  for (size_t i = 1; i < t.size(); ++i) t[i] = t[i - 1] + gap(rng);
  return t;
}

nlohmann::json request_body(const BenchServeOptions& o, const BenchPrompt& p) {
  const std::string_view ep = o.endpoint;
  const bool chat = ep.size() >= 17 && ep.substr(ep.size() - 17) == "/chat/completions";
  nlohmann::json b = {{"model", o.model},
                      {"max_tokens", p.max_tokens},
                      {"temperature", 0.0},
                      {"stream", true},
                      {"stream_options", {{"include_usage", true}}}};
  if (chat)
    b["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", p.prompt}}});
  else
    b["prompt"] = p.prompt;
  // Not OpenAI's, but vLLM, llama-server and lowbit serve honour it: every request then produces exactly
  // max_tokens tokens, so runs compare at a fixed output length.
  if (o.ignore_eos) b["ignore_eos"] = true;
  return b;
}

}  // namespace lowbit::serve
