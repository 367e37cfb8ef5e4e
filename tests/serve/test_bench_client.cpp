// `lowbit bench serve`'s client: the SSE parser (bytes cut anywhere), chunk parsing, percentiles, prompts,
// and whole runs against an in-process mock OpenAI server whose delays, usage and failures are known.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "core/error.h"
#include "serve/bench_client.h"
#include "tests/common/run_cli.h"
#include "tests/serve/test_server_process.h"

using namespace lowbit::serve;

namespace {

std::vector<std::string> parse_all(const std::string& stream, const std::vector<size_t>& cuts) {
  SseParser p;
  std::vector<std::string> ev;
  auto h = [&](std::string_view d) { ev.emplace_back(d); };
  size_t prev = 0;
  for (size_t c : cuts) {
    p.feed(std::string_view(stream).substr(prev, c - prev), h);
    prev = c;
  }
  p.feed(std::string_view(stream).substr(prev), h);
  p.finish(h);
  return ev;
}

}  // namespace

TEST(BenchSse, EventsSurviveEveryCutAndLineEnding) {
  for (const std::string nl : {"\n", "\r\n", "\r"}) {
    const std::string s = ": ping" + nl + "data: {\"a\":1}" + nl + nl + "event: x" + nl +
                          "data: {\"b\":" + nl + "data: 2}" + nl + nl + "id: 7" + nl + "data:[DONE]" + nl +
                          nl;
    const std::vector<std::string> want = {"{\"a\":1}", "{\"b\":\n2}", "[DONE]"};
    EXPECT_EQ(parse_all(s, {}), want) << "unsplit";
    for (size_t c = 0; c <= s.size(); ++c) EXPECT_EQ(parse_all(s, {c}), want) << "cut at " << c;
    for (size_t c = 0; c + 1 <= s.size(); ++c) EXPECT_EQ(parse_all(s, {c, c + 1}), want) << "byte at " << c;
    std::mt19937 rng(1);
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<size_t> cuts;
      for (size_t c = 0; c < s.size(); c += 1 + rng() % 5) cuts.push_back(c);
      EXPECT_EQ(parse_all(s, cuts), want) << "trial " << trial;
    }
  }
}

TEST(BenchSse, LastEventWithoutBlankLineAndSingleNewlineServers) {
  EXPECT_EQ(parse_all("data: {\"x\":1}", {}), std::vector<std::string>{"{\"x\":1}"});
  // Some servers end events with one newline: each whole JSON value is still one event.
  EXPECT_EQ(parse_all("data: {\"x\":1}\ndata: {\"y\":2}\ndata: [DONE]\n", {5, 20}),
            (std::vector<std::string>{"{\"x\":1}", "{\"y\":2}", "[DONE]"}));
  EXPECT_TRUE(parse_all(": only a comment\n\n", {}).empty());
}

TEST(BenchChunk, CompletionsChatUsageDoneAndErrors) {
  ChunkInfo c = parse_chunk(R"({"choices":[{"index":0,"text":"Hello"}]})");
  EXPECT_TRUE(c.valid);
  EXPECT_EQ(c.text, "Hello");
  c = parse_chunk(R"({"choices":[{"delta":{"role":"assistant","content":" world"}}]})");
  EXPECT_EQ(c.text, " world");
  c = parse_chunk(R"({"choices":[{"delta":{"reasoning_content":"hmm"}}]})");
  EXPECT_EQ(c.text, "hmm");
  c = parse_chunk(R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}})");
  EXPECT_TRUE(c.has_usage);
  EXPECT_EQ(c.prompt_tokens, 12);
  EXPECT_EQ(c.completion_tokens, 5);
  EXPECT_TRUE(c.text.empty());
  EXPECT_FALSE(parse_chunk(R"({"choices":[{"text":"x"}],"usage":null})").has_usage);
  EXPECT_TRUE(parse_chunk(" [DONE] ").done);
  EXPECT_FALSE(parse_chunk("{not json").valid);
  EXPECT_FALSE(parse_chunk("[1,2]").valid);
  EXPECT_EQ(parse_chunk(R"({"error":{"message":"context too long","code":400}})").error, "context too long");
  EXPECT_EQ(parse_chunk(R"({"error":"boom"})").error, "boom");
}

