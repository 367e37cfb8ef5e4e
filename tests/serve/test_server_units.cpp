// The pieces of `lowbit serve` without HTTP: chat-template choice and rendering, request parsing and its 4xx
// errors, the text assembler (UTF-8 hold-back, stop strings, the continuation space), Prometheus histograms.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/model.h"
#include "serve/chat_template.h"
#include "serve/generation.h"
#include "serve/metrics.h"
#include "serve/openai_api.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace lowbit;
using namespace lowbit::serve;
using nlohmann::json;
namespace fs = std::filesystem;

const Tokenizer& stories_tokenizer() {
  static std::unique_ptr<Model> m =
      load_model(std::string(LOWBIT_SHARED_DIR) + "/models/stories260K/stories260K.bin");
  return *m->tokenizer;
}

TEST(ChatTemplate, FamiliesAreRecognisedByTheirMarkers) {
  EXPECT_EQ(detect_chat_family("{% for m in messages %}<|im_start|>{{ m.role }}"), ChatFormat::ChatML);
  EXPECT_EQ(detect_chat_family("{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>' }}"),
            ChatFormat::Llama3);
  EXPECT_EQ(detect_chat_family("{{ bos_token + '[INST] ' + content + ' [/INST]' }}"), ChatFormat::Llama2);
  EXPECT_FALSE(detect_chat_family("{{ '<start_of_turn>' + role }}").has_value());
  EXPECT_FALSE(detect_chat_family("").has_value());
}

TEST(ChatTemplate, ChoiceFlagWinsThenModelThenPlain) {
  const std::string chatml = "<|im_start|>";
  EXPECT_EQ(choose_chat_template(chatml, "").format, ChatFormat::ChatML);
  const auto flag = choose_chat_template(chatml, "llama3");
  EXPECT_EQ(flag.format, ChatFormat::Llama3);
  EXPECT_NE(flag.reason.find("overrides"), std::string::npos) << flag.reason;
  const auto none = choose_chat_template("", "");
  EXPECT_EQ(none.format, ChatFormat::Plain);
  EXPECT_FALSE(none.warn);
  const auto unknown = choose_chat_template("{{ '<start_of_turn>' }}", "");  // interpreted (test_jinja)
  EXPECT_TRUE(unknown.jinja);
  const auto broken = choose_chat_template("{{ '<start_of_turn>' ", "");
  EXPECT_EQ(broken.format, ChatFormat::Plain);
  EXPECT_TRUE(broken.warn);
  EXPECT_NE(broken.reason.find("plain"), std::string::npos);
  EXPECT_THROW(choose_chat_template("", "jinja"), UsageError);
}

TEST(ChatTemplate, Rendering) {
  const std::vector<ChatMessage> m = {{"system", "S"}, {"user", "U1"}, {"assistant", "A1"}, {"user", "U2"}};
  EXPECT_EQ(
      render_chat(ChatFormat::ChatML, m),
      "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
      "<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(ChatFormat::Llama3, m),
            "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nU1<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nA1<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nU2<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render_chat(ChatFormat::Llama2, m),
            "[INST] <<SYS>>\nS\n<</SYS>>\n\nU1 [/INST] A1 </s><s>[INST] U2 [/INST]");
  EXPECT_EQ(render_chat(ChatFormat::Plain, m), "system: S\nuser: U1\nassistant: A1\nuser: U2\nassistant:");
}

