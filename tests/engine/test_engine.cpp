// The serving engine on the real tiny models: a request's greedy output equals generate()'s (lowbit run), and
// stays identical alone or among 15 others (mixed prompt lengths, arrivals mid-decode) for F16 and quantized
// KV, under preemption (a KV budget too small for everyone) and with prefix reuse; cancellation frees pages;
// the queue bound, prompt bounds, logprobs and the background thread's shutdown.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "engine/engine.h"
#include "kernels/dispatch.h"
#include "kv/kv_formats.h"
#include "kv/kv_paged.h"
#include "model/generate.h"
#include "model/model.h"
#include "quant/quantizer.h"
#include "quant/recipe.h"
#include "tokenizer/tokenizer.h"

using namespace lowbit;

namespace {
const std::string kShared = LOWBIT_SHARED_DIR;
const std::string kStories = kShared + "/models/stories260K/stories260K.bin";
const std::string kKjv = kShared + "/models/kjv-brown-6M/model.bin";

const Model& stories() {
  static std::unique_ptr<Model> m = load_model(kStories);
  return *m;
}
const Model& kjv() {
  static std::unique_ptr<Model> m = load_model(kKjv);
  return *m;
}

std::vector<int32_t> drain(Request& r, std::string* reason = nullptr) {
  std::vector<int32_t> out;
  TokenEvent e;
  while (r.next(&e, 60)) {
    if (e.token >= 0) out.push_back(e.token);
    if (e.done) {
      if (reason) *reason = e.finish_reason;
      break;
    }
  }
  return out;
}

std::vector<int32_t> prompt_of(const Model& m, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(3, static_cast<int32_t>(m.config.vocab_size - 1));
  std::vector<int32_t> p{m.config.bos_id};
  while (static_cast<int>(p.size()) < n) p.push_back(tok(rng));
  return p;
}

RequestOptions greedy(std::vector<int32_t> prompt, int n) {
  RequestOptions r;
  r.prompt = std::move(prompt);
  r.max_tokens = n;
  r.stop_at_eos = false;
  return r;
}

// Steps until the engine has nothing left to do.
void run_to_idle(Engine& e) {
  while (e.step()) {
  }
}

// Output of one request running alone on a fresh engine.
std::vector<int32_t> alone(const Model& m, const EngineOptions& eo, const RequestOptions& r) {
  Engine e(m, eo);
  auto req = e.submit(r);
  run_to_idle(e);
  return drain(*req);
}

// 16 requests of mixed prompt lengths; half arrive while the first half decode. Every output must equal the
// request's output alone.
void expect_batch_invariant(const Model& m, EngineOptions eo, int gen) {
  std::vector<RequestOptions> rs;
  for (int i = 0; i < 16; ++i) rs.push_back(greedy(prompt_of(m, 3 + (i * 37) % 90, 100 + i), gen));
  std::vector<std::vector<int32_t>> want;
  for (const auto& r : rs) want.push_back(alone(m, eo, r));
  Engine e(m, eo);
  std::vector<std::shared_ptr<Request>> reqs;
  for (int i = 0; i < 8; ++i) reqs.push_back(e.submit(rs[i]));
  for (int s = 0; s < 5; ++s) e.step();
  for (int i = 8; i < 16; ++i) {
    reqs.push_back(e.submit(rs[i]));
    e.step();
  }
  run_to_idle(e);
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(drain(*reqs[i]), want[i]) << "request " << i << " kv " << eo.kv.describe();
  const EngineStats st = e.stats();
  EXPECT_EQ(st.requests_finished, 16);
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.waiting, 0);
}
}  // namespace

TEST(Engine, GreedyEqualsGenerate) {
  const Model& m = stories();
  const auto prompt = m.tokenizer->encode("Once upon a time, there was a little girl", true);
  GenerateOptions go;
  go.max_new_tokens = 40;
  go.stop_at_eos = false;
  const auto want = generate(m, prompt, go, nullptr, nullptr);
  EngineOptions eo;
  eo.max_num_seqs = 4;
  EXPECT_EQ(alone(m, eo, greedy(prompt, 40)), want);
  eo.prefill_chunk = 4;  // a prompt fed in chunks gives the same tokens
  EXPECT_EQ(alone(m, eo, greedy(prompt, 40)), want);
}