TEST(BenchStats, PercentileInterpolatesLinearly) {
  EXPECT_EQ(percentile({}, 50), 0);
  EXPECT_EQ(percentile({7}, 99), 7);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);  // numpy.percentile([1,2,3,4], 50)
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 90), 3.7);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 0), 1);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 100), 4);
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  EXPECT_NEAR(percentile(v, 99), 99.01, 1e-9);
  const LatencyStats s = latency_stats({0.1, 0.2, 0.3});
  EXPECT_EQ(s.n, 3);
  EXPECT_NEAR(s.mean, 0.2, 1e-12);
  EXPECT_NEAR(s.p50, 0.2, 1e-12);
}

TEST(BenchStats, SummaryCountsTokensAndFailures) {
  std::vector<BenchRecord> rs(5);
  for (int i = 0; i < 2; ++i) {
    rs[i].sent = rs[i].ok = true;
    rs[i].ttft_s = 0.1;
    rs[i].e2e_s = 0.5;
    rs[i].itl_s = {0.1, 0.1, 0.1, 0.1};
    rs[i].output_tokens = 5;
    rs[i].prompt_tokens = 10;
  }
  rs[2].sent = true;
  rs[2].failure = {"http 500", "boom", 500};
  rs[3].sent = true;
  rs[3].failure = {"http 500", "second", 500};
  const BenchSummary s = summarize(rs, 2.0);  // rs[4] was never sent
  EXPECT_EQ(s.ok, 2);
  EXPECT_EQ(s.failed, 2);
  EXPECT_EQ(s.not_sent, 1);
  EXPECT_EQ(s.failures.at("http 500"), 2);
  EXPECT_EQ(s.failure_examples.at("http 500"), "boom");
  EXPECT_EQ(s.output_tokens, 10);
  EXPECT_DOUBLE_EQ(s.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(s.output_throughput, 5.0);
  EXPECT_DOUBLE_EQ(s.total_throughput, 15.0);
  EXPECT_NEAR(s.tpot.mean, 0.1, 1e-12);  // (0.5 - 0.1) / (5 - 1)
  EXPECT_EQ(s.itl.n, 8);
  const nlohmann::json j = summary_json(s);
  EXPECT_EQ(j["requests"]["failures"]["http 500"]["count"], 2);
  EXPECT_NEAR(j["latency_ms"]["ttft"]["mean"].get<double>(), 100.0, 1e-9);
  EXPECT_NE(summary_text(s).find("2 x http 500: boom"), std::string::npos);
}

TEST(BenchPrompts, RandomLengthsSeededAndFileFormats) {
  const auto a = random_prompts(20, 50, 16, 0.5, 3), b = random_prompts(20, 50, 16, 0.5, 3);
  ASSERT_EQ(a.size(), 20u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt, b[i].prompt);
    const auto words = std::count(a[i].prompt.begin(), a[i].prompt.end(), ' ') + 1;
    EXPECT_GE(words, 25);
    EXPECT_LE(words, 75);
    EXPECT_GE(a[i].max_tokens, 8);
    EXPECT_LE(a[i].max_tokens, 24);
  }
  EXPECT_NE(random_prompts(1, 50, 16, 0, 4)[0].prompt, random_prompts(1, 50, 16, 0, 3)[0].prompt);

  const std::string path = ::testing::TempDir() + "/bench_prompts.jsonl";
  std::ofstream(path) << "{\"prompt\": \"Once upon\", \"max_tokens\": 7}\r\n\nplain text line\n";
  const auto p = load_prompts(path, 64);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].prompt, "Once upon");
  EXPECT_EQ(p[0].max_tokens, 7);
  EXPECT_EQ(p[1].prompt, "plain text line");
  EXPECT_EQ(p[1].max_tokens, 64);
  BenchServeOptions o;
  o.prompts_file = path;
  o.num_requests = 5;
  const auto cyc = make_prompts(o);
  ASSERT_EQ(cyc.size(), 5u);
  EXPECT_EQ(cyc[4].prompt, "Once upon");
  std::ofstream(path) << "{\"prompt\": \"x\"}\n{\"prompt\": 3}\n";
  try {
    load_prompts(path, 8);
    FAIL() << "expected a UsageError";
  } catch (const lowbit::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_prompts("/nonexistent/p.jsonl", 8), lowbit::UsageError);
}

