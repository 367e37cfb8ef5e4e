#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "io_test_util.h"

namespace lowbit::io {
namespace {

using namespace lowbit::io::testing;

// Raw file from a header string and a data section (no padding added: tests control every byte).
std::vector<uint8_t> make_st(const std::string& header, size_t data_bytes) {
  Bytes b;
  b.put<uint64_t>(header.size()).raw(header);
  b.b.resize(b.b.size() + data_bytes, 0xAB);
  return b.b;
}

SafetensorsFile parse(const std::vector<uint8_t>& b) {
  return SafetensorsFile::parse(b.data(), b.size(), "t.st");
}

TEST(Safetensors, ParsesHandMadeFile) {
  auto b = make_st(R"({"b":{"dtype":"F16","shape":[2,3],"data_offsets":[8,20]},)"
                   R"("a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"format":"pt"}})",
                   20);
  auto f = parse(b);
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.metadata.at("format"), "pt");
  const TensorView& tb = f.tensors.at("b");
  EXPECT_EQ(tb.dtype, DType::F16);
  EXPECT_EQ(tb.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(tb.nbytes, 12u);
  EXPECT_EQ(tb.data, b.data() + b.size() - 12);
  EXPECT_EQ(f.tensors.at("a").data, b.data() + b.size() - 20);
}

