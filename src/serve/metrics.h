// Prometheus metrics of `lowbit serve` (GET /metrics, text exposition format 0.0.4). Gauges and engine
// counters come from EngineStats at scrape time; latency histograms are fed by the HTTP handlers from token
// event timestamps when a request ends. Names are listed in docs/serve.md.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace lowbit::serve {

// A cumulative Prometheus histogram (thread-safe).
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  uint64_t count() const;
  // name_bucket{le="..."} lines (cumulative, ending with +Inf), name_sum and name_count, after # HELP / #
  // TYPE.
  void render(std::string& out, const std::string& name, const std::string& help) const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last is +Inf
  double sum_ = 0;
  uint64_t n_ = 0;
};

// What one finished request contributes (seconds; < 0 = not observed, e.g. no token was generated).
struct RequestRecord {
  double queue = -1, ttft = -1, e2e = -1;
  std::vector<double> inter_token;  // gaps between consecutive token events
  int64_t prompt_tokens = 0, completion_tokens = 0;
  std::string finish_reason;  // stop | length | abort | error
};

class ServerMetrics {
 public:
  ServerMetrics();
  void record(const RequestRecord& r);
  void count_response(int status);  // every HTTP response by status code
  std::string render(const EngineStats& s) const;

 private:
  Histogram queue_, ttft_, itl_, e2e_;
  mutable std::mutex mu_;
  std::map<std::string, int64_t> finished_;  // finish_reason -> requests
  std::map<int, int64_t> responses_;         // HTTP status -> responses
  int64_t prompt_tokens_ = 0, completion_tokens_ = 0;
};

}  // namespace lowbit::serve
