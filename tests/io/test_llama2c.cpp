#include <gtest/gtest.h>

#include <cstring>

#include "io/llama2c.h"
#include "io_test_util.h"

namespace lowbit::io {
namespace {

using namespace lowbit::io::testing;

struct Dims {
  int32_t dim = 8, hidden = 12, layers = 2, heads = 2, kv_heads = 1, vocab = 10, seq = 4;
};

// Float count of each section in file order, computed independently of the reader.
std::vector<std::pair<std::string, int64_t>> sections(const Dims& d, bool untied) {
  int64_t hd = d.dim / d.heads, kv = d.kv_heads * hd, L = d.layers;
  std::vector<std::pair<std::string, int64_t>> s = {
      {"emb", d.vocab * d.dim},     {"rms_att", L * d.dim},       {"wq", L * d.dim * d.dim},
      {"wk", L * kv * d.dim},       {"wv", L * kv * d.dim},       {"wo", L * d.dim * d.dim},
      {"rms_ffn", L * d.dim},       {"w1", L * d.hidden * d.dim}, {"w2", L * d.dim * d.hidden},
      {"w3", L * d.hidden * d.dim}, {"rms_final", d.dim},         {"freq", d.seq * hd}};
  if (untied) s.push_back({"wcls", d.vocab * d.dim});
  return s;
}

// Each float holds its own index in the float payload, so a view's first value says where it points.
std::vector<uint8_t> make_ckpt(const Dims& d, bool untied, int64_t extra_bytes = 0) {
  Bytes b;
  b.put(d.dim)
      .put(d.hidden)
      .put(d.layers)
      .put(d.heads)
      .put(d.kv_heads)
      .put(untied ? -d.vocab : d.vocab)
      .put(d.seq);
  int64_t total = 0;
  for (auto& [n, c] : sections(d, untied)) total += c;
  for (int64_t i = 0; i < total; ++i) b.put(static_cast<float>(i));
  b.b.resize(static_cast<size_t>(static_cast<int64_t>(b.b.size()) + extra_bytes));
  return b.b;
}

Llama2cCheckpoint parse(const std::vector<uint8_t>& b) {
  return Llama2cCheckpoint::parse(b.data(), b.size(), "m.bin");
}

float first(const TensorView& v) {
  float x;
  std::memcpy(&x, v.data, 4);
  return x;
}

TEST(Llama2c, ViewsLandOnTheRightBytes) {
  for (bool untied : {false, true}) {
    Dims d;
    auto b = make_ckpt(d, untied);
    auto ck = parse(b);
    EXPECT_EQ(ck.header.shared_classifier, !untied);
    EXPECT_EQ(ck.header.vocab_size, 10);
    std::map<std::string, int64_t> start;
    int64_t at = 0;
    for (auto& [n, c] : sections(d, untied)) {
      start[n] = at;
      at += c;
    }
    const int64_t hd = 4, kv = 4;
    EXPECT_EQ(first(ck.tensors.at("model.embed_tokens.weight")), start["emb"]);
    EXPECT_EQ(first(ck.tensors.at("model.layers.1.input_layernorm.weight")), start["rms_att"] + d.dim);
    EXPECT_EQ(first(ck.tensors.at("model.layers.1.self_attn.q_proj.weight")), start["wq"] + d.dim * d.dim);
    EXPECT_EQ(first(ck.tensors.at("model.layers.1.self_attn.k_proj.weight")), start["wk"] + kv * d.dim);
    EXPECT_EQ(first(ck.tensors.at("model.layers.0.self_attn.v_proj.weight")), start["wv"]);
    EXPECT_EQ(first(ck.tensors.at("model.layers.1.self_attn.o_proj.weight")), start["wo"] + d.dim * d.dim);
    EXPECT_EQ(first(ck.tensors.at("model.layers.1.post_attention_layernorm.weight")),
              start["rms_ffn"] + d.dim);
    EXPECT_EQ(first(ck.tensors.at("model.layers.1.mlp.gate_proj.weight")), start["w1"] + d.hidden * d.dim);
    EXPECT_EQ(first(ck.tensors.at("model.layers.1.mlp.down_proj.weight")), start["w2"] + d.dim * d.hidden);
    EXPECT_EQ(first(ck.tensors.at("model.layers.0.mlp.up_proj.weight")), start["w3"]);
    EXPECT_EQ(first(ck.tensors.at("model.norm.weight")), start["rms_final"]);
    EXPECT_EQ(ck.tensors.at("model.layers.0.self_attn.k_proj.weight").shape, (std::vector<int64_t>{kv, 8}));
    EXPECT_EQ(ck.tensors.at("model.layers.0.mlp.down_proj.weight").shape, (std::vector<int64_t>{8, 12}));
    EXPECT_EQ(hd * d.heads, d.dim);
    if (untied) {
      EXPECT_EQ(first(ck.tensors.at("lm_head.weight")), start["wcls"]);
      EXPECT_EQ(ck.tensors.at("lm_head.weight").shape, (std::vector<int64_t>{10, 8}));
    } else {
      EXPECT_EQ(ck.tensors.count("lm_head.weight"), 0u);
    }
    for (auto& [n, v] : ck.tensors) {
      EXPECT_EQ(v.dtype, DType::F32);
      EXPECT_GE(v.data, b.data());
      EXPECT_LE(v.data + v.nbytes, b.data() + b.size()) << n;
    }
  }
}

TEST(Llama2c, OpenFromDisk) {
  ScratchDir s;
  write_bytes(s.file("m.bin"), make_ckpt(Dims{}, false));
  auto ck = Llama2cCheckpoint::open(s.file("m.bin"));
  EXPECT_EQ(ck.file->size(), make_ckpt(Dims{}, false).size());
  EXPECT_EQ(ck.tensors.at("model.embed_tokens.weight").data, ck.file->data() + 28);
}

TEST(Llama2c, SizeMismatchesStateExpectedAndActual) {
  Dims d;
  const size_t good = make_ckpt(d, false).size();
  expect_io_error(
      [&] { parse(make_ckpt(d, false, 4)); },
      "should be " + std::to_string(good) + " bytes but the file has " + std::to_string(good + 4));
  expect_io_error([&] { parse(make_ckpt(d, false, -4)); }, "truncated");
  // Untied weights but a positive vocab in the header (and the reverse).
  auto untied = make_ckpt(d, true);
  std::memcpy(untied.data() + 20, &d.vocab, 4);
  expect_io_error([&] { parse(untied); }, "matches an untied classifier");
  auto tied = make_ckpt(d, false);
  int32_t neg = -d.vocab;
  std::memcpy(tied.data() + 20, &neg, 4);
  expect_io_error([&] { parse(tied); }, "matches a shared classifier");
}

TEST(Llama2c, HostileHeaders) {
  expect_io_error([] { parse({1, 2, 3}); }, "truncated");
  auto with = [](auto edit) {
    Dims d;
    edit(d);
    Bytes b;
    b.put(d.dim).put(d.hidden).put(d.layers).put(d.heads).put(d.kv_heads).put(d.vocab).put(d.seq);
    b.b.resize(4096);
    return b.b;
  };
  expect_io_error([&] { parse(with([](Dims& d) { d.dim = 0; })); }, "non-positive");
  expect_io_error([&] { parse(with([](Dims& d) { d.layers = -3; })); }, "non-positive");
  expect_io_error([&] { parse(with([](Dims& d) { d.vocab = INT32_MIN; })); }, "non-positive");
  expect_io_error([&] { parse(with([](Dims& d) { d.heads = 3; })); }, "does not divide dim");
  expect_io_error(
      [&] {
        parse(with([](Dims& d) {
          d.heads = 4;
          d.kv_heads = 3;
        }));
      },
      "does not divide n_heads");
  // Dimensions whose product overflows 64 bits are just a wrong size, not a wrap-around.
  expect_io_error(
      [&] {
        parse(with([](Dims& d) {
          d.dim = 1 << 30;
          d.hidden = INT32_MAX;
          d.layers = INT32_MAX;
        }));
      },
      "more than 2^62");
  Bytes magic;
  magic.raw("ak42").put<int32_t>(1);
  magic.b.resize(256);
  expect_io_error([&] { parse(magic.b); }, "ak42");
}

// ---- tokenizer ----

std::vector<uint8_t> make_tok(const std::vector<std::string>& pieces, int32_t max_len) {
  Bytes b;
  b.put(max_len);
  for (size_t i = 0; i < pieces.size(); ++i) {
    b.put(static_cast<float>(i) * -0.5f).put(static_cast<int32_t>(pieces[i].size())).raw(pieces[i]);
  }
  return b.b;
}

TEST(Llama2cTokenizer, Parses) {
  std::vector<std::string> pieces = {"<unk>", "<s>", "</s>", "a", " the", "", std::string("\0x", 2)};
  auto b = make_tok(pieces, 5);
  auto t = Llama2cTokenizerData::parse(b.data(), b.size(), 7, "tok");
  EXPECT_EQ(t.max_token_length, 5);
  EXPECT_EQ(t.pieces, pieces);
  EXPECT_FLOAT_EQ(t.scores[4], -2.0f);
  // vocab_size <= 0 reads to the end of the file.
  EXPECT_EQ(Llama2cTokenizerData::parse(b.data(), b.size(), 0, "tok").pieces.size(), 7u);
  ScratchDir s;
  write_bytes(s.file("tok.bin"), b);
  EXPECT_EQ(Llama2cTokenizerData::open(s.file("tok.bin"), 7).pieces[4], " the");
}

TEST(Llama2cTokenizer, Hostile) {
  auto b = make_tok({"ab", "cd", "ef"}, 2);
  auto P = [](const std::vector<uint8_t>& x, int32_t v) {
    return Llama2cTokenizerData::parse(x.data(), x.size(), v, "tok");
  };
  expect_io_error([&] { P(b, 2); }, "bytes left after 2 tokens");
  expect_io_error([&] { P(b, 4); }, "needs at least");
  expect_io_error([&] { P(b, INT32_MAX); }, "needs at least");
  for (size_t cut = 0; cut < b.size(); ++cut) {
    std::vector<uint8_t> part(b.begin(), b.begin() + static_cast<long>(cut));
    EXPECT_THROW(P(part, 3), Error) << cut;
  }
  auto neg = make_tok({"ab"}, 2);
  int32_t bad = -1;
  std::memcpy(neg.data() + 8, &bad, 4);
  expect_io_error([&] { P(neg, 1); }, "has length -1");
  int32_t huge = 1 << 30;
  std::memcpy(neg.data() + 8, &huge, 4);
  expect_io_error([&] { P(neg, 1); }, "has length");
  auto ml = make_tok({"ab"}, -7);
  expect_io_error([&] { P(ml, 1); }, "max_token_length");
}

}  // namespace
}  // namespace lowbit::io