TEST(BenchPrompts, ArrivalsPoissonAndBodies) {
  EXPECT_EQ(arrival_times(3, INFINITY, 0), (std::vector<double>{0, 0, 0}));
  const auto t = arrival_times(4001, 100.0, 9);
  EXPECT_EQ(t, arrival_times(4001, 100.0, 9));
  EXPECT_EQ(t[0], 0);
  for (size_t i = 1; i < t.size(); ++i) EXPECT_GE(t[i], t[i - 1]);
  EXPECT_NEAR(t.back() / 4000, 0.01, 0.001);  // mean gap 1 / rate
  BenchServeOptions o;
  o.model = "m";
  nlohmann::json b = request_body(o, {"hi", 9});
  EXPECT_EQ(b["prompt"], "hi");
  EXPECT_EQ(b["max_tokens"], 9);
  EXPECT_EQ(b["stream"], true);
  EXPECT_EQ(b["stream_options"]["include_usage"], true);
  EXPECT_EQ(b["ignore_eos"], true);
  o.endpoint = "/v1/chat/completions";
  o.ignore_eos = false;
  b = request_body(o, {"hi", 9});
  EXPECT_EQ(b["messages"][0]["content"], "hi");
  EXPECT_FALSE(b.contains("prompt"));
  EXPECT_FALSE(b.contains("ignore_eos"));
}

TEST(BenchParse, PrometheusAndUrls) {
  const PrometheusText p = parse_prometheus(
      "# HELP x_total a counter\n# TYPE x_total counter\nx_total 3\nreq_total{code=\"200\"} 4\n"
      "req_total{code=\"5}0\",a=\"b\"} 1.5e1\ngauge 0.25 1700000000\nbad line\n"
      "# TYPE pages_total gauge\npages_total 512\n# TYPE om counter\nom_total 1\n");
  const auto& m = p.values;
  EXPECT_EQ(m.at("x_total"), 3);
  EXPECT_EQ(m.at("req_total"), 19);
  EXPECT_EQ(m.at("gauge"), 0.25);
  EXPECT_EQ(m.count("bad"), 0u);
  EXPECT_TRUE(p.is_counter("x_total"));
  EXPECT_TRUE(p.is_counter("req_total"));  // no TYPE: by its name
  EXPECT_TRUE(p.is_counter("om_total"));   // OpenMetrics: the family is named without _total
  EXPECT_FALSE(p.is_counter("pages_total"));
  EXPECT_FALSE(p.is_counter("gauge"));
  // llama-server's names (with --metrics) hold colons.
  const PrometheusText l = parse_prometheus(
      "# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total 3469\n"
      "# TYPE llamacpp:prompt_tokens_seconds gauge\nllamacpp:prompt_tokens_seconds 2.37\n");
  EXPECT_EQ(l.values.at("llamacpp:tokens_predicted_total"), 3469);
  EXPECT_TRUE(l.is_counter("llamacpp:tokens_predicted_total"));
  EXPECT_FALSE(l.is_counter("llamacpp:prompt_tokens_seconds"));
  EXPECT_EQ(split_url("http://127.0.0.1:8080"),
            (std::pair<std::string, std::string>{"http://127.0.0.1:8080", ""}));
  EXPECT_EQ(split_url("http://h:1/api/"), (std::pair<std::string, std::string>{"http://h:1", "/api"}));
  EXPECT_THROW(split_url("127.0.0.1:8080"), lowbit::UsageError);
  EXPECT_THROW(split_url("http://"), lowbit::UsageError);
}

// -----------------------------------------------------------------------------------------------------------
// A mock OpenAI-compatible server. /v1/completions streams kChunks text chunks: the first after kFirstMs, the
// others kGapMs apart, then a usage chunk (completion_tokens = kChunks * 2: as if each chunk held two tokens)
// and [DONE]. Other routes fail in one known way each.

