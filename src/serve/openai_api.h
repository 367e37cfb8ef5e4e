// The OpenAI API surface of `lowbit serve`: request bodies of /v1/completions and /v1/chat/completions parsed
// and checked into engine RequestOptions, and the response / stream-chunk / error JSON shapes. No HTTP here
// (http_server.cpp), no engine calls (generation.cpp). Fields supported and refused: docs/serve.md.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "serve/chat_template.h"

namespace lowbit {
class Tokenizer;
}

namespace lowbit::serve {

// An error answered with `status` and OpenAI's {"error": {"message", "type", "param", "code"}}.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string param = "", std::string code = "")
      : std::runtime_error(message), status(status), param(std::move(param)), code(std::move(code)) {}
  int status;
  std::string param, code;
};
const char* error_type(int status);  // 400 -> "invalid_request_error", 401 -> "authentication_error", ...
nlohmann::json error_json(int status, const std::string& message, const std::string& param = "",
                          const std::string& code = "");

// What the parser needs to know about the served model.
struct ApiContext {
  const Tokenizer* tok = nullptr;
  int64_t max_model_len = 0;
  std::string served_name;
  ChatFormat chat = ChatFormat::Plain;
  std::shared_ptr<const JinjaTemplate> chat_jinja;  // the interpreted template; renders instead of `chat`
};

// Choices per request (`n`): each is its own engine request over the same prompt. Admitted in the same step,
// each prefills the prompt itself; the prefix cache reuses only whole prompt chunks that another sequence has
// already computed.
constexpr int kMaxChoices = 16;

// A parsed generation request.
struct GenRequest {
  bool chat = false;
  int n = 1;  // choices, [1, kMaxChoices]; choice i samples with seed engine.sampler.seed + i
  bool stream = false, include_usage = false;
  std::vector<std::string> stop;  // matched on the detokenized text
  int logprobs = -1;              // -1: none; else alternatives per token (completions `logprobs`, chat
                                  // `top_logprobs`)
  RequestOptions engine;          // prompt ids, max_tokens, sampler, penalties, stop ids
};

// The JSON body of /v1/completions or /v1/chat/completions -> GenRequest. ApiError 400 naming the field for
// wrong types, values out of range (n outside [1, kMaxChoices], a logit_bias key outside the vocabulary),
// unsupported features (echo, best_of > 1, a non-text message part, response_format other than text, chat
// tools without tool_choice none), a prompt of max_model_len tokens or more, prompt + max_tokens past
// max_model_len; 404 for another model's name. Unknown fields are ignored.
GenRequest parse_completion_request(const nlohmann::json& body, const ApiContext& ctx);
GenRequest parse_chat_request(const nlohmann::json& body, const ApiContext& ctx);

// Whether a text prompt (a completion, a chat, /tokenize with add_special) starts with BOS: when the
// tokenizer has one and asks for it.
bool prompt_adds_bos(const Tokenizer& tok);

// Parses a request body: an object, at most 64 levels deep. ApiError 400 otherwise (including invalid UTF-8,
// which nlohmann's parser rejects).
nlohmann::json parse_body(const std::string& body);

// Response identity shared by all chunks of one response.
struct ResponseMeta {
  bool chat = false;
  std::string id, model;
  int64_t created = 0;
};
ResponseMeta new_response_meta(bool chat, const std::string& model);

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens);
// Logprobs of `events` (their token, logprob and alternatives) in the completions shape ({"tokens",
// "token_logprobs", "top_logprobs", "text_offset"}; text_offset from `offset`, advanced by each token's
// bytes) or the chat shape ({"content": [{"token", "logprob", "bytes", "top_logprobs"}]}).
nlohmann::json logprobs_json(bool chat, const Tokenizer& tok, const std::vector<TokenEvent>& events,
                             int64_t* offset);
// One choice of a non-streamed response (`index` in the response's choices). logprobs: null when not asked
// for.
nlohmann::json choice_json(const ResponseMeta& m, int index, const std::string& text,
                           const std::string& finish_reason, const nlohmann::json& logprobs);
// A whole non-streamed response: `choices` from choice_json, in index order.
nlohmann::json response_json(const ResponseMeta& m, const nlohmann::json& choices,
                             const nlohmann::json& usage);
// One stream chunk of choice `index`: text delta (chat: first = the role-only delta), finish_reason "" =
// null.
nlohmann::json chunk_json(const ResponseMeta& m, const std::string& text, const std::string& finish_reason,
                          const nlohmann::json& logprobs, bool first = false, int index = 0);
// The final usage chunk of stream_options.include_usage: no choices.
nlohmann::json usage_chunk_json(const ResponseMeta& m, const nlohmann::json& usage);

}  // namespace lowbit::serve
