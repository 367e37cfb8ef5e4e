#include "serve/http_server.h"

#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <list>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <unordered_set>

#include "core/error.h"
#include "core/json_text.h"
#include "serve/client_watch.h"
#include "serve/generation.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::serve {

using nlohmann::json;

namespace {

// The error of a request that ended without an answer: the engine failed on it, or the shutdown deadline
// aborted it. A non-streamed response is this error; a stream ends with it as an error event.
// Cancels the choices from index i on (those not driven yet, or all of them when the client is gone).
void cancel_from(const std::vector<std::shared_ptr<Request>>& rs, size_t i) {
  for (; i < rs.size(); ++i) rs[i]->cancel();
}

std::optional<ApiError> ended_without_answer(const DriveResult& d) {
  if (d.finish_reason == "error")
    return ApiError(500, "[serve] the engine failed while generating: " + d.error, "", "engine_error");
  if (d.client_gone)  // nobody reads this answer; the access log and the metrics see the status
    return ApiError(499, "The client closed the connection; its request was cancelled", "", "client_closed");
  if (d.finish_reason == "abort")
    return ApiError(503, "The server is shutting down; the request was aborted", "", "shutting_down");
  return std::nullopt;
}

// A token's piece for /tokenize with_pieces: the text when it is whole UTF-8, otherwise its bytes as numbers
// (a piece may hold part of a character), as llama-server answers.
json piece_json(const std::string& piece) {
  size_t i = 0;
  const auto* b = reinterpret_cast<const unsigned char*>(piece.data());
  while (i < piece.size()) {
    const unsigned c = b[i];
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > piece.size()) break;
    size_t k = 1;
    while (k < n && (b[i + k] & 0xC0) == 0x80) ++k;
    if (k < n) break;
    i += n;
  }
  if (i == piece.size()) return piece;
  json bytes = json::array();
  for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
  return bytes;
}

// httplib serves each connection on one pool thread for the connection's whole life (keep-alive included),
// and its compiled-in pool is fixed. A fixed pool lets a thousand idle connections, or clients that stop
// reading a stream, starve everyone else; this pool starts a thread whenever no thread is idle (up to `max`)
// and lets threads above `min` exit after 30 s without work.
class ElasticPool : public httplib::TaskQueue {
 public:
  ElasticPool(size_t min, size_t max) : min_(min), max_(std::max(min, max)) {
    std::lock_guard<std::mutex> lk(mu_);
    for (size_t i = 0; i < min_; ++i) spawn_locked();
  }
  void enqueue(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lk(mu_);
    jobs_.push_back(std::move(fn));
    reap_locked();
    if (idle_ < jobs_.size() && live_ < max_) spawn_locked();
    cv_.notify_one();
  }
  void shutdown() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      shutdown_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();  // workers finish the queued connections first
  }

 private:
  void spawn_locked() {
    ++live_;
    threads_.emplace_back([this] { work(); });
  }
  void work() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      ++idle_;
      const bool woke =
          cv_.wait_for(lk, std::chrono::seconds(30), [&] { return !jobs_.empty() || shutdown_; });
      --idle_;
      if (!jobs_.empty()) {
        auto fn = std::move(jobs_.front());
        jobs_.pop_front();
        lk.unlock();
        fn();
        lk.lock();
        continue;
      }
      if (shutdown_ || (!woke && live_ > min_)) break;
    }
    --live_;
    if (!shutdown_) finished_.insert(std::this_thread::get_id());
  }
  // Joins threads that left work() (they no longer hold mu_ once their id is visible here).
  void reap_locked() {
    if (finished_.empty()) return;
    for (auto it = threads_.begin(); it != threads_.end();) {
      if (finished_.count(it->get_id())) {
        finished_.erase(it->get_id());
        it->join();
        it = threads_.erase(it);
      } else {
        ++it;
      }
    }
  }
  const size_t min_, max_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::list<std::function<void()>> jobs_;
  std::list<std::thread> threads_;
  std::unordered_set<std::thread::id> finished_;
  size_t idle_ = 0, live_ = 0;
  bool shutdown_ = false;
};

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = "",
                const std::string& code = "") {
  res.status = status;
  if (status == 429) res.set_header("Retry-After", "1");
  res.set_content(json_text(error_json(status, message, param, code)), "application/json");
}

bool needs_auth(const std::string& path) {
  return path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize";
}

// Compares in time independent of where the strings first differ.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char d = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return d == 0;
}

}  // namespace

