// The baseline file: exact round trip, and every kind of damage (truncation at any length, flipped bytes,
// wrong magic / version, trailing bytes, out-of-range records behind a valid checksum) gives Error("eval").
// Also the header comparison that refuses a baseline made on other text / ctx / method / vocabulary.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>

#include "core/hash.h"
#include "eval/baseline.h"

using namespace lowbit;
using namespace lowbit::eval;

namespace {

Baseline synthetic(int64_t rows = 7, int k = 3, int64_t vocab = 10) {
  Baseline b;
  b.table.k = k;
  for (int64_t i = 0; i < rows; ++i) {
    TokenScore s;
    s.target = static_cast<int32_t>((i * 3) % vocab);
    s.pos = static_cast<int32_t>(1 + i % 7);
    s.chunk = static_cast<int32_t>(i / 7);
    s.top1 = static_cast<int32_t>(i % vocab);
    s.lse = 3.25 + i;
    s.tail = 0.125 / (i + 1);
    s.logprob = -0.5 - i;
    s.top1_logprob = -0.25f;
    s.entropy = 1.5f;
    b.table.rows.push_back(s);
    for (int c = 0; c < k; ++c) {
      b.table.top_ids.push_back(static_cast<int32_t>((i + c) % vocab));
      b.table.top_lp.push_back(-0.25 - c);
    }
  }
  BaselineMeta& m = b.meta;
  m.model_path = "model.bin";
  m.model_format = "llama2c";
  m.model_sha256 = std::string(64, 'a');
  m.text_path = "text.txt";
  m.text_sha256 = std::string(64, 'b');
  m.tokens_sha256 = std::string(64, 'c');
  m.text_tokens = 100;
  m.method = PplMethod::Window;
  m.ctx = 8;
  m.windows = (rows + 6) / 7;
  m.vocab_size = vocab;
  m.rows = rows;
  m.k = k;
  m.bos = true;
  m.tool = "lowbit test";
  m.ppl = table_perplexity(b.table);
  m.histograms = score_histograms(b.table, vocab);
  return b;
}

std::string bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("lowbit_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::string error_of(const std::string& bytes) {
  try {
    parse_baseline(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "x.lbbase");
  } catch (const Error& e) {
    EXPECT_EQ(e.module(), "eval");
    return e.what();
  }
  return "";
}

}  // namespace

TEST(BaselineFile, RoundTripIsExact) {
  Baseline b = synthetic();
  const std::string path = temp_path("rt.lbbase");
  save_baseline(path, b);
  Baseline r = load_baseline(path);
  std::filesystem::remove(path);
  EXPECT_EQ(r.meta.to_json(), b.meta.to_json());
  ASSERT_EQ(r.table.size(), b.table.size());
  EXPECT_EQ(r.table.k, 3);
  EXPECT_EQ(r.table.top_ids, b.table.top_ids);
  EXPECT_EQ(r.table.top_lp, b.table.top_lp);
  for (size_t i = 0; i < b.table.rows.size(); ++i) {
    const auto &x = b.table.rows[i], &y = r.table.rows[i];
    EXPECT_EQ(x.target, y.target);
    EXPECT_EQ(x.pos, y.pos);
    EXPECT_EQ(x.chunk, y.chunk);
    EXPECT_EQ(x.top1, y.top1);
    EXPECT_EQ(x.lse, y.lse);
    EXPECT_EQ(x.tail, y.tail);
    EXPECT_EQ(x.logprob, y.logprob);
    EXPECT_EQ(x.top1_logprob, y.top1_logprob);
    EXPECT_EQ(x.entropy, y.entropy);
  }
  // Size is exactly header + rows * (48 + 8k) + framing: bounded and documented.
  const std::string bytes = [&] {
    save_baseline(path, b);
    auto s = bytes_of(path);
    std::filesystem::remove(path);
    return s;
  }();
  const size_t header = b.meta.to_json().dump().size();
  EXPECT_EQ(bytes.size(), 16 + header + 16 + 7 * (56 + 12 * 3) + 40);
}

TEST(BaselineFile, EveryTruncationIsAnError) {
  Baseline b = synthetic();
  const std::string path = temp_path("tr.lbbase");
  save_baseline(path, b);
  const std::string bytes = bytes_of(path);
  std::filesystem::remove(path);
  for (size_t n = 0; n < bytes.size(); n += (n < 64 || n + 64 > bytes.size()) ? 1 : 13) {
    std::string e = error_of(bytes.substr(0, n));
    ASSERT_FALSE(e.empty()) << "prefix of " << n << " bytes accepted";
    EXPECT_TRUE(e.find("truncated") != std::string::npos || e.find("corrupt") != std::string::npos ||
                e.find("not a lowbit baseline") != std::string::npos)
        << e;
  }
  EXPECT_NE(error_of(bytes.substr(0, bytes.size() - 1)).find("truncated"), std::string::npos);
}

