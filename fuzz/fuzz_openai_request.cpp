// libFuzzer target: the request bodies of lowbit serve (serve/openai_api.h). Input layout:
//   <selector byte> <body bytes>
// The body goes through parse_body, then the completions or chat parser (selector bit 0) against a small
// byte-fallback tokenizer, with chat rendered by the template the selector picks; a parsed request is turned
// into its response and stream-chunk shapes. Only ApiError (an HTTP 4xx) and lowbit::Error may escape: a
// nlohmann type or range error escaping here would be a 500 for a malformed request.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "serve/chat_template.h"
#include "serve/openai_api.h"
#include "tokenizer/tokenizer.h"

namespace {
const lowbit::Tokenizer& tokenizer() {
  using namespace lowbit;
  static const Tokenizer tok = [] {
    std::vector<std::string> pieces = {"<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"};
    std::vector<TokenAttr> attrs = {TokenAttr::Unknown, TokenAttr::Control, TokenAttr::Control,
                                    TokenAttr::Control, TokenAttr::Control};
    char b[8];
    for (int i = 0; i < 256; ++i) {
      std::snprintf(b, sizeof b, "<0x%02X>", i);
      pieces.push_back(b);
      attrs.push_back(TokenAttr::Byte);
    }
    for (const char* w : {"\xe2\x96\x81", "a", "b", "\xe2\x96\x81the", "user", "assistant", ":"}) {
      pieces.push_back(w);
      attrs.push_back(TokenAttr::Normal);
    }
    std::vector<float> scores(pieces.size(), 0.0f);
    TokenizerOptions o;
    o.algo = TokenizerAlgo::ScoreMerge;
    o.prefix = PrefixMode::First;
    o.escape_spaces = true;
    return Tokenizer(o, pieces, scores, attrs, {}, 1, 2, 0);
  }();
  return tok;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lowbit;
  using namespace lowbit::serve;
  if (size == 0) return 0;
  const uint8_t sel = data[0];
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  ApiContext ctx;
  ctx.tok = &tokenizer();
  ctx.max_model_len = 64;
  ctx.served_name = "m";
  static const ChatFormat formats[] = {ChatFormat::Plain, ChatFormat::ChatML, ChatFormat::Llama3,
                                       ChatFormat::Llama2};
  ctx.chat = formats[(sel >> 1) & 3];
  try {
    const nlohmann::json j = parse_body(body);
    const bool chat = sel & 1;
    const GenRequest r = chat ? parse_chat_request(j, ctx) : parse_completion_request(j, ctx);
    const ResponseMeta meta = new_response_meta(chat, ctx.served_name);
    nlohmann::json choices = nlohmann::json::array();
    for (int i = 0; i < r.n; ++i) choices.push_back(choice_json(meta, i, "text", "stop", nlohmann::json()));
    (void)response_json(meta, choices, usage_json(static_cast<int64_t>(r.engine.prompt.size()), r.n));
    (void)chunk_json(meta, "t", "", nlohmann::json(), false, r.n - 1);
  } catch (const ApiError&) {
  } catch (const Error&) {
  }
  return 0;
}
