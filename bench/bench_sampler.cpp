// Sampling one token from a 151,936-entry vocabulary (Qwen2.5's), as a server does for every running
// sequence each step: greedy, and the OpenAI defaults (temperature 1, top_p 1) with and without truncation.
//   build/bench/bench_sampler
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "model/sampler.h"

namespace {

std::vector<float> logits(int64_t n) {
  // Roughly a trained model's spread: a few strong candidates over a wide low tail.
  std::mt19937_64 rng(1);
  std::normal_distribution<float> d(0.0f, 2.5f);
  std::vector<float> l(static_cast<size_t>(n));
  for (auto& v : l) v = d(rng);
  for (int i = 0; i < 8; ++i) l[static_cast<size_t>(rng() % n)] += 12.0f;
  return l;
}

void BM_Sample(benchmark::State& st, float temperature, int top_k, float top_p, float min_p) {
  const int64_t V = 151936;
  const std::vector<float> l = logits(V);
  lowbit::SamplerParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = 7;
  lowbit::Sampler s(p);
  const std::vector<int32_t> history;
  for (auto _ : st) benchmark::DoNotOptimize(s.sample(l.data(), V, history));
}

BENCHMARK_CAPTURE(BM_Sample, greedy, 0.0f, 0, 1.0f, 0.0f)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, temp1, 1.0f, 0, 1.0f, 0.0f)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, temp1_top_p90, 1.0f, 0, 0.9f, 0.0f)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, temp07_top_k40, 0.7f, 40, 1.0f, 0.0f)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, temp1_min_p05, 1.0f, 0, 1.0f, 0.05f)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
