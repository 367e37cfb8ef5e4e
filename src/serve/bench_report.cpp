// `lowbit bench serve`'s numbers: percentiles, the summary over all requests, and its table and JSON.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "serve/bench_client.h"

namespace lowbit::serve {

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = (static_cast<double>(values.size()) - 1) * std::clamp(p, 0.0, 100.0) / 100.0;
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - static_cast<double>(lo));
}

LatencyStats latency_stats(const std::vector<double>& values) {
  LatencyStats s;
  s.n = static_cast<int64_t>(values.size());
  if (values.empty()) return s;
  double sum = 0;
  for (double v : values) sum += v;
  s.mean = sum / static_cast<double>(values.size());
  s.p50 = percentile(values, 50);
  s.p90 = percentile(values, 90);
  s.p99 = percentile(values, 99);
  return s;
}

BenchSummary summarize(const std::vector<BenchRecord>& records, double duration_s) {
  BenchSummary s;
  s.requests = static_cast<int64_t>(records.size());
  s.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2e;
  for (const BenchRecord& r : records) {
    if (!r.sent) {
      ++s.not_sent;
      continue;
    }
    s.retried += r.retried;
    if (r.cancelled) {
      ++s.cancelled;
      continue;
    }
    if (!r.ok) {
      ++s.failed;
      if (s.failures[r.failure.kind]++ == 0) s.failure_examples[r.failure.kind] = r.failure.message;
      continue;
    }
    ++s.ok;
    s.output_tokens += r.output_tokens;
    if (r.prompt_tokens >= 0)
      s.prompt_tokens += r.prompt_tokens;
    else
      s.prompt_tokens_known = false;
    ttft.push_back(r.ttft_s);
    e2e.push_back(r.e2e_s);
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
    // vLLM's TPOT: decode time per token after the first; undefined for one-token outputs.
    if (r.output_tokens > 1) tpot.push_back((r.e2e_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1));
  }
  if (s.ok == 0) s.prompt_tokens_known = false;
  if (duration_s > 0) {
    s.request_throughput = static_cast<double>(s.ok) / duration_s;
    s.output_throughput = static_cast<double>(s.output_tokens) / duration_s;
    if (s.prompt_tokens_known)
      s.total_throughput = static_cast<double>(s.prompt_tokens + s.output_tokens) / duration_s;
  }
  s.ttft = latency_stats(ttft);
  s.tpot = latency_stats(tpot);
  s.itl = latency_stats(itl);
  s.e2e = latency_stats(e2e);
  return s;
}

namespace {

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string load_text(const BenchSummary& s) {
  if (std::isfinite(s.request_rate))
    return "request rate " + fmt("%g", s.request_rate) + " req/s (Poisson arrivals, seed " +
           std::to_string(s.seed) + "), at most " + std::to_string(s.concurrency) + " in flight";
  return "concurrency " + std::to_string(s.concurrency) +
         (s.concurrency >= s.requests ? " (every request at once)" : " (closed loop)");
}

nlohmann::json stats_json(const LatencyStats& l) {
  return {
      {"n", l.n}, {"mean", l.mean * 1e3}, {"p50", l.p50 * 1e3}, {"p90", l.p90 * 1e3}, {"p99", l.p99 * 1e3}};
}

std::string stats_row(const char* name, const LatencyStats& l) {
  if (l.n == 0) return std::string("| ") + name + " | – | – | – | – | 0 |\n";
  return std::string("| ") + name + " | " + fmt("%.2f", l.mean * 1e3) + " | " + fmt("%.2f", l.p50 * 1e3) +
         " | " + fmt("%.2f", l.p90 * 1e3) + " | " + fmt("%.2f", l.p99 * 1e3) + " | " + std::to_string(l.n) +
         " |\n";
}

}  // namespace