TEST(BaselineFile, FlippedBytesAreDetected) {
  Baseline b = synthetic();
  const std::string path = temp_path("fl.lbbase");
  save_baseline(path, b);
  const std::string bytes = bytes_of(path);
  std::filesystem::remove(path);
  for (size_t i = 0; i < bytes.size(); i += 5) {
    std::string c = bytes;
    c[i] = static_cast<char>(c[i] ^ 0x5a);
    EXPECT_FALSE(error_of(c).empty()) << "flip at byte " << i << " not detected";
  }
  std::string c = bytes;
  c[bytes.size() - 100] ^= 1;  // inside the records
  EXPECT_NE(error_of(c).find("checksum"), std::string::npos);
  EXPECT_NE(error_of("hello world, this is not a baseline").find("not a lowbit baseline"), std::string::npos);
  EXPECT_NE(error_of(bytes + "x").find("trailing"), std::string::npos);
  c = bytes;
  c[8] = 2;  // version
  EXPECT_NE(error_of(c).find("version 2"), std::string::npos);
}

TEST(BaselineFile, OutOfRangeRecordBehindValidChecksum) {
  Baseline b = synthetic();
  b.table.rows[3].target = 99;  // vocab is 10
  const std::string path = temp_path("oor.lbbase");
  save_baseline(path, b);
  try {
    load_baseline(path);
    ADD_FAILURE() << "accepted a record with target 99 of vocab 10";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("record 3"), std::string::npos) << e.what();
  }
  b = synthetic();
  b.table.top_ids[5] = -1;
  save_baseline(path, b);
  EXPECT_THROW(load_baseline(path), Error);
  std::filesystem::remove(path);
  EXPECT_THROW(load_baseline(temp_path("does_not_exist.lbbase")), Error);
}

namespace {

// The file `bytes` with its header JSON replaced by edit(header), header length and checksum fixed up.
std::string with_header(const std::string& bytes, const std::function<void(nlohmann::json&)>& edit) {
  uint32_t hl;
  std::memcpy(&hl, bytes.data() + 12, 4);
  nlohmann::json h = nlohmann::json::parse(bytes.substr(16, hl));
  edit(h);
  const std::string text = h.dump();
  std::string out = bytes.substr(0, 12);
  const uint32_t n = static_cast<uint32_t>(text.size());
  out.append(reinterpret_cast<const char*>(&n), 4);
  out += text;
  out += bytes.substr(16 + hl, bytes.size() - 16 - hl - 40);
  const std::string hex = sha256_hex(out.data(), out.size());
  for (size_t i = 0; i < 32; ++i)
    out.push_back(static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16)));
  return out + bytes.substr(bytes.size() - 8);
}

}  // namespace

// Found by fuzz_baseline: header integers given as out-of-range floats were cast with undefined behaviour
// (nlohmann's get<int64_t>() on 1e300) before any size check could reject them.
TEST(BaselineFile, HeaderIntegersMustBeIntegersInRange) {
  const std::string path = temp_path("ints.lbbase");
  save_baseline(path, synthetic());
  const std::string bytes = bytes_of(path);
  std::filesystem::remove(path);
  EXPECT_EQ(error_of(with_header(bytes, [](nlohmann::json&) {})), "");  // the fix-up itself is exact
  EXPECT_NE(error_of(with_header(bytes, [](nlohmann::json& h) { h["ctx"] = 1e300; }))
                .find("'ctx' must be an integer"),
            std::string::npos);
  EXPECT_NE(
      error_of(with_header(bytes, [](nlohmann::json& h) { h["topk"] = int64_t{1} << 40; })).find("'topk'"),
      std::string::npos);
  EXPECT_NE(
      error_of(with_header(bytes, [](nlohmann::json& h) { h["histograms"]["entropy"]["counts"][0] = -1e30; }))
          .find("histograms.entropy.counts"),
      std::string::npos);
}

TEST(BaselineFile, MismatchNamesWhatDiffers) {
  Baseline b = synthetic();
  EvalText t;
  t.path = "text.txt";
  t.text_sha256 = b.meta.text_sha256;
  t.tokens_sha256 = b.meta.tokens_sha256;
  t.ctx = 8;
  t.method = PplMethod::Window;
  t.chunks.resize(1);
  EXPECT_NO_THROW(check_baseline_matches(b.meta, t, 10));
  auto msg = [&](EvalText x, int64_t vocab) -> std::string {
    try {
      check_baseline_matches(b.meta, x, vocab);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EvalText x = t;
  x.ctx = 16;
  EXPECT_NE(msg(x, 10).find("ctx differs (baseline 8, now 16)"), std::string::npos);
  x = t;
  x.text_sha256 = std::string(64, 'd');
  EXPECT_NE(msg(x, 10).find("text differs"), std::string::npos);
  x = t;
  x.method = PplMethod::Chunks;
  EXPECT_NE(msg(x, 10).find("method differs"), std::string::npos);
  EXPECT_NE(msg(t, 32000).find("vocabulary differs"), std::string::npos);
  x = t;
  x.tokens_sha256 = std::string(64, 'e');
  EXPECT_NE(msg(x, 10).find("tokenizes differently"), std::string::npos);
  x = t;
  x.chunks.resize(3);
  EXPECT_NE(msg(x, 10).find("windows differs"), std::string::npos);
}
