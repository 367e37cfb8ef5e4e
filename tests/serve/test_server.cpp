// `lowbit serve` end to end on the real stories260K model: the binary runs as a child process (--port 0) and
// the tests talk HTTP to it. Greedy completions equal `lowbit run`, streamed text equals non-streamed text,
// usage, stop strings, max_tokens, seeds, tokenize round trips, metrics, and every abuse case answered with
// its status code while the server keeps serving.
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <set>
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

const char* kModelName = "stories260K.bin";

class Server : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    try {
      server_ = new ServerProcess({"-m", stories_model(), "--max-body", "65536"});
    } catch (const std::exception& e) {
      start_error_ = e.what();
    }
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(server_, nullptr) << start_error_; }
  const ServerProcess& s() const { return *server_; }

  json complete(json body, int want_status = 200) {
    body["model"] = kModelName;
    const Reply r = post(s(), "/v1/completions", body);
    EXPECT_EQ(r.status, want_status) << r.body;
    return r.status > 0 ? r.json() : json();
  }
  // A streamed request: the parsed chunks (without [DONE]); `done` tells whether [DONE] ended the stream.
  std::vector<json> stream(const std::string& path, json body, bool* done) {
    body["model"] = kModelName;
    body["stream"] = true;
    const Reply r = post(s(), path, body);
    EXPECT_EQ(r.status, 200) << r.body;
    std::vector<json> out;
    *done = false;
    for (const auto& e : sse_events(r.body)) {
      if (e == "[DONE]") {
        *done = true;
        continue;
      }
      EXPECT_FALSE(*done) << "data after [DONE]";
      out.push_back(json::parse(e));
    }
    return out;
  }
  int status_of(const std::string& path, const std::string& body) { return post(s(), path, body).status; }

  static ServerProcess* server_;
  static std::string start_error_;
};
ServerProcess* Server::server_ = nullptr;
std::string Server::start_error_;

json run_json(const std::string& prompt, int n) {
  const auto r = lowbit::testing_cli::run_cli("run --json -m " + stories_model() + " -p '" + prompt +
                                              "' -n " + std::to_string(n));
  EXPECT_EQ(r.rc, 0) << r.out;
  return json::parse(r.out);
}

TEST_F(Server, GreedyCompletionEqualsLowbitRun) {
  const json run = run_json("Once upon a time", 24);
  const json c = complete({{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0}});
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(c["model"], kModelName);
  EXPECT_EQ(c["choices"][0]["text"], run["text"]);
  EXPECT_EQ(c["usage"]["prompt_tokens"], run["prompt_ids"].size());
  EXPECT_EQ(c["usage"]["completion_tokens"], run["output_ids"].size());
  EXPECT_EQ(c["usage"]["total_tokens"], run["prompt_ids"].size() + run["output_ids"].size());
  EXPECT_EQ(c["choices"][0]["finish_reason"], run["stop_reason"] == "length" ? "length" : "stop");

  // A prompt whose continuation starts with a space: the completion continues the prompt's text, i.e. prompt
  // + text == the detokenized prompt + output ids, and `lowbit run` prints the same continuation.
  const json run2 = run_json("Once", 16);
  const json c2 = complete({{"prompt", "Once"}, {"max_tokens", 16}, {"temperature", 0}});
  EXPECT_EQ(c2["choices"][0]["text"], run2["text"]);
  EXPECT_EQ(run2["text"].get<std::string>().rfind(' ', 0), 0u) << run2["text"];
  json ids = run2["prompt_ids"];
  for (const auto& t : run2["output_ids"]) ids.push_back(t);
  const Reply d = post(s(), "/detokenize", json{{"tokens", ids}});
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_EQ("Once" + c2["choices"][0]["text"].get<std::string>(), d.json()["content"].get<std::string>());
}

