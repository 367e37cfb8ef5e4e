// `lowbit bench serve`'s HTTP side: one keep-alive httplib::Client per worker thread, every request streamed
// (SSE) and timestamped chunk by chunk, failures classified, /v1/models and /metrics read around the run.
#include "serve/bench_client.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/json_text.h"

namespace lowbit::serve {

namespace {

using Clock = std::chrono::steady_clock;
double secs(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}
Clock::duration to_dur(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(0.0, s)));
}

httplib::Client make_client(const std::string& base, const BenchServeOptions& o, double timeout_s) {
  httplib::Client cli(base);
  if (!cli.is_valid())
    throw UsageError(
        "bench", "--url " + base +
                     ": no HTTP client for it (https needs cpp-httplib with OpenSSL); use http://HOST:PORT");
  cli.set_keep_alive(true);
  // Without it the request line and body go out as two segments and Nagle holds the second until the server
  // acknowledges the first (a delayed ACK: ~40 ms added to every TTFT).
  cli.set_tcp_nodelay(true);
  cli.set_connection_timeout(to_dur(std::min(timeout_s, 10.0)));
  cli.set_read_timeout(to_dur(timeout_s));
  cli.set_write_timeout(to_dur(timeout_s));
  if (!o.api_key.empty()) cli.set_bearer_token_auth(o.api_key);
  return cli;
}

std::string clip(std::string s, size_t n = 300) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  if (s.size() > n) s = s.substr(0, n) + "...";
  return s;
}

// The message of an error body: OpenAI's {"error": {"message": ...}}, {"error": "..."} (llama-server's older
// form) or {"detail": ...} (FastAPI), else the raw text.
std::string error_body_message(const std::string& body) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object()) {
    for (const char* k : {"error", "detail", "message"}) {
      auto it = j.find(k);
      if (it == j.end()) continue;
      if (it->is_string()) return clip(it->get<std::string>());
      if (it->is_object() && it->contains("message") && (*it)["message"].is_string())
        return clip((*it)["message"].get<std::string>());
      return clip(json_text(*it));
    }
  }
  return clip(body.empty() ? "(empty body)" : body);
}

std::string resolve_model(const std::string& base, const std::string& prefix, const BenchServeOptions& o) {
  httplib::Client cli = make_client(base, o, std::min(o.timeout_s, 30.0));
  const std::string where = base + prefix + "/v1/models";
  auto res = cli.Get(prefix + "/v1/models");
  if (!res)
    throw Error("bench", "cannot reach " + where + " (" + httplib::to_string(res.error()) +
                             "); is the server running? start it (lowbit serve -m MODEL) or fix --url");
  if (res->status != 200)
    throw Error("bench", where + " answered HTTP " + std::to_string(res->status) + ": " +
                             error_body_message(res->body) +
                             "; pass --model NAME (and --api-key if it needs one)");
  const nlohmann::json j = nlohmann::json::parse(res->body, nullptr, false);
  if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
      j["data"][0].is_object() && j["data"][0].contains("id") && j["data"][0]["id"].is_string())
    return j["data"][0]["id"].get<std::string>();
  throw Error("bench", where + " lists no model (expected {\"data\": [{\"id\": ...}]}); pass --model NAME");
}

