#include "model/fixture.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "core/half.h"
#include "core/hash.h"
#include "core/json_text.h"
#include "core/parallel.h"
#include "io/durable.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace lowbit {
namespace {

json llama_cfg(int64_t hidden, int64_t ffn, int64_t layers, int64_t heads, int64_t kv, int64_t vocab,
               double theta, int64_t max_pos, double eps, bool tied) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", hidden},
          {"intermediate_size", ffn},
          {"num_hidden_layers", layers},
          {"num_attention_heads", heads},
          {"num_key_value_heads", kv},
          {"vocab_size", vocab},
          {"rope_theta", theta},
          {"max_position_embeddings", max_pos},
          {"rms_norm_eps", eps},
          {"tie_word_embeddings", tied},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"bos_token_id", 1},
          {"eos_token_id", 2},
          {"torch_dtype", "bfloat16"}};
}

json as_qwen2(json c) {
  c["architectures"] = {"Qwen2ForCausalLM"};
  c["model_type"] = "qwen2";
  c.erase("attention_bias");
  c["use_sliding_window"] = false;
  return c;
}

json as_qwen3(json c, int64_t head_dim) {
  c["architectures"] = {"Qwen3ForCausalLM"};
  c["model_type"] = "qwen3";
  c["head_dim"] = head_dim;
  return c;
}

json with_llama3_rope(json c) {
  c["rope_scaling"] = {{"factor", 32.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192},
                       {"rope_type", "llama3"}};
  return c;
}

std::vector<FixtureShape> make_shapes() {
  std::vector<FixtureShape> v;
  auto smol = llama_cfg(576, 1536, 30, 9, 3, 49152, 100000, 8192, 1e-5, true);
  smol["bos_token_id"] = 0;
  smol["eos_token_id"] = 0;
  v.push_back({"smollm2-135m",
               "SmolLM2-135M: llama, 30 layers, hidden 576, 9/3 heads, FFN 1536, vocab 49152, tied", smol,
               "gpt2"});
  auto qwen = as_qwen2(llama_cfg(896, 4864, 24, 14, 2, 151936, 1000000, 32768, 1e-6, true));
  qwen["bos_token_id"] = 151643;
  qwen["eos_token_id"] = 151643;
  v.push_back({"qwen2.5-0.5b",
               "Qwen2.5-0.5B: qwen2, 24 layers, hidden 896, 14/2 heads, FFN 4864, vocab 151936, "
               "QKV bias, tied",
               qwen, "qwen2"});
  auto l1b = with_llama3_rope(llama_cfg(2048, 8192, 16, 32, 8, 128256, 500000, 131072, 1e-5, true));
  l1b["bos_token_id"] = 128000;
  l1b["eos_token_id"] = 128001;
  l1b["head_dim"] = 64;
  v.push_back({"llama-3.2-1b",
               "Llama-3.2-1B: llama, 16 layers, hidden 2048, 32/8 heads, FFN 8192, vocab 128256, "
               "llama3 rope scaling, tied",
               l1b, "llama3"});
  // Tiny variants: one architecture flag each, for reference-forward tests.
  v.push_back({"tiny-llama", "tiny llama: 2 layers, hidden 64, 4/2 heads, untied",
               llama_cfg(64, 160, 2, 4, 2, 512, 10000, 256, 1e-5, false), "gpt2"});
  v.push_back({"tiny-mqa", "tiny llama with multi-query attention (1 KV head), tied",
               llama_cfg(64, 128, 2, 4, 1, 384, 10000, 256, 1e-5, true), "gpt2"});
  v.push_back({"tiny-llama3", "tiny llama with llama3 rope scaling, 8 heads of 16, GQA 4:1, tied",
               with_llama3_rope(llama_cfg(128, 256, 2, 8, 2, 512, 500000, 1024, 1e-5, true)), "llama3"});
  v.push_back({"tiny-qwen2", "tiny qwen2 with QKV bias, tied",
               as_qwen2(llama_cfg(64, 192, 2, 4, 2, 512, 1000000, 512, 1e-6, true)), "qwen2"});
  v.push_back({"tiny-qwen3", "tiny qwen3 with q/k RMSNorm and head_dim 32 != hidden/heads, untied",
               as_qwen3(llama_cfg(64, 192, 2, 4, 2, 512, 1000000, 512, 1e-6, false), 32), "qwen2"});
  auto mis = llama_cfg(64, 160, 2, 4, 2, 512, 10000, 512, 1e-5, false);
  mis["architectures"] = {"MistralForCausalLM"};
  mis["model_type"] = "mistral";
  mis["sliding_window"] = nullptr;
  v.push_back({"tiny-mistral", "tiny mistral, untied", mis, "gpt2"});
  auto gem = llama_cfg(64, 192, 2, 4, 1, 512, 10000, 512, 1e-6, true);
  gem["architectures"] = {"GemmaForCausalLM"};
  gem["model_type"] = "gemma";
  gem["head_dim"] = 32;
  gem["hidden_act"] = "gelu";
  gem["hidden_activation"] = "gelu_pytorch_tanh";
  gem.erase("attention_bias");
  v.push_back({"tiny-gemma",
               "tiny gemma: GeLU-tanh MLP, embeddings x sqrt(hidden), norms stored as w - 1, head_dim 32 "
               "!= hidden/heads, MQA, tied",
               gem, "gpt2"});
  v.push_back({"tiny-lmhead-only", "tiny llama, tied, storing only lm_head.weight (like TinyStories-656K)",
               llama_cfg(64, 160, 2, 4, 4, 512, 10000, 256, 1e-6, true), "gpt2", true});
  return v;
}

