#include "serve/openai_api.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::serve {

using nlohmann::json;

const char* error_type(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 413:
      return "invalid_request_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

bool prompt_adds_bos(const Tokenizer& tok) {
  return tok.bos_id() >= 0 && tok.add_bos_default();
}

json error_json(int status, const std::string& message, const std::string& param, const std::string& code) {
  return {{"error",
           {{"message", message},
            {"type", error_type(status)},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

namespace {

constexpr int kMaxStops = 16;
constexpr size_t kMaxStopBytes = 1024;
constexpr int kMaxLogprobs = 20;
constexpr size_t kMaxLogitBias = 1024;  // entries of logit_bias

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, "'" + param + "' " + message, param);
}

// A field that is absent or null counts as not given (clients send null for defaults).
const json* field(const json& body, const char* key) {
  auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

bool get_bool(const json& body, const char* key, bool def) {
  const json* v = field(body, key);
  if (!v) return def;
  if (!v->is_boolean()) bad(key, "must be a boolean");
  return v->get<bool>();
}

double get_number(const json& body, const char* key, double def, double lo, double hi) {
  const json* v = field(body, key);
  if (!v) return def;
  if (!v->is_number()) bad(key, "must be a number");
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) bad(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

// An integer (a float with an integral value is accepted: JavaScript clients may send 16.0).
bool get_int(const json& body, const char* key, int64_t* out) {
  const json* v = field(body, key);
  if (!v) return false;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      bad(key, "is too large");
    *out = v->get<int64_t>();
    return true;
  }
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) {
      *out = static_cast<int64_t>(d);
      return true;
    }
  }
  bad(key, "must be an integer");
}

// logit_bias: {"token id": bias in [-100, 100], ...} (OpenAI's shape: the ids as decimal strings).
std::vector<std::pair<int32_t, float>> get_logit_bias(const json& body, int64_t vocab) {
  const json* v = field(body, "logit_bias");
  std::vector<std::pair<int32_t, float>> out;
  if (!v) return out;
  if (!v->is_object()) bad("logit_bias", "must be an object of {\"token id\": bias}");
  if (v->size() > kMaxLogitBias)
    bad("logit_bias", "may hold at most " + std::to_string(kMaxLogitBias) + " tokens");
  for (const auto& [key, b] : v->items()) {
    int64_t id = -1;
    if (!key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string::npos)
      id = std::stoll(key);
    if (id < 0 || id >= vocab)
      bad("logit_bias",
          "key '" + key.substr(0, 32) + "' is not a token id in [0, " + std::to_string(vocab) + ")");
    if (!b.is_number() || !(b.get<double>() >= -100 && b.get<double>() <= 100))
      bad("logit_bias", "value for token " + key + " must be a number in [-100, 100]");
    for (const auto& e : out)
      if (e.first == id) bad("logit_bias", "names token " + std::to_string(id) + " twice");
    out.emplace_back(static_cast<int32_t>(id), static_cast<float>(b.get<double>()));
  }
  return out;
}

std::vector<std::string> get_stop(const json& body) {
  const json* v = field(body, "stop");
  std::vector<std::string> out;
  if (!v) return out;
  auto add = [&](const json& s) {
    if (!s.is_string()) bad("stop", "must be a string or a list of strings");
    std::string t = s.get<std::string>();
    if (t.size() > kMaxStopBytes)
      bad("stop", "strings may be at most " + std::to_string(kMaxStopBytes) + " bytes");
    if (!t.empty()) out.push_back(std::move(t));  // an empty stop string would end every response at once
  };
  if (v->is_array()) {
    if (v->size() > size_t(kMaxStops))
      bad("stop", "may hold at most " + std::to_string(kMaxStops) + " strings");
    for (const auto& s : *v) add(s);
  } else {
    add(*v);
  }
  return out;
}

std::vector<int32_t> token_list(const json& a, const ApiContext& ctx, const char* param) {
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (const auto& t : a) {
    if (!t.is_number_integer()) bad(param, "must be a string or a list of token ids (integers)");
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= ctx.tok->vocab_size())
      bad(param, "holds token id " + std::to_string(id) + ", outside the vocabulary [0, " +
                     std::to_string(ctx.tok->vocab_size()) + ")");
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

std::vector<int32_t> completion_prompt(const json& body, const ApiContext& ctx) {
  const json* p = field(body, "prompt");
  if (!p) bad("prompt", "is required");
  if (p->is_string())
    return ctx.tok->encode(p->get<std::string>(), prompt_adds_bos(*ctx.tok), /*parse_special=*/true);
  if (!p->is_array()) bad("prompt", "must be a string, a list of token ids or a list with one string");
  if (p->empty()) bad("prompt", "is empty");
  if ((*p)[0].is_number()) return token_list(*p, ctx, "prompt");
  // A batch of prompts: one response per prompt is not supported (one choice per request).
  if (p->size() != 1)
    bad("prompt", "holds " + std::to_string(p->size()) +
                      " prompts; lowbit serve answers one prompt per request (send one request each)");
  const json& one = (*p)[0];
  if (one.is_string())
    return ctx.tok->encode(one.get<std::string>(), prompt_adds_bos(*ctx.tok), /*parse_special=*/true);
  if (one.is_array()) return token_list(one, ctx, "prompt");
  bad("prompt", "must be a string, a list of token ids or a list with one string");
}

std::string message_content(const json& m, size_t i) {
  const std::string param = "messages[" + std::to_string(i) + "].content";
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) return "";  // an assistant turn with tool calls only
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array()) bad(param, "must be a string or a list of text parts");
  std::string text;
  for (const auto& part : *it) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
        !part["text"].is_string())
      bad(param, "may only hold {\"type\": \"text\", \"text\": ...} parts (this model reads text only)");
    text += part["text"].get<std::string>();
  }
  return text;
}

