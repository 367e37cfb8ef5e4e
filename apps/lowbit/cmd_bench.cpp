// `lowbit bench`: llama-bench-style speed measurement (load, prefill ppN, decode tgN, peak RSS, fraction of
// the memory-bandwidth bound) and `--bandwidth`: this machine's streaming read bandwidth. `lowbit bench
// serve`: a load generator for OpenAI-compatible servers (serve/bench_client.h).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "apps/lowbit/cli_common.h"
#include "apps/lowbit/command.h"
#include "core/error.h"
#include "core/json_text.h"
#include "core/memory.h"
#include "core/parallel.h"
#include "kernels/dispatch.h"
#include "kv/kv_cache.h"
#include "kv/kv_paged.h"
#include "model/decoder.h"
#include "model/model.h"
#include "serve/bench_client.h"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct BenchArgs {
  std::string model, dtype = "native", rope_scaling;
  lowbit::app::QuantizeFlags quant;
  lowbit::app::KvFlags kv;
  int p = 512, n = 128, threads = 0, reps = 3;
  int64_t depth = 0;
  double bw_gbs = 0;
  bool json = false, bandwidth = false;
};

// Streaming read of a buffer much larger than the last-level cache, split over the worker threads; best of
// `reps` passes, in bytes per second. The buffer is allocated once: the decode test probes after every
// repetition.
class ReadProbe {
 public:
  explicit ReadProbe(size_t bytes) : buf_(bytes / sizeof(uint64_t)) {
    lowbit::parallel_for(static_cast<int64_t>(buf_.size()), 1 << 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) buf_[i] = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
    });
  }
  double measure(int reps) {
    const int64_t n = static_cast<int64_t>(buf_.size());
    double best = 0;
    for (int r = 0; r < reps; ++r) {
      const int nt = lowbit::num_threads();
      std::vector<uint64_t> part(static_cast<size_t>(nt) * 8, 0);
      auto t0 = Clock::now();
      lowbit::parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
        uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        int64_t i = b;
        for (; i + 4 <= e; i += 4) {
          a0 += buf_[i];
          a1 += buf_[i + 1];
          a2 += buf_[i + 2];
          a3 += buf_[i + 3];
        }
        for (; i < e; ++i) a0 += buf_[i];
        part[static_cast<size_t>(lowbit::thread_index()) * 8] += a0 + a1 + a2 + a3;
      });
      const double s = seconds_since(t0);
      for (auto v : part) sink_ = sink_ + v;
      best = std::max(best, static_cast<double>(n) * sizeof(uint64_t) / s);
    }
    return best;
  }

 private:
  std::vector<uint64_t> buf_;
  volatile uint64_t sink_ = 0;
};

struct Stat {
  double mean = 0, sd = 0;
};
Stat stats(const std::vector<double>& v) {
  Stat s;
  if (v.empty()) return s;
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  if (v.size() > 1) {
    for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
    s.sd = std::sqrt(s.sd / static_cast<double>(v.size() - 1));
  }
  return s;
}

void run_bandwidth(const BenchArgs& a) {
  const size_t bytes = size_t{1} << 30;  // 1 GiB >> any L3 here
  nlohmann::json rows = nlohmann::json::array();
  const int maxt = lowbit::num_threads();
  if (!a.json) std::printf("| threads | read GB/s |\n|---:|---:|\n");
  for (int t = 1; t <= maxt; ++t) {
    lowbit::set_num_threads(t);
    const double bw = ReadProbe(bytes).measure(5);
    rows.push_back({{"threads", t}, {"read_bytes_per_second", bw}});
    if (!a.json) std::printf("| %d | %.1f |\n", t, bw / 1e9);
  }
  lowbit::set_num_threads(maxt);
  if (a.json)
    std::cout << lowbit::json_text(nlohmann::json{{"bandwidth", rows}, {"buffer_bytes", bytes}}, 2) << "\n";
}

// What one `lowbit bench -m` run measured, for its JSON and its table.
struct ModelBenchResult {
  Stat sp, sg, sb, sf;      // prefill t/s, decode t/s, read bandwidth B/s, decode fraction of its bound
  std::vector<double> bws;  // read bandwidth probed after each decode repetition
  double bytes_per_token = 0, bound = 0, load_s = 0;
  std::string wname;
  size_t wbytes = 0;
  uint64_t peak = 0, huge = 0;
  nlohmann::json online, kv, kernels;  // online quantization, KV cache and kernel reports (JSON only)
};