// splitmix64: a tiny, fast, well-mixed generator; one stream per tensor (seed ^ hash(name)) so the values do
// not depend on thread count or on which other tensors exist.
struct SplitMix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return ((next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
};

uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

void fill_normal(std::vector<float>& v, uint64_t seed, float stddev) {
  const int64_t n = static_cast<int64_t>(v.size());
  const int64_t chunk = 1 << 16;
  parallel_for((n + chunk - 1) / chunk, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      SplitMix rng{seed + static_cast<uint64_t>(c) * 0x632be59bd9b4e019ull};
      for (int64_t i = c * chunk; i < std::min(n, (c + 1) * chunk); i += 2) {
        double u1 = rng.uniform(), u2 = rng.uniform();
        double r = std::sqrt(-2.0 * std::log(u1)), t = 6.283185307179586 * u2;
        v[i] = static_cast<float>(r * std::cos(t) * stddev);
        if (i + 1 < n) v[i + 1] = static_cast<float>(r * std::sin(t) * stddev);
      }
    }
  });
}

const char* kDefaultText =
    "Once upon a time, in a small village by the sea, there lived an old clockmaker and his daughter. Every "
    "morning the two of them opened the shop at seven, wound every clock on the walls, and listened to the "
    "ticking fill the room. The daughter liked numbers: 12 hours, 60 minutes, 3600 seconds. She asked her "
    "father why the clocks never agreed, and he said that time is measured, not known. One day a traveller "
    "brought a broken watch. \"Can you fix it?\" he asked. \"We can try,\" said the girl, and she opened the "
    "case. Inside were gears smaller than rice, springs thinner than hair, and a note that read: the weights "
    "fit, but the memory does not. The model was large and the machine was small, so they measured "
    "everything twice: the weights, the cache, the workspace; the speed of the first token and of every "
    "token after it. They wrote the numbers in a table and compared them with the baseline, changing one "
    "thing at a time.\n";

}  // namespace

const std::vector<FixtureShape>& fixture_shapes() {
  static const std::vector<FixtureShape> v = make_shapes();
  return v;
}

const FixtureShape& fixture_shape(const std::string& name) {
  std::string list;
  for (auto& s : fixture_shapes()) {
    if (s.name == name) return s;
    list += (list.empty() ? "" : ", ") + s.name;
  }
  throw UsageError("fixture", "unknown shape '" + name + "'; available: " + list);
}