std::vector<int32_t> chat_prompt(const json& body, const ApiContext& ctx) {
  const json* ms = field(body, "messages");
  if (!ms) bad("messages", "is required");
  if (!ms->is_array() || ms->empty()) bad("messages", "must be a non-empty list of {\"role\", \"content\"}");
  std::vector<ChatMessage> msgs;
  for (size_t i = 0; i < ms->size(); ++i) {
    const json& m = (*ms)[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad(param, "must be an object with \"role\" and \"content\"");
    auto r = m.find("role");
    if (r == m.end() || !r->is_string()) bad(param + ".role", "must be a string");
    const std::string role = r->get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "developer" && role != "tool")
      bad(param + ".role", "must be system, developer, user, assistant or tool (got '" + role + "')");
    msgs.push_back({role, message_content(m, i)});
  }
  if (!ctx.chat_jinja)
    return ctx.tok->encode(render_chat(ctx.chat, msgs), prompt_adds_bos(*ctx.tok), /*parse_special=*/true);
  const Tokenizer& tok = *ctx.tok;
  const std::string bos = tok.bos_id() >= 0 ? tok.piece(tok.bos_id()) : "";
  std::string text;
  try {
    text = render_chat_jinja(*ctx.chat_jinja, msgs, bos, tok.eos_id() >= 0 ? tok.piece(tok.eos_id()) : "");
  } catch (const JinjaError& e) {
    // raise_exception (e.g. roles out of order) or a bound: the request's fault, not the server's
    throw ApiError(400, e.what(), "messages");
  }
  return tok.encode(text, jinja_prompt_needs_bos(text, bos, prompt_adds_bos(tok)), /*parse_special=*/true);
}

void check_model(const json& body, const ApiContext& ctx) {
  const json* m = field(body, "model");
  if (!m) return;
  if (!m->is_string()) bad("model", "must be a string");
  if (m->get<std::string>() != ctx.served_name)
    throw ApiError(404,
                   "The model '" + m->get<std::string>() + "' does not exist; this server serves '" +
                       ctx.served_name + "' (GET /v1/models)",
                   "model", "model_not_found");
}