TEST(Engine, BatchInvariantF16) {
  EngineOptions eo;
  eo.kv = parse_kv_spec("f16");
  eo.prefill_chunk = 32;
  expect_batch_invariant(stories(), eo, 24);
}

TEST(Engine, BatchInvariantQuantizedKv) {
  EngineOptions eo;
  eo.kv = parse_kv_spec("e4m3");
  eo.prefill_chunk = 32;
  expect_batch_invariant(stories(), eo, 24);
  eo.kv = parse_kv_spec("int4");
  expect_batch_invariant(kjv(), eo, 16);
}

TEST(Engine, PreemptionUnderASmallBudgetKeepsOutputs) {
  const Model& m = stories();
  EngineOptions eo;
  eo.max_num_seqs = 8;
  eo.prefill_chunk = 16;
  eo.kv = parse_kv_spec("f16");
  std::vector<RequestOptions> rs;
  for (int i = 0; i < 8; ++i) rs.push_back(greedy(prompt_of(m, 20 + 5 * i, 7 + i), 40));
  std::vector<std::vector<int32_t>> want;
  for (const auto& r : rs) want.push_back(alone(m, eo, r));
  // 8 sequences of up to 95 tokens need ~48 pages of 16; give 20.
  eo.kv.budget_tokens = 20 * 16;
  Engine e(m, eo);
  std::vector<std::shared_ptr<Request>> reqs;
  for (const auto& r : rs) reqs.push_back(e.submit(r));
  run_to_idle(e);
  const EngineStats st = e.stats();
  EXPECT_GT(st.preemptions_total, 0);
  int preempted = 0;
  for (int i = 0; i < 8; ++i) {
    std::string reason;
    EXPECT_EQ(drain(*reqs[i], &reason), want[i]) << "request " << i;
    EXPECT_EQ(reason, "length");
    preempted += reqs[i]->times().preemptions > 0;
  }
  EXPECT_GT(preempted, 0);
  EXPECT_EQ(st.requests_finished, 8);
}

TEST(Engine, BudgetTooSmallForOneSequenceFailsThatRequestOnly) {
  const Model& m = stories();
  EngineOptions eo;
  eo.max_num_seqs = 2;
  eo.kv = parse_kv_spec("f16");
  eo.kv.budget_tokens = 32;  // 2 pages
  Engine e(m, eo);
  auto big = e.submit(greedy(prompt_of(m, 20, 1), 60));
  auto small = e.submit(greedy(prompt_of(m, 4, 2), 8));
  run_to_idle(e);
  std::string rb, rsm;
  drain(*big, &rb);
  EXPECT_EQ(drain(*small, &rsm).size(), 8u);
  EXPECT_EQ(rb, "error");
  EXPECT_EQ(rsm, "length");
}