// /metrics as Prometheus text, or nothing (no such endpoint, not text, unreachable): it is optional.
std::optional<PrometheusText> fetch_metrics(const std::string& base, const std::string& prefix,
                                            const BenchServeOptions& o) {
  try {
    httplib::Client cli = make_client(base, o, std::min(o.timeout_s, 5.0));
    auto res = cli.Get(prefix + "/metrics");
    if (!res || res->status != 200) return std::nullopt;
    return parse_prometheus(res->body);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// What one request's stream has said so far.
struct StreamState {
  StreamState(BenchRecord& rec, Clock::time_point start) : r(rec), t0(start) {}
  BenchRecord& r;
  Clock::time_point t0, last{};
  bool done = false;
  std::string error;  // an {"error": ...} event, or a chunk that is not JSON
  int64_t completion_tokens = -1;

  void on_event(std::string_view data, Clock::time_point now) {
    if (done || !error.empty()) return;
    const ChunkInfo c = parse_chunk(data);
    if (c.done) {
      done = true;
      return;
    }
    if (!c.valid) {
      error = "a chunk is not a JSON object: " + clip(std::string(data), 120);
      return;
    }
    if (!c.error.empty()) {
      error = clip(c.error);
      return;
    }
    if (!c.text.empty()) {
      if (r.content_chunks == 0)
        r.ttft_s = secs(now - t0);
      else
        r.itl_s.push_back(secs(now - last));
      last = now;
      ++r.content_chunks;
      r.output_chars += c.text.size();
    }
    if (c.has_usage) {
      r.usage_reported = true;
      if (c.prompt_tokens >= 0) r.prompt_tokens = c.prompt_tokens;
      if (c.completion_tokens >= 0) completion_tokens = c.completion_tokens;
    }
  }
};

enum class Cancel { None, Timeout, MaxDuration };

struct SendLimits {
  double timeout_s;
  Clock::time_point run_start, run_deadline;  // run_deadline: --max-duration (time_point::max() when none)
};

void classify_result(BenchRecord& r, const StreamState& st, bool sent, httplib::Error err, int status,
                     Cancel cancel, const std::string& err_body, double timeout_s) {
  auto fail = [&](std::string kind, std::string message) {
    r.failure = {std::move(kind), std::move(message), status};
  };
  const std::string stream_end =
      "the stream ended without data: [DONE] after " + std::to_string(r.content_chunks) + " text chunks";
  if (cancel == Cancel::MaxDuration)
    r.cancelled = true;
  else if (cancel == Cancel::Timeout || (!sent && r.e2e_s >= timeout_s * 0.98))
    fail("timeout", "no complete answer within --timeout " + std::to_string(timeout_s) + " s");
  else if (!sent && status == 200)
    fail("incomplete stream", stream_end + " (" + httplib::to_string(err) + ")");
  else if (!sent)
    fail("connection", httplib::to_string(err));
  else if (status != 200)
    fail("http " + std::to_string(status), error_body_message(err_body));
  else if (!st.error.empty())
    fail("stream error", st.error);
  else if (!st.done)
    fail("incomplete stream", stream_end);
  else if (r.content_chunks == 0)
    fail("empty output", "the stream carried no text before [DONE]");
  else
    r.ok = true;
}

BenchRecord send_one(httplib::Client& cli, const std::string& path, const std::string& body,
                     const SendLimits& lim) {
  BenchRecord r;
  r.sent = true;
  const Clock::time_point t0 = Clock::now();
  r.send_s = secs(t0 - lim.run_start);
  const Clock::time_point deadline = std::min(t0 + to_dur(lim.timeout_s), lim.run_deadline);
  // The socket read timeout bounds a server that goes silent; the deadline check in the receiver bounds one
  // that keeps trickling bytes.
  cli.set_read_timeout(to_dur(std::max(0.05, secs(deadline - t0))));
  StreamState st(r, t0);
  SseParser sse;
  int status = 0;
  std::string err_body;
  Cancel cancel = Cancel::None;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  // A compressing server or proxy would hold tokens back until its compressor flushes, distorting ITL.
  req.set_header("Accept-Encoding", "identity");
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    const Clock::time_point now = Clock::now();
    if (status != 200) {
      if (err_body.size() < 8192) err_body.append(d, std::min(n, 8192 - err_body.size()));
    } else {
      sse.feed({d, n}, [&](std::string_view ev) { st.on_event(ev, now); });
    }
    if (now > deadline) {
      cancel = deadline == lim.run_deadline ? Cancel::MaxDuration : Cancel::Timeout;
      return false;
    }
    return true;
  };
  httplib::Error err = httplib::Error::Success;
  bool sent = false;
  // A keep-alive connection the server closed between requests (llama-server closes one after a few requests)
  // fails at once with nothing received: retry once on a fresh connection, as curl and browsers do. A request
  // that received anything, or ran for long, is never retried.
  for (int attempt = 0; attempt < 2; ++attempt) {
    httplib::Response res;
    err = httplib::Error::Success;
    sent = cli.send(req, res, err);
    const bool stale = !sent && status == 0 && cancel == Cancel::None &&
                       (err == httplib::Error::Read || err == httplib::Error::Write) &&
                       Clock::now() - t0 < std::chrono::seconds(1);
    if (!stale) break;
    r.retried = true;
  }
  const Clock::time_point t1 = Clock::now();
  r.e2e_s = secs(t1 - t0);
  // A socket timeout cut short to end at --max-duration (the 10 ms: timer slack) is the run ending, not a
  // slow server.
  if (!sent && cancel == Cancel::None && deadline == lim.run_deadline &&
      t1 + std::chrono::milliseconds(10) >= lim.run_deadline)
    cancel = Cancel::MaxDuration;
  if (sent && status == 200) sse.finish([&](std::string_view ev) { st.on_event(ev, t1); });
  r.output_tokens = st.completion_tokens >= 0 ? st.completion_tokens : r.content_chunks;
  classify_result(r, st, sent, err, status, cancel, err_body, lim.timeout_s);
  return r;
}

// Shared between the workers and the progress loop.
struct RunState {
  std::atomic<int> next{0}, finished{0}, failed{0}, in_flight{0}, workers_left{0};
  std::mutex mu;
  std::condition_variable cv;
};

void worker(const std::string& base, const std::string& path, const BenchServeOptions& o,
            const std::vector<std::string>& bodies, const std::vector<double>& arrivals,
            const SendLimits& lim, std::vector<BenchRecord>& records, RunState& rs) {
  std::optional<httplib::Client> cli;
  try {
    cli.emplace(make_client(base, o, o.timeout_s));
  } catch (const std::exception&) {
  }
  for (;;) {
    const int i = rs.next.fetch_add(1);
    if (i >= static_cast<int>(bodies.size())) break;
    const Clock::time_point at = lim.run_start + to_dur(arrivals[static_cast<size_t>(i)]);
    if (at >= lim.run_deadline) break;  // left as not sent
    std::this_thread::sleep_until(at);
    if (Clock::now() >= lim.run_deadline) break;
    ++rs.in_flight;
    BenchRecord r;
    if (cli) {
      r = send_one(*cli, path, bodies[static_cast<size_t>(i)], lim);
    } else {
      r.sent = true;
      r.failure = {"connection", "cannot create an HTTP client for " + base, 0};
    }
    --rs.in_flight;
    if (!r.ok && !r.cancelled) ++rs.failed;
    records[static_cast<size_t>(i)] = std::move(r);
    ++rs.finished;
  }
  std::lock_guard<std::mutex> lk(rs.mu);
  --rs.workers_left;
  rs.cv.notify_all();
}

void wait_with_progress(RunState& rs, int total, bool progress, Clock::time_point start) {
  std::unique_lock<std::mutex> lk(rs.mu);
  const auto every = std::chrono::seconds(5);
  while (!rs.cv.wait_for(lk, every, [&] { return rs.workers_left.load() == 0; }))
    if (progress)
      std::fprintf(stderr, "[bench] %d/%d done, %d failed, %d in flight, %.1f s\n", rs.finished.load(), total,
                   rs.failed.load(), rs.in_flight.load(), secs(Clock::now() - start));
}

void validate(const BenchServeOptions& o) {
  if (o.concurrency < 0 || o.concurrency > kMaxInFlight)
    throw UsageError("bench", "--concurrency must be in [1, " + std::to_string(kMaxInFlight) + "]");
  if (!(o.request_rate > 0))
    throw UsageError("bench", "--request-rate must be > 0 requests/s (or inf: every request at once)");
  // Bounded so that deadlines (steady_clock time points) cannot overflow.
  if (!(o.timeout_s > 0 && o.timeout_s <= 1e6) || !(o.max_duration_s >= 0 && o.max_duration_s <= 1e7))
    throw UsageError("bench",
                     "--timeout must be in (0, 1e6] s and --max-duration in [0, 1e7] s (0: no limit)");
  if (o.endpoint.empty() || o.endpoint[0] != '/')
    throw UsageError("bench", "--endpoint '" + o.endpoint + "' must be a path such as /v1/completions");
}

}  // namespace

