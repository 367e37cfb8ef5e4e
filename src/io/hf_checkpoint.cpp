#include "io/hf_checkpoint.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace lowbit::io {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

json read_json(const fs::path& p) {
  auto mf = MappedFile::open(p.string());
  const char* b = reinterpret_cast<const char*>(mf->data());
  try {
    return json::parse(b, b + mf->size());
  } catch (const json::exception& e) {
    fail("io", "'" + p.string() + "' is not valid JSON (" + e.what() + "); fix or re-download the file");
  }
}

json read_optional_json(const fs::path& p) {
  std::error_code ec;
  if (!fs::exists(p, ec)) return nullptr;
  return read_json(p);
}

// A shard name from an index must stay inside the checkpoint directory.
void check_shard_name(const std::string& shard, const fs::path& index) {
  if (shard.empty() || shard.find('/') != std::string::npos || shard.find('\\') != std::string::npos ||
      shard == "." || shard == "..") {
    fail("io", "'" + index.string() + "': shard file name \"" + shard.substr(0, 128) +
                   "\" is not a plain file name in the checkpoint directory");
  }
}

// AutoGPTQ's quantize_config "model_file_base_name" when it is a plain file name, else "".
std::string gptq_basename(const json& config) {
  const json& qc = config.contains("quantization_config") ? config["quantization_config"] : json();
  if (!qc.is_object() || !qc.contains("model_file_base_name") || !qc["model_file_base_name"].is_string())
    return "";
  const std::string b = qc["model_file_base_name"].get<std::string>();
  return b.find('/') == std::string::npos && b.find('\\') == std::string::npos && b != "." && b != ".." ? b
                                                                                                        : "";
}

}  // namespace

HfCheckpoint HfCheckpoint::open(const std::string& path) {
  HfCheckpoint ck;
  std::error_code ec;
  fs::path p(path);
  fs::path single;  // a .safetensors file given directly
  if (fs::is_regular_file(p, ec)) {
    if (p.extension() != ".safetensors") {
      fail("io", "'" + path + "' is neither a model directory nor a .safetensors file");
    }
    single = p;
    p = p.parent_path();
    if (p.empty()) p = ".";
  } else if (!fs::is_directory(p, ec)) {
    fail("io", "model directory '" + path + "' does not exist; pass a Hugging Face model directory");
  }
  ck.dir = p.string();
  fs::path config = p / "config.json";
  if (!fs::exists(config, ec)) {
    fail("io", "'" + ck.dir +
                   "' has no config.json; a Hugging Face checkpoint needs config.json next to its "
                   "safetensors files");
  }
  ck.config = read_json(config);
  if (!ck.config.is_object()) fail("io", "'" + config.string() + "' must hold a JSON object");
  // AutoGPTQ checkpoints may describe their quantization only in quantize_config.json (older releases wrote
  // no quantization_config into config.json): it is read as config.json's quantization_config, quant_method
  // "gptq" unless it names another.
  if (!ck.config.contains("quantization_config") && fs::exists(p / "quantize_config.json", ec)) {
    json qc = read_json(p / "quantize_config.json");
    if (!qc.is_object())
      fail("io", "'" + (p / "quantize_config.json").string() + "' must hold a JSON object");
    if (!qc.contains("quant_method")) qc["quant_method"] = "gptq";
    ck.config["quantization_config"] = qc;
  }
  ck.tokenizer = read_optional_json(p / "tokenizer.json");
  ck.tokenizer_config = read_optional_json(p / "tokenizer_config.json");
  ck.generation_config = read_optional_json(p / "generation_config.json");

  auto add_shard = [&](const fs::path& file) {
    ck.shards.push_back(SafetensorsFile::open(file.string()));
    const SafetensorsFile& sf = ck.shards.back();
    for (const auto& [name, view] : sf.tensors) {
      auto [it, fresh] = ck.tensors.emplace(name, view);
      if (!fresh) {
        fail("io", "tensor '" + name + "' appears in more than one shard (again in '" + file.string() +
                       "'); the checkpoint is inconsistent");
      }
    }
  };

  fs::path model = p / "model.safetensors";
  fs::path index = p / "model.safetensors.index.json";
  if (!single.empty()) {
    add_shard(single);
  } else if (fs::exists(model, ec)) {
    add_shard(model);
  } else if (fs::exists(index, ec)) {
    json idx = read_json(index);
    if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object()) {
      fail("io", "'" + index.string() + "' has no \"weight_map\" object mapping tensor names to shard files");
    }
    const json& wm = idx["weight_map"];
    // Open each shard once, in first-mention order.
    std::map<std::string, size_t> shard_index;
    for (auto it = wm.begin(); it != wm.end(); ++it) {
      if (!it.value().is_string()) {
        fail("io", "'" + index.string() + "': weight_map entry for '" + it.key() + "' is not a file name");
      }
      const std::string shard = it.value().get<std::string>();
      check_shard_name(shard, index);
      if (shard_index.count(shard)) continue;
      fs::path sp = p / shard;
      if (!fs::exists(sp, ec)) {
        fail("io", "'" + index.string() + "' refers to shard '" + shard + "' (for tensor '" + it.key() +
                       "') which is missing from '" + ck.dir + "'; download the missing shard");
      }
      shard_index[shard] = ck.shards.size();
      add_shard(sp);
    }
    for (auto it = wm.begin(); it != wm.end(); ++it) {
      const SafetensorsFile& sf = ck.shards[shard_index.at(it.value().get<std::string>())];
      if (!sf.tensors.count(it.key())) {
        fail("io", "'" + index.string() + "' places tensor '" + it.key() + "' in '" + sf.path +
                       "' but that shard does not contain it; the index and shards do not match");
      }
    }
  } else if (const fs::path base = p / (gptq_basename(ck.config) + ".safetensors");
             base.filename() != ".safetensors" && fs::exists(base, ec)) {
    add_shard(base);  // AutoGPTQ's model_basename (e.g. gptq_model-4bit-128g.safetensors)
  } else {
    fail("io", "'" + ck.dir + "' has neither model.safetensors nor model.safetensors.index.json");
  }
  return ck;
}

}  // namespace lowbit::io
