// llama2.c checkpoints (.bin) and tokenizers (tokenizer.bin).
//
// Checkpoint: 7 int32 header (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len); a
// negative vocab_size means an untied classifier follows. Then float32 arrays: token_embedding [vocab, dim],
// rms_att [L, dim], wq [L, dim, dim], wk [L, kv_dim, dim], wv [L, kv_dim, dim], wo [L, dim, dim],
// rms_ffn [L, dim], w1 [L, hidden, dim], w2 [L, dim, hidden], w3 [L, hidden, dim], rms_final [dim],
// freq_cis_real [seq_len, head_dim/2], freq_cis_imag [seq_len, head_dim/2] (legacy, skipped),
// then wcls [vocab, dim] if untied. Sizes are checked against the file length.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/mapped_file.h"
#include "tensor/tensor.h"

namespace lowbit::io {

struct Llama2cHeader {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
  bool shared_classifier;  // vocab_size > 0 in the file
};

struct Llama2cCheckpoint {
  std::string path;
  Llama2cHeader header{};
  std::shared_ptr<MappedFile> file;
  // Tensors exposed with Hugging Face Llama names so the model rung maps every source the same way:
  // model.embed_tokens.weight [vocab, dim], model.layers.{i}.input_layernorm.weight [dim],
  // model.layers.{i}.self_attn.{q,k,v,o}_proj.weight, model.layers.{i}.post_attention_layernorm.weight,
  // model.layers.{i}.mlp.{gate,down,up}_proj.weight (w1=gate, w2=down, w3=up), model.norm.weight,
  // lm_head.weight only when untied. q/k keep llama2.c's interleaved RoPE pair order (no permutation).
  std::map<std::string, TensorView> tensors;

  static Llama2cCheckpoint open(const std::string& path);
  static Llama2cCheckpoint parse(const uint8_t* bytes, size_t n, const std::string& name_for_errors);
};

// tokenizer.bin: int32 max_token_length, then per token: float score, int32 length, bytes. With vocab_size >
// 0 the file must hold exactly that many tokens (a mismatch with the model is an error); vocab_size <= 0
// reads tokens until the end of the file.
struct Llama2cTokenizerData {
  int32_t max_token_length = 0;
  std::vector<std::string> pieces;  // raw bytes of each token
  std::vector<float> scores;        // merge priority (higher merges first)
  static Llama2cTokenizerData open(const std::string& path, int32_t vocab_size);
  static Llama2cTokenizerData parse(const uint8_t* bytes, size_t n, int32_t vocab_size,
                                    const std::string& name_for_errors);
};

}  // namespace lowbit::io
