#include "model/gguf_export.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/json_text.h"
#include "formats/format.h"
#include "formats/ggml_types.h"
#include "io/gguf.h"
#include "model/gguf_export_common.h"
#include "tokenizer/tokenizer.h"

using nlohmann::json;

namespace lowbit {
namespace gguf_detail {

// llama.cpp's converter reorders each head's rows from HF's [first halves | second halves] to interleaved
// pairs: GGUF row 2i = HF row i, row 2i+1 = HF row i + head_dim/2.
std::vector<float> permute_qk(const std::vector<float>& w, int64_t n_heads, int64_t head_dim, int64_t cols) {
  std::vector<float> out(w.size());
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int s = 0; s < 2; ++s) {
        const float* src = w.data() + (h * head_dim + i + s * half) * cols;
        std::copy(src, src + cols, out.data() + (h * head_dim + 2 * i + s) * cols);
      }
  return out;
}

// The llama.cpp name of a Hugging Face tensor (the tensor-role table), "" when it names no role.
std::string gguf_name(const std::string& hf, RoleRef* ref) {
  return parse_hf_tensor_name(hf, ref) ? gguf_tensor_name(ref->role, ref->layer) : std::string();
}

int type_id(const std::string& t) {
  std::string n;
  for (char ch : t) n += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (n == "f32") return 0;
  if (n == "f16") return 1;
  if (n == "bf16") return 30;
  if (n == "mxfp4") n = "ggml_mxfp4";  // in a GGUF file, MXFP4 is ggml's block
  const FormatInfo* f = find_format(n);
  if (f && f->is_gguf() && (f->quantize_row || f->quantize_row_weighted)) return f->ggml_type;
  std::string names = "f32, f16, bf16";
  for (const FormatInfo& r : format_table())
    if (r.is_gguf() && (r.quantize_row || r.quantize_row_weighted)) names += std::string(", ") + r.name;
  throw UsageError("model", "unsupported GGUF tensor type '" + t + "'; use one of " + names);
}

std::string type_name(int ggml_type) {
  if (ggml_type == 0) return "f32";
  if (ggml_type == 1) return "f16";
  if (ggml_type == 30) return "bf16";
  const FormatInfo* f = format_by_ggml_type(ggml_type);
  return f ? f->name : "ggml type " + std::to_string(ggml_type);
}

namespace {

bool is_byte_piece(const std::string& p) {
  return p.size() == 6 && p.rfind("<0x", 0) == 0 && p[5] == '>' &&
         std::isxdigit(static_cast<unsigned char>(p[3])) && std::isxdigit(static_cast<unsigned char>(p[4]));
}

// llama.cpp's SPM spells a character missing from the vocabulary as its UTF-8 bytes, the tokens "<0xXX>",
// and throws (std::out_of_range: the server answers 500, llama-perplexity aborts) when one is missing. A
// vocabulary may lack them (Hugging Face byte_fallback then gives <unk>): append the missing ones as BYTE
// tokens, whose embedding (and output) rows copy <unk>'s, so that llama.cpp tokenizes every text.
int64_t append_byte_tokens(std::vector<std::string>& tokens, std::vector<int32_t>& types,
                           std::vector<float>& scores) {
  static const char* kHex = "0123456789ABCDEF";
  auto byte_piece = [](int b) { return std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">"; };
  std::vector<bool> have(256, false);  // llama.cpp looks up the upper-case spelling only
  for (size_t i = 0; i < tokens.size(); ++i)
    if (is_byte_piece(tokens[i])) {
      types[i] = 6;
      const int b = std::stoi(tokens[i].substr(3, 2), nullptr, 16);
      if (tokens[i] == byte_piece(b)) have[b] = true;
    }
  int64_t appended = 0;
  for (int b = 0; b < 256; ++b)
    if (!have[b]) {
      tokens.push_back(byte_piece(b));
      types.push_back(6);
      scores.push_back(0.0f);
      ++appended;
    }
  return appended;
}

}  // namespace

VocabExtension write_tokenizer_json(io::GgufWriter& w, const json& tj, const ModelConfig& c) {
  VocabExtension ext;
  ext.n_tokens = c.vocab_size;
  if (tj.is_null()) return ext;
  const json& m = tj.at("model");
  if (m.value("type", "") != "BPE") fail("model", "GGUF export supports BPE tokenizer.json only");
  std::vector<std::string> tokens(static_cast<size_t>(c.vocab_size));
  std::vector<int32_t> types(tokens.size(), 1);
  for (auto& [piece, id] : m.at("vocab").items()) {
    int64_t i = id.get<int64_t>();
    if (i >= 0 && i < c.vocab_size) tokens[i] = piece;
  }
  if (tj.contains("added_tokens"))
    for (const auto& a : tj["added_tokens"]) {
      int64_t i = a.at("id").get<int64_t>();
      if (i < 0 || i >= c.vocab_size) continue;
      tokens[i] = a.at("content").get<std::string>();
      types[i] = a.value("special", false) ? 3 : 4;
    }
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i].empty()) tokens[i] = "[PAD" + std::to_string(i) + "]", types[i] = 5;
  std::vector<std::string> merges;
  for (const auto& mg : m.value("merges", json::array()))
    merges.push_back(mg.is_string() ? mg.get<std::string>()
                                    : mg[0].get<std::string>() + " " + mg[1].get<std::string>());
  const std::string d = json_text(tj);
  int64_t unk = -1;
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    auto it = std::find(tokens.begin(), tokens.end(), m["unk_token"].get<std::string>());
    if (it != tokens.end()) unk = it - tokens.begin();
  }
  if (d.find("\"ByteLevel\"") != std::string::npos) {
    w.set_string("tokenizer.ggml.model", "gpt2");
    // llama.cpp's pre-tokenizer names: the Llama-3 regex, the Qwen2 regex, GPT-2's regex after individual
    // digits (SmolLM), or plain GPT-2.
    std::string pre = d.find("\\\\p{N}{1,3}") != std::string::npos ? "llama-bpe"
                      : d.find("Split") != std::string::npos       ? "qwen2"
                      : d.find("\"Digits\"") != std::string::npos  ? "smollm"
                                                                   : "default";
    w.set_string("tokenizer.ggml.pre", pre);
    w.set_array_string("tokenizer.ggml.merges", merges);
  } else {
    // SentencePiece-style BPE (a "▁" vocabulary, no byte-level alphabet): llama.cpp's "llama" (SPM)
    // tokenizer. It merges by score, so score = -(rank of the merge creating the piece).
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string("tokenizer.ggml.pre", "default");
    std::vector<float> scores(tokens.size(), 0.0f);
    for (size_t r = 0; r < merges.size(); ++r) {
      auto sp = merges[r].find(' ');
      std::string merged = merges[r].substr(0, sp) + merges[r].substr(sp + 1);
      auto it = m.at("vocab").find(merged);
      if (it != m.at("vocab").end()) scores[it->get<int64_t>()] = -static_cast<float>(r + 1);
    }
    ext.appended = append_byte_tokens(tokens, types, scores);
    ext.row_source = unk;
    // The dummy prefix: Hugging Face's Prepend("▁") normalizer or a Metaspace pre-tokenizer that prepends.
    const bool prefix =
        d.find("\"Prepend\"") != std::string::npos ||
        (d.find("\"Metaspace\"") != std::string::npos && d.find("\"never\"") == std::string::npos);
    w.set_bool("tokenizer.ggml.add_space_prefix", prefix);
    w.set_array_f32("tokenizer.ggml.scores", scores);
  }
  ext.n_tokens = static_cast<int64_t>(tokens.size());
  w.set_array_string("tokenizer.ggml.tokens", tokens);
  w.set_array_i32("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(c.bos_id));
  w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(c.eos_id));
  if (unk >= 0) w.set_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(unk));
  return ext;
}