void print_model_json(const BenchArgs& a, const lowbit::ModelConfig& c, const ModelBenchResult& r) {
  using namespace lowbit;
  nlohmann::json j = {{"model", a.model},
                      {"weights", r.wname},
                      {"size_bytes", r.wbytes},
                      {"params", c.n_params()},
                      {"backend", std::string("CPU ") + isa_name(kernel_isa())},
                      {"threads", num_threads()},
                      {"load_seconds", r.load_s},
                      {"peak_rss_bytes", r.peak},
                      {"huge_page_bytes", r.huge},
                      {"kv_cache", a.kv.text()},
                      {"online_quantization", r.online},
                      {"kv", r.kv},
                      {"depth", a.depth},
                      {"repetitions", a.reps},
                      {"kernels", r.kernels}};
  if (a.p > 0)
    j["prefill"] = {{"test", "pp" + std::to_string(a.p)}, {"tokens_per_second", r.sp.mean}, {"sd", r.sp.sd}};
  if (a.n > 0)
    j["decode"] = {
        {"test", "tg" + std::to_string(a.n) + (a.depth > 0 ? " @ d" + std::to_string(a.depth) : "")},
        {"tokens_per_second", r.sg.mean},
        {"sd", r.sg.sd},
        {"bytes_per_token", r.bytes_per_token},
        {"read_bandwidth_bytes_per_second", r.sb.mean},
        {"read_bandwidth_sd", r.sb.sd},
        {"read_bandwidth_per_repetition", r.bws},
        {"bound_tokens_per_second", r.bound},
        {"fraction_of_bound", r.sf.mean},
        {"fraction_of_bound_sd", r.sf.sd}};
  std::cout << lowbit::json_text(j, 2) << "\n";
}

void print_model_table(const BenchArgs& a, const lowbit::ModelConfig& c, const ModelBenchResult& r,
                       const std::string& kv_description) {
  using namespace lowbit;
  const std::string backend = std::string("CPU ") + isa_name(kernel_isa());
  std::printf("| model | size | params | backend | threads | test | t/s | of bound |\n");
  std::printf("| --- | ---: | ---: | --- | ---: | --- | ---: | ---: |\n");
  const std::string size = app::human_bytes(static_cast<double>(r.wbytes));
  const double params = static_cast<double>(c.n_params()) / 1e6;
  if (a.p > 0)
    std::printf("| %s | %s | %.1f M | %s | %d | pp%d | %.2f ± %.2f | |\n", r.wname.c_str(), size.c_str(),
                params, backend.c_str(), num_threads(), a.p, r.sp.mean, r.sp.sd);
  if (a.n > 0)
    std::printf("| %s | %s | %.1f M | %s | %d | tg%d%s | %.2f ± %.2f | %.0f ± %.0f %% |\n", r.wname.c_str(),
                size.c_str(), params, backend.c_str(), num_threads(), a.n,
                a.depth > 0 ? (" @ d" + std::to_string(a.depth)).c_str() : "", r.sg.mean, r.sg.sd,
                100.0 * r.sf.mean, 100.0 * r.sf.sd);
  std::printf(
      "\nload %.3f s | peak RSS %s (%s in huge pages) | decode reads %s/token, bound %.1f t/s at %.1f GB/s "
      "(probed after each repetition) | KV %s\n",
      r.load_s, app::human_bytes(static_cast<double>(r.peak)).c_str(),
      app::human_bytes(static_cast<double>(r.huge)).c_str(), app::human_bytes(r.bytes_per_token).c_str(),
      r.bound, r.sb.mean / 1e9, kv_description.c_str());
}

