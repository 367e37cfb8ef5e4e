// GOLDEN.md: the real tiny models reproduce the reference token ids' logits (top-5 to 1e-3) and the 32-token
// greedy continuations exactly, through every loader (llama2.c, HF safetensors).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "model/decoder.h"
#include "model/generate.h"
#include "model/model.h"

using namespace lowbit;

namespace {
const std::string kShared = LOWBIT_SHARED_DIR;

struct Golden {
  std::string path;
  std::vector<int32_t> prompt;
  std::vector<std::pair<int, float>> top5;
  std::vector<int32_t> greedy;
};

const Golden kStories{kShared + "/models/stories260K/stories260K.bin",
                      {1, 403, 407, 261, 378},
                      {{432, 17.7994f}, {383, 14.2813f}, {322, 9.7097f}, {353, 9.5873f}, {323, 9.1342f}},
                      {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337,
                       410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394}};
const Golden kTiny{kShared + "/models/tinystories-656K",
                   {1, 80, 147, 201, 282, 57},
                   {{313, 17.3808f}, {8, 13.7726f}, {1773, 13.7435f}, {404, 12.6918f}, {547, 11.3585f}},
                   {313,  598, 303, 1049, 1468, 267, 628, 333, 94,  1210, 263,  251, 604,  94,  1030, 94,
                    1030, 94,  436, 220,  1053, 615, 303, 328, 552, 319,  1269, 163, 1945, 897, 645,  1188}};
const Golden kKjv{kShared + "/models/kjv-brown-6M/model.bin",
                  {1, 350, 342, 604, 290, 794},
                  {{4032, 9.6612f}, {337, 7.6644f}, {414, 7.6551f}, {287, 7.5364f}, {406, 7.1918f}},
                  {4032, 316, 508, 262,  580,  4045, 4020, 621, 343, 646, 4032, 300, 453,  4032, 313,  412,
                   1440, 262, 580, 4045, 4020, 621,  4032, 274, 412, 360, 1056, 342, 4032, 912,  1093, 262}};

class GoldenTest : public ::testing::TestWithParam<Golden> {};

TEST_P(GoldenTest, TopFiveLogits) {
  const Golden& g = GetParam();
  auto m = load_model(g.path, {DenseMode::F32});
  KvCache kv(m->config, 1, 64, KvDtype::F32);
  Decoder dec(m->config, m->weights);
  std::vector<BatchEntry> b;
  for (size_t i = 0; i < g.prompt.size(); ++i)
    b.push_back({g.prompt[i], 0, static_cast<int64_t>(i), i + 1 == g.prompt.size()});
  std::vector<float> logits(m->config.vocab_size);
  dec.forward(b, kv, logits.data());
  std::vector<int> idx(logits.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + 5, idx.end(),
                    [&](int a, int b) { return logits[a] > logits[b]; });
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(idx[i], g.top5[i].first) << "rank " << i;
    EXPECT_NEAR(logits[g.top5[i].first], g.top5[i].second, 1e-3) << "token " << g.top5[i].first;
  }
}

TEST_P(GoldenTest, GreedyContinuation) {
  const Golden& g = GetParam();
  auto m = load_model(g.path, {DenseMode::F32});
  GenerateOptions o;
  o.max_new_tokens = 32;
  o.stop_at_eos = false;
  auto out = generate(*m, g.prompt, o, nullptr, nullptr);
  EXPECT_EQ(out, g.greedy);
}

TEST_P(GoldenTest, TokenByTokenEqualsBatchedPrefill) {
  // Prefill in one batch vs one token at a time: the last logits agree (batch consistency of the decoder).
  const Golden& g = GetParam();
  auto m = load_model(g.path);
  Decoder dec(m->config, m->weights);
  std::vector<float> a(m->config.vocab_size), b(m->config.vocab_size);
  KvCache kv1(m->config, 1, 64, KvDtype::F32), kv2(m->config, 1, 64, KvDtype::F32);
  std::vector<BatchEntry> all;
  for (size_t i = 0; i < g.prompt.size(); ++i)
    all.push_back({g.prompt[i], 0, static_cast<int64_t>(i), i + 1 == g.prompt.size()});
  dec.forward(all, kv1, a.data());
  for (size_t i = 0; i < g.prompt.size(); ++i) {
    std::vector<BatchEntry> one{{g.prompt[i], 0, static_cast<int64_t>(i), true}};
    dec.forward(one, kv2, b.data());
  }
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4) << i;
}

TEST_P(GoldenTest, MixedBatchMatchesAlone) {
  // Two sequences in one batch (different prompts, interleaved) give the same logits as each alone.
  const Golden& g = GetParam();
  auto m = load_model(g.path);
  Decoder dec(m->config, m->weights);
  const int64_t V = m->config.vocab_size;
  std::vector<int32_t> other = {1, 5, 9, 17, 33, 65, 129, 257};
  std::vector<float> alone(V), mixed(2 * V);
  KvCache kv1(m->config, 1, 64, KvDtype::F32), kv2(m->config, 2, 64, KvDtype::F32);
  std::vector<BatchEntry> b1, b2;
  for (size_t i = 0; i < g.prompt.size(); ++i)
    b1.push_back({g.prompt[i], 0, static_cast<int64_t>(i), i + 1 == g.prompt.size()});
  dec.forward(b1, kv1, alone.data());
  size_t n = std::max(g.prompt.size(), other.size());
  for (size_t i = 0; i < n; ++i) {
    if (i < other.size()) b2.push_back({other[i], 1, static_cast<int64_t>(i), false});
    if (i < g.prompt.size())
      b2.push_back({g.prompt[i], 0, static_cast<int64_t>(i), i + 1 == g.prompt.size()});
  }
  dec.forward(b2, kv2, mixed.data());
  for (int64_t i = 0; i < V; ++i) ASSERT_NEAR(alone[i], mixed[i], 1e-4) << i;
}

INSTANTIATE_TEST_SUITE_P(RealModels, GoldenTest, ::testing::Values(kStories, kTiny, kKjv),
                         [](const auto& info) {
                           return info.index == 0   ? std::string("stories260K")
                                  : info.index == 1 ? std::string("tinystories656K")
                                                    : std::string("kjv_brown_6M");
                         });

}  // namespace
