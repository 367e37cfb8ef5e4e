// A Hugging Face model directory: config.json, model.safetensors or sharded model-0000x-of-0000y.safetensors
// with model.safetensors.index.json, tokenizer.json / tokenizer_config.json / generation_config.json.
#pragma once
#include <map>
#include <nlohmann/json.hpp>  // complete type: HfCheckpoint holds json members by value
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace lowbit::io {

struct HfCheckpoint {
  std::string dir;
  nlohmann::json config;             // config.json (required); quantize_config.json (AutoGPTQ) becomes its
                                     // quantization_config when it has none
  nlohmann::json tokenizer;          // tokenizer.json, or null when absent
  nlohmann::json tokenizer_config;   // tokenizer_config.json, or null
  nlohmann::json generation_config;  // generation_config.json, or null
  std::vector<SafetensorsFile> shards;
  std::map<std::string, TensorView> tensors;  // merged over shards; duplicate names are an error

  // Throws Error("io") naming the missing/bad file. Index files that point at missing shards or at tensors
  // absent from their shard are errors.
  static HfCheckpoint open(const std::string& dir);
};

}  // namespace lowbit::io
