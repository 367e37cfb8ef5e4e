// Seeded random-weight models at real shapes, written in exactly the real file layouts (Hugging Face
// directory: config.json + model.safetensors + tokenizer.json + tokenizer_config.json +
// generation_config.json). They stand in for real checkpoints in speed/memory work and in architecture tests;
// the weights are N(0, 0.02) (norms 1), so the text they generate is noise but every byte is where a real
// checkpoint has it.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>  // complete type: FixtureShape holds a json by value
#include <string>
#include <vector>

#include "arch/config.h"

namespace lowbit {

struct FixtureShape {
  std::string name;  // "qwen2.5-0.5b", "tiny-qwen3", ...
  std::string description;
  nlohmann::json config;            // the Hugging Face config.json
  std::string pretokenizer;         // gpt2 | llama3 | qwen2 (byte-level BPE tokenizer.json style)
  bool store_lm_head_only = false;  // tied, but the file holds lm_head.weight only (like TinyStories-656K)
};

const std::vector<FixtureShape>& fixture_shapes();
// Throws UsageError listing the shapes when unknown.
const FixtureShape& fixture_shape(const std::string& name);

struct FixtureOptions {
  uint64_t seed = 0;
  std::string dtype = "bf16";  // f32 | f16 | bf16 (as real checkpoints ship)
  std::string tokenizer_text;  // text to learn the BPE merges from (default: a built-in paragraph)
};

// The tensors of a random model, by Hugging Face name, as float32: name -> (shape, values).
struct FixtureTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};
std::map<std::string, FixtureTensor> fixture_tensors(const ModelConfig& c, bool lm_head_only, uint64_t seed);

// A byte-level BPE tokenizer.json with `vocab_size` entries: 256 byte tokens, merges learned from `text`,
// special tokens, and unreachable filler entries up to the size.
nlohmann::json fixture_tokenizer_json(int64_t vocab_size, const std::string& pretokenizer,
                                      const std::string& text, int32_t bos_id, int32_t eos_id);

// Writes the directory (atomically: DIR.tmp then rename). Refuses an existing non-empty DIR.
void write_fixture_hf(const FixtureShape& s, const FixtureOptions& o, const std::string& dir);

}  // namespace lowbit