// Fields common to both endpoints. prompt is already in g.engine.prompt.
void parse_common(const json& body, const ApiContext& ctx, GenRequest& g, bool chat) {
  check_model(body, ctx);
  int64_t n = 1;
  if (get_int(body, "n", &n) && (n < 1 || n > kMaxChoices))
    bad("n", "must be in [1, " + std::to_string(kMaxChoices) + "] (got " + std::to_string(n) + ")");
  g.n = static_cast<int>(n);
  int64_t best_of = 1;
  if (get_int(body, "best_of", &best_of) && best_of != 1) bad("best_of", "> 1 is not supported");
  if (get_bool(body, "echo", false)) bad("echo", "is not supported");
  g.stream = get_bool(body, "stream", false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "must be an object");
    g.include_usage = get_bool(*so, "include_usage", false);
  }
  const int64_t plen = static_cast<int64_t>(g.engine.prompt.size());
  if (plen == 0) bad("prompt", "is empty (and the tokenizer adds no BOS token)");
  if (plen >= ctx.max_model_len)
    throw ApiError(400,
                   "This model's maximum context length is " + std::to_string(ctx.max_model_len) +
                       " tokens; the prompt has " + std::to_string(plen) +
                       " tokens, which leaves no room to generate. Shorten the prompt.",
                   chat ? "messages" : "prompt", "context_length_exceeded");
  int64_t max_tokens = chat ? ctx.max_model_len - plen : 16;  // OpenAI's defaults: chat = up to the context
  bool given = get_int(body, "max_tokens", &max_tokens);
  if (chat) given = get_int(body, "max_completion_tokens", &max_tokens) || given;
  const char* mt = chat && field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (max_tokens < 1) bad(mt, "must be at least 1 (got " + std::to_string(max_tokens) + ")");
  if (given && plen + max_tokens > ctx.max_model_len)
    throw ApiError(400,
                   "This model's maximum context length is " + std::to_string(ctx.max_model_len) +
                       " tokens; you requested " + std::to_string(plen + max_tokens) + " tokens (" +
                       std::to_string(plen) + " in the prompt, " + std::to_string(max_tokens) + " for '" +
                       mt + "'). Reduce the prompt or '" + mt + "'.",
                   mt, "context_length_exceeded");
  g.engine.max_tokens = static_cast<int>(max_tokens);

  SamplerParams& s = g.engine.sampler;
  s.temperature = static_cast<float>(get_number(body, "temperature", 1.0, 0.0, 2.0));
  s.top_p = static_cast<float>(get_number(body, "top_p", 1.0, 0.0, 1.0));
  if (s.top_p <= 0) bad("top_p", "must be in (0, 1]");
  s.min_p = static_cast<float>(get_number(body, "min_p", 0.0, 0.0, 0.999999));
  int64_t top_k = 0;
  if (get_int(body, "top_k", &top_k)) {
    if (top_k < -1) bad("top_k", "must be -1 or 0 (off) or a positive count");
    s.top_k = top_k <= 0 ? 0 : static_cast<int>(std::min<int64_t>(top_k, ctx.tok->vocab_size()));
  }
  s.repeat_penalty = static_cast<float>(get_number(body, "repetition_penalty", 1.0, 1e-3, 100.0));
  int64_t seed = 0;
  if (get_int(body, "seed", &seed)) {
    s.seed = static_cast<uint64_t>(seed);
  } else {
    static std::atomic<uint64_t> counter{std::random_device{}()};
    s.seed = counter.fetch_add(0x9E3779B97F4A7C15ull) ^
             static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  g.engine.presence_penalty = static_cast<float>(get_number(body, "presence_penalty", 0.0, -2.0, 2.0));
  g.engine.frequency_penalty = static_cast<float>(get_number(body, "frequency_penalty", 0.0, -2.0, 2.0));
  g.engine.logit_bias = get_logit_bias(body, ctx.tok->vocab_size());
  // Features that change what the answer must be are refused, not ignored: a client asking for JSON or for
  // tool calls would otherwise get plain text it cannot parse.
  if (const json* rf = field(body, "response_format")) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
      bad("response_format", "must be an object with a string \"type\"");
    const std::string t = (*rf)["type"].get<std::string>();
    if (t != "text")
      bad("response_format",
          "type '" + t.substr(0, 32) +
              "' is not supported: lowbit serve does not constrain its output (only \"text\")");
  }
  if (chat)
    if (const json* tools = field(body, "tools"); tools && !(tools->is_array() && tools->empty())) {
      const json* tc = field(body, "tool_choice");
      if (!(tc && tc->is_string() && tc->get<std::string>() == "none"))
        bad("tools", "tool calling is not supported (with \"tool_choice\": \"none\" the tools are ignored)");
    }
  g.engine.stop_at_eos = !get_bool(body, "ignore_eos", false);
  if (g.engine.stop_at_eos) g.engine.stop_tokens = ctx.tok->eog_ids();  // <|im_end|>, <|eot_id|>, ...
  if (const json* u = field(body, "user"); u && !u->is_string()) bad("user", "must be a string");
  g.stop = get_stop(body);
  try {
    s.validate();
  } catch (const UsageError& e) {
    throw ApiError(400, e.what());
  }
}

}  // namespace

GenRequest parse_completion_request(const json& body, const ApiContext& ctx) {
  GenRequest g;
  g.engine.prompt = completion_prompt(body, ctx);
  parse_common(body, ctx, g, false);
  if (const json* s = field(body, "suffix"); s && !(s->is_string() && s->get<std::string>().empty()))
    bad("suffix", "is not supported");
  int64_t lp = 0;
  if (get_int(body, "logprobs", &lp)) {
    if (lp < 0 || lp > kMaxLogprobs) bad("logprobs", "must be in [0, " + std::to_string(kMaxLogprobs) + "]");
    g.logprobs = static_cast<int>(lp);
  }
  g.engine.top_logprobs = g.logprobs;
  return g;
}

