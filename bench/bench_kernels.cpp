// Google Benchmark microbenchmarks of the matmul kernels per weight format and shape (Qwen2.5-0.5B
// projections). Counters: weight GB/s (bytes of the stored weight read per second; the decode roofline) and
// GFLOP/s (2*rows*cols*T).
//   build-*/bench/bench_kernels --benchmark_filter='int4' --benchmark_min_time=0.2
// LOWBIT_ISA=generic|avx2|avx512 selects the tier; LOWBIT_THREADS the threads.
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "formats/format.h"
#include "formats/scheme.h"
#include "kernels/matmul.h"
#include "tensor/qtensor.h"

namespace {
using namespace lowbit;

// GGUF types lowbit reads but cannot write (Q5_0, Q2_K, Q3_K, Q5_K, Q6_K, IQ4_NL, MXFP4): random blocks with
// small positive f16 scales at the given byte offsets (MXFP4: E8M0 exponent 127 at byte 0), as a zero-copy
// WeightKind::Ggml weight. Speed does not depend on the code values.
WeightMatrix random_ggml(const std::string& fmt, const std::vector<int>& f16_offsets, int64_t rows,
                         int64_t cols) {
  const FormatInfo& fi = format_by_name(fmt);
  const int64_t nblk = rows * cols / fi.block_elems;
  auto buf = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(nblk * fi.block_bytes));
  std::mt19937 rng(1);
  for (auto& b : *buf) b = static_cast<uint8_t>(rng());
  const uint16_t h = f32_to_f16(0.001f);
  for (int64_t k = 0; k < nblk; ++k)
    for (int off : f16_offsets) std::memcpy(buf->data() + k * fi.block_bytes + off, &h, 2);
  if (fi.native_scale == ScaleType::E8M0)
    for (int64_t k = 0; k < nblk; ++k) (*buf)[static_cast<size_t>(k * fi.block_bytes)] = 127;
  return make_ggml_weight(buf, buf->data(), fi.ggml_type, rows, cols);
}

// Seeded N(0, 0.02) weights (speed does not depend on the values).
std::vector<float> gaussian_weights(int64_t rows, int64_t cols) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (auto& v : w) v = nd(rng);
  return w;
}

// A GGUF tensor as load_model serves it: "gguf:q4_0" (zero-copy rows + the load-time 16-row pack where one
// exists) or "rows:q4_0" (the stored rows only, the kernel weights without a pack use).
WeightMatrix gguf_weight(const std::string& fmt, int64_t rows, int64_t cols) {
  const bool pack = fmt.rfind("gguf:", 0) == 0;
  const std::string type = fmt.substr(fmt.find(':') + 1);
  if (type != "q4_0" && type != "q8_0" && type != "q4_k" && type != "iq4_xs") {  // random blocks
    const std::vector<int> f16 = type == "ggml_mxfp4"                                 ? std::vector<int>{}
                                 : type == "q4_1" || type == "q5_1" || type == "q5_k" ? std::vector<int>{0, 2}
                                 : type == "q6_k"                                     ? std::vector<int>{208}
                                 : type == "q2_k" ? std::vector<int>{80, 82}
                                 : type == "q3_k" ? std::vector<int>{108}
                                                  : std::vector<int>{0};
    WeightMatrix m = random_ggml(type, f16, rows, cols);
    prepare_weight(m, pack);
    return m;
  }
  const FormatInfo& fi = format_by_name(type);
  const std::vector<float> w = gaussian_weights(rows, cols);
  auto q = std::make_shared<QuantizedMatrix>(quantize_matrix(w.data(), rows, cols, default_scheme(fi.id)));
  WeightMatrix m = make_ggml_weight(q, q->codes.data(), fi.ggml_type, rows, cols);
  prepare_weight(m, pack);
  return m;
}

WeightMatrix make(const std::string& fmt, const std::string& act, int64_t rows, int64_t cols) {
  if (fmt.rfind("gguf:", 0) == 0 || fmt.rfind("rows:", 0) == 0) return gguf_weight(fmt, rows, cols);
  if (fmt == "q2_k") return random_ggml(fmt, {80, 82}, rows, cols);
  if (fmt == "q3_k") return random_ggml(fmt, {108}, rows, cols);
  if (fmt == "q5_k") return random_ggml(fmt, {0, 2}, rows, cols);
  if (fmt == "q6_k") return random_ggml(fmt, {208}, rows, cols);
  const std::vector<float> w = gaussian_weights(rows, cols);
  WeightMatrix m;
  if (fmt == "f32")
    m = make_f32_weight(w.data(), rows, cols);
  else if (fmt == "bf16")
    m = make_half_weight(w.data(), rows, cols, WeightKind::BF16);
  else if (fmt == "f16")
    m = make_half_weight(w.data(), rows, cols, WeightKind::F16);
  else
    m = make_quant_weight(
        std::make_shared<QuantizedMatrix>(quantize_matrix(w.data(), rows, cols, parse_scheme(fmt))));
  if (act == "a8") m.act_format = FormatId::INT8;
  if (act == "a4") m.act_format = FormatId::INT4;     // W4A4 (clip 1)
  if (act == "anv4") m.act_format = FormatId::NVFP4;  // NVFP4 activations (clip 1)
  return m;
}

