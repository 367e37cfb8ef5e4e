// Writes small valid inputs per fuzz target into <dir>/<target>/seed*. Built from the writers so the seeds
// track the formats; the fuzzers mutate from there. With a second argument (the shared/ folder), the
// tokenizer-test GGUF vocabularies and the TinyStories config.json are cut down into seeds as well.
// fuzz/make_corpus.sh adds seeds made by the lowbit CLI (fixture models, quantized checkpoints, baselines).
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
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
void put_text(const fs::path& p, const std::string& s) {
  write_file_atomic(p.string(), s.data(), s.size());
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A real GGUF cut down to a seed: arrays keep their first entries (the real key set, string pieces, scores
// and merges), tensors only when tiny (norms); the big matrices are dropped.
void write_cut_gguf(const std::string& from, const std::string& to) {
  constexpr size_t kKeep = 300, kMaxTensorBytes = 1024;
  const GgufFile g = GgufFile::open(from);
  GgufWriter w;
  for (const std::string& k : g.kv_order) {
    const GgufValue& v = g.kv.at(k);
    if (v.type != GgufType::ARRAY || v.as_array().size() <= kKeep) {
      w.set_value(k, v);
      continue;
    }
    GgufValue cut;
    cut.type = GgufType::ARRAY;
    cut.elem_type = v.elem_type;
    auto arr = std::make_shared<GgufArray>();
    for (size_t i = 0; i < kKeep; ++i) arr->push_back(v.as_array()[i]);
    cut.v = std::move(arr);
    w.set_value(k, cut);
  }
  for (const std::string& name : g.tensor_order) {
    const TensorView& t = g.tensors.at(name);
    if (t.nbytes <= kMaxTensorBytes) w.add_tensor(name, t.ggml_type, t.shape, t.data, t.nbytes);
  }
  w.write(to, static_cast<uint32_t>(g.alignment));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--cut-gguf") {  // fuzz_make_seeds --cut-gguf IN OUT
    write_cut_gguf(argv[2], argv[3]);
    return 0;
  }
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: fuzz_make_seeds DIR [SHARED_DIR] | fuzz_make_seeds --cut-gguf IN OUT\n");
    return 2;
  }
  fs::path dir = argv[1];
  for (const char* sub :
       {"safetensors", "gguf", "llama2c", "llama2c_tokenizer", "tokenizer_json", "gguf_model",
        "hf_checkpoint", "quantized_checkpoint", "baseline", "recipe", "kv_spec"})
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
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_u32("llama.embedding_length", 32);
  w.set_u32("llama.attention.head_count", 4);
  w.set_u32("llama.feed_forward_length", 64);
  w.write((dir / "gguf_model/seed1").string());
  if (argc == 3) {
    const fs::path vocabs = fs::path(argv[2]) / "data/tokenizer-tests";
    for (const char* name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"}) {
      if (!fs::exists(vocabs / name)) continue;
      write_cut_gguf((vocabs / name).string(), (dir / "gguf_model" / name).string());
    }
  }

  // Text inputs: recipes (first byte even: --recipe argument, odd: JSON) and KV specs (NUL-separated flags).
  const std::vector<std::string> recipes = {
      std::string(1, '\0') + "W4A16",
      std::string(1, '\0') + "int4:g32:sym:f16,algo=gptq,ignore=lm_head",
      std::string(1, '\0') + "W4A16KV8,group=64,act=int8,kv_strategy=head",
      std::string(1, '\0') + "NVFP4",
      "\x01{\"preset\":\"W4A16\",\"overrides\":[{\"pattern\":\"*.w_down\",\"scheme\":\"int8:channel\"}],"
      "\"ignore\":[\"lm_head\",{\"pattern\":\"re:.*embed.*\",\"reason\":\"x\"}]}",
      "\x01{\"scheme\":\"nf4:g64\",\"algorithm\":\"awq\",\"activations\":{\"format\":\"int8\",\"dynamic\":"
      "true},"
      "\"kv_cache\":{\"format\":\"e4m3\",\"strategy\":\"head\"},\"gptq\":{\"block_size\":128,\"damp\":0.01}"
      "}"};
  for (size_t i = 0; i < recipes.size(); ++i) put_text(dir / ("recipe/seed" + std::to_string(i)), recipes[i]);
  const std::vector<std::vector<std::string>> kvs = {{"int4:window128+rot", "", "", ""},
                                                     {"e4m3:head", "int4:asym", "int2", "h2o:64:recent16"},
                                                     {"fp4:scale=2", "", "", "streaming:4+60"},
                                                     {"int8,keep=0,-1,block=32,budget=64MiB", "", "", ""},
                                                     {"bf16", "int4:pertoken", "e5m2:token", "h2o:50%"}};
  for (size_t i = 0; i < kvs.size(); ++i) {
    std::string text;
    for (size_t f = 0; f < kvs[i].size(); ++f) text += (f ? std::string(1, '\0') : std::string()) + kvs[i][f];
    put_text(dir / ("kv_spec/seed" + std::to_string(i)), text);
  }

  // HF directory: config.json NUL [index.json] NUL shard. One sharded (index naming the shard), one single
  // file.
  std::string config =
      R"({"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":8,)"
      R"("intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2,)"
      R"("num_key_value_heads":1,"vocab_size":4,"rms_norm_eps":1e-5,"tie_word_embeddings":true,)"
      R"("lowbit_rope_style":"half","rope_scaling":{"rope_type":"llama3","factor":8.0,)"
      R"("low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":64}})";
  if (argc == 3) {
    std::ifstream in(fs::path(argv[2]) / "models/tinystories-656K/config.json");
    std::stringstream ss;
    ss << in.rdbuf();
    if (!ss.str().empty()) put_text(dir / "hf_checkpoint/tinystories", ss.str() + std::string(2, '\0'));
  }
  const std::string shard = read_all(dir / "safetensors/seed1");
  const std::string index = R"({"metadata":{"total_size":148},"weight_map":{"model.embed_tokens.weight":)"
                            R"("model-00001-of-00001.safetensors","model.norm.weight":)"
                            R"("model-00001-of-00001.safetensors","q":"model-00001-of-00001.safetensors"}})";
  put_text(dir / "hf_checkpoint/seed1", config + '\0' + index + '\0' + shard);
  put_text(dir / "hf_checkpoint/seed2", config + '\0' + '\0' + shard);

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