VocabExtension write_tokenizer_spm(io::GgufWriter& w, const Tokenizer& tok, const ModelConfig& c) {
  if (tok.options().algo != TokenizerAlgo::ScoreMerge)
    fail("model",
         "GGUF export of a '" + tok.options().name +
             "' tokenizer from memory is not supported; export a model directory with tokenizer.json");
  // As llama.cpp's convert-llama2c-to-ggml: pieces with spaces spelled "▁", <unk> UNKNOWN, BOS/EOS and
  // empty pieces CONTROL, <0xXX> BYTE, the rest as the tokenizer marks them; the scores as stored.
  const int32_t n = tok.vocab_size();
  std::vector<std::string> tokens(static_cast<size_t>(n));
  std::vector<int32_t> types(tokens.size(), 1);
  std::vector<float> scores(tokens.size(), 0.0f);
  for (int32_t i = 0; i < n; ++i) {
    std::string p = tok.piece(i);
    if (!tok.options().escape_spaces) {
      std::string e;
      for (char ch : p) {
        if (ch == ' ')
          e.append("\xe2\x96\x81");
        else
          e.push_back(ch);
      }
      p = std::move(e);
    }
    tokens[i] = p;
    scores[i] = tok.score(i);
    types[i] = static_cast<int32_t>(tok.attr(i));
    if (i == tok.unk_id()) types[i] = 2;
    if (i == tok.bos_id() || i == tok.eos_id() || p.empty()) types[i] = 3;
  }
  VocabExtension ext;
  ext.appended = append_byte_tokens(tokens, types, scores);
  ext.row_source = tok.unk_id();
  ext.n_tokens = static_cast<int64_t>(tokens.size());
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string("tokenizer.ggml.pre", "default");
  w.set_bool("tokenizer.ggml.add_space_prefix", tok.options().prefix != PrefixMode::Never);
  w.set_array_string("tokenizer.ggml.tokens", tokens);
  w.set_array_f32("tokenizer.ggml.scores", scores);
  w.set_array_i32("tokenizer.ggml.token_type", types);
  if (tok.bos_id() >= 0) w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(tok.bos_id()));
  if (tok.eos_id() >= 0) w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(tok.eos_id()));
  if (tok.unk_id() >= 0) w.set_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(tok.unk_id()));
  return ext;
}