TEST(Engine, PrefixReuseHitsAndKeepsOutputs) {
  const Model& m = stories();
  EngineOptions eo;
  eo.max_num_seqs = 2;
  eo.prefill_chunk = 16;
  eo.kv = parse_kv_spec("f16");
  const auto system = prompt_of(m, 50, 99);
  auto with_tail = [&](int n, uint64_t seed) {
    auto p = system;
    auto t = prompt_of(m, n, seed);
    p.insert(p.end(), t.begin() + 1, t.end());
    return greedy(p, 12);
  };
  const auto a = with_tail(10, 1), b = with_tail(7, 2);
  const auto want_b = alone(m, eo, b);
  Engine e(m, eo);
  auto ra = e.submit(a);
  run_to_idle(e);
  drain(*ra);
  auto rb = e.submit(b);
  run_to_idle(e);
  EXPECT_EQ(drain(*rb), want_b);
  EXPECT_EQ(rb->times().cached_tokens, 48);  // 3 whole chunks of the 50 shared tokens
  EXPECT_EQ(e.stats().prefix_hits, 1);
  EXPECT_EQ(e.stats().prefix_tokens_reused, 48);
  // From a running sequence: its prompt chunks are copied (bytes and dynamic FP8 scales) into the new slot.
  for (const char* kv : {"f16", "e4m3", "int8", "int4:pertoken"}) {
    eo.kv = parse_kv_spec(kv);
    const auto want = alone(m, eo, b);
    Engine run(m, eo);
    auto first = run.submit(with_tail(10, 1));
    for (int i = 0; i < 6; ++i) run.step();  // a is decoding
    auto second = run.submit(b);
    run_to_idle(run);
    EXPECT_EQ(drain(*second), want) << kv;
    EXPECT_EQ(second->times().cached_tokens, 48) << kv;
    EXPECT_EQ(run.stats().prefix_hits, 1) << kv;
    EXPECT_EQ(drain(*first).size(), 12u);
  }
  // With eviction the cache is not a function of the prefix: no reuse.
  eo.kv = parse_kv_spec("f16", "", "", "streaming:4+64");
  Engine ev(m, eo);
  auto r1 = ev.submit(a);
  run_to_idle(ev);
  auto r2 = ev.submit(b);
  run_to_idle(ev);
  EXPECT_EQ(ev.stats().prefix_hits, 0);
  EXPECT_EQ(r2->times().cached_tokens, 0);
}

TEST(Engine, CancelFreesPagesAtTheNextStep) {
  const Model& m = stories();
  EngineOptions eo;
  eo.max_num_seqs = 2;
  eo.prefix_cache = false;
  eo.kv = parse_kv_spec("int8");
  Engine e(m, eo);
  const int64_t total = e.stats().kv_pages_total;
  auto r = e.submit(greedy(prompt_of(m, 40, 3), 200));
  for (int i = 0; i < 5; ++i) e.step();
  EXPECT_LT(e.stats().kv_pages_free, total);
  r->cancel();
  e.step();
  EXPECT_EQ(e.stats().kv_pages_free, total);
  std::string reason;
  drain(*r, &reason);
  EXPECT_EQ(reason, "abort");
  EXPECT_EQ(e.stats().requests_aborted, 1);
  EXPECT_FALSE(e.step());
}

TEST(Engine, RefusesBadRequestsAndBoundsTheQueue) {
  const Model& m = stories();
  EngineOptions eo;
  eo.max_num_seqs = 1;
  eo.max_queue = 2;
  eo.max_model_len = 64;
  Engine e(m, eo);
  EXPECT_THROW(e.submit(greedy({}, 4)), UsageError);
  EXPECT_THROW(e.submit(greedy(prompt_of(m, 64, 1), 4)), UsageError);
  EXPECT_THROW(e.submit(greedy({1, static_cast<int32_t>(m.config.vocab_size)}, 4)), UsageError);
  EXPECT_THROW(e.submit(greedy({1, 2}, 0)), UsageError);
  auto bad_t = greedy({1, 2}, 4);
  bad_t.sampler.temperature = -1;
  EXPECT_THROW(e.submit(bad_t), UsageError);
  e.submit(greedy({1, 2}, 4));
  e.submit(greedy({1, 3}, 4));
  EXPECT_THROW(e.submit(greedy({1, 4}, 4)), QueueFull);
  // The length limit ends generation at max_model_len.
  run_to_idle(e);
  auto r = e.submit(greedy(prompt_of(m, 60, 5), 100));
  run_to_idle(e);
  std::string reason;
  EXPECT_EQ(drain(*r, &reason).size(), 4u);
  EXPECT_EQ(reason, "length");
  EXPECT_THROW(Engine(m,
                      [] {
                        EngineOptions o;
                        o.max_model_len = 100000;
                        return o;
                      }()),
               UsageError);
}

