#include "io/llama2c.h"

#include <cstring>

#include "core/error.h"
#include "io/byte_reader.h"

namespace lowbit::io {
namespace {

using i128 = __int128;

std::string s(i128 v) {
  return std::to_string(static_cast<long long>(v));
}

// Bytes of token pieces beyond this are not a real tokenizer (llama2.c pieces are a few dozen bytes).
constexpr int32_t kMaxPieceBytes = 1 << 16;

}  // namespace

Llama2cCheckpoint Llama2cCheckpoint::parse(const uint8_t* bytes, size_t n, const std::string& name) {
  Llama2cCheckpoint ck;
  ck.path = name;
  if (n >= 4 && std::memcmp(bytes, "ak42", 4) == 0) {
    fail("io", name +
                   ": this is a llama2.c 'version 1/2' export (magic ak42), which lowbit does not read; "
                   "export with llama2.c's legacy format (export.py --version 0)");
  }
  detail::ByteReader r(bytes, n, name);
  r.need(28, "the 28-byte llama2.c header (7 int32)");
  Llama2cHeader& h = ck.header;
  h.dim = r.i32("dim");
  h.hidden_dim = r.i32("hidden_dim");
  h.n_layers = r.i32("n_layers");
  h.n_heads = r.i32("n_heads");
  h.n_kv_heads = r.i32("n_kv_heads");
  h.vocab_size = r.i32("vocab_size");
  h.seq_len = r.i32("seq_len");
  // A negative vocab size flags an untied classifier; INT32_MIN has no positive counterpart.
  h.shared_classifier = h.vocab_size > 0;
  if (h.vocab_size < 0 && h.vocab_size != INT32_MIN) h.vocab_size = -h.vocab_size;

  auto header_str = [&] {
    return "(dim " + std::to_string(h.dim) + ", hidden " + std::to_string(h.hidden_dim) + ", layers " +
           std::to_string(h.n_layers) + ", heads " + std::to_string(h.n_heads) + ", kv heads " +
           std::to_string(h.n_kv_heads) + ", vocab " + std::to_string(h.vocab_size) + ", seq_len " +
           std::to_string(h.seq_len) + ")";
  };
  if (h.dim <= 0 || h.hidden_dim <= 0 || h.n_layers <= 0 || h.n_heads <= 0 || h.n_kv_heads <= 0 ||
      h.vocab_size <= 0 || h.seq_len <= 0) {
    fail("io", name + ": llama2.c header has a non-positive field " + header_str() +
                   "; this is not a llama2.c checkpoint");
  }
  if (h.dim % h.n_heads != 0) {
    fail("io", name + ": n_heads " + std::to_string(h.n_heads) + " does not divide dim " +
                   std::to_string(h.dim) + " " + header_str());
  }
  if (h.n_heads % h.n_kv_heads != 0) {
    fail("io", name + ": n_kv_heads " + std::to_string(h.n_kv_heads) + " does not divide n_heads " +
                   std::to_string(h.n_heads) + " " + header_str());
  }
  const int64_t dim = h.dim, hidden = h.hidden_dim, L = h.n_layers, vocab = h.vocab_size;
  const int64_t head_dim = dim / h.n_heads;
  const int64_t kv_dim = h.n_kv_heads * head_dim;
  if (kv_dim > dim) {
    fail("io", name + ": n_kv_heads " + std::to_string(h.n_kv_heads) + " exceeds n_heads " + header_str());
  }

  // Expected size in 128-bit so that hostile dims (up to 2^31 each) cannot wrap.
  const i128 layer_floats =
      (i128)dim * 2 + (i128)dim * dim * 2 + (i128)kv_dim * dim * 2 + (i128)hidden * dim * 3;
  const i128 freq_floats = (i128)h.seq_len * (head_dim / 2) * 2;
  const i128 shared_floats = (i128)vocab * dim + (i128)L * layer_floats + dim + freq_floats;
  const i128 shared_bytes = 28 + shared_floats * 4;
  const i128 untied_bytes = shared_bytes + (i128)vocab * dim * 4;
  const i128 expected = h.shared_classifier ? shared_bytes : untied_bytes;
  if ((i128)n != expected) {
    std::string hint;
    if (h.shared_classifier && (i128)n == untied_bytes) {
      hint = "; the size matches an untied classifier but the header's vocab_size is positive (shared)";
    } else if (!h.shared_classifier && (i128)n == shared_bytes) {
      hint = "; the size matches a shared classifier but the header's vocab_size is negative (untied)";
    } else if ((i128)n < expected) {
      hint = "; the file is truncated";
    } else {
      hint = "; the header does not describe this file";
    }
    fail("io", name + ": llama2.c checkpoint " + header_str() + " with " +
                   (h.shared_classifier ? "shared" : "untied") + " classifier should be " +
                   (expected > ((i128)1 << 62) ? std::string("more than 2^62") : s(expected)) +
                   " bytes but the file has " + std::to_string(n) + " bytes" + hint);
  }

  // Every view below lies inside the file: the total was just checked.
  const uint8_t* p = bytes + 28;
  auto take = [&](std::vector<int64_t> shape) {
    TensorView v;
    v.dtype = DType::F32;
    v.shape = std::move(shape);
    v.data = p;
    v.nbytes = static_cast<size_t>(shape_numel(v.shape)) * 4;
    p += v.nbytes;
    return v;
  };
  auto per_layer = [&](const std::string& suffix, std::vector<int64_t> shape) {
    for (int64_t i = 0; i < L; ++i) {
      ck.tensors["model.layers." + std::to_string(i) + "." + suffix] = take(shape);
    }
  };
  ck.tensors["model.embed_tokens.weight"] = take({vocab, dim});
  per_layer("input_layernorm.weight", {dim});
  per_layer("self_attn.q_proj.weight", {dim, dim});
  per_layer("self_attn.k_proj.weight", {kv_dim, dim});
  per_layer("self_attn.v_proj.weight", {kv_dim, dim});
  per_layer("self_attn.o_proj.weight", {dim, dim});
  per_layer("post_attention_layernorm.weight", {dim});
  per_layer("mlp.gate_proj.weight", {hidden, dim});
  per_layer("mlp.down_proj.weight", {dim, hidden});
  per_layer("mlp.up_proj.weight", {hidden, dim});
  ck.tensors["model.norm.weight"] = take({dim});
  p += static_cast<size_t>(freq_floats) * 4;  // legacy RoPE tables: recomputed by the model
  if (!h.shared_classifier) ck.tensors["lm_head.weight"] = take({vocab, dim});
  return ck;
}

Llama2cCheckpoint Llama2cCheckpoint::open(const std::string& path) {
  auto mf = MappedFile::open(path);
  Llama2cCheckpoint ck = parse(mf->data(), mf->size(), path);
  ck.file = std::move(mf);
  return ck;
}

Llama2cTokenizerData Llama2cTokenizerData::parse(const uint8_t* bytes, size_t n, int32_t vocab_size,
                                                 const std::string& name) {
  Llama2cTokenizerData t;
  detail::ByteReader r(bytes, n, name);
  t.max_token_length = r.i32("max_token_length");
  if (t.max_token_length < 0 || t.max_token_length > kMaxPieceBytes) {
    fail("io", name + ": max_token_length " + std::to_string(t.max_token_length) +
                   " is out of range; this is not a llama2.c tokenizer");
  }
  // vocab_size <= 0: read tokens until the end of the file.
  if (vocab_size > 0) {
    // Each token takes at least 8 bytes (score + length): reject impossible counts before allocating.
    if ((uint64_t)vocab_size * 8 > r.remaining()) {
      fail("io", name + ": a tokenizer of " + std::to_string(vocab_size) + " tokens needs at least " +
                     std::to_string((uint64_t)vocab_size * 8 + 4) + " bytes but the file has " +
                     std::to_string(n) +
                     "; the tokenizer does not match the model's vocab_size or is truncated");
    }
    t.pieces.reserve(vocab_size);
    t.scores.reserve(vocab_size);
  }
  for (int64_t i = 0; vocab_size > 0 ? i < vocab_size : r.remaining() > 0; ++i) {
    const std::string where = "token " + std::to_string(i);
    float score = r.read<float>(where + " score");
    int32_t len = r.i32(where + " length");
    if (len < 0 || len > kMaxPieceBytes) {
      fail("io", name + ": " + where + " has length " + std::to_string(len) + " at offset " +
                     std::to_string(r.pos() - 4) + "; the tokenizer is corrupt");
    }
    const uint8_t* b = r.bytes(static_cast<uint64_t>(len), where + " bytes");
    t.pieces.emplace_back(reinterpret_cast<const char*>(b), static_cast<size_t>(len));
    t.scores.push_back(score);
  }
  if (r.remaining() != 0) {
    fail("io", name + ": " + std::to_string(r.remaining()) + " bytes left after " +
                   std::to_string(vocab_size) +
                   " tokens; the tokenizer has a larger vocabulary than the model (vocab_size mismatch)");
  }
  return t;
}

Llama2cTokenizerData Llama2cTokenizerData::open(const std::string& path, int32_t vocab_size) {
  auto mf = MappedFile::open(path);
  return parse(mf->data(), mf->size(), vocab_size, path);
}

}  // namespace lowbit::io