// general.file_type uses llama.cpp's llama_ftype numbering, not ggml tensor type ids (they agree only for
// F32, F16, Q4_0 and Q4_1): e.g. tensor type Q8_0 = 8 but file type MOSTLY_Q8_0 = 7. A file whose matrices
// are all Q4_K / Q5_K is the "_S" variant.
uint32_t llama_file_type(int ggml_type) {
  switch (ggml_type) {
    case 0:
      return 0;  // ALL_F32
    case 1:
      return 1;  // MOSTLY_F16
    case 2:
      return 2;  // MOSTLY_Q4_0
    case 3:
      return 3;  // MOSTLY_Q4_1
    case 6:
      return 8;  // MOSTLY_Q5_0
    case 7:
      return 9;  // MOSTLY_Q5_1
    case 8:
      return 7;  // MOSTLY_Q8_0
    case 10:
      return 10;  // MOSTLY_Q2_K
    case 11:
      return 11;  // MOSTLY_Q3_K_S
    case 12:
      return 14;  // MOSTLY_Q4_K_S
    case 13:
      return 16;  // MOSTLY_Q5_K_S
    case 14:
      return 18;  // MOSTLY_Q6_K
    case 20:
      return 25;  // MOSTLY_IQ4_NL
    case 23:
      return 30;  // MOSTLY_IQ4_XS
    case 30:
      return 32;  // MOSTLY_BF16
    case 39:
      return 38;  // MOSTLY_MXFP4_MOE
    default:
      return 0;
  }
}

void write_hparams(io::GgufWriter& w, const ModelConfig& c, const std::string& name, int file_ggml_type) {
  const std::string arch = arch_row(c.arch).gguf_arch;
  w.set_string("general.architecture", arch);
  w.set_string("general.name", name);
  w.set_u32("general.file_type", llama_file_type(file_ggml_type));
  if (file_ggml_type != 0 && file_ggml_type != 1 && file_ggml_type != 30)
    w.set_u32("general.quantization_version", 2);
  auto k = [&](const std::string& s) { return arch + "." + s; };
  w.set_u32(k("context_length"), static_cast<uint32_t>(c.max_seq_len));
  w.set_u32(k("embedding_length"), static_cast<uint32_t>(c.dim));
  w.set_u32(k("block_count"), static_cast<uint32_t>(c.n_layers));
  w.set_u32(k("feed_forward_length"), static_cast<uint32_t>(c.ffn_dim));
  w.set_u32(k("attention.head_count"), static_cast<uint32_t>(c.n_heads));
  w.set_u32(k("attention.head_count_kv"), static_cast<uint32_t>(c.n_kv_heads));
  w.set_u32(k("attention.key_length"), static_cast<uint32_t>(c.head_dim));
  w.set_u32(k("attention.value_length"), static_cast<uint32_t>(c.head_dim));
  w.set_f32(k("attention.layer_norm_rms_epsilon"), static_cast<float>(c.norm_eps));
  w.set_f32(k("rope.freq_base"), static_cast<float>(c.rope_theta));
  w.set_u32(k("vocab_size"), static_cast<uint32_t>(c.vocab_size));
  if (c.rope_scaling.type == "linear") {
    w.set_string(k("rope.scaling.type"), "linear");
    w.set_f32(k("rope.scaling.factor"), static_cast<float>(c.rope_scaling.factor));
  }
}

}  // namespace gguf_detail

using namespace gguf_detail;