// logit_bias moves only the sampled token, not the reported logprobs: -100 on the greedy token makes the
// next-best one win, +100 on a token makes every generated token that one; bad entries are refused.
TEST(Engine, LogitBiasMovesTheSampledToken) {
  const Model& m = stories();
  EngineOptions eo;
  eo.max_model_len = 64;
  auto r = greedy(prompt_of(m, 8, 3), 6);
  r.top_logprobs = 2;
  r.stop_at_eos = false;
  auto first_event = [&](const RequestOptions& o) {
    Engine e(m, eo);
    auto req = e.submit(o);
    run_to_idle(e);
    TokenEvent ev;
    EXPECT_TRUE(req->next(&ev, 10));
    return ev;
  };
  const TokenEvent plain = first_event(r);
  ASSERT_EQ(plain.top.size(), 2u);
  auto banned = r;
  banned.logit_bias = {{plain.token, -100.0f}};
  const TokenEvent b = first_event(banned);
  EXPECT_EQ(b.token, plain.top[1].token);                   // the runner-up
  EXPECT_FLOAT_EQ(b.top[0].logprob, plain.top[0].logprob);  // logprobs are the model's
  auto forced = r;
  const int32_t k = 100;
  forced.logit_bias = {{k, 100.0f}};
  EXPECT_EQ(alone(m, eo, forced), std::vector<int32_t>(6, k));
  Engine e(m, eo);
  for (const auto& bias : std::vector<std::vector<std::pair<int32_t, float>>>{
           {{-1, 1.0f}},
           {{static_cast<int32_t>(m.config.vocab_size), 1.0f}},
           {{5, 101.0f}},
           {{5, std::nanf("")}},
           {{5, 1.0f}, {5, 2.0f}}}) {
    auto bad = r;
    bad.logit_bias = bias;
    EXPECT_THROW(e.submit(bad), UsageError);
  }
}

TEST(Engine, LogprobsAreNormalisedAndSeededSamplingReproduces) {
  const Model& m = stories();
  EngineOptions eo;
  Engine e(m, eo);
  auto r = greedy(prompt_of(m, 10, 4), 6);
  r.top_logprobs = 5;
  auto req = e.submit(r);
  run_to_idle(e);
  TokenEvent ev;
  int n = 0;
  while (req->next(&ev, 10)) {
    ASSERT_EQ(ev.top.size(), 5u);
    EXPECT_EQ(ev.top[0].token, ev.token);  // greedy picks the most likely token
    EXPECT_FLOAT_EQ(ev.top[0].logprob, ev.logprob);
    double p = 0;
    for (const auto& t : ev.top) p += std::exp(t.logprob);
    EXPECT_LE(p, 1.0 + 1e-5);
    EXPECT_LE(ev.logprob, 0.0f);
    ++n;
    if (ev.done) break;
  }
  EXPECT_EQ(n, 6);
  auto sampled = greedy(prompt_of(m, 10, 4), 30);
  sampled.sampler.temperature = 1.0f;
  sampled.sampler.seed = 1234;
  sampled.presence_penalty = 0.5f;
  const auto a = alone(m, eo, sampled), b = alone(m, eo, sampled);
  EXPECT_EQ(a, b);
  sampled.sampler.seed = 1235;
  EXPECT_NE(alone(m, eo, sampled), a);
}

TEST(Engine, BackgroundThreadServesAndStopsWithinTheDeadline) {
  const Model& m = stories();
  EngineOptions eo;
  eo.max_num_seqs = 4;
  Engine e(m, eo);
  e.start();
  std::vector<std::shared_ptr<Request>> reqs;
  for (int i = 0; i < 6; ++i) reqs.push_back(e.submit(greedy(prompt_of(m, 8 + i, i), 16)));
  for (auto& r : reqs) EXPECT_EQ(drain(*r).size(), 16u);
  auto endless = e.submit(greedy(prompt_of(m, 8, 9), 100000));
  e.stop(0.05);
  std::string reason;
  drain(*endless, &reason);
  EXPECT_TRUE(reason == "abort" || reason == "length") << reason;
  EXPECT_THROW(e.submit(greedy({1, 2}, 2)), Error);
}