void BM_Matmul(benchmark::State& st, std::string fmt, std::string act, int64_t rows, int64_t cols,
               int64_t T) {
  WeightMatrix w = make(fmt, act, rows, cols);
  std::vector<float> x(static_cast<size_t>(T * cols), 0.5f), y(static_cast<size_t>(T * rows));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
  for (auto _ : st) {
    matmul(w, x.data(), T, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  const double n = static_cast<double>(st.iterations());
  st.counters["weight_GBps"] = benchmark::Counter(static_cast<double>(w.nbytes()) * n,
                                                  benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  st.counters["GFLOPs"] = benchmark::Counter(2.0 * rows * cols * T * n / 1e9, benchmark::Counter::kIsRate);
  st.SetLabel(matmul_kernel_name(w));
}

int register_all() {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{896, 896}, {4864, 896}, {896, 4864}};
  const std::vector<std::pair<std::string, std::string>> fmts = {{"f32", ""},
                                                                 {"bf16", ""},
                                                                 {"int8:channel", ""},
                                                                 {"int8:channel", "a8"},
                                                                 {"int4:g128", ""},
                                                                 {"int4:g128", "a8"},
                                                                 {"int4:g32:asym", ""},
                                                                 {"int4:g32:asym", "a8"},
                                                                 {"int4:channel", "a4"},
                                                                 {"int4:g128", "anv4"},
                                                                 {"nf4:g64", ""},
                                                                 {"mxfp4", ""},
                                                                 {"nvfp4", ""},
                                                                 {"e4m3:channel", ""},
                                                                 {"q4_0", ""},
                                                                 {"q8_0", ""},
                                                                 {"q4_k", ""},
                                                                 {"q5_k", ""},
                                                                 {"q6_k", ""},
                                                                 {"q2_k", ""},
                                                                 {"q3_k", ""}};
  // The last shape (a Qwen2.5-0.5B lm_head, 151936 x 896) streams from DRAM, decode only.
  std::vector<std::pair<int64_t, int64_t>> all_shapes = shapes;
  all_shapes.push_back({151936, 896});
  for (const auto& [f, a] : fmts)
    for (const auto& [r, c] : all_shapes)
      for (int64_t T : {int64_t{1}, int64_t{64}, int64_t{512}}) {
        if (r == 151936 && T != 1) continue;
        if (T == 512 && f != "f32" && f != "bf16") continue;  // 16-bit prefill / calibration batches
        if (f.size() == 4 && f[3] == 'k' && c % 256 != 0)
          continue;  // K-quant rows are whole 256-element super-blocks
        const std::string name = "matmul/" + f + (a.empty() ? "" : "+" + a) + "/" + std::to_string(r) + "x" +
                                 std::to_string(c) + "/T" + std::to_string(T);
        benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, f, a, r, c, T)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
  // GGUF tensors as loaded, with and without the load-time pack, in one run.
  for (const char* f :
       {"gguf:q4_0",       "rows:q4_0",       "gguf:q4_1", "rows:q4_1", "gguf:q5_0",   "rows:q5_0",
        "gguf:q5_1",       "rows:q5_1",       "gguf:q8_0", "rows:q8_0", "gguf:iq4_nl", "rows:iq4_nl",
        "gguf:ggml_mxfp4", "rows:ggml_mxfp4", "gguf:q2_k", "rows:q2_k", "gguf:q3_k",   "rows:q3_k",
        "gguf:q4_k",       "rows:q4_k",       "gguf:q5_k", "rows:q5_k", "gguf:q6_k",   "rows:q6_k",
        "gguf:iq4_xs",     "rows:iq4_xs"}) {
    const bool kq = std::string(f).back() == 'k' || std::string(f).find("iq4_xs") != std::string::npos;
    for (const auto& [r, c] :
         kq ? std::vector<std::pair<int64_t, int64_t>>{{896, 4864}, {4864, 2048}, {131072, 2048}}
            : all_shapes)
      for (int64_t T : {int64_t{1}, int64_t{16}, int64_t{64}}) {  // 16: a serving step's decode batch
        if (r >= 131072 && T == 64) continue;                     // the lm_head: decode and a serving step
        const std::string name = "matmul/" + std::string(f) + "/" + std::to_string(r) + "x" +
                                 std::to_string(c) + "/T" + std::to_string(T);
        benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, f, "", r, c, T)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
  }
  return 0;
}
const int registered = register_all();

}  // namespace

BENCHMARK_MAIN();