TEST(ChatTemplate, ReadFromTokenizerConfig) {
  const fs::path d = fs::path(::testing::TempDir()) / ("lowbit_chat_tpl_" + std::to_string(::getpid()));
  fs::create_directories(d);
  EXPECT_EQ(read_model_chat_template(d.string()), "");
  std::ofstream(d / "tokenizer_config.json") << json{{"chat_template", "<|im_start|>{{x}}"}}.dump();
  EXPECT_EQ(read_model_chat_template(d.string()), "<|im_start|>{{x}}");
  std::ofstream(d / "tokenizer_config.json")
      << json{{"chat_template", json::array({{{"name", "tool_use"}, {"template", "T"}},
                                             {{"name", "default"}, {"template", "[INST]"}}})}}
             .dump();
  EXPECT_EQ(read_model_chat_template(d.string()), "[INST]");
  std::ofstream(d / "tokenizer_config.json") << "{ not json";
  EXPECT_EQ(read_model_chat_template(d.string()), "");
  fs::remove_all(d);
  // The shared TinyStories checkpoint has a tokenizer_config.json without a template.
  EXPECT_EQ(read_model_chat_template(std::string(LOWBIT_SHARED_DIR) + "/models/tinystories-656K"), "");
}

std::string assemble(TextAssembler& ta, const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) out += ta.push(id);
  return out + ta.finish();
}

TEST(TextAssembler, HoldsIncompleteUtf8Characters) {
  const Tokenizer& tok = stories_tokenizer();
  const int32_t e2 = tok.piece_to_id("<0xE2>"), x82 = tok.piece_to_id("<0x82>"),
                xac = tok.piece_to_id("<0xAC>");
  ASSERT_GE(e2, 0);
  ASSERT_GE(x82, 0);
  ASSERT_GE(xac, 0);
  TextAssembler ta(tok, {}, {tok.bos_id()});
  EXPECT_EQ(ta.push(e2), "");
  EXPECT_EQ(ta.push(x82), "");
  EXPECT_EQ(ta.push(xac), "\xE2\x82\xAC");  // the euro sign, whole
  TextAssembler cut(tok, {}, {tok.bos_id()});
  EXPECT_EQ(cut.push(e2), "");
  EXPECT_EQ(cut.finish(), "\xEF\xBF\xBD");  // generation ended mid-character: U+FFFD, still valid UTF-8
}

TEST(TextAssembler, StopStringsAcrossTokens) {
  const Tokenizer& tok = stories_tokenizer();
  const auto ids = tok.encode("Once upon a time, there was a cat", false);
  TextAssembler plain(tok, {}, {tok.bos_id()});
  EXPECT_EQ(assemble(plain, ids), "Once upon a time, there was a cat");
  TextAssembler ta(tok, {"e, th", "cat"}, {tok.bos_id()});
  std::string out;
  size_t used = 0;
  for (int32_t id : ids) {
    out += ta.push(id);
    ++used;
    if (ta.stopped()) break;
  }
  EXPECT_TRUE(ta.stopped());
  EXPECT_EQ(out, "Once upon a tim");  // the earliest stop string wins; its text is cut
  EXPECT_LT(used, ids.size());
  EXPECT_EQ(ta.finish(), "");
  TextAssembler never(tok, {"upon a dog"}, {tok.bos_id()});  // a partial match is released once it fails
  EXPECT_EQ(assemble(never, ids), "Once upon a time, there was a cat");
}

TEST(TextAssembler, ContinuationKeepsItsLeadingSpace) {
  const Tokenizer& tok = stories_tokenizer();
  const auto prompt = tok.encode("Once", true);
  const auto next = tok.encode("Once upon", true);
  ASSERT_GT(next.size(), prompt.size());
  TextAssembler after_text(tok, {}, prompt);
  EXPECT_EQ(assemble(after_text, {next.begin() + prompt.size(), next.end()}), " upon");
  TextAssembler after_bos(tok, {}, {tok.bos_id()});
  EXPECT_EQ(assemble(after_bos, {next.begin() + 1, next.end()}), "Once upon");
}

ApiContext context() {
  ApiContext c;
  c.tok = &stories_tokenizer();
  c.max_model_len = 512;
  c.served_name = "m";
  return c;
}

int status_of(const json& body, bool chat = false) {
  try {
    chat ? parse_chat_request(body, context()) : parse_completion_request(body, context());
  } catch (const ApiError& e) {
    return e.status;
  }
  return 200;
}

