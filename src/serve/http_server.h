// `lowbit serve`'s HTTP server: the OpenAI-compatible endpoints over one Engine (cpp-httplib, a thread per
// connection from an elastic pool). Endpoints, fields, errors and metrics: docs/serve.md.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "serve/chat_template.h"
#include "serve/metrics.h"
#include "serve/openai_api.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace lowbit::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;             // 0: any free port (bind() returns it)
  std::string api_key;         // "": no authentication
  std::string served_name;     // the model name clients send and /v1/models lists
  int64_t max_body = 8 << 20;  // request bodies above this: 413
  ChatFormat chat = ChatFormat::Plain;
  // When set, the chat template (instead of `chat`).
  std::shared_ptr<const JinjaTemplate> chat_jinja;
  int min_threads = 40;       // connection threads kept ready
  int max_threads = 2048;     // connection threads at most (idle keep-alive connections hold one each)
  int read_timeout_s = 30;    // a client that stalls sending a request
  int write_timeout_s = 30;   // a client that stops reading a response (its request is cancelled)
  int keep_alive_s = 5;       // idle keep-alive connections are closed after this
  int keep_alive_max = 1000;  // requests per connection
};

class HttpServer {
 public:
  HttpServer(Engine& engine, const Model& model, ServerOptions o);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port; returns the port (the chosen one for port 0). Error("serve") when it cannot bind.
  int bind();
  // Accepts connections until shutdown(); returns then.
  void serve();
  // Thread-safe, idempotent: new requests get 503, the engine finishes running ones for up to deadline_s
  // seconds (then aborts them), the listener stops.
  void shutdown(double deadline_s);
  bool shutting_down() const { return stopping_; }

 private:
  void routes();
  void handle_generate(const httplib::Request& req, httplib::Response& res, bool chat);
  using Choices = std::vector<std::shared_ptr<Request>>;
  void respond_stream(httplib::Response& res, Choices rs, GenRequest g);
  void handle_tokenize(const httplib::Request& req, httplib::Response& res);
  void handle_detokenize(const httplib::Request& req, httplib::Response& res);
  void handle_models(httplib::Response& res);
  // g.n engine requests (choice i seeded with seed + i), all or none: when one is refused, the ones before it
  // are cancelled and the refusal is answered.
  Choices submit(const GenRequest& g);

  Engine& engine_;
  const Model& model_;
  ServerOptions o_;
  ApiContext ctx_;
  std::unique_ptr<httplib::Server> svr_;
  ServerMetrics metrics_;
  std::atomic<bool> stopping_{false};
  int64_t started_ = 0;
  int listen_fd_ = -1;  // unix seconds (the model's "created")
};

}  // namespace lowbit::serve