std::map<std::string, FixtureTensor> fixture_tensors(const ModelConfig& c, bool lm_head_only, uint64_t seed) {
  std::map<std::string, FixtureTensor> t;
  // Norm weights: around 1 with a little spread so that a wrong norm shows up in reference tests, stored in
  // the architecture's HF convention (Gemma's HF norms hold w - 1). Values depend only on the seed and the
  // name.
  const float norm_offset = c.norm_weight_offset;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool norm) {
    FixtureTensor ft;
    ft.shape = shape;
    ft.data.resize(static_cast<size_t>(shape_numel(shape)));
    if (norm) {
      fill_normal(ft.data, seed ^ name_hash(name), 0.1f);
      for (auto& v : ft.data) v += 1.0f - norm_offset;
    } else {
      fill_normal(ft.data, seed ^ name_hash(name), 0.02f);
    }
    t.emplace(name, std::move(ft));
  };
  using enum TensorRole;
  for (const TensorRoleRow& row : tensor_roles()) {
    if (!role_present(row.role, c)) continue;
    // Tied: one of embed_tokens / lm_head is stored (lm_head only like TinyStories-656K); untied: both.
    if (row.role == TokEmbed && c.tie_embeddings && lm_head_only) continue;
    if (row.role == LmHead && c.tie_embeddings && !lm_head_only) continue;
    for (int64_t l = 0; l < (row.per_layer ? c.n_layers : 1); ++l)
      add(hf_tensor_name(row.role, row.per_layer ? l : -1), role_shape(row.role, c),
          row.kind == RoleKind::Norm);
  }
  return t;
}