TEST(OpenAiApi, ParsesFieldsAndDefaults) {
  const GenRequest g = parse_completion_request({{"model", "m"},
                                                 {"prompt", "Once"},
                                                 {"temperature", 0.5},
                                                 {"top_k", -1},
                                                 {"seed", 9},
                                                 {"stop", "x"},
                                                 {"logprobs", 2},
                                                 {"presence_penalty", 0.5},
                                                 {"unknown_field", {1, 2}},
                                                 {"user", "u"}},
                                                context());
  EXPECT_EQ(g.engine.max_tokens, 16);  // OpenAI's completions default
  EXPECT_EQ(g.n, 1);
  EXPECT_TRUE(g.engine.logit_bias.empty());
  const auto lb =
      parse_completion_request({{"prompt", "Once"}, {"logit_bias", {{"5", -100}, {"7", 2.5}}}}, context())
          .engine.logit_bias;
  EXPECT_EQ(lb, (std::vector<std::pair<int32_t, float>>{{5, -100.0f}, {7, 2.5f}}));
  EXPECT_EQ(parse_completion_request({{"prompt", "Once"}, {"n", 3}}, context()).n, 3);
  EXPECT_FLOAT_EQ(g.engine.sampler.temperature, 0.5f);
  EXPECT_EQ(g.engine.sampler.top_k, 0);
  EXPECT_EQ(g.engine.sampler.seed, 9u);
  EXPECT_EQ(g.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(g.engine.top_logprobs, 2);
  EXPECT_FLOAT_EQ(g.engine.presence_penalty, 0.5f);
  EXPECT_EQ(g.engine.prompt, stories_tokenizer().encode("Once", true));
  const GenRequest c = parse_chat_request(
      {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_completion_tokens", 7}}, context());
  EXPECT_EQ(c.engine.max_tokens, 7);
  const GenRequest d = parse_chat_request({{"messages", {{{"role", "user"}, {"content", "hi"}}}}}, context());
  EXPECT_EQ(d.engine.max_tokens, 512 - static_cast<int>(d.engine.prompt.size()));  // chat: up to the context
  EXPECT_EQ(d.engine.top_logprobs, -1);
}

TEST(OpenAiApi, RefusesWithStatusCodes) {
  EXPECT_EQ(status_of({{"prompt", "a"}}), 200);
  EXPECT_EQ(status_of({{"prompt", "a"}, {"model", "other"}}), 404);
  EXPECT_EQ(status_of({{"prompt", "a"}, {"n", 0}}), 400);
  EXPECT_EQ(status_of({{"prompt", "a"}, {"n", lowbit::serve::kMaxChoices + 1}}), 400);
  EXPECT_EQ(status_of({{"prompt", "a"}, {"n", 1.5}}), 400);
  EXPECT_EQ(status_of({{"prompt", "a"}, {"n", 1}}), 200);
  EXPECT_EQ(status_of({{"prompt", "a"}, {"n", lowbit::serve::kMaxChoices}}), 200);
  EXPECT_EQ(status_of({{"prompt", "a"}, {"max_tokens", 511}}), 400);  // 2 prompt tokens + 511 > 512
  EXPECT_EQ(status_of({{"prompt", "a"}, {"max_tokens", 510}}), 200);
  EXPECT_EQ(status_of({{"prompt", "a"}, {"max_tokens", 16.0}}), 200);  // an integral float
  EXPECT_EQ(status_of({{"prompt", "a"}, {"max_tokens", 16.5}}), 400);
  EXPECT_EQ(status_of({{"prompt", "a"}, {"max_tokens", 18446744073709551615ull}}), 400);
  EXPECT_EQ(status_of({{"prompt", json::array()}}), 400);
  EXPECT_EQ(status_of({{"prompt", {{1, 2}}}}), 200);  // one list of ids in a list
  EXPECT_EQ(status_of({{"prompt", "a"}, {"stop", json::array({1})}}), 400);
  EXPECT_EQ(status_of({{"prompt", "a"}, {"stop", json(std::vector<std::string>(17, "x"))}}), 400);
  EXPECT_EQ(status_of({{"prompt", "a"}, {"min_p", 1.5}}), 400);
  EXPECT_EQ(status_of({{"prompt", "a"}, {"frequency_penalty", 3}}), 400);
  EXPECT_EQ(status_of({{"prompt", "a"}, {"stream_options", 1}}), 400);
  EXPECT_EQ(status_of({{"prompt", "a"}, {"suffix", "x"}}), 400);
  // logit_bias: {"token id": bias in [-100, 100]} over the vocabulary (512 tokens here).
  EXPECT_EQ(status_of({{"prompt", "a"}, {"logit_bias", {{"5", -100}, {"511", 100}, {"7", 0.5}}}}), 200);
  EXPECT_EQ(status_of({{"prompt", "a"}, {"logit_bias", nullptr}}), 200);
  for (const json& b : {json{{"512", 1}}, json{{"-1", 1}}, json{{"x", 1}}, json{{"", 1}}, json{{"5", 101}},
                        json{{"5", "big"}}, json{{"5", -100.5}}, json::array({1}), json{{"05", 1}, {"5", 2}},
                        json{{"99999999999999999999", 1}}})
    EXPECT_EQ(status_of({{"prompt", "a"}, {"logit_bias", b}}), 400) << b;
  // Output constraints are refused, not ignored.
  EXPECT_EQ(status_of({{"prompt", "a"}, {"response_format", {{"type", "text"}}}}), 200);
  EXPECT_EQ(status_of({{"prompt", "a"}, {"response_format", {{"type", "json_object"}}}}), 400);
  EXPECT_EQ(status_of({{"prompt", "a"}, {"response_format", "json"}}), 400);
  const json user = {{{"role", "user"}, {"content", "x"}}};
  const json tools = json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}});
  EXPECT_EQ(status_of({{"messages", user}, {"tools", tools}}, true), 400);
  EXPECT_EQ(status_of({{"messages", user}, {"tools", tools}, {"tool_choice", "auto"}}, true), 400);
  EXPECT_EQ(status_of({{"messages", user}, {"tools", tools}, {"tool_choice", "none"}}, true), 200);
  EXPECT_EQ(status_of({{"messages", user}, {"tools", json::array()}}, true), 200);
  EXPECT_EQ(status_of({{"messages", {{{"role", "user"}}}}}, true), 200);  // content may be absent (null)
  EXPECT_EQ(status_of({{"messages", {{{"content", "x"}}}}}, true), 400);
  EXPECT_EQ(status_of({{"messages", "hi"}}, true), 400);
  EXPECT_EQ(
      status_of(
          {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"logprobs", true}, {"top_logprobs", 21}},
          true),
      400);
  try {
    parse_body("{\"a\": \"\xff\"}");
    FAIL() << "invalid UTF-8 accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
  }
  EXPECT_THROW(parse_body("[]"), ApiError);
  EXPECT_THROW(parse_body(std::string(100, '{')), ApiError);
  EXPECT_NO_THROW(
      parse_body("{\"s\": \"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"}"));
}

TEST(OpenAiApi, ErrorJsonShape) {
  const json e = error_json(429, "slow down", "", "queue_full");
  EXPECT_EQ(e["error"]["message"], "slow down");
  EXPECT_EQ(e["error"]["type"], "rate_limit_error");
  EXPECT_TRUE(e["error"]["param"].is_null());
  EXPECT_EQ(e["error"]["code"], "queue_full");
}

TEST(Metrics, HistogramIsCumulative) {
  Histogram h({0.001, 0.01});
  h.observe(0.003);
  h.observe(0.5);
  h.observe(0.0005);
  std::string out;
  h.render(out, "x_seconds", "help");
  EXPECT_NE(out.find("x_seconds_bucket{le=\"0.001\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_bucket{le=\"0.01\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_count 3\n"), std::string::npos) << out;
  EXPECT_EQ(h.count(), 3u);
}

}  // namespace
