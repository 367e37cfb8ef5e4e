// Quantized checkpoint writer (see checkpoint_writer.h).
#include "quant/checkpoint_writer.h"

#include "core/half.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/hash.h"
#include "core/json_text.h"
#include "core/version.h"
#include "io/durable.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "kernels/matmul.h"
#include "model/quantized_checkpoint.h"

namespace fs = std::filesystem;

namespace lowbit::quant {
namespace {

using nlohmann::json;

// The activation routes whose per-token scale carries a clipping ratio (act_clip).
bool clipped_act(FormatId f) {
  return f == FormatId::INT4 || f == FormatId::NVFP4;
}

struct Files {
  std::string dir;
  int written = 0;
  int fail_after = -1;
  std::vector<std::string> names;
  void done(const std::string& name) {
    names.push_back(name);
    if (fail_after >= 0 && ++written >= fail_after)
      fail("quant", "injected failure after writing " + name + " (test hook WriteOptions::fail_after_files)");
  }
  void write_json(const std::string& name, const json& j) {
    const std::string text = json_text(j, 2) + "\n";
    io::write_file_atomic((fs::path(dir) / name).string(), text.data(), text.size());  // checked and fsynced
    done(name);
  }
  void copy(const fs::path& src, const std::string& name) {
    std::error_code ec;
    fs::copy_file(src, fs::path(dir) / name, fs::copy_options::overwrite_existing, ec);
    if (ec) fail("quant", "cannot copy " + src.string() + " to " + dir + ": " + ec.message());
    done(name);
  }
};

// Tensors to write; `store` owns the bytes that do not live in the model.
struct TensorSet {
  std::deque<std::vector<uint8_t>> store;
  std::vector<io::TensorToWrite> list;
  void add_bytes(const std::string& name, DType dt, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    store.push_back(std::move(bytes));
    list.push_back({name, dt, std::move(shape), store.back().data(), store.back().size()});
  }
  // Norm weights and biases in `dt` (the source checkpoint's dtype, as llm-compressor keeps them): F32, F16,
  // BF16.
  void add_vector(const std::string& name, const std::vector<float>& v, DType dt) {
    if (dt == DType::F32) return add_floats(name, v);
    std::vector<uint8_t> b(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t h = dt == DType::F16 ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
    add_bytes(name, dt, {static_cast<int64_t>(v.size())}, std::move(b));
  }
  void add_floats(const std::string& name, const std::vector<float>& v, std::vector<int64_t> shape = {}) {
    std::vector<uint8_t> b(v.size() * 4);
    if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
    if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
    add_bytes(name, DType::F32, std::move(shape), std::move(b));
  }
};

void add_matrix(TensorSet& ts, const std::string& module, const WeightMatrix& w) {
  if (w.kind == WeightKind::Quant) {
    for (auto& p : pack_quantized(*w.q))
      ts.add_bytes(module + "." + p.suffix, p.dtype, p.shape, std::move(p.bytes));
    if (w.act_format != FormatId::F32 && w.act_static_scale > 0)
      ts.add_floats(module + ".input_scale", {w.act_static_scale}, {1});
    return;
  }
  if (w.kind == WeightKind::F32 || w.kind == WeightKind::F16 || w.kind == WeightKind::BF16) {
    const DType dt = w.kind == WeightKind::F32   ? DType::F32
                     : w.kind == WeightKind::F16 ? DType::F16
                                                 : DType::BF16;
    const size_t n = w.row_bytes() * static_cast<size_t>(w.rows);
    ts.add_bytes(module + ".weight", dt, {w.rows, w.cols}, std::vector<uint8_t>(w.data, w.data + n));
    return;
  }
  // GGUF blocks kept unquantized by the recipe: widen to float32 (safetensors has no ggml block dtype).
  std::vector<float> f(static_cast<size_t>(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) weight_row_f32(w, r, f.data() + r * w.cols);
  ts.add_floats(module + ".weight", f, {w.rows, w.cols});
}

json hf_config(const Model& m, bool tied) {
  json cfg;
  const fs::path src_cfg = fs::path(m.path).filename() == "config.json" ? fs::path(m.path)
                           : fs::is_directory(m.path)                   ? fs::path(m.path) / "config.json"
                                                      : fs::path(m.path).parent_path() / "config.json";
  if (m.format == "hf" && fs::exists(src_cfg)) {
    std::ifstream in(src_cfg);
    cfg = json::parse(in, nullptr, false);
    if (cfg.is_discarded()) cfg = json::object();
    cfg.erase("quantization_config");
  }
  const ModelConfig& c = m.config;
  if (!cfg.contains("model_type")) {
    const ArchRow& row = arch_row(c.arch);
    cfg["architectures"] = {row.hf_class};
    cfg["model_type"] = row.name;
    cfg["hidden_size"] = c.dim;
    cfg["intermediate_size"] = c.ffn_dim;
    cfg["num_attention_heads"] = c.n_heads;
    cfg["num_key_value_heads"] = c.n_kv_heads;
    cfg["num_hidden_layers"] = c.n_layers;
    cfg["head_dim"] = c.head_dim;
    cfg["vocab_size"] = c.vocab_size;
    cfg["max_position_embeddings"] = c.max_seq_len;
    cfg["rms_norm_eps"] = c.norm_eps;
    cfg["rope_theta"] = c.rope_theta;
    cfg[row.act_key] = activation_name(c.act);
    cfg["bos_token_id"] = c.bos_id;
    cfg["eos_token_id"] = c.eos_id;
    cfg["torch_dtype"] = "float32";
    if (c.qkv_bias && !row.qkv_bias) cfg["attention_bias"] = true;
    if (c.rope_scaling.type != "none") {
      cfg["rope_scaling"] = {{"rope_type", c.rope_scaling.type}, {"factor", c.rope_scaling.factor}};
      if (c.rope_scaling.type == "llama3") {
        cfg["rope_scaling"]["low_freq_factor"] = c.rope_scaling.low_freq_factor;
        cfg["rope_scaling"]["high_freq_factor"] = c.rope_scaling.high_freq_factor;
        cfg["rope_scaling"]["original_max_position_embeddings"] = c.rope_scaling.original_max_position;
      }
    }
    cfg["lowbit_source_format"] = m.format;
  }
  // Hugging Face llama/mistral assume the "half" RoPE pairing; llama2.c and GGUF llama rows are interleaved
  // and are kept as they are (permuting rows would change 2-D block scales), so the pairing is recorded
  // explicitly.
  if (c.rope_style == RopeStyle::Interleaved) cfg["lowbit_rope_style"] = "interleaved";
  cfg["tie_word_embeddings"] = tied;
  return cfg;
}

json quantization_config(const Model& m, const QuantReport& rep,
                         std::vector<std::pair<std::string, const WeightMatrix*>>& mats) {
  struct Group {
    QuantScheme s;
    FormatId act;
    float clip;
    ActScale block_scale;  // NVFP4 activations
    bool st;
    bool act_order = false;  // input_perm (a matrix kept from an act-order GPTQ source): weight_g_idx
    std::vector<std::string> modules;
  };
  std::map<std::string, Group> groups;
  std::vector<std::string> ignore;
  bool embed_quantized = false;
  for (auto& [name, w] : mats) {
    const std::string hf = hf_module_name(name);
    if (w->kind != WeightKind::Quant) {
      if (name != lowbit_tensor_name(TensorRole::TokEmbed, -1)) ignore.push_back(hf);
      continue;
    }
    if (name == lowbit_tensor_name(TensorRole::TokEmbed, -1)) embed_quantized = true;
    const bool st = w->act_format != FormatId::F32 && w->act_static_scale > 0;
    const std::string key =
        to_string(w->q->scheme) + "|" + format_info(w->act_format).name + "|" + (st ? "s" : "d") +
        (clipped_act(w->act_format) ? "|" + std::to_string(w->act_clip) : "") +
        (w->act_format == FormatId::NVFP4 ? std::string("|") + act_scale_name(w->act_scale) : std::string()) +
        (w->q->input_perm.empty() ? "" : "|act-order");
    auto& g = groups[key];
    g.act_order = !w->q->input_perm.empty();
    g.s = w->q->scheme;
    g.act = w->act_format;
    g.clip = w->act_clip;
    g.block_scale = w->act_scale;
    g.st = st;
    g.modules.push_back(hf);
  }
  // A head tied to an unquantized embedding is not written, but compressed-tensors' "Linear" target matches
  // the model's lm_head nn.Linear (transformers then looks for its quantized tensors): ignore it by name, as
  // llm-compressor does.
  const bool head_written = std::any_of(mats.begin(), mats.end(), [](const auto& p) {
    return p.first == lowbit_tensor_name(TensorRole::LmHead, -1);
  });
  if (!head_written && !embed_quantized)
    ignore.push_back(hf_module_name(lowbit_tensor_name(TensorRole::LmHead, -1)));
  json cg = json::object(), lg = json::object();
  std::set<std::string> layouts;
  int i = 0;
  const bool single = groups.size() == 1 && !embed_quantized;
  for (auto& [key, g] : groups) {
    json w = ct_args_from_scheme(g.s);
    if (g.act_order)
      w["actorder"] = "group";  // pack_quantized writes weight_g_idx; vLLM reads it only with "group"
    else if (rep.recipe.algorithm == Algorithm::Gptq && rep.recipe.gptq_act_order &&
             g.s.gran == Granularity::Group)
      w["actorder"] = "static";
    else
      w["actorder"] = nullptr;
    json act = nullptr;
    if (g.act != FormatId::F32) {
      const FormatInfo& fi = format_info(g.act);
      act = {{"num_bits", fi.bits}, {"type", fi.kind == FormatKind::Int ? "int" : "float"},
             {"symmetric", true},   {"strategy", g.st ? "tensor" : "token"},
             {"dynamic", !g.st},    {"observer", g.st ? json("minmax") : json(nullptr)}};
      // NVFP4 activations: dynamic groups of 16 consecutive inputs (their E4M3 block scales under a per-token
      // FP32 scale, which compressed-tensors' args cannot say; lowbit_groups names the format).
      if (g.act == FormatId::NVFP4) act["strategy"] = "group", act["group_size"] = 16;
    }
    const std::string layout = layout_name(checkpoint_layout(g.s, 2));
    layouts.insert(layout);
    json targets = single ? json::array({"Linear"}) : json(g.modules);
    const std::string name = "group_" + std::to_string(i++);
    // Only compressed-tensors' own fields here: its QuantizationScheme and QuantizationArgs forbid extra keys
    // (pydantic extra="forbid"), so vLLM and transformers refuse a group that carries one. lowbit's exact
    // scheme (scale dtype, search, ...) and the INT4 activation clip go into lowbit_groups, a key of
    // quantization_config, which compressed-tensors ignores (extra="ignore").
    cg[name] = {{"targets", targets},
                {"weights", w},
                {"input_activations", act},
                {"output_activations", nullptr},
                {"format", layout}};
    lg[name] = {{"scheme", to_string(g.s)}};
    if (g.act != FormatId::F32) lg[name]["act"] = format_info(g.act).name;  // E4M3FN or E5M2: args cannot say
    // INT4 / NVFP4 activations: the clipping ratio of the per-token absmax.
    if (clipped_act(g.act)) lg[name]["act_clip"] = short_decimal(g.clip);
    // NVFP4 activations whose block scales lowbit picks by least squared error: an engine that reads only
    // compressed-tensors' args computes them by NVIDIA's amax rule instead.
    if (g.act == FormatId::NVFP4 && g.block_scale != ActScale::Amax)
      lg[name]["act_scale"] = act_scale_name(g.block_scale);
  }
  json kv = nullptr, kv_format = nullptr;
  if (rep.recipe.kv.enabled()) {
    kv_format = format_info(rep.recipe.kv.format).name;  // E4M3FN or E5M2: the args cannot say which
    const FormatInfo& fi = format_info(rep.recipe.kv.format);
    kv = {{"num_bits", fi.bits}, {"type", fi.kind == FormatKind::Int ? "int" : "float"},
          {"symmetric", true},   {"strategy", rep.recipe.kv.per_head ? "attn_head" : "tensor"},
          {"dynamic", false},    {"observer", "minmax"}};
  }
  (void)m;
  return {{"quant_method", "compressed-tensors"},
          {"format", layouts.size() == 1 ? *layouts.begin() : std::string("mixed-precision")},
          {"quantization_status", "compressed"},
          {"config_groups", cg},
          {"ignore", ignore},
          {"kv_cache_scheme", kv},
          {"lowbit_groups", lg},
          {"lowbit_kv_format", kv_format},
          {"lowbit_version", version()},
          {"lowbit_recipe", rep.recipe.name}};
}

json source_files(const Model& m) {
  json files = json::array();
  std::error_code ec;
  if (fs::is_directory(m.path, ec)) {
    std::vector<fs::path> ps;
    for (auto& e : fs::directory_iterator(m.path, ec))
      if (e.path().extension() == ".safetensors" || e.path().filename() == "config.json")
        ps.push_back(e.path());
    std::sort(ps.begin(), ps.end());
    for (auto& p : ps)
      files.push_back({{"file", p.filename().string()}, {"sha256", sha256_file_hex(p.string())}});
  } else if (fs::is_regular_file(m.path, ec)) {
    files.push_back({{"file", fs::path(m.path).filename().string()}, {"sha256", sha256_file_hex(m.path)}});
  }
  return files;
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> tokenizer_files(const Model& m,
                                                                 const std::string& tokenizer_path) {
  std::vector<std::pair<std::string, std::string>> out;
  if (m.format == "hf") {
    fs::path sdir = fs::is_directory(m.path) ? fs::path(m.path) : fs::path(m.path).parent_path();
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                          "generation_config.json", "tokenizer.model", "tokenizer.bin"})
      if (fs::exists(sdir / f)) out.push_back({(sdir / f).string(), f});
  } else if (m.format == "llama2c") {
    const std::string tp = find_llama2c_tokenizer(m.path, tokenizer_path);
    if (!tp.empty()) out.push_back({tp, "tokenizer.bin"});
    fs::path spm = fs::path(m.path).parent_path() / "tokenizer.model";
    if (fs::exists(spm)) out.push_back({spm.string(), "tokenizer.model"});
  }
  return out;
}

std::vector<std::pair<std::string, int64_t>> checkpoint_model_files(const std::string& dir) {
  std::vector<std::pair<std::string, int64_t>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file()) continue;
    const std::string name = e.path().filename().string(), ext = e.path().extension().string();
    if (name == "lowbit_manifest.json") continue;
    if (ext == ".safetensors" || ext == ".json" || name == "tokenizer.model" || name == "tokenizer.bin")
      out.push_back({name, static_cast<int64_t>(e.file_size())});
  }
  if (ec) fail("quant", "cannot list checkpoint directory '" + dir + "': " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

int64_t checkpoint_model_bytes(const std::string& dir) {
  int64_t total = 0;
  for (const auto& [name, n] : checkpoint_model_files(dir)) total += n;
  return total;
}

WriteResult write_quantized_checkpoint(const Model& m, const QuantReport& rep, const std::string& out_dir,
                                       const WriteOptions& o) {
  if (out_dir.empty()) throw UsageError("quant", "no output directory; pass --out DIR");
  const fs::path out = fs::absolute(fs::path(out_dir)).lexically_normal();
  std::error_code ec;
  if (fs::exists(out, ec) && !o.force)
    throw UsageError("quant", "output directory '" + out_dir +
                                  "' already exists; choose another --out or pass "
                                  "--force to replace it");
  if (!out.parent_path().empty()) fs::create_directories(out.parent_path(), ec);
  const std::string tmp = io::make_temp_dir_for(out.string());
  WriteResult res;
  try {
    Files files;
    files.dir = tmp;
    files.fail_after = o.fail_after_files;
    ModelWeights& W =
        const_cast<ModelWeights&>(m.weights);  // named_matrices() is non-const; nothing is modified
    auto named = W.named_matrices();
    const bool tied = m.weights.tied();
    std::vector<std::pair<std::string, const WeightMatrix*>> mats;
    for (auto& [n, w] : named)
      if (!(n == lowbit_tensor_name(TensorRole::LmHead, -1) && tied)) mats.push_back({n, w});
    // ---- tensors ----
    TensorSet ts;
    for (auto& [n, w] : mats) add_matrix(ts, hf_module_name(n), *w);
    const ModelConfig& c = m.config;
    // 16-bit sources keep their small tensors 16-bit (their values are exactly representable; AWQ-folded
    // norms round once, as in llm-compressor's output); F32 sources keep F32.
    const WeightKind ek = m.weights.tok_embed.kind;
    const DType vdt = ek == WeightKind::BF16 ? DType::BF16 : ek == WeightKind::F16 ? DType::F16 : DType::F32;
    // Norms, biases and calibrated KV scales by the tensor-role table. Norms go back into the HF convention
    // of the architecture (Gemma stores w - 1), whatever the source was.
    const float norm_offset = arch_row(c.arch).hf_norm_offset;
    auto add_vectors = [&](int64_t layer) {
      for (const TensorRoleRow& row : tensor_roles()) {
        if (row.kind == RoleKind::Matrix || row.per_layer != (layer >= 0) || !role_present(row.role, c))
          continue;
        std::vector<float> v = *W.vector(row.role, layer);
        if (row.kind == RoleKind::Norm)
          for (float& x : v) x -= norm_offset;
        ts.add_vector(hf_tensor_name(row.role, layer), v, vdt);
      }
    };
    add_vectors(-1);
    for (int64_t i = 0; i < c.n_layers; ++i) {
      add_vectors(i);
      const LayerWeights& L = m.weights.layers[static_cast<size_t>(i)];
      const std::string p = "model.layers." + std::to_string(i) + ".";
      if (!L.k_scale.empty()) ts.add_floats(p + "self_attn.k_scale", L.k_scale);
      if (!L.v_scale.empty()) ts.add_floats(p + "self_attn.v_scale", L.v_scale);
    }
    // Rotated models: the online R4's factor travels with the checkpoint (no factor file needed at load).
    const Hadamard& r4 = m.weights.down_rotation;
    if (r4.valid() && r4.m > 1) ts.add_floats(kDownRotationTensor, r4.hm, {r4.m, r4.m});
    if (!m.weights.rope_freq_factors.empty())
      fail("quant",
           "this model uses GGUF rope_freqs factors, which an HF checkpoint cannot carry; quantize the "
           "Hugging Face original instead");
    // ---- config ----
    json cfg = hf_config(m, tied);
    cfg["quantization_config"] = quantization_config(m, rep, mats);
    if (!rep.rotation.is_null() || r4.valid()) {
      json rot = rep.rotation.is_null() ? json::object() : rep.rotation;
      rot["r4"] = r4.valid() ? json{{"kind", "hadamard"},
                                    {"order", r4.n},
                                    {"factor", r4.m},
                                    {"construction", r4.construction},
                                    {"online", true}}
                             : json(nullptr);
      cfg["lowbit_rotation"] = rot;
    }
    files.write_json("config.json", cfg);
    // ---- safetensors (sharded above o.shard_bytes) ----
    std::sort(ts.list.begin(), ts.list.end(), [](auto& a, auto& b) { return a.name < b.name; });
    int64_t total = 0;
    for (auto& t : ts.list) total += static_cast<int64_t>(t.nbytes);
    std::vector<std::vector<io::TensorToWrite>> shards(1);
    int64_t cur = 0;
    for (auto& t : ts.list) {
      if (cur > 0 && cur + static_cast<int64_t>(t.nbytes) > o.shard_bytes && total > o.shard_bytes) {
        shards.emplace_back();
        cur = 0;
      }
      shards.back().push_back(t);
      cur += static_cast<int64_t>(t.nbytes);
    }
    const std::map<std::string, std::string> meta = {{"format", "pt"}, {"lowbit_version", version()}};
    if (shards.size() == 1) {
      io::write_safetensors((fs::path(tmp) / "model.safetensors").string(), shards[0], meta);
      files.done("model.safetensors");
    } else {
      json wm = json::object();
      for (size_t s = 0; s < shards.size(); ++s) {
        char name[64];
        std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
        io::write_safetensors((fs::path(tmp) / name).string(), shards[s], meta);
        for (auto& t : shards[s]) wm[t.name] = name;
        files.done(name);
      }
      files.write_json("model.safetensors.index.json",
                       {{"metadata", {{"total_size", total}}}, {"weight_map", wm}});
    }
    res.shards = static_cast<int>(shards.size());
    // ---- tokenizer ----
    json tok = {{"files", json::array()}};
    for (const auto& [src, name] : tokenizer_files(m, o.tokenizer_path)) {
      files.copy(src, name);
      tok["files"].push_back(name);
      if (m.format == "llama2c" && name == "tokenizer.bin") {
        tok["source"] = src;
        tok["note"] =
            "llama2.c tokenizer.bin copied as is (lowbit loads it; Hugging Face tools need a conversion)";
      }
    }
    if (tok["files"].empty())
      tok["note"] = m.format == "gguf"
                        ? "GGUF source: the tokenizer lives in the GGUF metadata and was not exported"
                        : "the source has no tokenizer files to copy";
    // ---- whole-file accounting: what an engine reads, before the manifest (a report) is added ----
    int64_t model_bytes = 0;  // the files written so far (the temporary directory also holds an owner marker)
    for (const auto& f : files.names) model_bytes += static_cast<int64_t>(fs::file_size(fs::path(tmp) / f));
    if (o.max_model_bytes > 0 && model_bytes > o.max_model_bytes)
      fail("quant", "the checkpoint's model files take " + std::to_string(model_bytes) +
                        " bytes, over the budget of " + std::to_string(o.max_model_bytes) +
                        " (the allocator's estimate of headers and config.json was too low); nothing was "
                        "written: lower the budget by the difference");
    const int64_t params = m.weights.parameters();
    res.model_bytes = model_bytes;
    res.parameters = params;
    // ---- manifest ----
    json manifest = rep.to_json();
    manifest["whole_file"] = {
        {"model_bytes", model_bytes},
        {"parameters", params},
        {"bits_per_parameter", params > 0 ? 8.0 * static_cast<double>(model_bytes) / params : 0.0},
        {"counts",
         "every file except lowbit_manifest.json: tensors, safetensors headers, config.json, "
         "tokenizer files"}};
    manifest["tool"] = {
        {"name", "lowbit"}, {"version", version()}, {"commit", git_commit()}, {"compiler", compiler_id()}};
    manifest["created_utc"] = utc_now();
    manifest["source"] = {
        {"path", m.path}, {"format", m.format}, {"files", source_files(m)}, {"config", c.to_json()}};
    manifest["tokenizer"] = tok;
    manifest["unquantized"] = json::array();
    for (auto& t : rep.tensors)
      if (!t.quantized)
        manifest["unquantized"].push_back({{"name", t.name}, {"dtype", t.scheme}, {"reason", t.reason}});
    files.write_json("lowbit_manifest.json", manifest);
    // ---- publish ---- (mkdtemp makes the directory 0700 and copies keep read-only source modes)
    res.bytes = io::open_to_readers(tmp, files.names);
    res.files = files.names;
    io::publish_dir(tmp, out.string(), o.force);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  res.dir = out.string();
  return res;
}

}  // namespace lowbit::quant