void export_gguf(const ModelConfig& c, const std::map<std::string, TensorView>& hf,
                 const json& tokenizer_json, const GgufExportOptions& o, const std::string& path) {
  const int mat_type = type_id(o.type);
  const ArchRow& row = arch_row(c.arch);
  io::GgufWriter w;
  write_hparams(w, c, o.name, mat_type);
  const VocabExtension ext = write_tokenizer_json(w, tokenizer_json, c);
  w.set_u32(row.gguf_arch + std::string(".vocab_size"), static_cast<uint32_t>(ext.n_tokens));

  // Tensor payloads must outlive write(): keep them here.
  std::vector<std::vector<uint8_t>> store;
  store.reserve(hf.size() + 2);
  // llama.cpp's llama rows are permuted for its interleaved RoPE; qwen2/qwen3/gemma keep HF order (NEOX
  // rope).
  const bool interleave = row.gguf_rope == RopeStyle::Interleaved;
  auto add = [&](const std::string& name, const std::vector<int64_t>& shape, std::vector<float> f,
                 bool matrix) {
    int t = matrix ? mat_type : 0;
    std::vector<uint8_t> bytes;
    if (t == 0) {
      bytes.resize(f.size() * 4);
      std::memcpy(bytes.data(), f.data(), bytes.size());
    } else if (t == 1 || t == 30) {
      bytes.resize(f.size() * 2);
      auto* h = reinterpret_cast<uint16_t*>(bytes.data());
      for (size_t i = 0; i < f.size(); ++i) h[i] = t == 1 ? f32_to_f16(f[i]) : f32_to_bf16(f[i]);
    } else {
      const GgmlTypeInfo* info = ggml_type_info(t);
      const int64_t cols = shape.back(), rows = static_cast<int64_t>(f.size()) / cols;
      if (cols % info->block_elems)
        throw UsageError("model", "tensor '" + name + "' has rows of " + std::to_string(cols) +
                                      " elements, not a multiple of the " + std::string(info->name) +
                                      " block (" + std::to_string(info->block_elems) +
                                      "); pick another --type");
      const int64_t rb = ggml_row_bytes(*info, cols);
      bytes.resize(static_cast<size_t>(rb * rows));
      for (int64_t r = 0; r < rows; ++r)
        quantize_row_ggml(t, f.data() + r * cols, bytes.data() + r * rb, cols);
    }
    store.push_back(std::move(bytes));
    w.add_tensor(name, t, shape, store.back().data(), store.back().size());
  };
  using enum TensorRole;
  const bool has_embed = hf.count(hf_tensor_name(TokEmbed, -1)) != 0;
  for (const auto& [name, v] : hf) {
    RoleRef ref{};
    std::string g = gguf_name(name, &ref);
    if (g.empty()) fail("model", "GGUF export: no llama.cpp name for tensor '" + name + "'");
    if (v.dtype == DType::GGML_BLOCK) fail("model", "GGUF export wants dense source tensors");
    std::vector<float> f(static_cast<size_t>(v.numel()));
    to_f32(v, f.data());
    bool matrix = v.shape.size() == 2;
    if (interleave && (ref.role == Q || ref.role == BiasQ))
      f = permute_qk(f, c.n_heads, c.head_dim, matrix ? v.shape[1] : 1);
    if (interleave && (ref.role == K || ref.role == BiasK))
      f = permute_qk(f, c.n_kv_heads, c.head_dim, matrix ? v.shape[1] : 1);
    // llama.cpp's GGUF stores RMSNorm weights as the layer multiplies by them (Gemma's HF files hold w - 1).
    if (role_row(ref.role).kind == RoleKind::Norm && c.norm_weight_offset != 0.0f)
      for (float& x : f) x += c.norm_weight_offset;
    // A tied checkpoint that stores only lm_head.weight: GGUF wants token_embd.weight (output.weight absent).
    if (ref.role == LmHead && c.tie_embeddings) {
      if (has_embed) continue;
      g = gguf_tensor_name(TokEmbed, -1);
    }
    std::vector<int64_t> shape = v.shape;
    if (ext.appended > 0 && (ref.role == TokEmbed || ref.role == LmHead)) {
      // Rows of the appended byte tokens: copies of <unk>'s (the source model reads an unknown character as
      // <unk>), zeros without one.
      const int64_t cols = shape.back(), rows = shape[0];
      f.resize(static_cast<size_t>((rows + ext.appended) * cols), 0.0f);
      if (ext.row_source >= 0 && ext.row_source < rows)
        for (int64_t r = rows; r < rows + ext.appended; ++r)
          std::copy_n(f.begin() + ext.row_source * cols, cols, f.begin() + r * cols);
      shape[0] = rows + ext.appended;
    }
    add(g, shape, std::move(f), matrix);
  }
  w.write(path);
}

}  // namespace lowbit
