// `lowbit serve` under load and at its edges: API keys, 64 concurrent streams, a thousand idle connections, a
// client that leaves mid-stream (its engine request is cancelled), SIGTERM / SIGINT while a stream runs (exit
// 0).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/common/run_cli.h"
#include "tests/serve/test_server_process.h"

namespace {

using lowbit::testing_serve::get;
using lowbit::testing_serve::metric;
using lowbit::testing_serve::post;
using lowbit::testing_serve::Reply;
using lowbit::testing_serve::ServerProcess;
using lowbit::testing_serve::sse_events;
using lowbit::testing_serve::stories_model;
using nlohmann::json;

json completion(const std::string& prompt, int max_tokens, bool stream = false) {
  return {{"prompt", prompt},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"ignore_eos", true},
          {"stream", stream}};
}

TEST(ServerAuth, ApiKeyGuardsTheApiButNotHealthOrMetrics) {
  ServerProcess s({"-m", stories_model(), "--api-key", "sekret"});
  auto status = [&](const httplib::Headers& h) {
    auto c = s.client();
    auto r = c.Get("/v1/models", h);
    return r ? r->status : -1;
  };
  EXPECT_EQ(status({}), 401);
  EXPECT_EQ(status({{"Authorization", "Bearer wrong"}}), 401);
  EXPECT_EQ(status({{"Authorization", "sekret"}}), 401);
  EXPECT_EQ(status({{"Authorization", "Bearer sekret"}}), 200);
  const Reply r = post(s, "/v1/completions", completion("Once", 2).dump());
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(post(s, "/tokenize", "{\"content\": \"a\"}").status, 401);
  EXPECT_EQ(
      post(s, "/v1/completions", completion("Once", 2).dump(), {{"Authorization", "Bearer sekret"}}).status,
      200);
  EXPECT_EQ(get(s, "/health").status, 200);
  EXPECT_EQ(get(s, "/metrics").status, 200);
}

TEST(ServerLoad, SixtyFourConcurrentStreams) {
  ServerProcess s({"-m", stories_model(), "--max-num-seqs", "16"});
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 64; ++i)
    clients.emplace_back([&, i] {
      const Reply r = post(s, "/v1/completions", completion("Story number " + std::to_string(i), 24, true));
      const auto ev = sse_events(r.body);
      if (r.status == 200 && !ev.empty() && ev.back() == "[DONE]") ++ok;
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), 64);
  const std::string m = get(s, "/metrics").body;
  EXPECT_EQ(metric(m, "lowbit_request_success_total{finish_reason=\"length\"}"), 64);
  EXPECT_EQ(metric(m, "lowbit_generation_tokens_total"), 64 * 24);
}

TEST(ServerLoad, AFullQueueAnswers429) {
  ServerProcess s({"-m", stories_model(), "--max-num-seqs", "1", "--max-queue", "1"});
  std::atomic<int> ok{0}, full{0}, other{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 12; ++i)
    clients.emplace_back([&] {
      auto c = s.client();
      auto r = c.Post("/v1/completions", completion("Once upon a time", 400).dump(), "application/json");
      if (r && r->status == 200) {
        ++ok;
      } else if (r && r->status == 429 && r->get_header_value("Retry-After") == "1" &&
                 json::parse(r->body)["error"]["code"] == "queue_full") {
        ++full;
      } else {
        ++other;
      }
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_GE(ok.load(), 1);
  EXPECT_GE(full.load(), 1) << "12 simultaneous requests never filled a queue of 1";
  EXPECT_EQ(post(s, "/v1/completions", completion("Once", 4).dump()).status, 200);
}

TEST(ServerLoad, AThousandIdleConnectionsDoNotBlockOthers) {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < 1200 && rl.rlim_max >= 1200) {
    rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, 4096);
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur < 1200) GTEST_SKIP() << "needs 1200 file descriptors (ulimit -n is " << rl.rlim_cur << ")";
  ServerProcess s({"-m", stories_model()});
  std::vector<int> idle;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(s.port()));
  inet_pton(AF_INET, s.host().c_str(), &a.sin_addr);
  for (int i = 0; i < 1000; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      close(fd);
      break;
    }
    idle.push_back(fd);
  }
  EXPECT_EQ(idle.size(), 1000u);
  // Half of them send half a request and stall (a slow client), the rest send nothing.
  for (size_t i = 0; i < idle.size(); i += 2) {
    const char part[] = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
    (void)!write(idle[i], part, sizeof part - 1);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const Reply r = post(s, "/v1/completions", completion("Once", 8).dump());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.status, 200) << r.body;
  // Under 1 s on an idle machine. Blocked behind the stalled clients it would wait for their 30 s read
  // timeout; 15 s tells the two apart on a machine busy with other jobs too.
  EXPECT_LT(secs, 15.0);
  EXPECT_EQ(get(s, "/health").status, 200);
  for (int fd : idle) close(fd);
}