// Quantized weights switch kernels with the token count (row kernels below kPrefillTokens, tiles from there),
// so a decode token batched with others runs another kernel than alone. The GGUF block types use the same Q8
// activation blocks and block order in both, and their greedy tokens agree. (W4A16's nib16 / bf16tile and
// W8A8's vnni / vnnitile round in another order; `lowbit eval batch` reports that difference, docs/serve.md.)
// On the AVX2 tier the integer-activation kernels (i8dot / i8dot16) form the same sums in the same order
// alone and batched, so W8A8 and W4A8 are checked there too.
TEST(Engine, BatchInvariantQuantizedWeights) {
  std::vector<const char*> recipes = {"q4_0", "q8_0"};
  if (kernel_isa() == Isa::Avx2) recipes.insert(recipes.end(), {"W8A8", "W4A16,group=32,act=int8"});
  for (const char* recipe : recipes) {
    auto m = load_model(kKjv);
    quant::quantize_model(*m, quant::parse_recipe_arg(recipe));
    EngineOptions eo;
    eo.prefill_chunk = 32;
    SCOPED_TRACE(recipe);
    expect_batch_invariant(*m, eo, 16);
  }
}

// NaN logits in one sequence (an embedding row poisoned with NaN) end that request with an error; the others
// in the same batches keep their exact outputs and the engine keeps serving.
TEST(Engine, ANanSequenceFailsAloneAndTheOthersContinue) {
  LoadOptions lo;
  lo.dense = DenseMode::F16;  // an owned, writable copy of the weights
  auto m = load_model(kStories, lo);
  // The embedding table doubles as the output head here (tied): give the head its own intact copy first.
  std::vector<uint8_t> head(
      m->weights.tok_embed.data,
      m->weights.tok_embed.data + m->weights.tok_embed.rows * m->weights.tok_embed.row_bytes());
  auto head_owner = std::make_shared<std::vector<uint8_t>>(std::move(head));
  if (m->weights.tied()) {
    m->weights.lm_head = m->weights.tok_embed;
    m->weights.lm_head.data = head_owner->data();
    m->weights.lm_head.owner = head_owner;
  }
  const int32_t poison = 300;
  auto* row = const_cast<uint8_t*>(m->weights.tok_embed.data) + poison * m->weights.tok_embed.row_bytes();
  for (size_t i = 0; i < m->weights.tok_embed.row_bytes(); i += 2)
    row[i] = 0x00, row[i + 1] = 0x7E;  // f16 NaN
  EngineOptions eo;
  eo.max_num_seqs = 4;
  const auto a = greedy(prompt_of(*m, 12, 1), 10), c = greedy(prompt_of(*m, 9, 3), 10);
  auto b = greedy(prompt_of(*m, 10, 2), 10);
  b.prompt[5] = poison;
  const auto want_a = alone(*m, eo, a), want_c = alone(*m, eo, c);
  Engine e(*m, eo);
  auto ra = e.submit(a), rb = e.submit(b), rc = e.submit(c);
  run_to_idle(e);
  std::string reason;
  TokenEvent ev;
  ASSERT_TRUE(rb->next(&ev, 10));
  EXPECT_TRUE(ev.done);
  EXPECT_EQ(ev.finish_reason, "error");
  EXPECT_NE(ev.error.find("NaN"), std::string::npos) << ev.error;
  EXPECT_EQ(drain(*ra), want_a);
  EXPECT_EQ(drain(*rc), want_c);
  EXPECT_EQ(want_a.size(), 10u);
  EXPECT_EQ(e.stats().requests_failed, 1);
  auto again = e.submit(a);
  run_to_idle(e);
  EXPECT_EQ(drain(*again), want_a);
}
