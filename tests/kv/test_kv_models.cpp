// Real models: greedy continuation with a paged F16/BF16/E4M3/INT8 KV cache against the F32 cache
// (stories260K, first 16 tokens), and sanity of the quantized formats on a whole context (no NaN/Inf).
#include <gtest/gtest.h>

#include <cmath>

#include "model/decoder.h"
#include "model/generate.h"
#include "model/kv_formats.h"
#include "model/model.h"

using namespace lowbit;

namespace {
const std::string kStories = std::string(LOWBIT_SHARED_DIR) + "/models/stories260K/stories260K.bin";

std::vector<int32_t> greedy(const Model& m, const std::vector<int32_t>& prompt, int n, const KvCacheSpec* spec) {
  KvCache kv = spec ? KvCache(m.config, 1, 128, *spec) : KvCache(m.config, 1, 128, KvDtype::F32);
  Decoder dec(m.config, m.weights);
  std::vector<float> logits(m.config.vocab_size);
  std::vector<BatchEntry> b;
  for (size_t i = 0; i < prompt.size(); ++i) b.push_back({prompt[i], 0, int64_t(i), i + 1 == prompt.size()});
  dec.forward(b, kv, logits.data());
  std::vector<int32_t> out;
  int64_t pos = static_cast<int64_t>(prompt.size());
  for (int i = 0; i < n; ++i) {
    int32_t best = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(best);
    std::vector<BatchEntry> one{{best, 0, pos++, true}};
    dec.forward(one, kv, logits.data());
    for (float x : logits) EXPECT_TRUE(std::isfinite(x));
  }
  return out;
}

TEST(KvModels, GreedyMatchesF32OnStories260K) {
  auto m = load_model(kStories, {DenseMode::F32});
  const std::vector<int32_t> prompt{1, 403, 407, 261, 378};
  const auto ref = greedy(*m, prompt, 16, nullptr);
  for (const char* f : {"f16:paged", "bf16:paged", "e4m3", "int8", "int8+rot", "e4m3:head", "f32:prerope"}) {
    KvCacheSpec s = parse_kv_spec(f);
    const auto got = greedy(*m, prompt, 16, &s);
    int first_diff = -1;
    for (int i = 0; i < 16 && first_diff < 0; ++i)
      if (got[i] != ref[i]) first_diff = i;
    std::printf("kv %-12s greedy-16 %s (first divergence at %d)\n", f, first_diff < 0 ? "matches F32" : "diverges",
                first_diff);
    // F16/BF16/INT8/E4M3 must keep the story; the pre-RoPE F32 path must be exact.
    EXPECT_EQ(first_diff, -1) << f;
  }
  // Quantized formats stay finite on a whole context.
  for (const char* f : {"int4", "int4:window32+rot", "int2:asym", "fp4", "e5m2:token"}) {
    KvCacheSpec s = parse_kv_spec(f);
    const auto got = greedy(*m, prompt, 100, &s);
    EXPECT_EQ(got.size(), 100u) << f;
  }
}

// generate() with a spec: bytes per token and capacity are reported; eviction lets it run past the capacity.
TEST(KvModels, GenerateWithSpecAndEviction) {
  auto m = load_model(kStories, {DenseMode::F32});
  GenerateOptions o;
  o.max_new_tokens = 200;
  o.stop_at_eos = false;
  o.ctx = 64;
  o.kv_spec = parse_kv_spec("int8", "", "", "streaming:4+60");
  GenerateStats st;
  auto out = generate(*m, {1, 403, 407, 261, 378}, o, nullptr, &st);
  EXPECT_EQ(out.size(), 200u);
  EXPECT_EQ(st.kv_bytes_per_token, 2 * 5 * (32 + 2 * 4));
  EXPECT_GT(st.kv_capacity_tokens, 0);
}
}  // namespace