// Clients that send streaming requests and then never read a byte: their responses back up in the socket
// buffers (a tiny receive buffer makes that happen within a few tokens), their handler threads block in
// write, and everyone else is still served promptly.
TEST(ServerLoad, ClientsThatReadNothingDoNotBlockOthers) {
  ServerProcess s({"-m", stories_model()});
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(s.port()));
  inet_pton(AF_INET, s.host().c_str(), &a.sin_addr);
  std::vector<int> mute;
  const std::string body = completion("Once upon a time", 400, true).dump();
  const std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  for (int i = 0; i < 8; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    const int small = 1024;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
    mute.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // their streams fill the buffers
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const Reply r = post(s, "/v1/completions", completion("Once", 8).dump());
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_LT(secs, 5.0);
  }
  for (int fd : mute) close(fd);
  EXPECT_EQ(get(s, "/health").status, 200);
}

// A client that leaves mid-stream, or gives up waiting for a non-streamed answer, cancels its engine request.
// stories260K generates its whole context in a fraction of a second, so this uses a 135M-parameter fixture
// (tens of tokens per second on 2 cores).
TEST(ServerLifecycle, ClientsThatLeaveCancelTheirRequests) {
  const std::string fx = ::testing::TempDir() + "lowbit_serve_fx135_" + std::to_string(::getpid()) + ".gguf";
  std::filesystem::remove(fx);
  const auto made = lowbit::testing_cli::run_cli(
      "fixture --shape smollm2-135m --format gguf --type q4_0 --seed 1 --out " + fx, true);
  ASSERT_EQ(made.rc, 0) << made.out;
  struct Cleanup {
    std::string p;
    ~Cleanup() { std::filesystem::remove(p); }
  } cleanup{fx};
  ServerProcess s({"-m", fx, "--max-model-len", "4096", "--kv-budget", "64M"});
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = completion("Hello", 3000, true).dump();
  req.set_header("Content-Type", "application/json");
  int chunks = 0;
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
    return ++chunks < 3;
  };  // then hang up
  auto c = s.client();
  (void)c.send(req);
  EXPECT_GE(chunks, 3);
  double aborted = 0, generated = 0;
  for (int i = 0; i < 200 && aborted < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const std::string m = get(s, "/metrics").body;
    aborted = metric(m, "lowbit_engine_requests_total{outcome=\"aborted\"}");
    generated = metric(m, "lowbit_generation_tokens_total");
  }
  EXPECT_EQ(aborted, 1) << s.log();
  EXPECT_LT(generated, 3000);
  EXPECT_EQ(metric(get(s, "/metrics").body, "lowbit_requests_running"), 0);

  // A non-streaming client that gives up (its read timeout closes the connection) cancels its request too:
  // nothing is written to it before the end, so the server notices by looking at the connection.
  auto c2 = s.client();
  c2.set_read_timeout(0, 400000);
  const auto gone = c2.Post("/v1/completions", completion("Hello", 3000, false).dump(), "application/json");
  EXPECT_FALSE(gone) << "the request should have outlived the client's 0.4 s timeout";
  const double generated_before = generated;
  for (int i = 0; i < 200 && aborted < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const std::string m = get(s, "/metrics").body;
    aborted = metric(m, "lowbit_engine_requests_total{outcome=\"aborted\"}");
    generated = metric(m, "lowbit_generation_tokens_total");
  }
  EXPECT_EQ(aborted, 2) << s.log();
  EXPECT_LT(generated - generated_before, 3000);
  EXPECT_EQ(metric(get(s, "/metrics").body, "lowbit_requests_running"), 0);
  // The server goes on.
  const Reply r = post(s, "/v1/completions", completion("Hello", 4).dump());
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST(ServerLifecycle, SigtermWhileStreamingDrainsAndExitsZero) {
  for (int sig : {SIGTERM, SIGINT}) {
    ServerProcess s({"-m", stories_model(), "--shutdown-deadline", "20"});
    Reply streamed;
    std::atomic<bool> started{false};
    std::thread client([&] {
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.body = completion("Once upon a time", 400, true).dump();
      req.set_header("Content-Type", "application/json");
      req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
        streamed.body.append(d, n);
        started = true;
        return true;
      };
      auto c = s.client();
      auto r = c.send(req);
      streamed.status = r ? r->status : -1;
    });
    for (int i = 0; i < 500 && !started; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(s.stop(sig, 30), 0) << "signal " << sig << "\n" << s.log();
    client.join();
    // The running stream was allowed to finish before the exit.
    EXPECT_EQ(streamed.status, 200);
    const auto ev = sse_events(streamed.body);
    ASSERT_FALSE(ev.empty());
    EXPECT_EQ(ev.back(), "[DONE]");
  }
}

}  // namespace
