// The pieces both GGUF writers share (model/gguf_export.h writes Hugging Face tensors,
// model/gguf_model_export.h a loaded model in its stored formats): llama.cpp's hyperparameter keys, the
// tokenizer metadata, the q/k row order and the type names. Internal to the model module.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "arch/config.h"
#include "io/gguf.h"

namespace lowbit {

class Tokenizer;

namespace gguf_detail {

// Rows the export appends to the embedding (and output) matrices for tokens the source vocabulary lacks.
struct VocabExtension {
  int64_t n_tokens = 0;  // tokens written (source vocabulary + appended)
  int64_t appended = 0;
  int64_t row_source = -1;  // the source row each appended row copies (<unk>), or -1 for zero rows
};

// general.* and "<arch>.*" keys; file_ggml_type picks general.file_type (llama.cpp's llama_ftype numbering).
void write_hparams(io::GgufWriter& w, const ModelConfig& c, const std::string& name, int file_ggml_type);
// A Hugging Face tokenizer.json (byte-level BPE -> "gpt2"; SentencePiece-style BPE -> "llama"); null json
// writes nothing and returns the config's vocabulary size.
VocabExtension write_tokenizer_json(io::GgufWriter& w, const nlohmann::json& tj, const ModelConfig& c);
// A loaded score-merge tokenizer (llama2.c tokenizer.bin, GGUF "llama") as llama.cpp's "llama" vocabulary.
VocabExtension write_tokenizer_spm(io::GgufWriter& w, const Tokenizer& tok, const ModelConfig& c);
uint32_t llama_file_type(int ggml_type);

// llama.cpp's converter reorders each head's rows from HF's [first halves | second halves] to interleaved
// pairs: GGUF row 2i = HF row i, row 2i+1 = HF row i + head_dim/2.
std::vector<float> permute_qk(const std::vector<float>& w, int64_t n_heads, int64_t head_dim, int64_t cols);
// The GGUF type id of a name: f32, f16, bf16, or a GGUF block type the formats library quantizes to
// ("mxfp4" means ggml's MXFP4 block). UsageError listing the names otherwise.
int type_id(const std::string& t);
std::string type_name(int ggml_type);  // "q4_k", "f16", ...

}  // namespace gguf_detail
}  // namespace lowbit
