// Token sampling: greedy, temperature, top-k, top-p, min-p, repetition penalty; seeded and reproducible.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace lowbit {

struct SamplerParams {
  float temperature = 0.0f;  // 0 = greedy (argmax)
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off; keep tokens with p >= min_p * p_max
  float repeat_penalty =
      1.0f;  // 1 = off; divides positive logits / multiplies negative ones of recent tokens
  int repeat_last_n = 64;
  uint64_t seed = 0;
  // Throws UsageError naming the bad parameter.
  void validate() const;
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& p);
  // Picks the next token from logits[vocab]; `history` = previous tokens (for the repetition penalty).
  int32_t sample(const float* logits, int64_t vocab, const std::vector<int32_t>& history);

 private:
  int32_t sample_top_k(const float* logits, int64_t vocab);
  int32_t sample_all(const float* logits, int64_t vocab);
  SamplerParams p_;
  std::mt19937_64 rng_;
};

// Index of the largest logit (lowest index on ties).
int32_t argmax(const float* logits, int64_t n);

}  // namespace lowbit
