// The phases of GPTQ at the shapes of a real model (Qwen2.5-0.5B's down_proj: 896 x 4864, and its 896-wide
// inputs), so quantization time is measured by a benchmark rather than by timing `lowbit quantize`:
//   Hessian  SiteStats::add — X^T X over a batch of calibration tokens (lower triangle)
//   Gptq     gptq_quantize — damped inverse-Hessian Cholesky factor, then the blocked column loop
// Run: build/bench/bench_quant --benchmark_filter=Gptq
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "formats/scheme.h"
#include "quant/calibration.h"
#include "quant/gptq.h"

namespace {
using namespace lowbit;

std::vector<float> normal(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = nd(rng);
  return v;
}

// A Gram matrix of `cols` inputs from 2 x cols random tokens with a few outlier channels, as calibration
// activations have.
Eigen::MatrixXf gram_of(int64_t cols) {
  const int64_t T = 2 * cols;
  std::vector<float> x = normal(T * cols, 7);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < cols; j += 97) x[t * cols + j] *= 20.0f;
  quant::SiteStats s;
  s.want_gram = true;
  s.add(x.data(), T, cols);
  return Eigen::MatrixXf(s.gram.selfadjointView<Eigen::Lower>());
}

void BM_Hessian(benchmark::State& st) {
  const int64_t T = st.range(0), cols = st.range(1);
  const std::vector<float> x = normal(T * cols, 3);
  quant::SiteStats s;
  s.want_gram = true;
  for (auto _ : st) {
    s.add(x.data(), T, cols);
    benchmark::DoNotOptimize(s.gram.data());
  }
  st.SetItemsProcessed(st.iterations() * T * cols * (cols + 1) / 2);  // multiply-adds of the lower triangle
}
BENCHMARK(BM_Hessian)->Args({512, 896})->Args({512, 4864})->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Gptq(benchmark::State& st, const char* scheme, bool act_order) {
  const int64_t rows = st.range(0), cols = st.range(1);
  const std::vector<float> w = normal(rows * cols, 5);
  const Eigen::MatrixXf g = gram_of(cols);
  quant::GptqOptions o;
  o.act_order = act_order;
  const QuantScheme s = parse_scheme(scheme);
  for (auto _ : st) {
    QuantizedMatrix q = quant::gptq_quantize(w.data(), rows, cols, g, s, o);
    benchmark::DoNotOptimize(q.codes.data());
  }
  st.SetItemsProcessed(st.iterations() * rows * cols);
}
BENCHMARK_CAPTURE(BM_Gptq, int4_g128, "int4:g128", false)
    ->Args({896, 4864})
    ->Args({4864, 896})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Gptq, int4_g128_act_order, "int4:g128", true)
    ->Args({896, 4864})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
