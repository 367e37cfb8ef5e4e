// Model input for the planner: a preset, an HF directory or bare config.json, a GGUF file, a llama2.c .bin
// (only its 28-byte header is read) or a quantized HF checkpoint (its stored tensor bytes come from the
// safetensors headers). Every failure is a UsageError: the user pointed the planner at something it cannot
// plan.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "io/hf_checkpoint.h"
#include "io/llama2c.h"
#include "plan/plan.h"
#include "quant/checkpoint_writer.h"

namespace lowbit::plan {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void bad_model(const std::string& path, const std::string& why) {
  throw UsageError("plan", "cannot plan for '" + path + "': " + why);
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) bad_model(path, "cannot open the file; check the path");
  // config.json files are a few KiB; anything huge is not a config.
  f.seekg(0, std::ios::end);
  const auto size = static_cast<int64_t>(f.tellg());
  if (size > (int64_t(16) << 20)) bad_model(path, "file is larger than 16 MiB; this is not a config.json");
  f.seekg(0);
  try {
    return nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    bad_model(path, std::string("not valid JSON (") + e.what() + "); pass a Hugging Face config.json");
  }
}

ModelConfig config_or_usage(const std::string& path, const nlohmann::json& j) {
  try {
    return config_from_hf(j);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    bad_model(path, e.what());
  }
}

std::string describe_quant(const nlohmann::json& q) {
  std::string d = "quantized checkpoint";
  if (!q.is_object()) return d;
  if (q.contains("quant_method") && q["quant_method"].is_string()) d = q["quant_method"].get<std::string>();
  if (q.contains("format") && q["format"].is_string()) d += " " + q["format"].get<std::string>();
  return d;
}

}  // namespace

ModelConfig config_from_llama2c_header(const uint8_t* bytes, size_t n, const std::string& name) {
  if (n >= 4 && std::memcmp(bytes, "ak42", 4) == 0)
    bad_model(name, "llama2.c version 1/2 export (magic ak42) is not supported; export with --version 0");
  if (n < 28) bad_model(name, "shorter than the 28-byte llama2.c header; this is not a llama2.c checkpoint");
  int32_t v[7];
  std::memcpy(v, bytes, sizeof v);  // little-endian int32, as llama2.c writes them on x86
  io::Llama2cHeader h{};
  h.dim = v[0];
  h.hidden_dim = v[1];
  h.n_layers = v[2];
  h.n_heads = v[3];
  h.n_kv_heads = v[4];
  h.vocab_size = v[5];
  h.seq_len = v[6];
  h.shared_classifier = h.vocab_size > 0;
  if (h.vocab_size == INT32_MIN) bad_model(name, "vocab_size is INT32_MIN; the header is corrupt");
  if (h.vocab_size < 0) h.vocab_size = -h.vocab_size;
  if (h.dim <= 0 || h.hidden_dim <= 0 || h.n_layers <= 0 || h.n_heads <= 0 || h.n_kv_heads <= 0 ||
      h.vocab_size <= 0 || h.seq_len <= 0)
    bad_model(name, "llama2.c header has a non-positive field; this is not a llama2.c checkpoint");
  if (h.dim % h.n_heads != 0) bad_model(name, "llama2.c header: n_heads does not divide dim");
  try {
    return config_from_llama2c(h);
  } catch (const Error& e) {
    bad_model(name, e.what());
  }
}

PlanModel load_plan_model(const std::string& arg, bool preset) {
  PlanModel m;
  m.name = arg;
  m.compare_model = arg;
  if (preset) {
    const ModelPreset& p = model_preset(arg);
    m.config = p.config;
    m.source = "preset";
    m.compare_model = p.hf_id;
    return m;
  }
  std::error_code ec;
  const fs::path path(arg);
  if (!fs::exists(path, ec)) {
    std::string hint = "no such file or directory";
    // A bare model name was probably meant as a preset.
    std::vector<std::string> ids;
    for (const auto& p : model_presets()) ids.push_back(p.id);
    auto s = suggest_names(arg, ids, 1);
    if (!s.empty()) hint += "; did you mean --preset " + s[0] + "?";
    bad_model(arg, hint);
  }
  if (fs::is_directory(path, ec)) {
    const fs::path cfg = path / "config.json";
    if (!fs::exists(cfg, ec))
      bad_model(arg, "directory has no config.json; pass a Hugging Face model directory");
    const nlohmann::json j = read_json(cfg.string());
    m.config = config_or_usage(cfg.string(), j);
    m.source = "hf";
    const bool quantized = j.is_object() && j.contains("quantization_config");
    bool has_weights = false;
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.path().extension() == ".safetensors") has_weights = true;
    // Every file an engine reads (safetensors with their headers, configs, tokenizer files): the same list
    // `lowbit inspect` and `quantize --budget` count.
    try {
      m.files = quant::checkpoint_model_files(arg);
    } catch (const Error& e) {
      bad_model(arg, e.what());
    }
    if (quantized) {
      m.source = "hf-quantized";
      if (!has_weights)
        bad_model(arg, "config.json has quantization_config but the directory holds no .safetensors");
      try {
        const io::HfCheckpoint ck = io::HfCheckpoint::open(arg);
        int64_t bytes = 0;
        for (const auto& [name, t] : ck.tensors) bytes += static_cast<int64_t>(t.nbytes);
        m.stored_bytes = bytes;
        m.stored_desc = describe_quant(j["quantization_config"]) + ", " + std::to_string(ck.tensors.size()) +
                        " tensors (safetensors headers)";
      } catch (const Error& e) {
        bad_model(arg, e.what());
      }
    }
    return m;
  }
  const std::string ext = path.extension().string();
  if (path.filename() == "config.json" || ext == ".json") {
    m.config = config_or_usage(arg, read_json(arg));
    m.source = "hf-config";
    return m;
  }
  if (ext == ".gguf") {
    try {
      const io::GgufFile g = io::GgufFile::open(arg);
      m.config = config_from_gguf(g);
      int64_t bytes = 0;
      for (const auto& [name, t] : g.tensors) bytes += static_cast<int64_t>(t.nbytes);
      if (!g.tensors.empty()) {
        m.stored_bytes = bytes;
        m.stored_desc = "GGUF, " + std::to_string(g.tensors.size()) + " tensors";
      }
    } catch (const UsageError&) {
      throw;
    } catch (const Error& e) {
      bad_model(arg, e.what());
    }
    m.source = "gguf";
    m.files = {{path.filename().string(), static_cast<int64_t>(fs::file_size(path, ec))}};
    return m;
  }
  // Anything else is read as a llama2.c checkpoint; only the header matters for planning.
  std::ifstream f(arg, std::ios::binary);
  if (!f) bad_model(arg, "cannot open the file");
  uint8_t h[28] = {};
  f.read(reinterpret_cast<char*>(h), sizeof h);
  m.config = config_from_llama2c_header(h, static_cast<size_t>(f.gcount()), arg);
  m.source = "llama2c";
  // The checkpoint and the tokenizer.bin an engine loads next to it.
  m.files = {{path.filename().string(), static_cast<int64_t>(fs::file_size(path, ec))}};
  const fs::path tok = path.parent_path() / "tokenizer.bin";
  if (path.filename() != "tokenizer.bin" && fs::is_regular_file(tok, ec))
    m.files.push_back({"tokenizer.bin", static_cast<int64_t>(fs::file_size(tok, ec))});
  return m;
}

}  // namespace lowbit::plan
