// `lowbit throughput`: continuous-batching service simulation at one or more concurrency levels.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/lowbit/cli_common.h"
#include "apps/lowbit/command.h"
#include "core/error.h"
#include "core/json_text.h"
#include "core/memory.h"
#include "core/parallel.h"
#include "eval/throughput.h"
#include "model/model.h"

namespace {

struct Args {
  std::string model, dtype = "native", levels = "1,4";
  lowbit::app::KvFlags kv;
  lowbit::app::QuantizeFlags quant;
  int requests = 0, p = 64, n = 32, threads = 0;
  uint64_t seed = 0;
  bool json = false;
};

void setup(CLI::App& cmd) {
  static Args a;
  cmd.add_option("-m,--model", a.model, "Model: a Hugging Face directory, a .gguf file or a llama2.c .bin")
      ->required();
  cmd.add_option("-c,--concurrency", a.levels,
                 "Concurrency levels (sequence slots), comma-separated (default 1,4)");
  cmd.add_option("--requests", a.requests,
                 "Requests per level, all arriving at t=0 (default: 2 x concurrency)");
  cmd.add_option("-p,--n-prompt", a.p, "Prompt tokens per request (default 64)");
  cmd.add_option("-n,--n-gen", a.n, "Generated tokens per request (default 32)");
  lowbit::app::add_kv_options(&cmd, a.kv);
  lowbit::app::add_quantize_options(&cmd, a.quant);
  cmd.add_option("--dtype", a.dtype, "Dense weights in memory: native (default), f32, f16, bf16");
  cmd.add_option("--seed", a.seed, "Seed for the random prompt token ids");
  lowbit::app::add_threads_option(&cmd, a.threads);
  lowbit::app::add_gguf_acts_option(&cmd);
  cmd.add_flag("--json", a.json, "Print one JSON object");
  cmd.footer(
      "Example: lowbit throughput -m ../shared/models/kjv-brown-6M/model.bin -c 1,4,8 -p 64 -n 32\n"
      "Example: lowbit throughput -m model-dir --quantize W4A16 --kv-cache int8 -c 1,4,8,16\n"
      "The requests run through the serving engine (the scheduler of lowbit serve), in process.");
  cmd.callback([] {
    using namespace lowbit;
    app::apply_threads(a.threads);
    auto levels = app::parse_concurrency_list(a.levels, "throughput", "--concurrency");
    LoadOptions lo;
    lo.dense = dense_mode_from_string(a.dtype);
    auto m = load_model(a.model, lo);
    const nlohmann::json online = app::apply_online_quantization(*m, a.quant, a.json);
    nlohmann::json out = {{"model", a.model},        {"threads", num_threads()},
                          {"prompt_tokens", a.p},    {"gen_tokens", a.n},
                          {"kv_cache", a.kv.text()}, {"levels", nlohmann::json::array()}};
    if (!online.is_null()) out["online_quantization"] = online;
    if (!a.json)
      std::printf("%-11s %8s %12s %12s %10s %10s %10s %10s\n", "concurrency", "requests", "gen tok/s",
                  "total tok/s", "TTFT mean", "TTFT p90", "queue mean", "latency");
    for (int c : levels) {
      ThroughputOptions o;
      o.concurrency = c;
      o.requests = a.requests;
      o.prompt_tokens = a.p;
      o.gen_tokens = a.n;
      o.kv = a.kv.spec();
      o.seed = a.seed;
      auto r = measure_throughput(*m, o);
      out["levels"].push_back(r.to_json());
      if (!a.json)
        std::printf("%-11d %8d %12.1f %12.1f %8.1fms %8.1fms %8.1fms %8.1fms\n", c, r.requests,
                    r.gen_tokens_per_second, r.total_tokens_per_second, r.ttft_mean * 1e3, r.ttft_p90 * 1e3,
                    r.queue_mean * 1e3, r.latency_mean * 1e3);
    }
    out["peak_rss_bytes"] = peak_rss_bytes();
    if (a.json) std::cout << lowbit::json_text(out, 2) << "\n";
  });
}

}  // namespace

LOWBIT_COMMAND(
    "throughput", 45,
    "Serve many requests with continuous batching: throughput, TTFT and queueing per concurrency level.",
    setup);
