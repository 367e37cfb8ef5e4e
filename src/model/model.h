// Loading a model from any supported source: a Hugging Face directory (safetensors), a GGUF file, or a
// llama2.c checkpoint (+ tokenizer.bin). The source format is detected from the path and the file's magic.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "arch/config.h"
#include "model/weights.h"

namespace lowbit {

class Tokenizer;

struct LoadOptions {
  DenseMode dense = DenseMode::Native;  // how F32/F16/BF16 tensors are held
  std::string tokenizer_path;           // llama2.c: tokenizer.bin (default: found next to the model)
};

struct Model {
  ModelConfig config;
  ModelWeights weights;
  std::shared_ptr<Tokenizer> tokenizer;  // may be null when no tokenizer was found (ids-only use)
  std::string path;                      // what the user gave
  std::string format;                    // hf | gguf | llama2c
  std::vector<std::shared_ptr<const void>> keep_alive;  // mapped files
  double load_seconds = 0;
};

// Throws Error("io"/"model") with what is wrong and where; never returns a half-loaded model.
std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& o = {});

// llama2.c: the tokenizer for a checkpoint: `given` if set, else tokenizer.bin beside it, else the single
// tok*.bin beside it; "" when none is found.
std::string find_llama2c_tokenizer(const std::string& model_path, const std::string& given);

// "hf", "gguf" or "llama2c" for a path, by directory contents and magic bytes; Error("model") if none fits.
std::string detect_model_format(const std::string& path);

}  // namespace lowbit