void run_model(const BenchArgs& a) {
  using namespace lowbit;
  if (a.model.empty()) throw UsageError("bench", "--model is required (or pass --bandwidth)");
  if (a.p < 0 || a.n < 0 || a.reps < 1 || a.reps > 1000)
    throw UsageError("bench", "-p and -n must be >= 0 and --repetitions in [1, 1000]");
  LoadOptions lo;
  lo.dense = dense_mode_from_string(a.dtype);
  auto t0 = Clock::now();
  auto m = load_model(a.model, lo);
  app::apply_rope_scaling(*m, a.rope_scaling, a.json);
  const nlohmann::json online = app::apply_online_quantization(*m, a.quant, a.json);
  for (auto& [name, w] : m->weights.named_matrices()) prepare_weight(*w);
  const double load_s = seconds_since(t0);
  const ModelConfig& c = m->config;
  const KvCacheSpec kvs = a.kv.spec();
  if (a.depth < 0) throw UsageError("bench", "--depth must be >= 0");
  if (a.depth + a.n > c.max_seq_len && kvs.evict.policy == KvEvictPolicy::None)
    throw UsageError("bench", "--depth " + std::to_string(a.depth) + " + -n " + std::to_string(a.n) +
                                  " exceeds the model's context of " + std::to_string(c.max_seq_len) +
                                  " tokens");
  app::check_context(c, a.p, "-p", "bench");
  Decoder dec(c, m->weights);
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size - 1));
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));

  // Memory held by the weights (size) and bytes a decode step reads from them (every matrix except the
  // embedding table, of which it reads one row; decode_bytes: codes + the tables the kernel walks) + the KV
  // read.
  size_t wbytes = 0, rbytes = 0;
  for (auto& [name, w] : m->weights.named_matrices())
    if (name != "tok_embed") wbytes += w->nbytes(), rbytes += w->decode_bytes();

  std::vector<double> pp, tg;
  const int64_t cap = std::max<int64_t>(1, std::max<int64_t>(a.p, a.depth + a.n));
  // --depth: the decode test starts from a cache already holding `depth` tokens. They are synthetic K/V rows
  // (Gaussian, like post-norm projections) stored through the cache's own encoder, so a quantized cache holds
  // quantized pages exactly as after a real prefill; attention cost does not depend on the values.
  std::vector<float> fill_k, fill_v;
  if (a.depth > 0) {
    std::normal_distribution<float> g(0.0f, 1.0f);
    fill_k.resize(static_cast<size_t>(std::min<int64_t>(a.depth, 256) * c.kv_dim()));
    fill_v.resize(fill_k.size());
    for (auto& x : fill_k) x = g(rng);
    for (auto& x : fill_v) x = g(rng);
  }
  auto prefill_synthetic = [&](KvCache& kv) {
    const int64_t chunk = static_cast<int64_t>(fill_k.size()) / std::max<int64_t>(1, c.kv_dim());
    std::vector<int32_t> seqs(static_cast<size_t>(chunk), 0);
    std::vector<int64_t> pos(static_cast<size_t>(chunk));
    for (int64_t p0 = 0; p0 < a.depth; p0 += chunk) {
      const int64_t T = std::min(chunk, a.depth - p0);
      for (int64_t t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = p0 + t;
      for (int l = 0; l < c.n_layers; ++l)
        kv.store_rows(l, T, seqs.data(), pos.data(), fill_k.data(), fill_v.data());
    }
  };
  bool printed_kv = a.json;
  // The decode bound's bandwidth is probed right after each counted decode repetition and each repetition is
  // compared with its own probe: on a shared (virtual) machine the bandwidth drifts by 20-30 % within a
  // minute, so one probe before or after the whole test mis-states the fraction. Peak RSS is read before the
  // probe's buffer exists (after the warm-up repetition, which did all the work a counted one does).
  const bool probe_bw = a.n > 0 && a.bw_gbs <= 0;
  std::unique_ptr<ReadProbe> probe;
  uint64_t peak = 0, huge = 0;  // huge: anonymous memory in transparent huge pages (weights, caches)
  std::vector<double> bws;
  for (int r = 0; r < a.reps + 1; ++r) {  // repetition 0 warms up (page faults, plans) and is not counted
    if (r == 1) {
      peak = peak_rss_bytes();
      huge = anon_huge_page_bytes();
      if (probe_bw) probe = std::make_unique<ReadProbe>(size_t{1} << 29);
    }
    if (a.p > 0) {
      KvCache kv(c, 1, cap, kvs);
      if (!printed_kv) app::print_kv_cache(kv), printed_kv = true;
      std::vector<BatchEntry> batch;
      for (int i = 0; i < a.p; ++i) batch.push_back({tok(rng), 0, i, i == a.p - 1});
      auto t1 = Clock::now();
      dec.forward(batch, kv, logits.data());
      if (r > 0) pp.push_back(a.p / seconds_since(t1));
    }
    if (a.n > 0) {
      KvCache kv(c, 1, cap, kvs);
      if (!printed_kv) app::print_kv_cache(kv), printed_kv = true;
      prefill_synthetic(kv);
      auto t1 = Clock::now();
      for (int i = 0; i < a.n; ++i) dec.forward({{tok(rng), 0, a.depth + i, true}}, kv, logits.data());
      if (r > 0) tg.push_back(a.n / seconds_since(t1));
      if (r > 0) bws.push_back(probe ? probe->measure(2) : a.bw_gbs * 1e9);
    }
  }
  KvCache kv1(c, 1, cap, kvs);
  // Mean live tokens read per decode step (eviction caps them at its budget).
  double live = static_cast<double>(a.depth) + (a.n - 1) / 2.0;
  if (kv1.paged() && kv1.paged_cache()->evict_budget() > 0)
    live = std::min<double>(live, static_cast<double>(kv1.paged_cache()->evict_budget()));
  const double kv_read = kv1.bytes_per_token_exact() * live;
  const double bytes_per_token = static_cast<double>(rbytes) + kv_read;
  std::vector<double> fr;  // each repetition's tokens/s over its own bound
  for (size_t i = 0; i < tg.size(); ++i) fr.push_back(tg[i] * bytes_per_token / bws[i]);
  ModelBenchResult res;
  res.sp = stats(pp), res.sg = stats(tg), res.sb = stats(bws), res.sf = stats(fr);
  res.bws = bws;
  res.bytes_per_token = bytes_per_token;
  res.bound = res.sb.mean > 0 ? res.sb.mean / bytes_per_token : 0;
  res.wname = a.quant.recipe.empty() ? m->format : a.quant.recipe;
  res.wbytes = wbytes;
  res.load_s = load_s;
  res.peak = peak;
  res.huge = huge;
  if (a.json) {
    res.online = online;
    res.kv = app::kv_cache_json(kv1);
    res.kernels = app::kernel_report(*m).to_json()["by_kernel"];
    print_model_json(a, c, res);
  } else {
    print_model_table(a, c, res, kv1.describe());
  }
}

