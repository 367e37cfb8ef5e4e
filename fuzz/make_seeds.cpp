// Writes one small valid input per fuzz target: <dir>/{safetensors,gguf,llama2c,llama2c_tokenizer}/seed*.
// Built from the writers so the seeds track the formats; the fuzzers mutate from there.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;
using namespace lowbit;
using namespace lowbit::io;

namespace {
template <typename T>
void put(std::vector<uint8_t>& b, T v) {
  size_t at = b.size();
  b.resize(at + sizeof(T));
  std::memcpy(b.data() + at, &v, sizeof(T));
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds DIR\n");
    return 2;
  }
  fs::path dir = argv[1];
  for (const char* sub : {"safetensors", "gguf", "llama2c", "llama2c_tokenizer", "tokenizer_json"})
    fs::create_directories(dir / sub);

  std::vector<float> f(64);
  for (size_t i = 0; i < f.size(); ++i) f[i] = 0.01f * static_cast<float>(i);
  write_safetensors((dir / "safetensors/seed1").string(),
                    {{"model.embed_tokens.weight", DType::F32, {4, 8}, f.data(), 128},
                     {"model.norm.weight", DType::BF16, {8}, f.data(), 16},
                     {"q", DType::I8, {2, 2}, f.data(), 4}},
                    {{"format", "pt"}});
  write_safetensors((dir / "safetensors/seed2").string(), {{"x", DType::F8_E4M3, {3}, f.data(), 3}});

  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 1);
  w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_bool("b", true);
  w.set_array_string("tokenizer.ggml.tokens", {"<unk>", "<s>", "a"});
  w.set_array_f32("tokenizer.ggml.scores", {0, 0, -1});
  w.set_array_i32("tokenizer.ggml.token_type", {2, 3, 1});
  std::vector<uint8_t> q8(34, 3);
  w.add_tensor("blk.0.attn_q.weight", 8, {1, 32}, q8.data(), q8.size());
  w.add_tensor("output_norm.weight", 0, {8}, f.data(), 32);
  w.write((dir / "gguf/seed1").string());

  // llama2.c: dim 4, hidden 4, 1 layer, 2 heads, 1 kv head, vocab 3, seq 2; then an untied variant.
  for (int untied = 0; untied < 2; ++untied) {
    std::vector<uint8_t> b;
    for (int32_t v : {4, 4, 1, 2, 1, untied ? -3 : 3, 2}) put(b, v);
    int floats = 3 * 4 + 4 + 16 + 8 + 8 + 16 + 4 + 48 + 4 + 4 + (untied ? 12 : 0);
    for (int i = 0; i < floats; ++i) put(b, 0.5f);
    write_file_atomic((dir / ("llama2c/seed" + std::to_string(untied + 1))).string(), b.data(), b.size());
  }

  std::vector<uint8_t> t;
  put<int32_t>(t, 4);  // vocab_size for the target
  put<int32_t>(t, 3);  // max_token_length
  for (const char* p : {"<s>", "a", " b", "\xe2\x96\x81"}) {
    put<float>(t, -1.0f);
    put<int32_t>(t, static_cast<int32_t>(std::strlen(p)));
    t.insert(t.end(), p, p + std::strlen(p));
  }
  write_file_atomic((dir / "llama2c_tokenizer/seed1").string(), t.data(), t.size());

  // tokenizer.json: a byte-level BPE and a SentencePiece-style (Prepend/Replace normalizer, byte fallback)
  // one.
  const std::string bpe =
      R"({"version":"1.0","added_tokens":[{"id":0,"content":"<|endoftext|>","special":true}],)"
      R"("normalizer":null,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},)"
      R"("decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"<|endoftext|>":0,"a":1,"b":2,)"
      R"("ab":3,"Ġ":4,"Ġab":5},"merges":["a b","Ġ ab"]}})";
  const std::string spm =
      R"({"version":"1.0","added_tokens":[{"id":0,"content":"<unk>","special":true},)"
      R"({"id":1,"content":"<s>","special":true}],"normalizer":{"type":"Sequence","normalizers":[)"
      R"({"type":"Prepend","prepend":"▁"},{"type":"Replace","pattern":{"String":" "},"content":"▁"}]},)"
      R"("pre_tokenizer":null,"decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":)"
      R"({"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"}]},)"
      R"("model":{"type":"BPE","byte_fallback":true,"unk_token":"<unk>","vocab":{"<unk>":0,"<s>":1,)"
      R"("<0x41>":2,"▁":3,"a":4,"▁a":5},"merges":["▁ a"]}})";
  std::string bpe_text = bpe + std::string(1, '\0') + "ab ab a";
  write_file_atomic((dir / "tokenizer_json/seed1").string(), bpe_text.data(), bpe_text.size());
  write_file_atomic((dir / "tokenizer_json/seed2").string(), spm.data(), spm.size());
  return 0;
}