HttpServer::HttpServer(Engine& engine, const Model& model, ServerOptions o)
    : engine_(engine), model_(model), o_(std::move(o)), svr_(std::make_unique<httplib::Server>()) {
  started_ =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  ctx_.tok = model_.tokenizer.get();
  ctx_.max_model_len = engine_.max_model_len();
  ctx_.served_name = o_.served_name;
  ctx_.chat = o_.chat;
  ctx_.chat_jinja = o_.chat_jinja;
  routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  svr_->new_task_queue = [min = o_.min_threads, max = o_.max_threads] {
    return new ElasticPool(static_cast<size_t>(min), static_cast<size_t>(max));
  };
  svr_->set_payload_max_length(static_cast<size_t>(o_.max_body));
  svr_->set_read_timeout(o_.read_timeout_s, 0);
  svr_->set_write_timeout(o_.write_timeout_s, 0);
  svr_->set_keep_alive_timeout(o_.keep_alive_s);
  svr_->set_keep_alive_max_count(static_cast<size_t>(o_.keep_alive_max));
  svr_->set_socket_options([this](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    // Accepted sockets inherit it: stream chunks are small writes that Nagle would hold for the client's ACK.
    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
    listen_fd_ = sock;
  });
  int port = o_.port;
  if (port == 0) {
    port = svr_->bind_to_any_port(o_.host);
    if (port <= 0) port = -1;
  } else if (!svr_->bind_to_port(o_.host, port)) {
    port = -1;
  }
  if (port < 0)
    throw Error("serve", "cannot listen on " + o_.host + ":" + std::to_string(o_.port) +
                             " (address in use, not an address of this machine, or a privileged port); pick "
                             "another --host/--port, or --port 0 for any free port");
  // httplib listens with a backlog of 5: a burst of clients would see refused or retried connections. Calling
  // listen() again on the bound socket raises it.
  if (listen_fd_ >= 0) ::listen(listen_fd_, 4096);
  return port;
}

void HttpServer::serve() {
  if (!stopping_) svr_->listen_after_bind();
}

void HttpServer::shutdown(double deadline_s) {
  if (stopping_.exchange(true)) return;
  engine_.stop(deadline_s);  // running requests finish (or abort at the deadline): their handlers return
  svr_->stop();
}

HttpServer::Choices HttpServer::submit(const GenRequest& g) {
  Choices rs;
  auto refuse = [&rs](ApiError e) {
    cancel_from(rs, 0);
    return e;
  };
  try {
    for (int i = 0; i < g.n; ++i) {
      RequestOptions o = g.engine;
      o.sampler.seed += static_cast<uint64_t>(i);
      rs.push_back(engine_.submit(std::move(o)));
    }
  } catch (const QueueFull&) {
    throw refuse(ApiError(429,
                          "The server's request queue is full (--max-queue " +
                              std::to_string(engine_.options().max_queue) + "); retry later",
                          "", "queue_full"));
  } catch (const UsageError& e) {
    throw refuse(ApiError(400, e.what()));
  } catch (const Error& e) {
    throw refuse(
        ApiError(503, std::string("The server is not accepting requests: ") + e.what(), "", "shutting_down"));
  } catch (...) {
    refuse(ApiError(500, ""));
    throw;
  }
  return rs;
}

void HttpServer::routes() {
  svr_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (o_.api_key.empty() || !needs_auth(req.path)) return httplib::Server::HandlerResponse::Unhandled;
    const std::string h = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (h.rfind(prefix, 0) == 0 && same_secret(h.substr(prefix.size()), o_.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, 401,
               h.empty()
                   ? "Missing API key: send the header 'Authorization: Bearer KEY' (the server runs with "
                     "--api-key)"
                   : "Incorrect API key",
               "", "invalid_api_key");
    return httplib::Server::HandlerResponse::Handled;
  });
  svr_->set_error_handler(
      httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        if (res.status == 404)
          send_error(res, 404,
                     "Unknown endpoint " + req.method + " " + req.path +
                         " (endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, "
                         "POST /tokenize, POST /detokenize, GET /health, GET /metrics)");
        else if (res.status == 413)
          send_error(res, 413,
                     "The request body is larger than the server's limit of " + std::to_string(o_.max_body) +
                         " bytes (--max-body)",
                     "", "payload_too_large");
        else
          send_error(res, res.status, "HTTP error " + std::to_string(res.status));
        return httplib::Server::HandlerResponse::Handled;
      }));
  svr_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, 500, "[serve] internal error: " + what);
  });
  svr_->set_logger(
      [this](const httplib::Request&, const httplib::Response& res) { metrics_.count_response(res.status); });

  // Every handler answers its own errors as OpenAI error JSON.
  auto guard = [](std::function<void(const httplib::Request&, httplib::Response&)> fn) {
    return [fn = std::move(fn)](const httplib::Request& req, httplib::Response& res) {
      try {
        fn(req, res);
      } catch (const ApiError& e) {
        send_error(res, e.status, e.what(), e.param, e.code);
      } catch (const std::exception& e) {
        send_error(res, 500, std::string("[serve] internal error: ") + e.what());
      }
    };
  };
  svr_->Post("/v1/completions", guard([this](auto& req, auto& res) { handle_generate(req, res, false); }));
  svr_->Post("/v1/chat/completions",
             guard([this](auto& req, auto& res) { handle_generate(req, res, true); }));
  svr_->Get("/v1/models", guard([this](auto&, auto& res) { handle_models(res); }));
  svr_->Post("/tokenize", guard([this](auto& req, auto& res) { handle_tokenize(req, res); }));
  svr_->Post("/detokenize", guard([this](auto& req, auto& res) { handle_detokenize(req, res); }));
  svr_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (stopping_)
      send_error(res, 503, "The server is shutting down", "", "shutting_down");
    else
      res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  svr_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(engine_.stats()), "text/plain; version=0.0.4; charset=utf-8");
  });
}

