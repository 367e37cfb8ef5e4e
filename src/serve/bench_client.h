// The serving load generator behind `lowbit bench serve`: streams completions from any OpenAI-compatible
// server (lowbit serve, llama.cpp's llama-server, vLLM) and measures what a user of that server sees: time to
// the first token (TTFT), time per output token (TPOT), inter-token latency (ITL), end-to-end latency and
// throughput. The definitions follow vLLM's benchmark_serving.py so that numbers from either tool can be set
// side by side.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace lowbit::serve {

// One request to send: a prompt (a user message on /v1/chat/completions) and how many tokens to ask for.
struct BenchPrompt {
  std::string prompt;
  int max_tokens = 0;
};

struct BenchServeOptions {
  std::string url = "http://127.0.0.1:8080";  // scheme://host[:port][/prefix]
  std::string endpoint = "/v1/completions";   // or /v1/chat/completions
  std::string model;                          // empty: the first model GET /v1/models lists
  std::string api_key;                        // sent as "Authorization: Bearer KEY" when set
  int num_requests = 0;                       // 0: one per prompt of the file, or 32 random prompts
  // Closed loop: `concurrency` workers each send their next request when the previous one ends. With a finite
  // `request_rate` requests arrive as a Poisson process instead (open loop) and `concurrency` caps how many
  // are in flight (0: no cap, up to kMaxInFlight). Neither given: every request at once (rate inf, like
  // vLLM).
  int concurrency = 0;
  double request_rate = std::numeric_limits<double>::infinity();
  std::string prompts_file;  // JSONL {"prompt": ..., "max_tokens": ...} or plain text lines
  int input_len = 128, output_len = 64;
  double range_ratio = 0.0;  // random lengths uniform in [L * (1 - r), L * (1 + r)]
  uint64_t seed = 0;
  double timeout_s = 600;     // per request, from send to [DONE]
  double max_duration_s = 0;  // whole run; 0 = none (num_requests bounds it)
  bool ignore_eos = true;     // "ignore_eos": true so every request produces exactly max_tokens
  bool progress = false;      // a line on stderr every few seconds
};

constexpr int kMaxInFlight = 1024;  // threads: one per in-flight request

// Why a request failed; `kind` is the key the report counts by ("connection", "http 500", "timeout", ...).
struct BenchFailure {
  std::string kind, message;
  int status = 0;  // HTTP status when one arrived
};

// One request as measured. Times are seconds; send_s from the start of the run, the others from the send.
struct BenchRecord {
  bool sent = false;       // false: --max-duration ended the run first
  bool cancelled = false;  // in flight when --max-duration ended the run (neither ok nor failed)
  bool ok = false;
  BenchFailure failure;
  double send_s = 0, ttft_s = 0, e2e_s = 0;
  std::vector<double> itl_s;   // gaps between consecutive chunks that carried text
  int64_t content_chunks = 0;  // chunks that carried text
  int64_t output_tokens = 0;   // usage.completion_tokens when reported, else content_chunks
  int64_t prompt_tokens = -1;  // usage.prompt_tokens, -1 when the server sent no usage
  bool usage_reported = false;
  size_t output_chars = 0;
  bool retried = false;  // resent once after a keep-alive connection the server had closed
};

// Server-sent events (the `text/event-stream` body of a streamed completion), fed in pieces cut anywhere:
// mid-line, mid-"\r\n". Every complete event's data (its `data:` lines joined with '\n') goes to the
// callback; comments (":..."), `event:`/`id:`/`retry:` fields and other lines are skipped. An event ends at a
// blank line as the SSE spec says; a server that separates `data:` lines with single newlines still works
// because a new `data:` line first flushes pending data that is already a complete JSON value or [DONE].
class SseParser {
 public:
  using Handler = std::function<void(std::string_view data)>;
  void feed(std::string_view bytes, const Handler& on_event);
  void finish(
      const Handler& on_event);  // end of stream: dispatches a last event not followed by a blank line

 private:
  void line(std::string_view l, const Handler& on_event);
  void dispatch(const Handler& on_event);
  std::string partial_;  // bytes of a line not yet ended
  std::string data_;     // data of the event being read
  bool has_data_ = false;
  bool after_cr_ = false;  // the last byte was '\r': a following '\n' belongs to the same line end
};

