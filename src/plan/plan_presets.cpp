// Built-in model presets for `lowbit plan --preset`: the real configs of well-known models, as data.
// Values are the published config.json fields (hidden_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads, head_dim, intermediate_size, vocab_size, tie_word_embeddings, qkv bias, max
// positions); tests check n_params() against the published parameter counts.
#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "plan/plan.h"

namespace lowbit::plan {
namespace {

struct PresetRow {
  const char* id;
  const char* hf_id;
  const char* arch;
  int64_t dim, layers, heads, kv_heads, head_dim, ffn, vocab, max_pos;
  bool tied;  // bias, q/k norm, activation and embedding scale come from the architecture row
  double rope_theta;
};

// clang-format off
constexpr PresetRow kRows[] = {
  // id, Hugging Face id, arch (a row of arch_rows()), dim, layers, heads, kv heads, head dim, FFN, vocab,
  // max positions, tied embeddings, RoPE theta
  {"llama-2-7b",   "meta-llama/Llama-2-7b-hf",    "llama",   4096, 32, 32, 32, 128, 11008,  32000,   4096, false,   10000},
  {"llama-2-13b",  "meta-llama/Llama-2-13b-hf",   "llama",   5120, 40, 40, 40, 128, 13824,  32000,   4096, false,   10000},
  {"llama-2-70b",  "meta-llama/Llama-2-70b-hf",   "llama",   8192, 80, 64,  8, 128, 28672,  32000,   4096, false,   10000},
  {"llama-3-8b",   "meta-llama/Meta-Llama-3-8B",  "llama",   4096, 32, 32,  8, 128, 14336, 128256,   8192, false,  500000},
  {"llama-3-70b",  "meta-llama/Meta-Llama-3-70B", "llama",   8192, 80, 64,  8, 128, 28672, 128256,   8192, false,  500000},
  {"llama-3.2-1b", "meta-llama/Llama-3.2-1B",     "llama",   2048, 16, 32,  8,  64,  8192, 128256, 131072, true,   500000},
  {"llama-3.2-3b", "meta-llama/Llama-3.2-3B",     "llama",   3072, 28, 24,  8, 128,  8192, 128256, 131072, true,   500000},
  {"mistral-7b",   "mistralai/Mistral-7B-v0.1",   "mistral", 4096, 32, 32,  8, 128, 14336,  32000,  32768, false,   10000},
  {"gemma-2b",     "google/gemma-2b",             "gemma",   2048, 18,  8,  1, 256, 16384, 256000,   8192, true,    10000},
  {"gemma-7b",     "google/gemma-7b",             "gemma",   3072, 28, 16, 16, 256, 24576, 256000,   8192, true,    10000},
  {"qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B",           "qwen2",    896, 24, 14,  2,  64,  4864, 151936,  32768, true,  1000000},
  {"qwen2.5-7b",   "Qwen/Qwen2.5-7B",             "qwen2",   3584, 28, 28,  4, 128, 18944, 152064, 131072, false, 1000000},
  {"qwen2.5-72b",  "Qwen/Qwen2.5-72B",            "qwen2",   8192, 80, 64,  8, 128, 29568, 152064, 131072, false, 1000000},
  {"qwen3-8b",     "Qwen/Qwen3-8B",               "qwen3",   4096, 36, 32,  8, 128, 12288, 151936,  40960, false, 1000000},
  {"smollm2-135m", "HuggingFaceTB/SmolLM2-135M",  "llama",    576, 30,  9,  3,  64,  1536,  49152,   8192, true,   100000},
  {"smollm2-1.7b", "HuggingFaceTB/SmolLM2-1.7B",  "llama",   2048, 24, 32, 32,  64,  8192,  49152,   8192, true,   130000},
};
// clang-format on

std::string lower(std::string_view s) {
  std::string o(s);
  for (auto& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::vector<std::string> suggest_names(std::string_view name, const std::vector<std::string>& candidates,
                                       size_t max) {
  const std::string n = lower(name);
  std::vector<std::pair<size_t, std::string>> scored;
  for (const auto& c : candidates) {
    const std::string lc = lower(c);
    size_t d = edit_distance(n, lc);
    // A candidate that contains the query (or vice versa) is a good suggestion even when far in edits
    // ("llama3" -> "llama-3-8b").
    if (!n.empty() && (lc.find(n) != std::string::npos || n.find(lc) != std::string::npos))
      d = std::min<size_t>(d, 2);
    scored.emplace_back(d, c);
  }
  std::stable_sort(scored.begin(), scored.end(), [](auto& a, auto& b) { return a.first < b.first; });
  // Plausible: within a third of the longer name's length (at least 2 edits).
  std::vector<std::string> out;
  for (auto& [d, c] : scored) {
    const size_t limit = std::max<size_t>(2, std::max(n.size(), c.size()) / 3);
    if (d <= limit && out.size() < max) out.push_back(c);
  }
  return out;
}

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = [] {
    std::vector<ModelPreset> v;
    for (const PresetRow& r : kRows) {
      ModelPreset p;
      p.id = r.id;
      p.hf_id = r.hf_id;
      ModelConfig& c = p.config;
      c.arch = r.arch;
      c.source_format = "preset";
      c.dim = r.dim;
      c.n_layers = r.layers;
      c.n_heads = r.heads;
      c.n_kv_heads = r.kv_heads;
      c.head_dim = r.head_dim;
      c.ffn_dim = r.ffn;
      c.vocab_size = r.vocab;
      c.max_seq_len = r.max_pos;
      c.tie_embeddings = r.tied;
      const ArchRow& row = arch_row(r.arch);
      c.qkv_bias = row.qkv_bias;
      c.qk_norm = row.qk_norm;
      c.act = row.act;
      c.embed_scale = row.embed_scale;
      c.rope_theta = r.rope_theta;
      c.torch_dtype = "bfloat16";
      c.validate();
      v.push_back(std::move(p));
    }
    return v;
  }();
  return presets;
}

const ModelPreset& model_preset(std::string_view name) {
  const std::string n = lower(name);
  std::vector<std::string> ids;
  for (const auto& p : model_presets()) {
    if (lower(p.id) == n || lower(p.hf_id) == n) return p;
    ids.push_back(p.id);
  }
  std::string msg = "unknown model preset '" + std::string(name) + "'";
  auto s = suggest_names(name, ids);
  if (!s.empty()) {
    msg += "; did you mean ";
    for (size_t i = 0; i < s.size(); ++i) msg += (i ? ", '" : "'") + s[i] + "'";
    msg += "?";
  }
  msg += " Known presets:";
  for (auto& id : ids) msg += " " + id;
  msg += " (or pass --model PATH to a config.json, HF directory, .gguf or llama2.c .bin)";
  throw UsageError("plan", msg);
}

}  // namespace lowbit::plan