// `lowbit bench serve`: its own options (none of bench's model flags apply to a remote server).
struct ServeBenchFlags {
  lowbit::serve::BenchServeOptions o;
  std::string rate = "inf";
  bool json = false;
};

double parse_rate(const std::string& s) {
  if (s == "inf" || s == "infinity") return std::numeric_limits<double>::infinity();
  size_t used = 0;
  double r = 0;
  try {
    r = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || !(r > 0) || !std::isfinite(r))
    throw lowbit::UsageError("bench", "--request-rate '" + s + "' must be a number > 0 (requests/s) or inf");
  return r;
}

void run_serve_bench(ServeBenchFlags& f) {
  using namespace lowbit;
  f.o.request_rate = parse_rate(f.rate);
  f.o.progress = !f.json || isatty(STDERR_FILENO);
  const serve::BenchRun run = serve::run_bench_serve(f.o);
  if (f.json)
    std::cout << json_text(serve::summary_json(run.summary), 2) << "\n";
  else
    std::cout << serve::summary_text(run.summary);
  if (run.summary.failed > 0) app::set_exit_code(3);
}

void setup_serve(CLI::App& bench) {
  static ServeBenchFlags f;
  lowbit::serve::BenchServeOptions& o = f.o;
  CLI::App* s = bench.add_subcommand("serve",
                                     "Load-test an OpenAI-compatible server (lowbit serve, llama-server, "
                                     "vLLM): TTFT, TPOT, ITL, throughput");
  s->add_option("--url", o.url, "Server base URL (default http://127.0.0.1:8080; a trailing /v1 is fine)");
  s->add_option("--endpoint", o.endpoint, "/v1/completions (default) or /v1/chat/completions");
  s->add_option("--model", o.model, "Model name to request (default: the first one GET /v1/models lists)");
  s->add_option("-n,--num-requests", o.num_requests,
                "Requests to send (default: one per line of --prompts, else 32)")
      ->check(CLI::Range(1, 1000000));
  s->add_option(
       "-c,--concurrency", o.concurrency,
       "Requests in flight at most; alone: a closed loop of this many clients (default: all at once)")
      ->check(CLI::Range(1, lowbit::serve::kMaxInFlight));
  s->add_option("--request-rate", f.rate,
                "Poisson arrivals at this many requests/s (seeded), or inf: every request at once (default)");
  s->add_option("--prompts", o.prompts_file,
                "JSONL file of {\"prompt\": ..., \"max_tokens\": ...} or plain text lines (cycled if short)");
  s->add_option("--input-len", o.input_len,
                "Random prompts (no --prompts): about this many words (default 128)");
  s->add_option("--output-len", o.output_len,
                "max_tokens per request when the prompt gives none (default 64)");
  s->add_option("--range-ratio", o.range_ratio,
                "Random lengths uniform in [L*(1-r), L*(1+r)], r in [0, 1) (default 0: fixed)");
  s->add_option("--seed", o.seed, "Seed of the random prompts and the Poisson arrivals (default 0)");
  s->add_option("--api-key", o.api_key, "Sent as 'Authorization: Bearer KEY'")->envname("OPENAI_API_KEY");
  s->add_option("--timeout", o.timeout_s, "Seconds one request may take, send to [DONE] (default 600)");
  s->add_option(
      "--max-duration", o.max_duration_s,
      "Stop the run after this many seconds: unsent requests are skipped, in-flight ones cancelled (0: "
      "no limit, the default)");
  s->add_flag("--ignore-eos,!--no-ignore-eos", o.ignore_eos,
              "Send \"ignore_eos\": true so every request generates exactly max_tokens (default on)");
  s->add_flag("--json", f.json, "Print one JSON object (progress on stderr only when it is a terminal)");
  s->footer(
      "Example: lowbit serve -m ../shared/models/stories260K/stories260K.bin --port 8080 &\n"
      "         lowbit bench serve --url http://127.0.0.1:8080 -n 64 -c 4 --input-len 32 --output-len 32\n"
      "         lowbit bench serve --url http://127.0.0.1:8080 --request-rate 2 --prompts prompts.jsonl "
      "--json\n"
      "Percentiles interpolate linearly between closest ranks (numpy's default, as vLLM's benchmark).\n"
      "Exit code 3 when any request failed (the report is still printed), 1 when the server cannot be\n"
      "reached to list models.");
  s->callback([] { run_serve_bench(f); });
}