GenRequest parse_chat_request(const json& body, const ApiContext& ctx) {
  GenRequest g;
  g.chat = true;
  g.engine.prompt = chat_prompt(body, ctx);
  parse_common(body, ctx, g, true);
  const bool lp = get_bool(body, "logprobs", false);
  int64_t top = 0;
  const bool has_top = get_int(body, "top_logprobs", &top);
  if (has_top && (top < 0 || top > kMaxLogprobs))
    bad("top_logprobs", "must be in [0, " + std::to_string(kMaxLogprobs) + "]");
  if (has_top && !lp) bad("top_logprobs", "needs \"logprobs\": true");
  if (lp) g.logprobs = static_cast<int>(top);
  g.engine.top_logprobs = g.logprobs;
  return g;
}

json parse_body(const std::string& body) {
  // nlohmann's parser keeps its own stack, but the value it builds is destroyed recursively; a body of a few
  // megabytes of '[' must not reach it.
  int depth = 0;
  bool in_str = false, esc = false;
  for (char c : body) {
    if (in_str) {
      if (esc)
        esc = false;
      else if (c == '\\')
        esc = true;
      else if (c == '"')
        in_str = false;
    } else if (c == '"') {
      in_str = true;
    } else if (c == '[' || c == '{') {
      if (++depth > 64) throw ApiError(400, "The request body nests deeper than 64 levels");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    throw ApiError(400, std::string("The request body is not valid JSON (UTF-8): ") + e.what());
  }
  if (!j.is_object()) throw ApiError(400, "The request body must be a JSON object");
  return j;
}

ResponseMeta new_response_meta(bool chat, const std::string& model) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32);
  std::mt19937_64 rng(salt + counter.fetch_add(1));
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", (unsigned long long)rng(), (unsigned long long)rng());
  ResponseMeta m;
  m.chat = chat;
  m.id = std::string(chat ? "chatcmpl-" : "cmpl-") + hex;
  m.model = model;
  m.created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  return m;
}

json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

namespace {

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// -inf / NaN are not JSON numbers; OpenAI clients expect a float, so use the most negative one.
double finite_logprob(float lp) {
  return std::isfinite(lp) ? lp : -9999.0;
}

}  // namespace

json logprobs_json(bool chat, const Tokenizer& tok, const std::vector<TokenEvent>& events, int64_t* offset) {
  if (chat) {
    json content = json::array();
    for (const auto& e : events) {
      if (e.token < 0) continue;
      const std::string t = tok.decode_token(e.token);
      json top = json::array();
      for (const auto& a : e.top) {
        const std::string at = tok.decode_token(a.token);
        top.push_back({{"token", at}, {"logprob", finite_logprob(a.logprob)}, {"bytes", bytes_of(at)}});
      }
      content.push_back({{"token", t},
                         {"logprob", finite_logprob(e.logprob)},
                         {"bytes", bytes_of(t)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  for (const auto& e : events) {
    if (e.token < 0) continue;
    const std::string t = tok.decode_token(e.token);
    tokens.push_back(t);
    lps.push_back(finite_logprob(e.logprob));
    json top = json::object();
    for (const auto& a : e.top) top[tok.decode_token(a.token)] = finite_logprob(a.logprob);
    tops.push_back(top);
    offs.push_back(*offset);
    *offset += static_cast<int64_t>(t.size());
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

json choice_json(const ResponseMeta& m, int index, const std::string& text, const std::string& finish_reason,
                 const json& logprobs) {
  json choice = {{"index", index}, {"logprobs", logprobs}, {"finish_reason", finish_reason}};
  if (m.chat)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  return choice;
}

json response_json(const ResponseMeta& m, const json& choices, const json& usage) {
  return {{"id", m.id},           {"object", m.chat ? "chat.completion" : "text_completion"},
          {"created", m.created}, {"model", m.model},
          {"choices", choices},   {"usage", usage}};
}

json chunk_json(const ResponseMeta& m, const std::string& text, const std::string& finish_reason,
                const json& logprobs, bool first, int index) {
  json choice = {{"index", index},
                 {"logprobs", logprobs},
                 {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)}};
  if (m.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (first || !text.empty()) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  return {{"id", m.id},
          {"object", m.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", m.created},
          {"model", m.model},
          {"choices", json::array({choice})}};
}

json usage_chunk_json(const ResponseMeta& m, const json& usage) {
  return {{"id", m.id},
          {"object", m.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", m.created},
          {"model", m.model},
          {"choices", json::array()},
          {"usage", usage}};
}

}  // namespace lowbit::serve
