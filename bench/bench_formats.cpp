// Quantize / dequantize throughput of the scalar reference paths, per format and shape.
// Run: build/bench/bench_formats --benchmark_filter=nf4
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "formats/format.h"
#include "formats/minifloat.h"
#include "formats/scheme.h"
#include "tensor/qtensor.h"

namespace {
using namespace lowbit;

const char* kSchemes[] = {"int8:channel", "int4:g128",  "int4:g32:asym", "int3:g64",
                          "nf4:g64",      "nf4:g64:dq", "e4m3:channel",  "e4m3:block128x128",
                          "e5m2:channel", "mxfp8",      "mxfp6",         "mxfp4",
                          "mxint8",       "nvfp4",      "q4_0",          "q8_0",
                          "q4_k"};

std::vector<float> data(int64_t n) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = nd(rng);
  return v;
}

void BM_Quantize(benchmark::State& st, std::string scheme, int64_t rows, int64_t cols) {
  auto w = data(rows * cols);
  const QuantScheme s = parse_scheme(scheme);
  for (auto _ : st) {
    auto q = quantize_matrix(w.data(), rows, cols, s);
    benchmark::DoNotOptimize(q.codes.data());
  }
  st.SetItemsProcessed(st.iterations() * rows * cols);
}

void BM_Dequantize(benchmark::State& st, std::string scheme, int64_t rows, int64_t cols) {
  auto w = data(rows * cols);
  auto q = quantize_matrix(w.data(), rows, cols, parse_scheme(scheme));
  std::vector<float> out(w.size());
  for (auto _ : st) {
    for (int64_t r = 0; r < rows; ++r) dequantize_row(q, r, out.data() + r * cols);
    benchmark::DoNotOptimize(out.data());
  }
  st.SetItemsProcessed(st.iterations() * rows * cols);
}

void BM_Fp8Encode(benchmark::State& st) {
  auto w = data(1 << 16);
  std::vector<uint8_t> out(w.size());
  for (auto _ : st) {
    for (size_t i = 0; i < w.size(); ++i) out[i] = f32_to_fp8_e4m3fn(w[i]);
    benchmark::DoNotOptimize(out.data());
  }
  st.SetItemsProcessed(st.iterations() * static_cast<int64_t>(w.size()));
}
BENCHMARK(BM_Fp8Encode);

int register_all() {
  const std::pair<int64_t, int64_t> shapes[] = {{256, 256}, {768, 256}, {1024, 4096}};
  for (const char* s : kSchemes)
    for (auto [r, c] : shapes) {
      const std::string tag = std::string(s) + "/" + std::to_string(r) + "x" + std::to_string(c);
      benchmark::RegisterBenchmark(("quantize/" + tag).c_str(), BM_Quantize, std::string(s), r, c)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
      benchmark::RegisterBenchmark(("dequantize/" + tag).c_str(), BM_Dequantize, std::string(s), r, c)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  return 0;
}
const int kRegistered = register_all();
}  // namespace

BENCHMARK_MAIN();