json fixture_tokenizer_json(int64_t vocab_size, const std::string& pretokenizer, const std::string& text,
                            int32_t bos_id, int32_t eos_id) {
  const auto& bl = bytelevel_encoding();
  PreTokenizer kind = pretokenizer == "llama3"  ? PreTokenizer::Llama3
                      : pretokenizer == "qwen2" ? PreTokenizer::Qwen2
                                                : PreTokenizer::Gpt2;
  // Reserve ids: specials at bos/eos (and 0/1/2 when those are free), then byte tokens, then merges.
  std::vector<std::string> pieces;
  std::unordered_map<std::string, int32_t> ids;
  std::map<int32_t, std::string> specials = {{bos_id, "<|bos|>"}, {eos_id, "<|eos|>"}};
  if (bos_id == eos_id) specials = {{bos_id, "<|endoftext|>"}};
  auto next_free = [&]() {
    while (specials.count(static_cast<int32_t>(pieces.size()))) {
      pieces.push_back(specials[static_cast<int32_t>(pieces.size())]);
    }
    return static_cast<int32_t>(pieces.size());
  };
  for (int b = 0; b < 256 && next_free() < vocab_size; ++b) {
    ids[bl[b]] = static_cast<int32_t>(pieces.size());
    pieces.push_back(bl[b]);
  }
  // Words of the text in byte-level characters, split into current symbols.
  // BPE training, incremental: words as symbol-id sequences with their counts, pair counts kept up to date,
  // an index pair -> words that (may) contain it, and a max-heap with lazy deletion. Each merge touches only
  // the words that contain the pair. Ties go to the lexicographically smallest (left, right) pair, so the
  // merges are exactly those of the straightforward "count every pair, take the first maximum in (left,
  // right) order" loop.
  std::vector<std::string> sname;
  std::unordered_map<std::string, int32_t> sid;
  auto symbol = [&](const std::string& str) {
    auto it = sid.find(str);
    if (it != sid.end()) return it->second;
    sid.emplace(str, static_cast<int32_t>(sname.size()));
    sname.push_back(str);
    return static_cast<int32_t>(sname.size() - 1);
  };
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> wcount;
  {
    std::map<std::vector<int32_t>, int64_t> uniq;
    for (auto [b, e] : pretokenize(kind, text)) {
      std::vector<int32_t> w;
      for (size_t i = b; i < e; ++i) w.push_back(symbol(bl[static_cast<unsigned char>(text[i])]));
      uniq[w]++;
    }
    for (auto& [w, n] : uniq) words.push_back(w), wcount.push_back(n);
  }
  auto key_of = [](int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  };
  std::unordered_map<uint64_t, int64_t> pc;
  std::unordered_map<uint64_t, std::vector<int32_t>> where;
  for (size_t wi = 0; wi < words.size(); ++wi)
    for (size_t i = 0; i + 1 < words[wi].size(); ++i) {
      const uint64_t k = key_of(words[wi][i], words[wi][i + 1]);
      pc[k] += wcount[wi];
      where[k].push_back(static_cast<int32_t>(wi));
    }
  struct Cand {
    int64_t count;
    uint64_t key;
  };
  auto worse = [&](const Cand& x,
                   const Cand& y) {  // heap order: larger count, then smaller (left, right) strings
    if (x.count != y.count) return x.count < y.count;
    const std::string &xl = sname[x.key >> 32], &yl = sname[y.key >> 32];
    if (xl != yl) return xl > yl;
    return sname[x.key & 0xffffffffu] > sname[y.key & 0xffffffffu];
  };
  std::priority_queue<Cand, std::vector<Cand>, decltype(worse)> heap(worse);
  for (auto& [k, n] : pc) heap.push({n, k});
  std::vector<int32_t> stamp(words.size(), -1);
  std::vector<std::pair<std::string, std::string>> merges;
  const int64_t specials_above =
      static_cast<int64_t>(std::count_if(specials.begin(), specials.end(), [&](auto& kv) {
        return kv.first >= static_cast<int32_t>(pieces.size());
      }));
  int64_t budget = vocab_size - static_cast<int64_t>(pieces.size()) - specials_above;
  for (int32_t step = 0; budget > 0; ++step) {
    Cand best{0, 0};
    bool found = false;
    while (!heap.empty()) {
      Cand c = heap.top();
      heap.pop();
      auto it = pc.find(c.key);
      if (it == pc.end() || it->second != c.count) continue;  // stale entry
      best = c, found = true;
      break;
    }
    if (!found || best.count < 2) break;
    const int32_t a = static_cast<int32_t>(best.key >> 32), b = static_cast<int32_t>(best.key & 0xffffffffu);
    const std::string l = sname[a], r = sname[b];
    merges.push_back({l, r});
    const std::string m = l + r;
    const int32_t ms = symbol(m);
    if (!ids.count(m)) {
      next_free();
      ids[m] = static_cast<int32_t>(pieces.size());
      pieces.push_back(m);
      --budget;
    }
    std::vector<uint64_t> touched;
    std::vector<int32_t> list;
    list.swap(where[best.key]);
    for (int32_t wi : list) {
      if (stamp[wi] == step) continue;
      stamp[wi] = step;
      std::vector<int32_t>& w = words[wi];
      const int64_t n = wcount[wi];
      bool has = false;
      for (size_t i = 0; i + 1 < w.size() && !has; ++i) has = w[i] == a && w[i + 1] == b;
      if (!has) continue;
      for (size_t i = 0; i + 1 < w.size(); ++i) {
        const uint64_t k = key_of(w[i], w[i + 1]);
        if ((pc[k] -= n) == 0) pc.erase(k);
        touched.push_back(k);
      }
      std::vector<int32_t> o;
      o.reserve(w.size());
      for (size_t i = 0; i < w.size(); ++i) {
        if (i + 1 < w.size() && w[i] == a && w[i + 1] == b) {
          o.push_back(ms);
          ++i;
        } else {
          o.push_back(w[i]);
        }
      }
      w.swap(o);
      for (size_t i = 0; i + 1 < w.size(); ++i) {
        const uint64_t k = key_of(w[i], w[i + 1]);
        pc[k] += n;
        where[k].push_back(wi);
        touched.push_back(k);
      }
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (uint64_t k : touched) {
      auto it = pc.find(k);
      if (it != pc.end()) heap.push({it->second, k});
    }
  }
  while (static_cast<int64_t>(pieces.size()) < vocab_size) {
    int32_t id = next_free();
    if (id >= vocab_size) break;
    // Fillers are ordinary vocabulary entries that no merge produces (real vocabularies have a few hundred
    // added tokens at most; 150k special tokens would make every tokenizer slow for no reason).
    pieces.push_back(bl[' '] + "unused" + std::to_string(id));
  }
  json vocab = json::object();
  json added = json::array();
  for (size_t i = 0; i < pieces.size() && static_cast<int64_t>(i) < vocab_size; ++i) {
    vocab[pieces[i]] = i;
    bool special = specials.count(static_cast<int32_t>(i)) != 0;
    if (special)
      added.push_back({{"id", i},
                       {"content", pieces[i]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", true}});
  }
  json jm = json::array();
  for (auto& [l, r] : merges) jm.push_back(l + " " + r);
  json pre;
  if (pretokenizer == "gpt2") {
    pre = {{"type", "Sequence"},
           {"pretokenizers",
            {{{"type", "Digits"}, {"individual_digits", true}},
             {{"type", "ByteLevel"},
              {"add_prefix_space", false},
              {"trim_offsets", true},
              {"use_regex", true}}}}};
  } else {
    std::string re =
        pretokenizer == "llama3"
            ? R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"
            : R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    pre = {{"type", "Sequence"},
           {"pretokenizers",
            {{{"type", "Split"}, {"pattern", {{"Regex", re}}}, {"behavior", "Isolated"}, {"invert", false}},
             {{"type", "ByteLevel"},
              {"add_prefix_space", false},
              {"trim_offsets", false},
              {"use_regex", false}}}}};
  }
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre},
          {"post_processor",
           {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
          {"decoder",
           {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", jm}}}};
}

void write_fixture_hf(const FixtureShape& s, const FixtureOptions& o, const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec))
    throw UsageError("fixture",
                     "output directory '" + dir + "' exists and is not empty; choose another --out");
  if (o.dtype != "f32" && o.dtype != "f16" && o.dtype != "bf16")
    throw UsageError("fixture", "--dtype must be f32, f16 or bf16 (got '" + o.dtype + "')");
  ModelConfig c = config_from_hf(s.config);
  json cfg = s.config;
  cfg["torch_dtype"] = o.dtype == "f32" ? "float32" : o.dtype == "f16" ? "float16" : "bfloat16";
  // A private temporary next to the target (never a fixed name that could be someone's directory), published
  // only when complete; a missing parent is an error, not created.
  const std::string tmp = io::make_temp_dir_for(dir);
  try {
    auto tensors = fixture_tensors(c, s.store_lm_head_only, o.seed);
    // Convert to the stored dtype and write one safetensors file (HF writes one file up to 5 GB per shard).
    std::vector<std::vector<uint16_t>> halves;
    halves.reserve(tensors.size());
    std::vector<io::TensorToWrite> tw;
    for (auto& [name, t] : tensors) {
      if (o.dtype == "f32") {
        tw.push_back({name, DType::F32, t.shape, t.data.data(), t.data.size() * 4});
        continue;
      }
      halves.emplace_back(t.data.size());
      auto& h = halves.back();
      bool bf = o.dtype == "bf16";
      for (size_t i = 0; i < h.size(); ++i) h[i] = bf ? f32_to_bf16(t.data[i]) : f32_to_f16(t.data[i]);
      tw.push_back({name, bf ? DType::BF16 : DType::F16, t.shape, h.data(), h.size() * 2});
    }
    io::write_safetensors(tmp + "/model.safetensors", tw, {{"format", "pt"}});
    std::string text = o.tokenizer_text.empty() ? kDefaultText : o.tokenizer_text;
    json tok = fixture_tokenizer_json(c.vocab_size, s.pretokenizer, text, c.bos_id, c.eos_id);
    auto write_json = [&](const std::string& name, const json& j) {
      std::string d = json_text(j, 2);
      io::write_file_atomic(tmp + "/" + name, d.data(), d.size());
    };
    write_json("config.json", cfg);
    write_json("tokenizer.json", tok);
    json tcfg = {{"add_bos_token", false},
                 {"model_max_length", c.max_seq_len},
                 {"tokenizer_class", "PreTrainedTokenizerFast"}};
    for (const auto& a : tok["added_tokens"]) {
      if (a["id"] == c.bos_id) tcfg["bos_token"] = a["content"];
      if (a["id"] == c.eos_id) tcfg["eos_token"] = a["content"];
    }
    write_json("tokenizer_config.json", tcfg);
    write_json("generation_config.json", {{"bos_token_id", c.bos_id}, {"eos_token_id", c.eos_id}});
    write_json("lowbit_fixture.json", {{"shape", s.name},
                                       {"seed", o.seed},
                                       {"dtype", o.dtype},
                                       {"note", "seeded random weights N(0, 0.02); not a trained model"}});
    if (fs::exists(dir, ec)) fs::remove(dir, ec);  // empty directory
    io::publish_dir(tmp, dir, false);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace lowbit