// What one streamed chunk (one SSE event's JSON) says, for /v1/completions and /v1/chat/completions alike.
struct ChunkInfo {
  bool done = false;  // the [DONE] sentinel
  bool valid = true;  // parsed as a JSON object
  std::string text;   // choices[0].text or choices[0].delta.content (+ reasoning_content)
  bool has_usage = false;
  int64_t prompt_tokens = -1, completion_tokens = -1;
  std::string error;  // {"error": ...} sent inside the stream
};
ChunkInfo parse_chunk(std::string_view data);

// Percentile p in [0, 100] by linear interpolation between closest ranks (numpy's default, which vLLM's
// benchmark uses): rank (n - 1) * p / 100 over the sorted values. 0 for an empty input.
double percentile(std::vector<double> values, double p);

struct LatencyStats {
  int64_t n = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;  // seconds
};
LatencyStats latency_stats(const std::vector<double>& values);

// Prompts: from `prompts_file` (cycled when there are fewer than num_requests) or seeded random word
// sequences. Resolves num_requests when it was 0. UsageError for an unreadable or malformed file.
std::vector<BenchPrompt> load_prompts(const std::string& path, int default_max_tokens);
std::vector<BenchPrompt> random_prompts(int n, int input_len, int output_len, double range_ratio,
                                        uint64_t seed);
std::vector<BenchPrompt> make_prompts(BenchServeOptions& o);

// Send times (seconds from the start) of n requests arriving as a Poisson process of `rate` requests/s
// (exponential gaps, seeded); all 0 when rate is infinite.
std::vector<double> arrival_times(int n, double rate, uint64_t seed);

// The request body for one prompt on `endpoint` (chat when it ends in "/chat/completions").
nlohmann::json request_body(const BenchServeOptions& o, const BenchPrompt& p);

// Prometheus text exposition: samples summed per metric name (labels collapsed), and the `# TYPE` of each
// family that declares one.
struct PrometheusText {
  std::map<std::string, double> values;      // {"lowbit_requests_total": 12, ...}
  std::map<std::string, std::string> types;  // {"lowbit_requests_total": "counter", ...}
  // A counter: declared so (the family may be named without the _total suffix), else named *_total.
  bool is_counter(const std::string& name) const;
};
PrometheusText parse_prometheus(std::string_view text);

struct BenchSummary {
  std::string url, endpoint, model;
  int concurrency = 0;  // requests in flight at most (closed loop when request_rate is infinite)
  double request_rate = std::numeric_limits<double>::infinity();
  uint64_t seed = 0;
  int64_t requests = 0, ok = 0, failed = 0, not_sent = 0, cancelled = 0, retried = 0;
  std::map<std::string, int64_t> failures;              // kind -> count
  std::map<std::string, std::string> failure_examples;  // kind -> first message
  double duration_s = 0, request_throughput = 0, output_throughput = 0, total_throughput = 0;
  int64_t prompt_tokens = 0, output_tokens = 0;
  bool prompt_tokens_known = true;  // every ok request reported usage.prompt_tokens
  LatencyStats ttft, tpot, itl, e2e;
  std::map<std::string, double> server_counters;  // /metrics counters: increase over the run (empty: none)
  bool server_metrics = false;
};
BenchSummary summarize(const std::vector<BenchRecord>& records, double duration_s);
nlohmann::json summary_json(const BenchSummary& s);
std::string summary_text(const BenchSummary& s);

// The whole run: resolves the model, sends every request, collects records and /metrics. Error("bench") when
// the server cannot be reached to list its models; request failures are counted, not thrown.
struct BenchRun {
  BenchSummary summary;
  std::vector<BenchRecord> records;
};
BenchRun run_bench_serve(BenchServeOptions o);

// Splits "http://host:port/prefix" into "http://host:port" and "/prefix" (no trailing '/'); UsageError when
// the scheme is not http or https or the host is missing.
std::pair<std::string, std::string> split_url(const std::string& url);

}  // namespace lowbit::serve
