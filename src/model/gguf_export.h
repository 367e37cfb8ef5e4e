// Writes a model as a llama.cpp GGUF file: llama.cpp tensor names and metadata keys, the tokenizer embedded,
// and matrices stored as F32/F16/BF16 or a GGUF block type (Q8_0, Q4_0, Q4_K, ...; quantized by the formats
// library). For the llama architecture the q/k rows are permuted as llama.cpp's converter does, so that its
// interleaved RoPE gives the same result as Hugging Face's rotate_half.
#pragma once
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "arch/config.h"
#include "tensor/tensor.h"

namespace lowbit {

struct GgufExportOptions {
  std::string type =
      "f32";  // f32 | f16 | bf16 | q8_0 | q4_0 | q4_1 | q5_0 | q4_k | q5_k | q6_k ... (matrices)
  std::string name = "lowbit-export";
};

// hf_tensors: Hugging Face names -> views (any element dtype). tokenizer_json: a Hugging Face tokenizer.json
// (byte-level BPE -> "gpt2" vocab; SentencePiece-style BPE -> "llama" vocab with merge-rank scores), or null.
// llama.cpp's "llama" tokenizer needs the byte tokens <0x00>..<0xFF> for characters outside the vocabulary:
// those the source lacks are appended as BYTE tokens after its vocabulary, with token_embd / output rows
// copied from <unk> (tinystories-656K: 2048 -> 2304 tokens); docs/tokenizers.md, "Export to GGUF".
void export_gguf(const ModelConfig& c, const std::map<std::string, TensorView>& hf_tensors,
                 const nlohmann::json& tokenizer_json, const GgufExportOptions& o, const std::string& path);

}  // namespace lowbit