TEST(Safetensors, AllDtypesAndScalars) {
  const char* names[] = {"F32", "F16", "BF16", "F64", "I8",   "U8",      "I16",    "U16",
                         "I32", "U32", "I64",  "U64", "BOOL", "F8_E4M3", "F8_E5M2"};
  for (const char* n : names) {
    DType t;
    ASSERT_TRUE(dtype_from_name(n, &t));
    size_t sz = dtype_size(t);
    std::string h = std::string(R"({"x":{"dtype":")") + n + R"(","shape":[],"data_offsets":[0,)" +
                    std::to_string(sz) + "]}}";
    auto f = parse(make_st(h, sz));
    EXPECT_EQ(f.tensors.at("x").dtype, t) << n;
    EXPECT_EQ(f.tensors.at("x").numel(), 1);
  }
}

TEST(Safetensors, WriterRoundTrip) {
  ScratchDir d;
  std::vector<float> a = {1.f, -2.f, 3.5f, 0.f, 5.f, 6.f};
  std::vector<uint16_t> h = {0x3c00, 0xc000, 0x7bff};
  std::vector<int8_t> q = {-1, 2, -3, 4, 5};
  const std::string p = d.file("m.safetensors");
  write_safetensors(p,
                    {{"z.weight", DType::F32, {2, 3}, a.data(), a.size() * 4},
                     {"a.scale", DType::F16, {3}, h.data(), h.size() * 2},
                     {"m.q", DType::I8, {5}, q.data(), q.size()}},
                    {{"producer", "lowbit"}});
  auto raw = read_bytes(p);
  uint64_t hlen;
  std::memcpy(&hlen, raw.data(), 8);
  EXPECT_EQ((8 + hlen) % 8, 0u);  // data section 8-byte aligned
  EXPECT_EQ(raw[8 + hlen - 1] == ' ' || raw[8 + hlen - 1] == '}', true);
  auto f = SafetensorsFile::open(p);
  EXPECT_EQ(f.metadata.at("producer"), "lowbit");
  ASSERT_EQ(f.tensors.size(), 3u);
  const TensorView& z = f.tensors.at("z.weight");
  EXPECT_EQ(z.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(z.data, a.data(), 24), 0);
  EXPECT_EQ(std::memcmp(f.tensors.at("a.scale").data, h.data(), 6), 0);
  EXPECT_EQ(std::memcmp(f.tensors.at("m.q").data, q.data(), 5), 0);
  // Sorted by name: a.scale first, then m.q, then z.weight, packed without holes.
  const uint8_t* data0 = f.file->data() + 8 + hlen;
  EXPECT_EQ(f.tensors.at("a.scale").data, data0);
  EXPECT_EQ(f.tensors.at("m.q").data, data0 + 6);
  EXPECT_EQ(z.data, data0 + 11);
  EXPECT_EQ(f.file->size(), 8 + hlen + 35);
}

TEST(Safetensors, WriterRejectsBadInput) {
  ScratchDir d;
  float x[4] = {};
  expect_io_error(
      [&] {
        write_safetensors(d.file("a"), {{"w", DType::F32, {2, 2}, x, 12}});
      },
      "needs 16 bytes");
  expect_io_error(
      [&] {
        write_safetensors(d.file("a"), {{"w", DType::F32, {1}, x, 4}, {"w", DType::F32, {1}, x, 4}});
      },
      "twice");
  expect_io_error([&] { write_safetensors(d.file("a"), {{"w", DType::GGML_BLOCK, {1}, x, 4}}); }, "GGML");
  EXPECT_FALSE(fs::exists(d.file("a")));
}

TEST(Safetensors, HostileHeaders) {
  expect_io_error([] { parse({1, 2, 3}); }, "too small");
  {
    Bytes b;
    b.put<uint64_t>(200ull << 20);
    expect_io_error([&] { parse(b.b); }, "100 MB");
  }
  {
    Bytes b;
    b.put<uint64_t>(50).raw("{}");
    expect_io_error([&] { parse(b.b); }, "past the end");
  }
  expect_io_error([] { parse(make_st("{not json", 0)); }, "not valid JSON");
  expect_io_error([] { parse(make_st("[1,2]", 0)); }, "JSON object");
  expect_io_error([] { parse(make_st(R"({"x":{"dtype":"Q9","shape":[1],"data_offsets":[0,1]}})", 1)); },
                  "unknown dtype");
  expect_io_error([] { parse(make_st(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)); },
                  "needs 12 bytes");
  expect_io_error([] { parse(make_st(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4)); },
                  "past the end of the data section");
  expect_io_error([] { parse(make_st(R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[9,8]}})", 16)); },
                  "reversed");
  expect_io_error(
      [] {
        parse(make_st(R"({"x":{"dtype":"F32","shape":[1099511627776,1099511627776],)"
                      R"("data_offsets":[0,4]}})",
                      4));
      },
      "overflows");
  expect_io_error(
      [] {
        parse(make_st(R"({"x":{"dtype":"F64","shape":[4611686018427387904],)"
                      R"("data_offsets":[0,8]}})",
                      8));
      },
      "overflows");
  expect_io_error([] { parse(make_st(R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4)); },
                  "non-negative");
  expect_io_error([] { parse(make_st(R"({"x":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4)); },
                  "non-negative");
  expect_io_error([] { parse(make_st(R"({"x":{"dtype":"F32","shape":[1]}})", 4)); }, "data_offsets");
  expect_io_error([] { parse(make_st(R"({"x":{"shape":[1],"data_offsets":[0,4]}})", 4)); }, "dtype");
  expect_io_error([] { parse(make_st(R"({"x":[1]})", 4)); }, "entry must be an object");
  expect_io_error(
      [] {
        parse(make_st(R"({"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                      R"("y":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                      8));
      },
      "overlap");
  expect_io_error(
      [] {
        parse(make_st(R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                      R"("x":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                      2));
      },
      "twice");
  expect_io_error([] { parse(make_st(R"({"__metadata__":{"a":1}})", 0)); }, "not a string");
}

TEST(Safetensors, TruncationAtEveryCutPoint) {
  ScratchDir d;
  std::vector<float> a(10, 1.f);
  write_safetensors(d.file("m"),
                    {{"a", DType::F32, {10}, a.data(), 40}, {"b", DType::F32, {2, 5}, a.data(), 40}});
  auto full = read_bytes(d.file("m"));
  ASSERT_NO_THROW(parse(full));
  for (size_t cut = 0; cut < full.size(); ++cut) {
    std::vector<uint8_t> part(full.begin(), full.begin() + static_cast<long>(cut));
    EXPECT_THROW(parse(part), Error) << "cut at " << cut;
  }
}

}  // namespace
}  // namespace lowbit::io