namespace {

constexpr int kChunks = 5, kFirstMs = 200, kGapMs = 100;

std::string sse(const nlohmann::json& j) {
  return "data: " + j.dump() + "\n\n";
}

class MockServer {
 public:
  MockServer() {
    svr_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"mock-model","object":"model"}]})",
                      "application/json");
    });
    svr_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content("# TYPE mock_requests_total counter\nmock_requests_total " +
                          std::to_string(served_.load()) + "\nmock_running 0\n",
                      "text/plain; version=0.0.4");
    });
    stream_route("/v1/completions", true, true, false);
    stream_route("/nousage/v1/completions", false, true, false);
    stream_route("/drop/v1/completions", true, false, false);
    stream_route("/abort/v1/completions", true, false, true);
    svr_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      record(req);
      const std::string body = sse({{"choices", {{{"delta", {{"role", "assistant"}}}}}}}) +
                               sse({{"choices", {{{"delta", {{"content", "Hi"}}}}}}}) +
                               sse({{"choices", {{{"delta", {{"content", " there"}}}}}}}) +
                               "data: [DONE]\n\n";
      res.set_content(body, "text/event-stream");
    });
    svr_.Post("/err/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      record(req);
      res.status = 500;
      res.set_content(R"({"error":{"message":"mock overload","type":"server_error"}})", "application/json");
    });
    svr_.Post("/slow/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      record(req);
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      res.set_content("data: [DONE]\n\n", "text/event-stream");
    });
    svr_.Post("/fast/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      record(req);
      res.set_chunked_content_provider("text/event-stream", [](size_t, httplib::DataSink& sink) {
        const std::string e = sse({{"choices", {{{"text", "x"}}}}}) + "data: [DONE]\n\n";
        sink.write(e.data(), e.size());
        sink.done();
        return true;
      });
    });
    // As a streaming server should (lowbit serve, llama-server): small SSE writes go out at once.
    svr_.set_tcp_nodelay(true);
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
  }
  ~MockServer() {
    svr_.stop();
    thread_.join();
  }
  std::string url(const std::string& prefix = "") const {
    return "http://127.0.0.1:" + std::to_string(port_) + prefix;
  }
  int port() const { return port_; }
  std::vector<httplib::Headers> headers() {
    std::lock_guard<std::mutex> lk(mu_);
    return headers_;
  }
  std::vector<nlohmann::json> bodies() {
    std::lock_guard<std::mutex> lk(mu_);
    return bodies_;
  }

 private:
  void record(const httplib::Request& req) {
    std::lock_guard<std::mutex> lk(mu_);
    headers_.push_back(req.headers);
    bodies_.push_back(nlohmann::json::parse(req.body, nullptr, false));
    ++served_;
  }
  // usage: send the usage chunk; done: end with [DONE] (else end the body cleanly after 2 chunks, or with
  // abort, close the connection mid-stream).
  void stream_route(const std::string& path, bool usage, bool done, bool abort) {
    svr_.Post(path, [=, this](const httplib::Request& req, httplib::Response& res) {
      record(req);
      auto step = std::make_shared<int>(0);
      res.set_chunked_content_provider("text/event-stream", [=](size_t, httplib::DataSink& sink) {
        const int i = (*step)++;
        const int chunks = done ? kChunks : 2;
        if (i < chunks) {
          std::this_thread::sleep_for(std::chrono::milliseconds(i == 0 ? kFirstMs : kGapMs));
          // Split each event over two writes so the client sees partial lines.
          const std::string e = sse({{"choices", {{{"index", 0}, {"text", "t" + std::to_string(i)}}}}});
          sink.write(e.data(), 7);
          sink.write(e.data() + 7, e.size() - 7);
          return true;
        }
        if (abort) return false;
        if (usage && done) {
          const std::string u = sse(
              {{"choices", nlohmann::json::array()},
               {"usage", {{"prompt_tokens", 11}, {"completion_tokens", kChunks * 2}, {"total_tokens", 21}}}});
          sink.write(u.data(), u.size());
        }
        if (done) sink.write("data: [DONE]\r\n\r\n", 16);
        sink.done();
        return true;
      });
    });
  }

  httplib::Server svr_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<httplib::Headers> headers_;
  std::vector<nlohmann::json> bodies_;
  std::atomic<int> served_{0};
};