TEST_F(Server, TokenIdPromptEqualsTextPrompt) {
  const Reply t = post(s(), "/tokenize", json{{"content", "Once upon a time"}});
  ASSERT_EQ(t.status, 200) << t.body;
  const json ids = t.json()["tokens"];
  const json a = complete({{"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 0}});
  const json b = complete({{"prompt", ids}, {"max_tokens", 12}, {"temperature", 0}});
  const json c =
      complete({{"prompt", json::array({"Once upon a time"})}, {"max_tokens", 12}, {"temperature", 0}});
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
  EXPECT_EQ(a["choices"][0]["text"], c["choices"][0]["text"]);
  EXPECT_EQ(b["usage"]["prompt_tokens"], ids.size());
}

TEST_F(Server, ChatCompletion) {
  const json msgs = json::array({{{"role", "system"}, {"content", "You tell stories."}},
                                 {{"role", "user"}, {"content", "Tell me about a cat."}}});
  const Reply r =
      post(s(), "/v1/chat/completions",
           json{{"model", kModelName}, {"messages", msgs}, {"max_tokens", 20}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json c = r.json();
  EXPECT_EQ(c["object"], "chat.completion");
  EXPECT_EQ(c["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(c["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(c["choices"][0]["message"]["content"].is_string());
  const std::string fr = c["choices"][0]["finish_reason"];
  EXPECT_TRUE(fr == "stop" || fr == "length") << fr;
  // The model has no chat template: the plain one renders "role: content" lines and "assistant:".
  const Reply t =
      post(s(), "/tokenize",
           json{{"content", "system: You tell stories.\nuser: Tell me about a cat.\nassistant:"}});
  EXPECT_EQ(c["usage"]["prompt_tokens"], t.json()["count"]);
  EXPECT_LE(c["usage"]["completion_tokens"].get<int>(), 20);
}

TEST_F(Server, StreamedTextEqualsNonStreamedText) {
  for (const std::string path : {"/v1/completions", "/v1/chat/completions"}) {
    const bool chat = path == "/v1/chat/completions";
    json body = {{"max_tokens", 40}, {"temperature", 0}};
    if (chat)
      body["messages"] = json::array({{{"role", "user"}, {"content", "Once upon a time"}}});
    else
      body["prompt"] = "Once upon a time there was";
    body["model"] = kModelName;
    const Reply whole = post(s(), path, body);
    ASSERT_EQ(whole.status, 200) << whole.body;
    const json w = whole.json();
    body["stream_options"] = {{"include_usage", true}};
    bool done = false;
    const auto chunks = stream(path, body, &done);
    EXPECT_TRUE(done) << path;
    ASSERT_GE(chunks.size(), 3u);
    std::string text, finish;
    for (size_t i = 0; i + 1 < chunks.size(); ++i) {
      const json& ch = chunks[i];
      EXPECT_EQ(ch["id"], chunks[0]["id"]);
      EXPECT_EQ(ch["object"], chat ? "chat.completion.chunk" : "text_completion");
      const json& c0 = ch["choices"][0];
      text += chat ? c0["delta"].value("content", "") : c0["text"].get<std::string>();
      if (!c0["finish_reason"].is_null()) finish = c0["finish_reason"];
    }
    if (chat) {
      EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    }
    const json& last = chunks.back();  // the usage chunk: no choices
    EXPECT_TRUE(last["choices"].empty());
    EXPECT_EQ(last["usage"], w["usage"]) << path;
    const json& want_text = chat ? w["choices"][0]["message"]["content"] : w["choices"][0]["text"];
    EXPECT_EQ(text, want_text.get<std::string>()) << path;
    EXPECT_EQ(finish, w["choices"][0]["finish_reason"].get<std::string>()) << path;
  }
}

TEST_F(Server, StopStringsCutTheTextAndEndTheRequest) {
  const json full = complete({{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}});
  const std::string text = full["choices"][0]["text"];
  // A stop string from the middle of the greedy text (spanning tokens is the interesting case).
  const std::string stop = text.substr(text.size() / 2, 4);
  const std::string want = text.substr(0, text.find(stop));
  for (const json& stops : {json(stop), json::array({"zzzz-never", stop})}) {
    const json c =
        complete({{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}, {"stop", stops}});
    EXPECT_EQ(c["choices"][0]["text"], want) << stop;
    EXPECT_EQ(c["choices"][0]["finish_reason"], "stop");
    EXPECT_LT(c["usage"]["completion_tokens"].get<int>(), 40);
    bool done = false;
    const auto chunks = stream(
        "/v1/completions",
        {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}, {"stop", stops}}, &done);
    std::string streamed, finish;
    for (const auto& ch : chunks) {
      streamed += ch["choices"][0]["text"].get<std::string>();
      if (!ch["choices"][0]["finish_reason"].is_null()) finish = ch["choices"][0]["finish_reason"];
    }
    EXPECT_TRUE(done);
    EXPECT_EQ(streamed, want);
    EXPECT_EQ(finish, "stop");
  }
}

TEST_F(Server, MaxTokensAndIgnoreEos) {
  const json c = complete({{"prompt", "Once upon a time"}, {"max_tokens", 5}, {"temperature", 0}});
  EXPECT_EQ(c["usage"]["completion_tokens"], 5);
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
  const json long_run = complete(
      {{"prompt", "Once upon a time"}, {"max_tokens", 300}, {"temperature", 0}, {"ignore_eos", true}});
  EXPECT_EQ(long_run["usage"]["completion_tokens"], 300);
  EXPECT_EQ(long_run["choices"][0]["finish_reason"], "length");
}

TEST_F(Server, SeedsReproduce) {
  auto sample = [&](int seed) {
    return complete({{"prompt", "Once upon a time"},
                     {"max_tokens", 32},
                     {"temperature", 0.9},
                     {"top_p", 0.95},
                     {"seed", seed},
                     {"ignore_eos", true}})["choices"][0]["text"]
        .get<std::string>();
  };
  const std::string a = sample(7);
  EXPECT_EQ(a, sample(7));
  std::set<std::string> others;
  for (int seed : {1, 2, 3}) others.insert(sample(seed));
  others.insert(a);
  EXPECT_GT(others.size(), 1u) << "different seeds never changed the text";
}

// n choices: choice i is the request that n = 1 with seed + i answers (seeded sampling reproduces), streamed
// or not, on both endpoints; usage counts the prompt once and every choice's tokens.
TEST_F(Server, ChoicesAreTheSeededSingleRequests) {
  for (const std::string path : {"/v1/completions", "/v1/chat/completions"}) {
    const bool chat = path == "/v1/chat/completions";
    json body = {{"model", kModelName}, {"max_tokens", 24},   {"temperature", 0.9},
                 {"top_p", 0.95},       {"ignore_eos", true}, {"seed", 11}};
    if (chat)
      body["messages"] = json::array({{{"role", "user"}, {"content", "Once upon a time"}}});
    else
      body["prompt"] = "Once upon a time";
    auto text_of = [&](const json& choice) {
      return (chat ? choice["message"]["content"] : choice["text"]).get<std::string>();
    };
    std::vector<std::string> single;
    for (int i = 0; i < 3; ++i) {
      json one = body;
      one["seed"] = 11 + i;
      const Reply r = post(s(), path, one);
      ASSERT_EQ(r.status, 200) << r.body;
      single.push_back(text_of(r.json()["choices"][0]));
    }
    EXPECT_NE(single[0], single[1]) << "seeds 11 and 12 sampled the same text";
    body["n"] = 3;
    const Reply r = post(s(), path, body);
    ASSERT_EQ(r.status, 200) << r.body;
    const json w = r.json();
    ASSERT_EQ(w["choices"].size(), 3u) << r.body;
    int64_t prompt_tokens = 0;
    {
      json one = body;
      one["n"] = 1;
      prompt_tokens = post(s(), path, one).json()["usage"]["prompt_tokens"].get<int64_t>();
    }
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(w["choices"][i]["index"], i);
      EXPECT_EQ(text_of(w["choices"][i]), single[i]) << path << " choice " << i;
      EXPECT_EQ(w["choices"][i]["finish_reason"], "length");
    }
    EXPECT_EQ(w["usage"]["prompt_tokens"], prompt_tokens);
    EXPECT_EQ(w["usage"]["completion_tokens"], 3 * 24);
    EXPECT_EQ(w["usage"]["total_tokens"], prompt_tokens + 3 * 24);

    // Streamed: each chunk names its choice; the texts assembled by index are the same.
    body["stream_options"] = {{"include_usage", true}};
    bool done = false;
    const auto chunks = stream(path, body, &done);
    EXPECT_TRUE(done);
    std::vector<std::string> text(3);
    std::vector<int> finished(3, 0), roles(3, 0);
    for (size_t k = 0; k + 1 < chunks.size(); ++k) {
      ASSERT_EQ(chunks[k]["choices"].size(), 1u);
      const json& c0 = chunks[k]["choices"][0];
      const int i = c0["index"].get<int>();
      ASSERT_TRUE(i >= 0 && i < 3) << c0;
      text[i] += chat ? c0["delta"].value("content", "") : c0["text"].get<std::string>();
      if (chat && c0["delta"].contains("role")) ++roles[i];
      if (!c0["finish_reason"].is_null()) ++finished[i];
    }
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(text[i], single[i]) << path << " streamed choice " << i;
      EXPECT_EQ(finished[i], 1) << path << " choice " << i;
      if (chat) EXPECT_EQ(roles[i], 1) << path << " choice " << i;
    }
    EXPECT_TRUE(chunks.back()["choices"].empty());
    EXPECT_EQ(chunks.back()["usage"], w["usage"]);
  }
  // Greedy choices are all the greedy text.
  const json g = complete({{"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 0}, {"n", 2}});
  ASSERT_EQ(g["choices"].size(), 2u);
  EXPECT_EQ(g["choices"][0]["text"], g["choices"][1]["text"]);
}

TEST_F(Server, TokenizeDetokenizeRoundTrip) {
  for (const std::string text : {"Once upon a time, Lily saw a big dog.", "Hello\nworld  two spaces", "x"}) {
    const Reply t = post(s(), "/tokenize", json{{"content", text}});
    ASSERT_EQ(t.status, 200) << t.body;
    const json tok = t.json();
    EXPECT_EQ(tok["count"], tok["tokens"].size());
    EXPECT_EQ(tok["tokens"][0], 1) << "BOS first";
    const Reply d = post(s(), "/detokenize", json{{"tokens", tok["tokens"]}});
    ASSERT_EQ(d.status, 200) << d.body;
    EXPECT_EQ(d.json()["content"], text);
    const Reply p = post(s(), "/tokenize", json{{"prompt", text}, {"add_special", false}});
    EXPECT_EQ(p.json()["count"].get<size_t>(), tok["tokens"].size() - 1);
  }
  // Special-token text is the special token (as in a completion prompt), unless parse_special is false.
  const json sp = post(s(), "/tokenize", json{{"content", "Once</s>"}, {"add_special", false}}).json();
  EXPECT_EQ(sp["tokens"].back(), 2) << sp.dump();
  const json plain =
      post(s(), "/tokenize", json{{"content", "Once</s>"}, {"add_special", false}, {"parse_special", false}})
          .json();
  EXPECT_GT(plain["count"].get<size_t>(), sp["count"].get<size_t>());
  for (const auto& id : plain["tokens"]) EXPECT_NE(id, 2) << plain.dump();
  const json pieces =
      post(s(), "/tokenize", json{{"content", "Once upon</s>"}, {"with_pieces", true}}).json();
  ASSERT_EQ(pieces["tokens"].size(), pieces["count"].get<size_t>()) << pieces.dump();
  std::string joined;
  for (size_t i = 1; i + 1 < pieces["tokens"].size(); ++i)
    joined += pieces["tokens"][i]["piece"].get<std::string>();
  EXPECT_EQ(pieces["tokens"][0]["id"], 1);
  EXPECT_EQ(pieces["tokens"].back()["id"], 2);
  EXPECT_EQ(joined, " Once upon") << pieces.dump() << " (SentencePiece writes the leading space as a piece)";
  const json usage =
      post(s(), "/v1/completions", json{{"model", kModelName}, {"prompt", "Once</s>"}, {"max_tokens", 1}})
          .json()["usage"];
  EXPECT_EQ(usage["prompt_tokens"], sp["count"].get<int>() + 1) << "BOS + the special token parsed";
  EXPECT_EQ(post(s(), "/tokenize", json{{"content", "x"}, {"parse_special", 1}}).status, 400);
  EXPECT_EQ(post(s(), "/detokenize", json{{"tokens", {1, -1}}}).status, 400);
  EXPECT_EQ(post(s(), "/detokenize", json{{"tokens", {100000}}}).status, 400);
  EXPECT_EQ(post(s(), "/detokenize", json{{"tokens", "1 2"}}).status, 400);
  EXPECT_EQ(post(s(), "/tokenize", json{{"content", 5}}).status, 400);
}

TEST_F(Server, ModelsAndHealth) {
  const Reply m = get(s(), "/v1/models");
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(m.json()["data"][0]["id"], kModelName);
  EXPECT_EQ(m.json()["data"][0]["max_model_len"], 512);
  EXPECT_EQ(get(s(), "/health").status, 200);
}

TEST_F(Server, MetricsCountTheRequestsMade) {
  // Responses are counted after they are written: let earlier ones settle before each scrape.
  auto settle = [] { std::this_thread::sleep_for(std::chrono::milliseconds(100)); };
  settle();
  const std::string before = get(s(), "/metrics").body;
  int64_t prompt = 0, completion = 0;
  for (const auto& [p, n] :
       std::vector<std::pair<std::string, int>>{{"A cat sat", 7}, {"The dog ran far away", 9}}) {
    const json c = complete({{"prompt", p}, {"max_tokens", n}, {"ignore_eos", true}, {"temperature", 0}});
    prompt += c["usage"]["prompt_tokens"].get<int64_t>();
    completion += c["usage"]["completion_tokens"].get<int64_t>();
  }
  EXPECT_EQ(completion, 16);
  settle();
  const Reply after_r = get(s(), "/metrics");
  ASSERT_EQ(after_r.status, 200);
  const std::string& after = after_r.body;
  // A labelled counter appears with its first sample: absent before = 0.
  auto delta = [&](const std::string& m) { return metric(after, m) - std::max(0.0, metric(before, m)); };
  EXPECT_EQ(delta("lowbit_request_success_total{finish_reason=\"length\"}"), 2);
  EXPECT_EQ(delta("lowbit_generation_tokens_total"), 16);
  EXPECT_EQ(delta("lowbit_request_generation_tokens_total"), 16);
  EXPECT_EQ(delta("lowbit_request_prompt_tokens_total"), prompt);
  EXPECT_EQ(delta("lowbit_time_to_first_token_seconds_count"), 2);
  EXPECT_EQ(delta("lowbit_e2e_request_latency_seconds_count"), 2);
  EXPECT_EQ(delta("lowbit_inter_token_latency_seconds_count"), 14);
  EXPECT_EQ(delta("lowbit_engine_requests_total{outcome=\"finished\"}"), 2);
  EXPECT_EQ(delta("lowbit_http_responses_total{code=\"200\"}"),
            3);  // the two completions and the first scrape
  EXPECT_EQ(metric(after, "lowbit_requests_running"), 0);
  EXPECT_EQ(metric(after, "lowbit_requests_waiting"), 0);
  EXPECT_EQ(metric(after, "lowbit_kv_pages_used") + metric(after, "lowbit_kv_pages_free"),
            metric(after, "lowbit_kv_pages_total"));
  EXPECT_GT(metric(after, "lowbit_kv_pages_total"), 0);
  EXPECT_NE(after.find("# TYPE lowbit_time_to_first_token_seconds histogram"), std::string::npos);
  EXPECT_NE(after.find("lowbit_time_to_first_token_seconds_bucket{le=\"+Inf\"}"), std::string::npos);
}

TEST_F(Server, PrefixCacheHitsAreCounted) {
  // The engine reuses whole prefill chunks (256 tokens by default): a prompt of ~330 tokens, sent twice.
  std::string p;
  for (int i = 0; i < 22; ++i) p += "Lily had a big red ball and she liked to play with it in the park. ";
  const std::string before = get(s(), "/metrics").body;
  const json a = complete({{"prompt", p}, {"max_tokens", 4}, {"temperature", 0}});
  const json b = complete({{"prompt", p}, {"max_tokens", 4}, {"temperature", 0}});
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
  ASSERT_GT(a["usage"]["prompt_tokens"].get<int>(), 256);
  ASSERT_LT(a["usage"]["prompt_tokens"].get<int>(), 500);
  const std::string after = get(s(), "/metrics").body;
  EXPECT_GE(
      metric(after, "lowbit_prefix_cache_hits_total") - metric(before, "lowbit_prefix_cache_hits_total"), 1);
  EXPECT_GE(metric(after, "lowbit_prefix_cache_tokens_reused_total") -
                metric(before, "lowbit_prefix_cache_tokens_reused_total"),
            256);
}

TEST_F(Server, AbuseIsAnsweredWithStatusCodesAndTheServerKeepsServing) {
  const std::string c = "/v1/completions";
  struct Case {
    std::string path, body;
    int status;
  };
  std::string nested;
  for (int i = 0; i < 200; ++i) nested += "[";
  const std::vector<Case> cases = {
      {c, "{\"prompt\": \"a\",", 400},                             // malformed JSON
      {c, "[1, 2]", 400},                                          // not an object
      {c, "{\"prompt\": " + nested, 400},                          // nested past 64 levels
      {c, std::string("{\"prompt\": \"a\xff\xfe b\"}"), 400},      // invalid UTF-8
      {c, "{\"prompt\": \"a\", \"max_tokens\": -1}", 400},         // negative
      {c, "{\"prompt\": \"a\", \"max_tokens\": 0}", 400},          // zero
      {c, "{\"prompt\": \"a\", \"max_tokens\": 100000000}", 400},  // past the context
      {c, "{\"prompt\": \"a\", \"max_tokens\": 1e300}", 400},      // not an integer
      {c, "{\"prompt\": \"a\", \"max_tokens\": \"ten\"}", 400},    // wrong type
      {c, "{\"prompt\": \"a\", \"n\": 17}", 400},                  // more choices than kMaxChoices
      {c, "{\"prompt\": \"a\", \"n\": 0}", 400},                   //
      {c, "{\"prompt\": \"a\", \"echo\": true}", 400},             // refused feature
      {c, "{\"prompt\": [\"a\", \"b\"]}", 400},                    // two prompts
      {c, "{\"prompt\": [1, 99999]}", 400},                        // token id outside the vocabulary
      {c, "{\"prompt\": \"a\", \"temperature\": -1}", 400},        // out of range
      {c, "{\"prompt\": \"a\", \"top_p\": 0}", 400},               //
      {c, "{\"prompt\": \"a\", \"logprobs\": 50}", 400},           //
      {c, "{\"prompt\": \"a\", \"stop\": 5}", 400},                //
      {c, "{\"prompt\": \"a\", \"stream\": \"yes\"}", 400},        //
      {c, "{\"max_tokens\": 5}", 400},                             // no prompt
      {c, "{\"prompt\": \"a\", \"model\": \"gpt-4\"}", 404},       // another model
      {"/v1/chat/completions", "{\"messages\": []}", 400},         //
      {"/v1/chat/completions", "{\"messages\": [{\"role\": \"wizard\", \"content\": \"hi\"}]}", 400},
      {"/v1/chat/completions",
       "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {}}]}]}",
       400},
      {"/v1/chat/completions",
       "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"top_logprobs\": 2}",
       400},                       // top_logprobs without logprobs
      {"/v1/nothing", "{}", 404},  // unknown path
  };
  for (const auto& k : cases) {
    const Reply r = post(s(), k.path, k.body);
    EXPECT_EQ(r.status, k.status) << k.path << " " << k.body.substr(0, 80) << " -> " << r.body;
    if (r.status <= 0) continue;
    const json e = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(e.is_object() && e.contains("error")) << r.body;
    EXPECT_TRUE(e["error"]["message"].is_string() && !e["error"]["message"].get<std::string>().empty());
    EXPECT_TRUE(e["error"]["type"].is_string());
    EXPECT_TRUE(e["error"].contains("param") && e["error"].contains("code"));
  }
  // n out of range says what the range is.
  EXPECT_NE(post(s(), c, "{\"prompt\": \"a\", \"n\": 17}").body.find("'n' must be in [1, 16] (got 17)"),
            std::string::npos);
  // A prompt longer than the model's context (512 tokens).
  json ids = json::array();
  for (int i = 0; i < 600; ++i) ids.push_back(100);
  const Reply longp = post(s(), c, json{{"prompt", ids}});
  EXPECT_EQ(longp.status, 400);
  EXPECT_EQ(longp.json()["error"]["code"], "context_length_exceeded");
  // A body over --max-body (64 KiB here).
  const Reply big = post(s(), c, "{\"prompt\": \"" + std::string(70000, 'a') + "\"}");
  EXPECT_EQ(big.status, 413);
  // Unknown method on a known path, unknown GET path.
  EXPECT_EQ(get(s(), "/v1/completions").status, 404);
  EXPECT_EQ(get(s(), "/admin").status, 404);
  // Still serving.
  const json ok = complete({{"prompt", "Once"}, {"max_tokens", 3}});
  EXPECT_EQ(ok["usage"]["completion_tokens"], 3);
  EXPECT_EQ(get(s(), "/health").status, 200);
}

TEST_F(Server, LogprobsShapes) {
  const json c =
      complete({{"prompt", "Once upon a time"}, {"max_tokens", 4}, {"temperature", 0}, {"logprobs", 3}});
  const json& lp = c["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 4u);
  ASSERT_EQ(lp["token_logprobs"].size(), 4u);
  ASSERT_EQ(lp["top_logprobs"].size(), 4u);
  EXPECT_EQ(lp["text_offset"][0], 0);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_GE(lp["top_logprobs"][i].size(), 1u);  // 3 alternatives, fewer when their texts coincide
  }
  const Reply r = post(s(), "/v1/chat/completions",
                       json{{"model", kModelName},
                            {"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})},
                            {"max_tokens", 3},
                            {"logprobs", true},
                            {"top_logprobs", 2}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json chat = r.json();
  const json& content = chat["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u);
  EXPECT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_TRUE(content[0]["bytes"].is_array());
}

}  // namespace