BenchRun run_bench_serve(BenchServeOptions o) {
  validate(o);
  auto [base, prefix] = split_url(o.url);
  // OpenAI clients take base URLs that end in /v1; the endpoints here carry it already.
  if (prefix.size() >= 3 && prefix.compare(prefix.size() - 3, 3, "/v1") == 0 &&
      o.endpoint.rfind("/v1/", 0) == 0)
    prefix.resize(prefix.size() - 3);
  const std::vector<BenchPrompt> prompts = make_prompts(o);
  if (o.model.empty()) o.model = resolve_model(base, prefix, o);
  const int n = o.num_requests;
  std::vector<std::string> bodies;
  for (const BenchPrompt& p : prompts) bodies.push_back(json_text(request_body(o, p)));
  const std::vector<double> arrivals = arrival_times(n, o.request_rate, o.seed);
  const int workers = std::max(1, std::min(n, o.concurrency > 0 ? o.concurrency : kMaxInFlight));
  if (o.progress)
    std::fprintf(stderr, "[bench] %d requests to %s%s (model %s), %d at most in flight; progress every 5 s\n",
                 n, o.url.c_str(), o.endpoint.c_str(), o.model.c_str(), workers);
  const auto before = fetch_metrics(base, prefix, o);

  std::vector<BenchRecord> records(static_cast<size_t>(n));
  RunState rs;
  rs.workers_left = workers;
  const Clock::time_point start = Clock::now();
  const SendLimits lim{o.timeout_s, start,
                       o.max_duration_s > 0 ? start + to_dur(o.max_duration_s) : Clock::time_point::max()};
  const std::string path = prefix + o.endpoint;
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w)
    threads.emplace_back(worker, std::cref(base), std::cref(path), std::cref(o), std::cref(bodies),
                         std::cref(arrivals), std::cref(lim), std::ref(records), std::ref(rs));
  wait_with_progress(rs, n, o.progress, start);
  for (auto& t : threads) t.join();
  const double duration = secs(Clock::now() - start);

  BenchRun run;
  run.summary = summarize(records, duration);
  BenchSummary& s = run.summary;
  s.url = o.url;
  s.endpoint = o.endpoint;
  s.model = o.model;
  s.concurrency = workers;
  s.request_rate = o.request_rate;
  s.seed = o.seed;
  if (before) {
    if (const auto after = fetch_metrics(base, prefix, o)) {
      s.server_metrics = true;
      // Counters only: their increase is what this run made the server do (gauges would need sampling).
      for (const auto& [name, v] : after->values) {
        const auto b = before->values.find(name);
        const double d = v - (b == before->values.end() ? 0.0 : b->second);
        if (d != 0 && after->is_counter(name)) s.server_counters[name] = d;
      }
    }
  }
  run.records = std::move(records);
  return run;
}

}  // namespace lowbit::serve
