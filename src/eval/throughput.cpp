#include "eval/throughput.h"

#include <algorithm>
#include <deque>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "core/timer.h"
#include "engine/engine.h"

namespace lowbit {

nlohmann::json ThroughputResult::to_json() const {
  return {{"concurrency", concurrency},
          {"requests", requests},
          {"wall_seconds", wall_seconds},
          {"gen_tokens_per_second", gen_tokens_per_second},
          {"total_tokens_per_second", total_tokens_per_second},
          {"ttft_seconds", {{"mean", ttft_mean}, {"p50", ttft_p50}, {"p90", ttft_p90}, {"max", ttft_max}}},
          {"queue_seconds", {{"mean", queue_mean}, {"max", queue_max}}},
          {"latency_mean_seconds", latency_mean}};
}

namespace {
double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(std::min<double>(v.size() - 1, p * (v.size() - 1) + 0.5))];
}
}  // namespace

// A thin client of the serving engine (engine/engine.h): every request arrives at t = 0, the engine's
// scheduler admits them into `concurrency` sequence slots and batches their prefill chunks and decode tokens.
ThroughputResult measure_throughput(const Model& m, const ThroughputOptions& o) {
  if (o.concurrency < 1) throw UsageError("eval", "--concurrency must be at least 1");
  if (o.prompt_tokens < 1 || o.gen_tokens < 1)
    throw UsageError("eval", "prompt and generated tokens must be >= 1");
  const auto& c = m.config;
  const int64_t cap = o.prompt_tokens + o.gen_tokens;
  if (cap > c.max_seq_len)
    throw UsageError("eval", "prompt + generated tokens (" + std::to_string(cap) +
                                 ") exceed the model context (" + std::to_string(c.max_seq_len) + ")");
  const int R = o.requests > 0 ? o.requests : 2 * o.concurrency;
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> tok(3, static_cast<int32_t>(c.vocab_size - 1));
  EngineOptions eo;
  eo.max_num_seqs = o.concurrency;
  eo.max_model_len = cap;
  eo.kv = o.kv;
  // The whole prompt in one chunk (as a single-sequence prefill would run it); the step budget lets every
  // admitted request's prompt into the same step.
  eo.prefill_chunk = o.prompt_tokens;
  eo.step_tokens = std::max(o.prompt_tokens * o.concurrency + o.concurrency, 512);
  eo.max_queue = R;
  eo.prefix_cache = false;  // random prompts share nothing; keep the measurement about batching
  Engine engine(m, eo);
  std::vector<std::shared_ptr<Request>> reqs;
  for (int r = 0; r < R; ++r) {
    RequestOptions ro;
    ro.prompt.resize(o.prompt_tokens);
    ro.prompt[0] = c.bos_id >= 0 && c.bos_id < c.vocab_size ? c.bos_id : tok(rng);
    for (int i = 1; i < o.prompt_tokens; ++i) ro.prompt[i] = tok(rng);
    ro.max_tokens = o.gen_tokens;
    ro.stop_at_eos = false;  // fixed work per request
    reqs.push_back(engine.submit(std::move(ro)));
  }
  const double t0 = engine.now();
  while (engine.step()) {
  }
  ThroughputResult res;
  res.concurrency = o.concurrency;
  res.requests = R;
  res.wall_seconds = engine.now() - t0;
  res.gen_tokens_per_second = R * static_cast<double>(o.gen_tokens) / res.wall_seconds;
  res.total_tokens_per_second = R * static_cast<double>(o.gen_tokens + o.prompt_tokens) / res.wall_seconds;
  std::vector<double> ttft, queue;
  double lat = 0;
  for (auto& r : reqs) {
    const RequestTimes t = r->times();
    if (t.finished < 0 || t.generated != o.gen_tokens)
      throw Error("eval", "request " + std::to_string(r->id()) + " ended after " +
                              std::to_string(t.generated) + " of " + std::to_string(o.gen_tokens) +
                              " tokens");
    ttft.push_back(t.first_token - t0);
    queue.push_back(t.admitted - t0);
    lat += t.finished - t0;
  }
  for (double v : ttft) res.ttft_mean += v / R;
  for (double v : queue) res.queue_mean += v / R;
  res.ttft_p50 = pct(ttft, 0.5);
  res.ttft_p90 = pct(ttft, 0.9);
  res.ttft_max = *std::max_element(ttft.begin(), ttft.end());
  res.queue_max = *std::max_element(queue.begin(), queue.end());
  res.latency_mean = lat / R;
  return res;
}

}  // namespace lowbit