nlohmann::json summary_json(const BenchSummary& s) {
  nlohmann::json failures = nlohmann::json::object();
  for (const auto& [kind, n] : s.failures)
    failures[kind] = {{"count", n}, {"first_message", s.failure_examples.at(kind)}};
  nlohmann::json load = {{"concurrency", s.concurrency},
                         {"request_rate", std::isfinite(s.request_rate) ? nlohmann::json(s.request_rate)
                                                                        : nlohmann::json("inf")},
                         {"arrivals", std::isfinite(s.request_rate) ? "poisson" : "closed_loop"},
                         {"seed", s.seed}};
  nlohmann::json j = {
      {"url", s.url},
      {"endpoint", s.endpoint},
      {"model", s.model},
      {"load", load},
      {"requests",
       {{"total", s.requests},
        {"ok", s.ok},
        {"failed", s.failed},
        {"not_sent", s.not_sent},
        {"cancelled", s.cancelled},
        {"retried_stale_connection", s.retried},
        {"failures", failures}}},
      {"duration_seconds", s.duration_s},
      {"request_throughput", s.request_throughput},
      {"output_throughput", s.output_throughput},
      {"total_throughput", s.prompt_tokens_known ? nlohmann::json(s.total_throughput) : nlohmann::json()},
      {"prompt_tokens", s.prompt_tokens_known ? nlohmann::json(s.prompt_tokens) : nlohmann::json()},
      {"output_tokens", s.output_tokens},
      {"latency_ms",
       {{"ttft", stats_json(s.ttft)},
        {"tpot", stats_json(s.tpot)},
        {"itl", stats_json(s.itl)},
        {"e2e", stats_json(s.e2e)}}},
      {"percentiles", "linear interpolation between closest ranks (numpy default)"}};
  j["server_metrics"] = s.server_metrics ? nlohmann::json(s.server_counters) : nlohmann::json();
  return j;
}

std::string summary_text(const BenchSummary& s) {
  std::string t;
  t += "target      " + s.url + s.endpoint + "  model " + s.model + "\n";
  t += "load        " + load_text(s) + "\n";
  t += "requests    " + std::to_string(s.ok) + " ok, " + std::to_string(s.failed) + " failed";
  if (s.not_sent + s.cancelled > 0)
    t += ", " + std::to_string(s.not_sent) + " not sent and " + std::to_string(s.cancelled) +
         " cancelled at --max-duration";
  t += " (of " + std::to_string(s.requests) + ")";
  if (s.retried > 0)
    t += "; " + std::to_string(s.retried) + " resent once after the server closed a keep-alive connection";
  t += "\n";
  for (const auto& [kind, n] : s.failures)
    t += "  failed    " + std::to_string(n) + " x " + kind + ": " + s.failure_examples.at(kind) + "\n";
  t += "duration    " + fmt("%.2f s", s.duration_s) + "\n";
  t += "throughput  " + fmt("%.2f req/s", s.request_throughput) + " | output " +
       fmt("%.1f tok/s", s.output_throughput) + " | total " +
       (s.prompt_tokens_known ? fmt("%.1f tok/s", s.total_throughput)
                              : std::string("n/a (no usage.prompt_tokens)")) +
       "\n";
  t += "tokens      prompt " +
       (s.prompt_tokens_known ? std::to_string(s.prompt_tokens) : std::string("n/a")) + " | output " +
       std::to_string(s.output_tokens) + "\n\n";
  t += "| latency (ms) | mean | p50 | p90 | p99 | n |\n| --- | ---: | ---: | ---: | ---: | ---: |\n";
  t += stats_row("TTFT", s.ttft) + stats_row("TPOT", s.tpot) + stats_row("ITL", s.itl) +
       stats_row("E2E", s.e2e);
  if (s.server_metrics) {
    t += "\nserver      ";
    if (s.server_counters.empty()) t += "/metrics: no counter changed during the run";
    int shown = 0;
    for (const auto& [name, d] : s.server_counters) {
      if (shown++ == 8) {
        t += " | ... (--json lists all)";
        break;
      }
      t += (shown > 1 ? " | " : "") + name + " +" + fmt("%g", d);
    }
    t += "\n";
  }
  return t;
}

}  // namespace lowbit::serve
