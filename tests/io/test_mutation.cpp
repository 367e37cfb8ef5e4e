// Mutation test: random byte flips and truncations of small valid files must only ever produce lowbit::Error
// (never a crash, another exception type, or a view outside the input). Seeded, so failures reproduce.
#include <gtest/gtest.h>

#include <random>

#include "io/gguf.h"
#include "io/llama2c.h"
#include "io/safetensors.h"
#include "io_test_util.h"

namespace lowbit::io {
namespace {

using namespace lowbit::io::testing;

constexpr int kIterations = 3000;

template <typename Parse>
void mutate(const std::vector<uint8_t>& valid, uint32_t seed, Parse parse) {
  std::mt19937 rng(seed);
  int accepted = 0;
  for (int it = 0; it < kIterations; ++it) {
    std::vector<uint8_t> b = valid;
    int flips = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < flips; ++k) {
      size_t at = rng() % b.size();
      switch (rng() % 4) {
        case 0:
          b[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
          break;
        case 1:
          b[at] = static_cast<uint8_t>(rng());
          break;
        case 2:
          b[at] = 0xFF;
          break;
        default:
          b[at] = 0;
          break;
      }
    }
    if (rng() % 8 == 0) b.resize(rng() % b.size());
    try {
      parse(b);
      ++accepted;
    } catch (const lowbit::Error&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << it << " (seed " << seed << "): non-lowbit exception: " << e.what();
      return;
    }
  }
  // Some mutations (inside tensor data) leave a valid file: the parser must not reject everything.
  EXPECT_GT(accepted, 0);
}

void check_views(const std::map<std::string, TensorView>& ts, const std::vector<uint8_t>& b) {
  for (const auto& [name, v] : ts) {
    ASSERT_GE(v.data, b.data()) << name;
    ASSERT_LE(v.data + v.nbytes, b.data() + b.size()) << name;
  }
}

TEST(Mutation, Safetensors) {
  ScratchDir d;
  std::vector<float> a(24, 0.5f);
  write_safetensors(d.file("m"),
                    {{"a.weight", DType::F32, {4, 6}, a.data(), 96},
                     {"b", DType::F16, {2, 3}, a.data(), 12},
                     {"c", DType::U8, {5}, a.data(), 5}},
                    {{"format", "pt"}});
  auto valid = read_bytes(d.file("m"));
  mutate(valid, 1, [](const std::vector<uint8_t>& b) {
    auto f = SafetensorsFile::parse(b.data(), b.size(), "m");
    check_views(f.tensors, b);
  });
}

TEST(Mutation, Gguf) {
  ScratchDir d;
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_array_string("tokenizer.ggml.tokens", {"a", "bb", "ccc"});
  w.set_array_f32("tokenizer.ggml.scores", {1, 2, 3});
  w.set_u32("n", 3);
  std::vector<uint8_t> q(34, 1);
  std::vector<float> f(8, 1.f);
  w.add_tensor("q", 8, {32}, q.data(), q.size());
  w.add_tensor("f", 0, {2, 4}, f.data(), 32);
  w.write(d.file("m.gguf"));
  auto valid = read_bytes(d.file("m.gguf"));
  mutate(valid, 2, [](const std::vector<uint8_t>& b) {
    auto g = GgufFile::parse(b.data(), b.size(), "m.gguf");
    check_views(g.tensors, b);
  });
}

TEST(Mutation, Llama2cCheckpoint) {
  Bytes b;
  // dim 4, hidden 4, 1 layer, 2 heads, 1 kv head, vocab 3, seq 2 (shared classifier).
  b.put<int32_t>(4)
      .put<int32_t>(4)
      .put<int32_t>(1)
      .put<int32_t>(2)
      .put<int32_t>(1)
      .put<int32_t>(3)
      .put<int32_t>(2);
  const int floats = 3 * 4 + 4 + 16 + 8 + 8 + 16 + 4 + 16 * 3 + 4 + 2 * 2;
  for (int i = 0; i < floats; ++i) b.put<float>(0.1f * static_cast<float>(i));
  ASSERT_NO_THROW(Llama2cCheckpoint::parse(b.b.data(), b.b.size(), "m.bin"));
  mutate(b.b, 3, [](const std::vector<uint8_t>& x) {
    auto ck = Llama2cCheckpoint::parse(x.data(), x.size(), "m.bin");
    check_views(ck.tensors, x);
  });
}

TEST(Mutation, Llama2cTokenizer) {
  Bytes b;
  b.put<int32_t>(3);
  for (const char* p : {"a", "bc", "def", "", "xy"}) {
    b.put<float>(1.f).put<int32_t>(static_cast<int32_t>(std::strlen(p))).raw(p);
  }
  mutate(b.b, 4,
         [](const std::vector<uint8_t>& x) { Llama2cTokenizerData::parse(x.data(), x.size(), 5, "tok"); });
}

}  // namespace
}  // namespace lowbit::io
