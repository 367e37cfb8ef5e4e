#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "io/gguf.h"
#include "io_test_util.h"

namespace lowbit::io {
namespace {

using namespace lowbit::io::testing;

GgufFile parse(const std::vector<uint8_t>& b) {
  return GgufFile::parse(b.data(), b.size(), "t.gguf");
}

// Header of a hand-made file; the caller appends kv pairs and tensor infos.
Bytes head(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
  Bytes b;
  b.raw("GGUF").put(version).put(n_tensors).put(n_kv);
  return b;
}

// One tensor info: dims innermost first, as in the file.
void info(Bytes& b, const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
  b.str(name).put<uint32_t>(static_cast<uint32_t>(ne.size()));
  for (auto d : ne) b.put(d);
  b.put(type).put(offset);
}

void pad_to(Bytes& b, size_t align) {
  b.b.resize((b.b.size() + align - 1) / align * align, 0);
}

TEST(Gguf, HandMadeV2AllValueTypes) {
  Bytes b = head(2, 1, 14);
  b.str("u8").put<uint32_t>(0).put<uint8_t>(200);
  b.str("i8").put<uint32_t>(1).put<int8_t>(-5);
  b.str("u16").put<uint32_t>(2).put<uint16_t>(60000);
  b.str("i16").put<uint32_t>(3).put<int16_t>(-300);
  b.str("u32").put<uint32_t>(4).put<uint32_t>(4000000000u);
  b.str("i32").put<uint32_t>(5).put<int32_t>(-70000);
  b.str("f32").put<uint32_t>(6).put<float>(1.5f);
  b.str("bool").put<uint32_t>(7).put<uint8_t>(1);
  b.str("str").put<uint32_t>(8).str("héllo");
  b.str("u64").put<uint32_t>(10).put<uint64_t>(1ull << 40);
  b.str("i64").put<uint32_t>(11).put<int64_t>(-(1ll << 40));
  b.str("f64").put<uint32_t>(12).put<double>(-2.25);
  // array of 2 arrays of int32: [[1, 2], []]
  b.str("nested").put<uint32_t>(9).put<uint32_t>(9).put<uint64_t>(2);
  b.put<uint32_t>(5).put<uint64_t>(2).put<int32_t>(1).put<int32_t>(2);
  b.put<uint32_t>(5).put<uint64_t>(0);
  b.str("strs").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(2).str("a").str("");
  info(b, "w", {4, 2}, 0, 0);  // F32, file dims [4, 2] -> view shape [2, 4]
  pad_to(b, 32);
  const size_t data_at = b.b.size();
  for (int i = 0; i < 8; ++i) b.put<float>(static_cast<float>(i));
  auto g = parse(b.b);
  EXPECT_EQ(g.version, 2u);
  EXPECT_EQ(g.kv_order.size(), 14u);
  EXPECT_EQ(g.kv_order.front(), "u8");
  EXPECT_EQ(g.get("u8").as_int(), 200);
  EXPECT_EQ(g.get("i8").as_int(), -5);
  EXPECT_EQ(g.get("u16").as_int(), 60000);
  EXPECT_EQ(g.get("i16").as_int(), -300);
  EXPECT_EQ(g.get("u32").as_int(), 4000000000ll);
  EXPECT_EQ(g.get("i32").as_int(), -70000);
  EXPECT_EQ(g.get("f32").as_float(), 1.5);
  EXPECT_TRUE(g.get("bool").as_bool());
  EXPECT_EQ(g.get("str").as_string(), "héllo");
  EXPECT_EQ(g.get("u64").as_int(), 1ll << 40);
  EXPECT_EQ(g.get("i64").as_int(), -(1ll << 40));
  EXPECT_EQ(g.get("f64").as_float(), -2.25);
  const GgufArray& nested = g.get("nested").as_array();
  ASSERT_EQ(nested.size(), 2u);
  EXPECT_EQ(nested[0].as_array()[1].as_int(), 2);
  EXPECT_TRUE(nested[1].as_array().empty());
  EXPECT_EQ(g.get("strs").as_array()[0].as_string(), "a");
  expect_io_error([&] { g.get("str").as_int(); }, "string");
  expect_io_error([&] { g.get("u8").as_string(); }, "uint8");
  const TensorView& w = g.tensors.at("w");
  EXPECT_EQ(w.dtype, DType::F32);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(w.nbytes, 32u);
  EXPECT_EQ(w.data, b.b.data() + data_at);
}

TEST(Gguf, WriterRoundTrip) {
  ScratchDir d;
  std::vector<float> f32(2 * 64);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = static_cast<float>(i) * 0.25f;
  std::vector<uint8_t> q4(3 * 2 * 18, 0x5A);  // Q4_0 [3, 64]: 2 blocks per row
  std::vector<uint16_t> bf(5, 0x3f80);
  for (uint32_t alignment : {32u, 64u}) {
    GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.set_u32("llama.block_count", 2);
    w.set_i32("i", -7);
    w.set_u64("big", 1ull << 50);
    w.set_f32("eps", 1e-5f);
    w.set_bool("flag", true);
    w.set_array_string("tokenizer.ggml.tokens", {"<s>", "a", ""});
    w.set_array_f32("tokenizer.ggml.scores", {0.f, -1.f, 2.5f});
    w.set_array_i32("types", {1, 2, 3});
    w.set_u32("llama.block_count", 3);  // replaced in place
    GgufValue inner;
    inner.type = GgufType::ARRAY;
    inner.elem_type = GgufType::UINT8;
    inner.v =
        std::make_shared<GgufArray>(GgufArray{GgufValue{GgufType::UINT8, GgufType::UINT32, uint64_t{9}}});
    GgufValue outer;
    outer.type = GgufType::ARRAY;
    outer.elem_type = GgufType::ARRAY;
    outer.v = std::make_shared<GgufArray>(GgufArray{inner, inner});
    w.set_value("nested", outer);
    w.add_tensor("tok_embd.weight", 0, {2, 64}, f32.data(), f32.size() * 4);
    w.add_tensor("blk.0.attn_q.weight", 2, {3, 64}, q4.data(), q4.size());
    w.add_tensor("norm", 30, {5}, bf.data(), 10);
    const std::string p = d.file("m.gguf");
    w.write(p, alignment);
    auto g = GgufFile::open(p);
    EXPECT_EQ(g.version, 3u);
    EXPECT_EQ(g.alignment, alignment);
    EXPECT_EQ(g.kv_order.size(), alignment == 32 ? 10u : 11u);
    EXPECT_EQ(g.kv_order[1], "llama.block_count");
    EXPECT_EQ(g.get("llama.block_count").as_int(), 3);
    EXPECT_EQ(g.get("i").as_int(), -7);
    EXPECT_EQ(g.get("big").as_int(), 1ll << 50);
    EXPECT_FLOAT_EQ(static_cast<float>(g.get("eps").as_float()), 1e-5f);
    EXPECT_TRUE(g.get("flag").as_bool());
    EXPECT_EQ(g.get("tokenizer.ggml.tokens").as_array()[1].as_string(), "a");
    EXPECT_EQ(g.get("tokenizer.ggml.scores").as_array()[2].as_float(), 2.5);
    EXPECT_EQ(g.get("types").as_array()[2].as_int(), 3);
    EXPECT_EQ(g.get("nested").as_array()[1].as_array()[0].as_int(), 9);
    EXPECT_EQ(g.tensor_order, (std::vector<std::string>{"tok_embd.weight", "blk.0.attn_q.weight", "norm"}));
    const TensorView& e = g.tensors.at("tok_embd.weight");
    EXPECT_EQ(e.dtype, DType::F32);
    EXPECT_EQ(e.shape, (std::vector<int64_t>{2, 64}));
    EXPECT_EQ(std::memcmp(e.data, f32.data(), e.nbytes), 0);
    const TensorView& q = g.tensors.at("blk.0.attn_q.weight");
    EXPECT_EQ(q.dtype, DType::GGML_BLOCK);
    EXPECT_EQ(q.ggml_type, 2);
    EXPECT_EQ(q.shape, (std::vector<int64_t>{3, 64}));
    EXPECT_EQ(q.nbytes, q4.size());
    EXPECT_EQ(std::memcmp(q.data, q4.data(), q4.size()), 0);
    EXPECT_EQ((q.data - g.file->data()) % alignment, 0);
    EXPECT_EQ(g.tensors.at("norm").dtype, DType::BF16);
  }
}

TEST(Gguf, WriterRejectsBadTensors) {
  GgufWriter w;
  float x[64] = {};
  expect_io_error([&] { w.add_tensor("a", 99, {1}, x, 4); }, "unknown ggml type id 99");
  expect_io_error([&] { w.add_tensor("a", 0, {2}, x, 4); }, "needs 8 bytes");
  expect_io_error([&] { w.add_tensor("a", 2, {1, 16}, x, 9); }, "not a multiple");
  expect_io_error([&] { w.add_tensor("a", 0, {1, 1, 1, 1, 1}, x, 4); }, "at most 4");
  expect_io_error([&] { w.add_tensor("a", 0, {0}, x, 0); }, "invalid shape");
  w.add_tensor("a", 0, {1}, x, 4);
  expect_io_error([&] { w.add_tensor("a", 0, {1}, x, 4); }, "twice");
  expect_io_error([&] { w.write("/nonexistent-dir/x.gguf", 24); }, "power of two");
}

// A valid file with two tensors whose data ends exactly at the end of the file.
std::vector<uint8_t> small_valid() {
  Bytes b = head(3, 2, 2);
  b.str("general.architecture").put<uint32_t>(8).str("llama");
  b.str("general.alignment").put<uint32_t>(4).put<uint32_t>(32);
  info(b, "q", {32}, 8, 0);  // Q8_0: one 34-byte block
  info(b, "f", {8}, 0, 64);  // F32, 32 bytes
  pad_to(b, 32);
  b.b.resize(b.b.size() + 96, 0x11);
  return b.b;
}

// Resident set now (/proc/self/statm) and the process peak so far (getrusage), in bytes.
size_t current_rss() {
  std::ifstream in("/proc/self/statm");
  size_t pages_total = 0, pages_resident = 0;
  in >> pages_total >> pages_resident;
  return pages_resident * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}
size_t peak_rss() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<size_t>(u.ru_maxrss) * 1024;
}

// Finding 4 of issue 22: each array element used to become a ~48-byte GgufValue, so a 10 MB file holding one
// uint8 array of 10 M elements took ~480 MB before anything could reject it (a 1 GB file: ~48 GB). Arrays now
// keep their encoded bytes and decode on access: memory stays within a small factor of the file.
TEST(Gguf, HugeMetadataArraysCostAboutTheirFileBytes) {
  constexpr uint64_t kU8 = 10'000'000, kStrings = 2'000'000;
  Bytes b = head(3, 0, 2);
  b.b.reserve(64 + kU8 + kStrings * 9 + 64);  // one allocation: the peak before parsing is the file itself
  b.str("u8s").put<uint32_t>(9).put<uint32_t>(0).put<uint64_t>(kU8);
  b.b.resize(b.b.size() + kU8, 7);
  b.b.back() = 9;
  b.str("strs").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(kStrings);
  for (uint64_t i = 0; i < kStrings; ++i) b.str(i + 1 == kStrings ? "z" : "a");
  const size_t file_bytes = b.b.size();

  const size_t before = current_rss();
  auto g = parse(b.b);
  const size_t grew = peak_rss() > before ? peak_rss() - before : 0;
  // Two copies of the file at most (encoded bytes + 8-byte string starts) plus allocator slack; the old
  // representation needed ~576 MB here.
  EXPECT_LT(grew, 3 * file_bytes + (16u << 20)) << "file " << file_bytes << " bytes";

  const GgufArray& u8s = g.get("u8s").as_array();
  const GgufArray& strs = g.get("strs").as_array();
  ASSERT_EQ(u8s.size(), kU8);
  ASSERT_EQ(strs.size(), kStrings);
  EXPECT_LE(u8s.memory_bytes(), kU8 + 64);
  EXPECT_LE(strs.memory_bytes(), kStrings * (9 + 8) + 64);
  EXPECT_EQ(u8s[0].as_int(), 7);
  EXPECT_EQ(u8s[kU8 - 1].as_int(), 9);
  EXPECT_EQ(strs[0].as_string(), "a");
  EXPECT_EQ(strs[kStrings - 1].as_string(), "z");
  expect_io_error([&] { (void)u8s[kU8]; }, "out of range");
}

// Arrays decode lazily, but everything is still validated while reading: a bad bool, string length or
// nested element deep inside an array rejects the file up front.
TEST(Gguf, ArrayElementsAreValidatedWhenRead) {
  Bytes bools = head(3, 0, 1);
  bools.str("b")
      .put<uint32_t>(9)
      .put<uint32_t>(7)
      .put<uint64_t>(3)
      .put<uint8_t>(1)
      .put<uint8_t>(0)
      .put<uint8_t>(2);
  expect_io_error([&] { parse(bools.b); }, "bool value 2");
  Bytes strs = head(3, 0, 1);
  strs.str("s").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(2).str("ok").put<uint64_t>(1000).raw("x");
  expect_io_error([&] { parse(strs.b); }, "'s'");
  Bytes nested = head(3, 0, 1);
  nested.str("n").put<uint32_t>(9).put<uint32_t>(9).put<uint64_t>(1).put<uint32_t>(13).put<uint64_t>(0);
  expect_io_error([&] { parse(nested.b); }, "unknown metadata value type 13");
  // A nested array read back through the writer keeps its exact bytes.
  Bytes ok = head(3, 0, 1);
  ok.str("n").put<uint32_t>(9).put<uint32_t>(9).put<uint64_t>(2);
  ok.put<uint32_t>(8).put<uint64_t>(2).str("x").str("yz").put<uint32_t>(6).put<uint64_t>(1).put<float>(0.5f);
  auto g = parse(ok.b);
  const GgufArray& n = g.get("n").as_array();
  ASSERT_EQ(n.size(), 2u);
  EXPECT_EQ(n[0].as_array()[1].as_string(), "yz");
  EXPECT_EQ(n[1].as_array()[0].as_float(), 0.5);
  // Elements are decoded temporaries: what as_string() / as_array() return on them must outlive them.
  const std::string& kept = n[0].as_array()[1].as_string();
  EXPECT_EQ(kept, "yz");
  std::vector<std::string> seen;
  for (const GgufValue& e : n[0].as_array()) seen.push_back(e.as_string());
  EXPECT_EQ(seen, (std::vector<std::string>{"x", "yz"}));
  ScratchDir d;
  GgufWriter w;
  w.set_value("n", g.get("n"));
  w.write(d.file("n.gguf"));
  auto h = GgufFile::open(d.file("n.gguf"));
  EXPECT_EQ(h.get("n").as_array()[0].as_array()[0].as_string(), "x");
}

TEST(Gguf, TruncationAtEveryCutPoint) {
  auto full = small_valid();
  ASSERT_NO_THROW(parse(full));
  for (size_t cut = 0; cut < full.size(); ++cut) {
    std::vector<uint8_t> part(full.begin(), full.begin() + static_cast<long>(cut));
    EXPECT_THROW(parse(part), Error) << "cut at " << cut;
  }
}

TEST(Gguf, HostileInputs) {
  expect_io_error([] { parse({'G', 'G'}); }, "truncated");
  {
    auto b = head(3, 0, 0).b;
    b.pop_back();
    expect_io_error([&] { parse(b); }, "truncated");
  }
  {
    auto b = head(3, 0, 0).b;
    b[0] = 'X';
    expect_io_error([&] { parse(b); }, "wrong magic");
  }
  expect_io_error([] { parse(head(1, 0, 0).b); }, "version 1 is not supported");
  expect_io_error([] { parse(head(4, 0, 0).b); }, "unsupported GGUF version 4");
  expect_io_error([] { parse(head(0x03000000, 0, 0).b); }, "big-endian");
  expect_io_error([] { parse(head(3, 0, 1ull << 60).b); }, "metadata count");
  expect_io_error([] { parse(head(3, 1ull << 60, 0).b); }, "tensor count");
  auto kv1 = [](auto fill) {
    Bytes b = head(3, 0, 1);
    fill(b);
    b.b.resize(b.b.size() + 64, 0);
    return b.b;
  };
  expect_io_error([&] { parse(kv1([](Bytes& b) { b.put<uint64_t>(1ull << 60); })); }, "exceeds the limit");
  expect_io_error([&] { parse(kv1([](Bytes& b) { b.put<uint64_t>(100); })); }, "truncated");
  expect_io_error(
      [&] { parse(kv1([](Bytes& b) { b.str("k").put<uint32_t>(8).put<uint64_t>(1ull << 60); })); },
      "exceeds the limit");
  expect_io_error([&] { parse(kv1([](Bytes& b) { b.str("k").put<uint32_t>(13); })); },
                  "unknown metadata value type 13");
  expect_io_error([&] { parse(kv1([](Bytes& b) { b.str("k").put<uint32_t>(7).put<uint8_t>(2); })); },
                  "not 0 or 1");
  expect_io_error([&] { parse(kv1([](Bytes& b) { b.str("").put<uint32_t>(0).put<uint8_t>(2); })); }, "empty");
  expect_io_error(
      [&] {
        parse(kv1([](Bytes& b) { b.str("k").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(1ull << 60); }));
      },
      "cannot fit");
  expect_io_error(
      [&] {
        parse(kv1([](Bytes& b) {
          b.str("k").put<uint32_t>(9);
          for (int i = 0; i < 10; ++i) b.put<uint32_t>(9).put<uint64_t>(1);
        }));
      },
      "nested deeper");
  {
    Bytes b = head(3, 0, 2);
    b.str("k").put<uint32_t>(0).put<uint8_t>(1).str("k").put<uint32_t>(0).put<uint8_t>(1);
    expect_io_error([&] { parse(b.b); }, "appears twice");
  }
  auto align_kv = [](uint32_t a) {
    Bytes b = head(3, 0, 1);
    b.str("general.alignment").put<uint32_t>(4).put<uint32_t>(a);
    return b.b;
  };
  expect_io_error([&] { parse(align_kv(0)); }, "power of two");
  expect_io_error([&] { parse(align_kv(48)); }, "power of two");
  EXPECT_EQ(parse(align_kv(64)).alignment, 64u);

  // Tensor infos.
  auto t1 = [](std::vector<uint64_t> ne, uint32_t type, uint64_t off, size_t data) {
    Bytes b = head(3, 1, 0);
    info(b, "blk.0.w", std::move(ne), type, off);
    pad_to(b, 32);
    b.b.resize(b.b.size() + data, 0);
    return b.b;
  };
  EXPECT_NO_THROW(parse(t1({32, 2}, 8, 0, 68)));
  expect_io_error([&] { parse(t1({32}, 77, 0, 64)); },
                  "'blk.0.w' has unknown or unsupported ggml type id 77");
  expect_io_error([&] { parse(t1({16}, 8, 0, 64)); }, "not a multiple of the Q8_0 block size 32");
  expect_io_error([&] { parse(t1({8}, 0, 16, 64)); }, "not a multiple of the alignment");
  expect_io_error([&] { parse(t1({8}, 0, 64, 64)); }, "past the end of the data section");
  expect_io_error([&] { parse(t1({32, 2}, 8, 0, 67)); }, "past the end");
  expect_io_error([&] { parse(t1({8, 0}, 0, 0, 64)); }, "zero dimension");
  expect_io_error([&] { parse(t1({1ull << 32, 1ull << 32}, 0, 0, 64)); }, "overflows");
  expect_io_error([&] { parse(t1({1ull << 62}, 0, 0, 64)); }, "overflows");
  {
    Bytes b = head(3, 1, 0);
    b.str("x").put<uint32_t>(5);
    b.b.resize(256, 0);
    expect_io_error([&] { parse(b.b); }, "5 dimensions");
  }
  {
    Bytes b = head(3, 2, 0);
    info(b, "a", {16}, 0, 0);
    info(b, "b", {8}, 0, 32);
    pad_to(b, 32);
    b.b.resize(b.b.size() + 128, 0);
    expect_io_error([&] { parse(b.b); }, "overlap");
  }
  {
    Bytes b = head(3, 2, 0);
    info(b, "a", {8}, 0, 0);
    info(b, "a", {8}, 0, 32);
    pad_to(b, 32);
    b.b.resize(b.b.size() + 128, 0);
    expect_io_error([&] { parse(b.b); }, "appears twice");
  }
}

}  // namespace
}  // namespace lowbit::io
