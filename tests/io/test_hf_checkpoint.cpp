#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/hf_checkpoint.h"
#include "io_test_util.h"

namespace lowbit::io {
namespace {

using namespace lowbit::io::testing;

// A tiny checkpoint directory: config.json plus either one file or shards with an index.
struct HfDir {
  ScratchDir d;
  std::vector<float> w = {1, 2, 3, 4};
  HfDir() { write_text(d.file("config.json"), R"({"model_type":"llama","hidden_size":2})"); }
  void shard(const std::string& file, const std::vector<std::string>& names) {
    std::vector<TensorToWrite> ts;
    for (auto& n : names) ts.push_back({n, DType::F32, {2, 2}, w.data(), 16});
    write_safetensors(d.file(file), ts);
  }
  void index(const std::string& weight_map) {
    write_text(d.file("model.safetensors.index.json"), R"({"metadata":{},"weight_map":)" + weight_map + "}");
  }
  std::string dir() const { return d.path().string(); }
};

TEST(HfCheckpoint, SingleFile) {
  HfDir h;
  h.shard("model.safetensors", {"a", "b"});
  write_text(h.d.file("tokenizer.json"), R"({"model":{"type":"BPE"}})");
  auto ck = HfCheckpoint::open(h.dir());
  EXPECT_EQ(ck.config.at("hidden_size"), 2);
  EXPECT_EQ(ck.tensors.size(), 2u);
  EXPECT_EQ(ck.shards.size(), 1u);
  EXPECT_FALSE(ck.tokenizer.is_null());
  EXPECT_TRUE(ck.tokenizer_config.is_null());
  EXPECT_TRUE(ck.generation_config.is_null());
  // A path to the .safetensors file itself works too.
  EXPECT_EQ(HfCheckpoint::open(h.d.file("model.safetensors")).tensors.size(), 2u);
}

TEST(HfCheckpoint, ShardedWithIndex) {
  HfDir h;
  h.shard("model-00001-of-00002.safetensors", {"a", "b"});
  h.shard("model-00002-of-00002.safetensors", {"c"});
  h.index(R"({"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors",)"
          R"("c":"model-00002-of-00002.safetensors"})");
  auto ck = HfCheckpoint::open(h.dir());
  EXPECT_EQ(ck.shards.size(), 2u);  // each shard opened once
  EXPECT_EQ(ck.tensors.size(), 3u);
  EXPECT_EQ(ck.tensors.at("c").shape, (std::vector<int64_t>{2, 2}));
}

TEST(HfCheckpoint, Errors) {
  {
    ScratchDir d;
    expect_io_error([&] { HfCheckpoint::open(d.path().string()); }, "config.json");
    expect_io_error([&] { HfCheckpoint::open(d.file("missing")); }, "does not exist");
  }
  {
    HfDir h;
    expect_io_error([&] { HfCheckpoint::open(h.dir()); }, "neither model.safetensors");
  }
  {
    HfDir h;
    write_text(h.d.file("config.json"), "{bad");
    h.shard("model.safetensors", {"a"});
    expect_io_error([&] { HfCheckpoint::open(h.dir()); }, "not valid JSON");
  }
  {
    HfDir h;
    h.shard("s1.safetensors", {"a"});
    h.index(R"({"a":"s1.safetensors","b":"s2.safetensors"})");
    expect_io_error([&] { HfCheckpoint::open(h.dir()); }, "missing");
  }
  {
    HfDir h;
    h.shard("s1.safetensors", {"a"});
    h.index(R"({"a":"s1.safetensors","b":"s1.safetensors"})");
    expect_io_error([&] { HfCheckpoint::open(h.dir()); }, "does not contain");
  }
  {
    HfDir h;
    h.shard("s1.safetensors", {"a"});
    h.shard("s2.safetensors", {"a"});
    h.index(R"({"a":"s1.safetensors","x":"s2.safetensors"})");
    expect_io_error([&] { HfCheckpoint::open(h.dir()); }, "more than one shard");
  }
  {
    HfDir h;
    h.index(R"({"a":"../escape.safetensors"})");
    expect_io_error([&] { HfCheckpoint::open(h.dir()); }, "plain file name");
  }
  {
    HfDir h;
    write_text(h.d.file("model.safetensors.index.json"), R"({"metadata":{}})");
    expect_io_error([&] { HfCheckpoint::open(h.dir()); }, "weight_map");
  }
  {
    HfDir h;
    write_text(h.d.file("model.safetensors"), "garbage");
    expect_io_error([&] { HfCheckpoint::open(h.dir()); }, "model.safetensors");
  }
}

}  // namespace
}  // namespace lowbit::io