BenchServeOptions options(const std::string& url, int n, int concurrency) {
  BenchServeOptions o;
  o.url = url;
  o.model = "mock-model";
  o.num_requests = n;
  o.concurrency = concurrency;
  o.input_len = 8;
  o.output_len = 4;
  o.timeout_s = 30;
  return o;
}

}  // namespace

TEST(BenchServe, StreamsMeasureTtftItlAndUsage) {
  MockServer m;
  BenchServeOptions o = options(m.url(), 6, 3);
  o.model.clear();
  o.api_key = "sekret";
  const BenchRun run = run_bench_serve(o);
  const BenchSummary& s = run.summary;
  EXPECT_EQ(s.model, "mock-model");  // from /v1/models
  EXPECT_EQ(s.ok, 6);
  EXPECT_EQ(s.failed, 0);
  EXPECT_EQ(s.output_tokens, 6 * kChunks * 2);  // usage wins over the chunk count
  EXPECT_EQ(s.prompt_tokens, 6 * 11);
  EXPECT_TRUE(s.prompt_tokens_known);
  // Delays are lower bounds; upper bounds are generous (a loaded 2-core machine).
  EXPECT_GE(s.ttft.p50, kFirstMs * 0.9e-3);
  EXPECT_LT(s.ttft.p50, kFirstMs * 1e-3 + 3.0);
  EXPECT_EQ(s.itl.n, 6 * (kChunks - 1));
  EXPECT_GE(s.itl.mean, kGapMs * 0.8e-3);
  EXPECT_LT(s.itl.mean, kGapMs * 1e-3 + 2.0);
  EXPECT_GE(s.e2e.p50, (kFirstMs + (kChunks - 1) * kGapMs) * 0.9e-3);
  EXPECT_NEAR(
      s.tpot.mean,
      [&] {
        double t = 0;
        for (const auto& r : run.records) t += (r.e2e_s - r.ttft_s) / (kChunks * 2 - 1);
        return t / 6;
      }(),
      1e-9);
  EXPECT_GT(s.duration_s, 2 * 0.6 * 0.9);  // two rounds of 3 requests, each >= 0.6 s
  EXPECT_NEAR(s.request_throughput, 6 / s.duration_s, 1e-9);
  for (const auto& r : run.records) {
    EXPECT_EQ(r.content_chunks, kChunks);
    EXPECT_TRUE(r.usage_reported);
  }
  ASSERT_TRUE(s.server_metrics);
  EXPECT_EQ(s.server_counters.at("mock_requests_total"), 6);
  const auto hs = m.headers();
  ASSERT_EQ(hs.size(), 6u);
  for (const auto& h : hs) {
    auto it = h.find("Authorization");
    ASSERT_NE(it, h.end());
    EXPECT_EQ(it->second, "Bearer sekret");
    it = h.find("Accept-Encoding");
    ASSERT_NE(it, h.end());
    EXPECT_EQ(it->second, "identity");  // a compressed stream would arrive in bursts
    EXPECT_EQ(h.count("Accept-Encoding"), 1u);
  }
  for (const auto& b : m.bodies()) {
    EXPECT_EQ(b["model"], "mock-model");
    EXPECT_EQ(b["stream"], true);
    EXPECT_EQ(b["ignore_eos"], true);
  }
}

TEST(BenchServe, ReusedConnectionsAddNoNagleDelay) {
  // httplib writes a request's head and body separately; unless the client sets TCP_NODELAY, Nagle holds the
  // body until the server's delayed ACK (~40 ms) on most requests over a reused keep-alive connection. The
  // median is robust to the odd request that is slow for other reasons (a loaded machine) or fast (quick
  // ACKs).
  MockServer m;
  const BenchRun run = run_bench_serve(options(m.url("/fast"), 8, 1));
  ASSERT_EQ(run.summary.ok, 8);
  std::vector<double> reused;
  for (size_t i = 1; i < run.records.size(); ++i) reused.push_back(run.records[i].ttft_s);
  EXPECT_LT(percentile(reused, 50), 0.030);
}

