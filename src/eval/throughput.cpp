#include "eval/throughput.h"

#include <algorithm>
#include <deque>
#include <random>

#include "core/error.h"
#include "core/timer.h"
#include "model/decoder.h"
#include "model/sampler.h"

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
struct Req {
  std::vector<int32_t> prompt;
  int generated = 0;
  int slot = -1;
  int64_t pos = 0;
  int32_t last = 0;
  double start = 0, first = 0, done = 0;
};
double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(std::min<double>(v.size() - 1, p * (v.size() - 1) + 0.5))];
}
}  // namespace

ThroughputResult measure_throughput(const Model& m, const ThroughputOptions& o) {
  if (o.concurrency < 1) throw UsageError("eval", "--concurrency must be at least 1");
  if (o.prompt_tokens < 1 || o.gen_tokens < 1) throw UsageError("eval", "prompt and generated tokens must be >= 1");
  const auto& c = m.config;
  const int64_t cap = o.prompt_tokens + o.gen_tokens;
  if (cap > c.max_seq_len)
    throw UsageError("eval", "prompt + generated tokens (" + std::to_string(cap) + ") exceed the model context (" +
                                 std::to_string(c.max_seq_len) + ")");
  const int R = o.requests > 0 ? o.requests : 2 * o.concurrency;
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> tok(3, static_cast<int32_t>(c.vocab_size - 1));
  std::vector<Req> reqs(R);
  for (auto& r : reqs) {
    r.prompt.resize(o.prompt_tokens);
    r.prompt[0] = c.bos_id >= 0 && c.bos_id < c.vocab_size ? c.bos_id : tok(rng);
    for (int i = 1; i < o.prompt_tokens; ++i) r.prompt[i] = tok(rng);
  }
  KvCache kv(c, o.concurrency, cap, o.kv);
  Decoder dec(c, m.weights);
  std::deque<int> waiting;
  for (int i = 0; i < R; ++i) waiting.push_back(i);
  std::vector<int> slot_owner(o.concurrency, -1);
  std::vector<int> active;
  std::vector<float> logits;
  Timer t;
  int finished = 0;
  while (finished < R) {
    std::vector<BatchEntry> batch;
    std::vector<int> owners;  // request index for each logits row, in order
    // Admit waiting requests into free slots: their whole prompt joins this step's batch.
    for (int s = 0; s < o.concurrency && !waiting.empty(); ++s) {
      if (slot_owner[s] >= 0) continue;
      int ri = waiting.front();
      waiting.pop_front();
      Req& r = reqs[ri];
      r.slot = s;
      r.start = t.seconds();
      slot_owner[s] = ri;
      kv.clear(s);
      for (int i = 0; i < o.prompt_tokens; ++i) batch.push_back({r.prompt[i], s, i, i + 1 == o.prompt_tokens});
      r.pos = o.prompt_tokens;
      owners.push_back(ri);
      active.push_back(ri);
    }
    // One decode token for every request already generating.
    for (int ri : active) {
      Req& r = reqs[ri];
      if (r.generated == 0) continue;  // admitted this step: its prompt is in the batch
      batch.push_back({r.last, r.slot, r.pos, true});
      owners.push_back(ri);
      r.pos++;
    }
    logits.resize(owners.size() * c.vocab_size);
    dec.forward(batch, kv, logits.data());
    double now = t.seconds();
    for (size_t k = 0; k < owners.size(); ++k) {
      Req& r = reqs[owners[k]];
      r.last = argmax(logits.data() + k * c.vocab_size, c.vocab_size);
      if (r.generated == 0) r.first = now;
      r.generated++;
      if (r.generated == o.gen_tokens) {
        r.done = now;
        slot_owner[r.slot] = -1;
        active.erase(std::find(active.begin(), active.end(), owners[k]));
        finished++;
      }
    }
  }
  ThroughputResult res;
  res.concurrency = o.concurrency;
  res.requests = R;
  res.wall_seconds = t.seconds();
  res.gen_tokens_per_second = R * static_cast<double>(o.gen_tokens) / res.wall_seconds;
  res.total_tokens_per_second = R * static_cast<double>(o.gen_tokens + o.prompt_tokens) / res.wall_seconds;
  std::vector<double> ttft, queue;
  double lat = 0;
  for (auto& r : reqs) {
    ttft.push_back(r.first);
    queue.push_back(r.start);
    lat += r.done;
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