void HttpServer::handle_generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  if (stopping_) throw ApiError(503, "The server is shutting down", "", "shutting_down");
  const json body = parse_body(req.body);
  GenRequest g = chat ? parse_chat_request(body, ctx_) : parse_completion_request(body, ctx_);
  Choices rs = submit(g);
  if (g.stream) {
    respond_stream(res, std::move(rs), std::move(g));
    return;
  }
  const ResponseMeta meta = new_response_meta(chat, o_.served_name);
  // httplib does not tell a handler that its client left: ClientWatch peeks the connection between tokens
  // and while the request waits, so a client that gave up stops its sequences (as a stream's failed write
  // does).
  ClientWatch client(req.remote_addr, req.remote_port, req.local_addr, req.local_port);
  json choices = json::array();
  int64_t prompt_tokens = 0, completion_tokens = 0;
  auto drive_choice = [&](size_t i) {
    TextAssembler ta(*model_.tokenizer, g.stop, g.engine.prompt);
    std::string text;
    std::vector<TokenEvent> events;
    RequestRecord rec;
    const DriveResult d = drive_request(
        *rs[i], ta,
        [&](const std::string& t, const TokenEvent* e) {
          text += t;
          if (e && g.logprobs >= 0) events.push_back(*e);
          return client.alive();
        },
        [&] { return client.alive(); }, 0.25, &rec);
    metrics_.record(rec);
    if (auto e = ended_without_answer(d)) throw *e;
    int64_t offset = 0;
    const json lp = g.logprobs >= 0 ? logprobs_json(chat, *model_.tokenizer, events, &offset) : json(nullptr);
    choices.push_back(choice_json(meta, static_cast<int>(i), text, d.finish_reason, lp));
    prompt_tokens = rec.prompt_tokens;  // the same prompt for every choice, counted once (as OpenAI does)
    completion_tokens += d.completion_tokens;
  };
  // The choices run together in the engine; their events wait in their channels while one is read. A choice
  // that ends without an answer (or anything thrown) cancels the ones after it.
  size_t i = 0;
  try {
    for (; i < rs.size(); ++i) drive_choice(i);
  } catch (...) {
    cancel_from(rs, i + 1);
    throw;
  }
  res.set_content(json_text(response_json(meta, choices, usage_json(prompt_tokens, completion_tokens))),
                  "application/json");
}