TEST(BenchServe, NoUsageCountsChunksAndChatWorks) {
  MockServer m;
  BenchServeOptions o = options(m.url("/nousage"), 2, 2);
  o.model = "given";
  BenchRun run = run_bench_serve(o);
  EXPECT_EQ(run.summary.ok, 2);
  EXPECT_EQ(run.summary.output_tokens, 2 * kChunks);
  EXPECT_FALSE(run.summary.prompt_tokens_known);
  EXPECT_FALSE(summary_json(run.summary)["total_throughput"].is_number());
  EXPECT_EQ(m.bodies()[0]["model"], "given");

  o = options(m.url("/v1/"), 3, 1);  // an OpenAI-style base URL: /v1 is not doubled
  o.endpoint = "/v1/chat/completions";
  run = run_bench_serve(o);
  EXPECT_EQ(run.summary.ok, 3);
  EXPECT_EQ(run.summary.output_tokens, 3 * 2);  // the role-only delta carries no text
  EXPECT_TRUE(m.bodies().back().contains("messages"));
}

TEST(BenchServe, FailuresAreClassified) {
  MockServer m;
  BenchServeOptions o = options(m.url("/err"), 3, 2);
  BenchRun run = run_bench_serve(o);
  EXPECT_EQ(run.summary.failed, 3);
  EXPECT_EQ(run.summary.failures.at("http 500"), 3);
  EXPECT_EQ(run.summary.failure_examples.at("http 500"), "mock overload");
  EXPECT_EQ(run.records[0].failure.status, 500);

  for (const char* prefix : {"/drop", "/abort"}) {
    run = run_bench_serve(options(m.url(prefix), 2, 2));
    EXPECT_EQ(run.summary.failed, 2) << prefix;
    EXPECT_EQ(run.summary.failures.count("incomplete stream"), 1u)
        << prefix << " " << summary_text(run.summary);
    EXPECT_EQ(run.records[0].content_chunks, 2) << prefix;
  }

  o = options(m.url("/slow"), 1, 1);
  o.timeout_s = 0.4;
  run = run_bench_serve(o);
  EXPECT_EQ(run.summary.failures.count("timeout"), 1u) << summary_text(run.summary);
  EXPECT_LT(run.records[0].e2e_s, 1.4);
}

TEST(BenchServe, ConnectionRefusedAndUnreachableModels) {
  // A port that was just free: bind, read the port, close.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  const std::string url = "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  BenchServeOptions o = options(url, 2, 1);
  o.model.clear();
  EXPECT_THROW(run_bench_serve(o), lowbit::Error);  // no --model: listing the models fails, clearly
  o.model = "x";
  const BenchRun run = run_bench_serve(o);
  EXPECT_EQ(run.summary.failures.at("connection"), 2);
  EXPECT_FALSE(run.summary.server_metrics);
}

TEST(BenchServe, PoissonRateAndMaxDuration) {
  MockServer m;
  BenchServeOptions o = options(m.url(), 4, 0);
  o.request_rate = 20;
  o.seed = 5;
  BenchRun run = run_bench_serve(o);
  EXPECT_EQ(run.summary.ok, 4);
  const auto at = arrival_times(4, 20, 5);
  for (size_t i = 0; i < 4; ++i) EXPECT_GE(run.records[i].send_s, at[i] - 1e-3);
  EXPECT_EQ(run.summary.concurrency, 4);

  o = options(m.url(), 10, 1);
  o.max_duration_s = 1.5;  // room for two requests (0.6 s each) and part of a third
  run = run_bench_serve(o);
  EXPECT_GE(run.summary.ok, 1);
  EXPECT_EQ(run.summary.failed, 0);
  EXPECT_GE(run.summary.cancelled + run.summary.not_sent, 6);
  EXPECT_LT(run.summary.duration_s, 5.0);
}