void setup(CLI::App& cmd) {
  static BenchArgs a;
  cmd.add_option("-m,--model", a.model, "Model: a Hugging Face directory, a .gguf file or a llama2.c .bin");
  lowbit::app::add_quantize_options(&cmd, a.quant);
  cmd.add_option("-p,--n-prompt", a.p, "Prefill test: tokens in one batch (0 = skip; default 512)");
  cmd.add_option("-n,--n-gen", a.n,
                 "Decode test: tokens generated one by one from an empty cache (0 = skip; 128)");
  lowbit::app::add_threads_option(&cmd, a.threads);
  lowbit::app::add_gguf_acts_option(&cmd);
  cmd.add_option("-r,--repetitions", a.reps, "Repetitions per test (mean ± sd; one extra warm-up run)");
  lowbit::app::add_kv_options(&cmd, a.kv);
  lowbit::app::add_rope_scaling_option(&cmd, a.rope_scaling);
  cmd.add_option(
      "-d,--depth", a.depth,
      "Decode test starts from a cache already holding this many tokens (synthetic rows stored through "
      "the cache's encoder; like llama-bench -d). Example: -d 4096 --kv-cache int8");
  cmd.add_option("--dtype", a.dtype, "Dense weights in memory: native (default), f32, f16, bf16");
  cmd.add_option(
      "--bw", a.bw_gbs,
      "Read bandwidth in GB/s for the decode bound (default: probed right after each decode repetition, "
      "~0.1 s each, and each repetition compared with its own probe)");
  cmd.add_flag("--bandwidth", a.bandwidth,
               "Only measure this machine's read bandwidth for 1..threads threads");
  cmd.add_flag("--json", a.json, "Print one JSON object");
  cmd.footer(
      "Example: lowbit bench -m /tmp/qwen05-q4_0.gguf -p 128 -n 32 -r 3 --threads 2\n"
      "         lowbit bench -m /tmp/q05 -p 0 -n 32 -d 4096 --kv-cache int4   (/tmp/q05: lowbit fixture "
      "--shape qwen2.5-0.5b --format hf --out /tmp/q05)\n"
      "         lowbit bench --bandwidth\n"
      "The ISA tier can be lowered with LOWBIT_ISA=generic|avx2|avx512|avx512bf16|amx (avx512: FP32 "
      "activations in every weight-only kernel).\n"
      "Weights (and the probe's buffer) sit in transparent huge pages unless LOWBIT_HUGEPAGES=0 (the summary "
      "line says how many bytes).");
  setup_serve(cmd);
  cmd.callback([&cmd] {
    if (cmd.got_subcommand("serve")) return;  // CLI11 also runs the parent's callback after a subcommand's
    lowbit::app::apply_threads(a.threads);
    if (a.bandwidth)
      run_bandwidth(a);
    else
      run_model(a);
  });
}

}  // namespace

LOWBIT_COMMAND("bench", 35, "Measure load, prefill and decode speed (llama-bench style) or memory bandwidth.",
               setup);