// Choices are streamed one after another, each chunk carrying its choice's index (OpenAI clients assemble
// choices by index, in any order of chunks).
void HttpServer::respond_stream(httplib::Response& res, Choices rs, GenRequest g) {
  struct State {
    Choices rs;
    GenRequest g;
    ResponseMeta meta;
  };
  ResponseMeta meta = new_response_meta(g.chat, o_.served_name);
  auto st = std::make_shared<State>(State{std::move(rs), std::move(g), std::move(meta)});
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, st](size_t, httplib::DataSink& sink) {
        const Tokenizer& tok = *model_.tokenizer;
        const GenRequest& g = st->g;
        auto send = [&](const json& j) {
          const std::string s = "data: " + json_text(j) + "\n\n";
          return sink.write(s.data(), s.size());
        };
        int64_t prompt_tokens = 0, completion_tokens = 0;
        for (size_t i = 0; i < st->rs.size(); ++i) {
          const int index = static_cast<int>(i);
          if (g.chat && !send(chunk_json(st->meta, "", "", nullptr, /*first=*/true, index))) {
            cancel_from(st->rs, i);
            return false;
          }
          TextAssembler ta(tok, g.stop, g.engine.prompt);
          RequestRecord rec;
          int64_t offset = 0;
          const DriveResult d = drive_request(
              *st->rs[i], ta,
              [&](const std::string& t, const TokenEvent* e) {
                json lp = nullptr;
                if (e && g.logprobs >= 0) lp = logprobs_json(g.chat, tok, {*e}, &offset);
                if (t.empty() && lp.is_null()) return true;
                return send(chunk_json(st->meta, t, "", lp, false, index));
              },
              // An SSE comment every few quiet seconds: clients ignore it, and a write to a closed connection
              // fails, which is how a client that left while its request waits in the queue is noticed.
              [&] {
                static const char kPing[] = ": keep-alive\n\n";
                return sink.write(kPing, sizeof kPing - 1);
              },
              2.0, &rec);
          metrics_.record(rec);
          prompt_tokens = rec.prompt_tokens;
          completion_tokens += d.completion_tokens;
          if (d.client_gone) {
            cancel_from(st->rs, i + 1);
            return false;
          }
          if (auto e = ended_without_answer(d)) {
            send(error_json(e->status, e->what(), e->param, e->code));
            cancel_from(st->rs, i + 1);
            break;
          }
          send(chunk_json(st->meta, "", d.finish_reason, nullptr, false, index));
        }
        if (g.include_usage) send(usage_chunk_json(st->meta, usage_json(prompt_tokens, completion_tokens)));
        static const char kDone[] = "data: [DONE]\n\n";
        sink.write(kDone, sizeof kDone - 1);
        sink.done();
        return true;
      },
      [st](bool success) {
        if (!success) cancel_from(st->rs, 0);
      });
}

void HttpServer::handle_tokenize(const httplib::Request& req, httplib::Response& res) {
  const json body = parse_body(req.body);
  const json* text = nullptr;
  for (const char* k : {"content", "prompt"})
    if (body.contains(k)) text = &body[k];
  if (!text || !text->is_string())
    throw ApiError(400, "'content' (or 'prompt') must be a string: {\"content\": \"text\"}", "content");
  auto flag = [&](std::initializer_list<const char*> keys, bool dflt) {
    for (const char* k : keys)
      if (body.contains(k) && !body[k].is_null()) {
        if (!body[k].is_boolean()) throw ApiError(400, std::string("'") + k + "' must be a boolean", k);
        dflt = body[k].get<bool>();
      }
    return dflt;
  };
  const bool add_special = flag({"add_special", "add_special_tokens"}, true);
  // Special-token text ("<|im_end|>") is one token, as in a completion prompt (and in llama-server / vLLM).
  const bool parse_special = flag({"parse_special"}, true);
  const bool with_pieces = flag({"with_pieces"}, false);
  const Tokenizer& tok = *model_.tokenizer;
  const auto ids = tok.encode(text->get<std::string>(), add_special && prompt_adds_bos(tok), parse_special);
  json tokens = ids;
  if (with_pieces) {  // llama-server's shape: [{"id": 15, "piece": " upon"}]; a piece may be partial UTF-8
    tokens = json::array();
    for (int32_t id : ids) {
      const std::string piece = tok.decode_token(id, /*render_special=*/true);
      tokens.push_back({{"id", id}, {"piece", piece_json(piece)}});
    }
  }
  res.set_content(
      json_text({{"tokens", tokens}, {"count", ids.size()}, {"max_model_len", engine_.max_model_len()}}),
      "application/json");
}

void HttpServer::handle_detokenize(const httplib::Request& req, httplib::Response& res) {
  const json body = parse_body(req.body);
  if (!body.contains("tokens") || !body["tokens"].is_array())
    throw ApiError(400, "'tokens' must be a list of token ids: {\"tokens\": [1, 2, 3]}", "tokens");
  const Tokenizer& tok = *model_.tokenizer;
  std::vector<int32_t> ids;
  for (const auto& t : body["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok.vocab_size())
      throw ApiError(
          400,
          "'tokens' holds " + t.dump() + ", not a token id in [0, " + std::to_string(tok.vocab_size()) + ")",
          "tokens");
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  const std::string text = tok.decode(ids);
  res.set_content(json_text({{"content", text}, {"prompt", text}}), "application/json");
}

void HttpServer::handle_models(httplib::Response& res) {
  const json m = {{"id", o_.served_name}, {"object", "model"},   {"created", started_},
                  {"owned_by", "lowbit"}, {"root", model_.path}, {"max_model_len", engine_.max_model_len()}};
  res.set_content(json_text({{"object", "list"}, {"data", json::array({m})}}), "application/json");
}

}  // namespace lowbit::serve