TEST(BenchServeCli, JsonReportExitCodesAndUsageErrors) {
  using lowbit::testing_cli::run_cli;
  MockServer m;
  auto r = run_cli("bench serve --url " + m.url() + " -n 3 -c 3 --input-len 4 --output-len 4 --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["model"], "mock-model");
  EXPECT_EQ(j["requests"]["ok"], 3);
  EXPECT_EQ(j["output_tokens"], 3 * kChunks * 2);
  EXPECT_EQ(j["load"]["concurrency"], 3);
  EXPECT_GE(j["latency_ms"]["ttft"]["p50"].get<double>(), kFirstMs * 0.9);
  EXPECT_EQ(j["server_metrics"]["mock_requests_total"], 3);

  r = run_cli("bench serve --url " + m.url("/err") + " --model m -n 2 -c 1");
  EXPECT_EQ(r.rc, 3) << r.out;  // a failed request is a failed check; the report is still printed
  EXPECT_NE(r.out.find("2 x http 500: mock overload"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| TTFT |"), std::string::npos) << r.out;

  EXPECT_EQ(run_cli("bench serve --url " + m.url() + " --request-rate 0").rc, 2);
  EXPECT_EQ(run_cli("bench serve --url localhost:8080").rc, 2);
  EXPECT_EQ(run_cli("bench serve --url " + m.url() + " --prompts /nonexistent/p.jsonl").rc, 2);
  r = run_cli("bench serve --help");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("Example: "), std::string::npos);
}

TEST(BenchServeReal, LowbitServeStreamsExactTokenCounts) {
  // The real server (stories260K): with ignore_eos every request yields exactly max_tokens, usage reports
  // them, and the server's own counters agree with the client's.
  if (!std::ifstream(lowbit::testing_serve::stories_model())) GTEST_SKIP() << "no ../shared models";
  lowbit::testing_serve::ServerProcess srv({"-m", lowbit::testing_serve::stories_model()});
  BenchServeOptions o = options(srv.url(), 8, 4);
  o.model.clear();
  o.input_len = 12;
  o.output_len = 16;
  BenchRun run = run_bench_serve(o);
  const BenchSummary& s = run.summary;
  ASSERT_EQ(s.ok, 8) << summary_text(s) << srv.log();
  EXPECT_EQ(s.output_tokens, 8 * 16);
  EXPECT_TRUE(s.prompt_tokens_known);
  EXPECT_GT(s.prompt_tokens, 8 * 12);
  for (const auto& r : run.records) {
    EXPECT_TRUE(r.usage_reported);
    EXPECT_GE(r.content_chunks, 1);
    EXPECT_LE(r.ttft_s, r.e2e_s);
  }
  ASSERT_TRUE(s.server_metrics);
  EXPECT_EQ(s.server_counters.at("lowbit_generation_tokens_total"), 8 * 16);
  EXPECT_EQ(s.server_counters.at("lowbit_request_generation_tokens_total"), s.output_tokens);
  EXPECT_EQ(s.server_counters.at("lowbit_request_prompt_tokens_total"), s.prompt_tokens);

  o.endpoint = "/v1/chat/completions";
  o.num_requests = 3;
  run = run_bench_serve(o);
  EXPECT_EQ(run.summary.ok, 3) << summary_text(run.summary);
  EXPECT_EQ(run.summary.output_tokens, 3 * 16);
}

TEST(BenchServe, BadOptionsAreUsageErrors) {
  // All refused before any connection (nothing listens on the URL).
  const std::vector<std::function<void(BenchServeOptions&)>> bad = {
      [](BenchServeOptions& o) { o.request_rate = 0; },  [](BenchServeOptions& o) { o.timeout_s = 0; },
      [](BenchServeOptions& o) { o.timeout_s = 1e300; }, [](BenchServeOptions& o) { o.max_duration_s = -1; },
      [](BenchServeOptions& o) { o.concurrency = -1; },  [](BenchServeOptions& o) { o.endpoint = "v1/x"; },
      [](BenchServeOptions& o) { o.range_ratio = 1.0; }, [](BenchServeOptions& o) { o.input_len = 0; },
      [](BenchServeOptions& o) { o.url = "ftp://h:1"; }, [](BenchServeOptions& o) { o.num_requests = -2; },
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    BenchServeOptions o = options("http://127.0.0.1:9", 1, 1);
    bad[i](o);
    EXPECT_THROW(run_bench_serve(o), lowbit::UsageError) << "case " << i;
  }
}
