#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/parallel.h"
#include "kv/kv_paged.h"
#include "model/decoder.h"

namespace lowbit {

namespace {
double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

// ---- Request ----

bool Request::next(TokenEvent* e, double timeout_s) {
  std::unique_lock lk(mu_);
  if (events_.empty()) {
    if (delivered_done_) return false;
    cv_.wait_for(lk, std::chrono::duration<double>(std::max(0.0, timeout_s)),
                 [&] { return !events_.empty(); });
    if (events_.empty()) return false;
  }
  *e = std::move(events_.front());
  events_.pop_front();
  if (e->done) delivered_done_ = true;
  return true;
}

RequestTimes Request::times() const {
  std::lock_guard lk(mu_);
  return times_;
}

void Request::push(TokenEvent e) {
  {
    std::lock_guard lk(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

// ---- Engine ----

// A request the engine works on. Only the stepping thread touches a Seq once it is queued.
struct Engine::Seq {
  std::shared_ptr<Request> req;
  std::vector<int32_t> tokens;  // prompt + generated; KV holds tokens [0, computed)
  int64_t n_prompt = 0;
  int64_t computed = 0;
  int64_t generated = 0;
  int slot = -1;
  uint64_t admit_tick = 0;
  std::unique_ptr<Sampler> sampler;
};

Engine::Engine(const Model& m, const EngineOptions& o) : m_(m), o_(o), t0_(steady_seconds()) {
  const ModelConfig& c = m.config;
  if (o_.max_num_seqs < 1 || o_.max_num_seqs > 4096)
    throw UsageError("engine",
                     "--max-num-seqs must be in [1, 4096] (got " + std::to_string(o_.max_num_seqs) + ")");
  if (o_.max_model_len < 0 || o_.max_model_len > c.max_seq_len)
    throw UsageError("engine", "--max-model-len " + std::to_string(o_.max_model_len) +
                                   " exceeds the model's context of " + std::to_string(c.max_seq_len) +
                                   " tokens; use " + std::to_string(c.max_seq_len) +
                                   " or less (0 = the model's context)");
  if (o_.step_tokens < 1) throw UsageError("engine", "the step token budget must be >= 1");
  if (o_.prefill_chunk < 1) throw UsageError("engine", "the prefill chunk must be >= 1");
  if (o_.max_queue < 1) throw UsageError("engine", "--max-queue must be >= 1");
  // A chunk has to fit in one step, or a prompt could never be fed.
  o_.prefill_chunk = std::min(o_.prefill_chunk, o_.step_tokens);
  max_len_ = o_.max_model_len > 0 ? o_.max_model_len : c.max_seq_len;
  o_.kv.force_paged = true;
  kv_ = std::make_unique<KvCache>(c, o_.max_num_seqs, max_len_, o_.kv);
  // Reusing a prefix in place needs KV that is a pure function of the prefix: no eviction (it depends on
  // later tokens), no F16 staging window and no per-channel keys (their pages are sealed by how many tokens
  // follow).
  const PagedKvCache& pk = *kv_->paged_cache();
  bool reusable = o_.kv.evict.policy == KvEvictPolicy::None && o_.kv.window == 0;
  for (int64_t l = 0; l < c.n_layers; ++l)
    reusable = reusable && !pk.layout(static_cast<int>(l), true).per_channel;
  o_.prefix_cache = o_.prefix_cache && reusable;
  dec_ = std::make_unique<Decoder>(c, m.weights);
  slots_.resize(o_.max_num_seqs);
  slot_cache_.resize(o_.max_num_seqs);
  st_.max_num_seqs = o_.max_num_seqs;
  st_.kv_block_tokens = pk.block_tokens();
  st_.kv_pages_total = pk.n_blocks();
  st_.kv_pages_free = pk.free_blocks();
}

Engine::~Engine() {
  if (thread_.joinable()) stop(0);
}

double Engine::now() const {
  return steady_seconds() - t0_;
}

int64_t Engine::pages_for(int64_t tokens) const {
  const PagedKvCache& pk = *kv_->paged_cache();
  if (pk.evict_budget() > 0) tokens = std::min(tokens, pk.evict_budget());
  return (tokens + pk.block_tokens() - 1) / pk.block_tokens();
}

std::shared_ptr<Request> Engine::submit(RequestOptions r) {
  const ModelConfig& c = m_.config;
  const int64_t n = static_cast<int64_t>(r.prompt.size());
  if (n == 0) throw UsageError("engine", "the prompt is empty; give at least one token");
  if (n >= max_len_)
    throw UsageError("engine", "the prompt has " + std::to_string(n) +
                                   " tokens but the maximum model length is " + std::to_string(max_len_) +
                                   " (prompt + at least one generated token); shorten it");
  for (int32_t id : r.prompt)
    if (id < 0 || id >= c.vocab_size)
      throw UsageError("engine", "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                     std::to_string(c.vocab_size) + ")");
  if (r.max_tokens < 1)
    throw UsageError("engine", "max_tokens must be >= 1 (got " + std::to_string(r.max_tokens) + ")");
  if (r.top_logprobs < -1 || r.top_logprobs > 20)
    throw UsageError("engine", "top_logprobs must be in [0, 20]");
  if (!std::isfinite(r.presence_penalty) || std::fabs(r.presence_penalty) > 2 ||
      !std::isfinite(r.frequency_penalty) || std::fabs(r.frequency_penalty) > 2)
    throw UsageError("engine", "presence_penalty and frequency_penalty must be in [-2, 2]");
  for (const auto& [id, b] : r.logit_bias)
    if (id < 0 || id >= c.vocab_size || !std::isfinite(b) || std::fabs(b) > 100)
      throw UsageError("engine", "logit_bias entry (" + std::to_string(id) + ", " + std::to_string(b) +
                                     ") needs a token id in [0, " + std::to_string(c.vocab_size) +
                                     ") and a bias in [-100, 100]");
  {
    std::vector<int32_t> ids;
    for (const auto& e : r.logit_bias) ids.push_back(e.first);
    std::sort(ids.begin(), ids.end());
    if (auto twice = std::adjacent_find(ids.begin(), ids.end()); twice != ids.end())
      throw UsageError("engine", "logit_bias names token " + std::to_string(*twice) + " twice");
  }
  r.sampler.validate();
  auto s = std::make_unique<Seq>();
  s->sampler = std::make_unique<Sampler>(r.sampler);
  s->tokens = r.prompt;
  s->n_prompt = n;
  auto req = std::make_shared<Request>();
  req->opt_ = std::move(r);
  {
    std::lock_guard lk(mu_);
    if (stopping_) throw Error("engine", "the engine is shutting down and takes no new requests");
    if (static_cast<int>(waiting_.size()) >= o_.max_queue)
      throw QueueFull("[engine] the queue is full (" + std::to_string(o_.max_queue) +
                      " waiting requests); retry later or raise --max-queue");
    req->id_ = next_id_++;
    req->times_.arrival = now();
    req->times_.prompt_tokens = n;
    s->req = req;
    waiting_.push_back(std::move(s));
  }
  work_cv_.notify_all();
  return req;
}

int64_t Engine::chunk_end(const Seq& s, int64_t from) const {
  const int64_t C = o_.prefill_chunk, N = static_cast<int64_t>(s.tokens.size());
  // Fixed offsets (multiples of C, and the prompt's end) whatever else runs: see the header.
  int64_t end = (from / C + 1) * C;
  if (from < s.n_prompt) end = std::min(end, s.n_prompt);
  return std::min(end, N);
}

int64_t Engine::chunk_end(const Seq& s) const {
  return chunk_end(s, s.computed);
}

int64_t Engine::shareable_prefix(const Seq& s) const {
  // Only whole prompt chunks: their KV is exactly what a new request's own prefill would store.
  return std::min(s.computed, s.n_prompt) / o_.prefill_chunk * o_.prefill_chunk;
}

int64_t Engine::pages_needed(const Seq& s, int64_t end) const {
  return std::max<int64_t>(0, pages_for(end) - kv_->paged_cache()->seq_pages(s.slot));
}

bool Engine::has_work_locked() const {
  if (!waiting_.empty()) return true;
  for (const auto& s : slots_)
    if (s) return true;
  return false;
}

void Engine::finish_locked(Seq& s, const std::string& reason, const std::string& error) {
  TokenEvent e;
  e.error = error;
  e.time = now();
  end_locked(s, std::move(e), reason);
}

void Engine::end_locked(Seq& s, TokenEvent e, const std::string& reason) {
  e.done = true;
  e.finish_reason = reason;
  {
    std::lock_guard lk(s.req->mu_);
    s.req->times_.finished = e.time;
  }
  if (reason == "abort")
    st_.requests_aborted++;
  else if (reason == "error")
    st_.requests_failed++;
  else
    st_.requests_finished++;
  s.req->push(std::move(e));
}

void Engine::release_slot_locked(Seq& s, bool keep_prefix) {
  const int slot = s.slot;
  SlotCache& sc = slot_cache_[slot];
  sc.tokens.clear();
  const int64_t keep = shareable_prefix(s);
  if (keep_prefix && o_.prefix_cache && keep > 0) {
    sc.tokens.assign(s.tokens.begin(), s.tokens.begin() + keep);
    sc.last_used = ++tick_;
  } else {
    kv_->clear(slot);
  }
  slots_[slot].reset();
}

int Engine::lru_cached_slot_locked(int except) const {
  int best = -1;
  for (int i = 0; i < o_.max_num_seqs; ++i)
    if (!slots_[i] && i != except && !slot_cache_[i].tokens.empty() &&
        (best < 0 || slot_cache_[i].last_used < slot_cache_[best].last_used))
      best = i;
  return best;
}

bool Engine::reclaim_cached_locked(int keep_slot) {
  const int best = lru_cached_slot_locked(keep_slot);
  if (best < 0) return false;
  slot_cache_[best].tokens.clear();
  kv_->clear(best);
  return true;
}

int Engine::find_slot_locked(const std::vector<int32_t>& tokens, int64_t* reuse, int* copy_from) const {
  *reuse = 0;
  *copy_from = -1;
  const int64_t C = o_.prefill_chunk, N = static_cast<int64_t>(tokens.size());
  // Longest run of whole shared chunks, leaving at least one token to compute (its logits start generation).
  auto shared = [&](const int32_t* t, int64_t n) {
    int64_t common = 0;
    const int64_t lim = std::min(n, N - 1);
    while (common < lim && t[common] == tokens[common]) ++common;
    return common / C * C;
  };
  int best = -1, empty = -1;
  for (int i = 0; i < o_.max_num_seqs; ++i) {
    int64_t r = 0;
    if (slots_[i]) {  // a running sequence: its computed whole prompt chunks can be copied
      const Seq& s = *slots_[i];
      if (o_.prefix_cache) r = shared(s.tokens.data(), shareable_prefix(s));
    } else {
      const auto& ct = slot_cache_[i].tokens;
      if (ct.empty()) {
        if (empty < 0) empty = i;
        continue;
      }
      if (o_.prefix_cache) r = shared(ct.data(), static_cast<int64_t>(ct.size()));
    }
    if (r > *reuse) *reuse = r, best = i;
  }
  if (best >= 0 && !slots_[best]) return best;  // an idle slot that holds the prefix: reuse it in place
  if (best >= 0) *copy_from = best;
  return empty >= 0 ? empty : lru_cached_slot_locked(-1);
}

void Engine::drop_cancelled_locked() {
  for (auto& sp : slots_)
    if (sp && sp->req->cancelled()) {
      Seq& s = *sp;
      finish_locked(s, "abort");
      release_slot_locked(s, true);
    }
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if ((*it)->req->cancelled()) {
      finish_locked(**it, "abort");
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
}

void Engine::admit_locked() {
  PagedKvCache& pk = *kv_->paged_cache();
  while (!waiting_.empty()) {
    Seq& s = *waiting_.front();
    int running = 0;
    for (const auto& sp : slots_) running += sp != nullptr;
    if (running == o_.max_num_seqs) return;
    int64_t reuse = 0;
    int copy_from = -1;
    const int slot = find_slot_locked(s.tokens, &reuse, &copy_from);
    s.slot = slot;
    s.computed = reuse;
    const int64_t held = reuse > 0 && copy_from < 0 ? pk.seq_pages(slot) : 0;
    // Its first chunk's pages, plus one page per running sequence so that admitting it does not force a
    // preemption at this very step.
    const int64_t need = std::max<int64_t>(0, pages_for(chunk_end(s)) - held) + running;
    while (pk.free_blocks() < need && reclaim_cached_locked(reuse > 0 && copy_from < 0 ? slot : -1)) {
    }
    if (pk.free_blocks() < need) {
      if (running == 0) {  // nothing will ever free pages: this request cannot run under the budget
        finish_locked(s, "error",
                      "[engine] the KV cache budget (" + std::to_string(pk.n_blocks()) + " pages of " +
                          std::to_string(pk.block_tokens()) + " tokens) cannot hold this request's first " +
                          std::to_string(chunk_end(s)) + " tokens; raise --kv-budget");
        waiting_.pop_front();
        continue;
      }
      s.slot = -1;
      s.computed = 0;
      return;
    }
    slot_cache_[slot].tokens.clear();
    if (reuse == 0) {
      kv_->clear(slot);
    } else {
      if (copy_from >= 0) pk.copy_prefix(copy_from, slot, reuse);  // a running sequence's prompt chunks
      st_.prefix_hits++;
      st_.prefix_tokens_reused += reuse;
    }
    if (o_.prefix_cache) st_.prefix_queries++;
    s.admit_tick = ++tick_;
    {
      std::lock_guard lk(s.req->mu_);
      if (s.req->times_.admitted < 0) s.req->times_.admitted = now();
      s.req->times_.cached_tokens = std::max(s.req->times_.cached_tokens, reuse);
    }
    slots_[slot] = std::move(waiting_.front());
    waiting_.pop_front();
  }
}

void Engine::preempt_locked(Seq& s) {
  // Recompute: the pages go back now; on readmission prompt + generated tokens are prefilled again.
  kv_->clear(s.slot);
  slot_cache_[s.slot].tokens.clear();
  s.computed = 0;
  st_.preemptions_total++;
  {
    std::lock_guard lk(s.req->mu_);
    s.req->times_.preemptions++;
  }
  const int slot = s.slot;
  s.slot = -1;
  waiting_.push_front(std::move(slots_[slot]));
}

void Engine::plan_batch_locked(std::vector<Seq*>* seqs, std::vector<int64_t>* ends) {
  PagedKvCache& pk = *kv_->paged_cache();
  for (;;) {
    std::vector<Seq*> running;
    for (auto& sp : slots_)
      if (sp) running.push_back(sp.get());
    std::sort(running.begin(), running.end(), [](Seq* a, Seq* b) { return a->admit_tick < b->admit_tick; });
    seqs->clear();
    ends->clear();
    int64_t budget = o_.step_tokens;
    // Decode tokens first (every running sequence advances each step), then prefill chunks first come first
    // served.
    for (Seq* s : running)
      if (s->computed >= s->n_prompt && budget > 0) {
        seqs->push_back(s);
        ends->push_back(chunk_end(*s));
        budget -= ends->back() - s->computed;
      }
    for (Seq* s : running) {
      if (s->computed >= s->n_prompt) continue;
      int64_t e = chunk_end(*s);
      if (e - s->computed > budget) break;
      // Once its first chunk is stored (its dynamic KV scales come from that chunk alone), a sequence takes
      // as many whole chunks as the budget allows: the cut points stay the same, only more of them run in one
      // step.
      const int64_t N = static_cast<int64_t>(s->tokens.size());
      while (s->computed > 0 && e < N && chunk_end(*s, e) - s->computed <= budget) e = chunk_end(*s, e);
      seqs->push_back(s);
      ends->push_back(e);
      budget -= e - s->computed;
    }
    int64_t need = 0;
    for (size_t i = 0; i < seqs->size(); ++i) need += pages_needed(*(*seqs)[i], (*ends)[i]);
    if (need <= pk.free_blocks()) return;
    if (reclaim_cached_locked(-1)) continue;
    Seq* victim = running.back();
    if (running.size() == 1) {
      finish_locked(*victim, "error",
                    "[engine] the KV cache budget (" + std::to_string(pk.n_blocks()) + " pages of " +
                        std::to_string(pk.block_tokens()) + " tokens) cannot hold one sequence of " +
                        std::to_string((*ends)[0]) + " tokens; raise --kv-budget or lower --max-model-len");
      release_slot_locked(*victim, false);
      continue;
    }
    preempt_locked(*victim);
  }
}

// The next token of `s` from its logits row, with its log-probabilities when asked. Reads only the sequence's
// own state (tokens, options, sampler): step() runs it for the step's sequences in parallel, outside mu_.
TokenEvent Engine::sample_token(Seq& s, const float* logits) const {
  const RequestOptions& o = s.req->opt_;
  const int64_t V = m_.config.vocab_size;
  const float* row = logits;
  thread_local std::vector<float> penalized;
  if (o.presence_penalty != 0 || o.frequency_penalty != 0 || !o.logit_bias.empty()) {
    // Only the biased and the generated tokens' logits change: a copy with those entries adjusted.
    penalized.assign(logits, logits + V);
    for (const auto& [id, b] : o.logit_bias) penalized[id] += b;
    std::vector<int32_t> gen(s.tokens.begin() + s.n_prompt, s.tokens.end());
    std::sort(gen.begin(), gen.end());
    for (size_t i = 0; i < gen.size();) {
      size_t j = i;
      while (j < gen.size() && gen[j] == gen[i]) ++j;
      penalized[gen[i]] -= o.frequency_penalty * static_cast<float>(j - i) + o.presence_penalty;
      i = j;
    }
    row = penalized.data();
  }
  TokenEvent e;
  e.token = s.sampler->sample(row, V, s.tokens);
  if (o.top_logprobs >= 0) {
    // Log-probabilities under the model itself (raw logits), as OpenAI reports them.
    double mx = *std::max_element(logits, logits + V), sum = 0;
    for (int64_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
    const double lse = mx + std::log(sum);
    e.logprob = static_cast<float>(logits[e.token] - lse);
    thread_local std::vector<int32_t> idx;
    idx.resize(static_cast<size_t>(V));
    std::iota(idx.begin(), idx.end(), 0);
    const int64_t k = std::min<int64_t>(o.top_logprobs, V);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int64_t i = 0; i < k; ++i) e.top.push_back({idx[i], static_cast<float>(logits[idx[i]] - lse)});
  }
  return e;
}

void Engine::emit_locked(Seq& s, TokenEvent e, double t) {
  const ModelConfig& c = m_.config;
  const RequestOptions& o = s.req->opt_;
  const int32_t tok = e.token;
  e.time = t;
  s.tokens.push_back(tok);
  s.generated++;
  st_.generation_tokens_total++;
  {
    std::lock_guard lk(s.req->mu_);
    if (s.req->times_.first_token < 0) s.req->times_.first_token = t;
    s.req->times_.generated = s.generated;
  }
  std::string reason;
  if ((o.stop_at_eos && tok == c.eos_id) ||
      std::find(o.stop_tokens.begin(), o.stop_tokens.end(), tok) != o.stop_tokens.end())
    reason = "stop";
  else if (s.generated >= o.max_tokens || static_cast<int64_t>(s.tokens.size()) >= max_len_)
    reason = "length";
  if (reason.empty()) {
    s.req->push(std::move(e));
    return;
  }
  end_locked(s, std::move(e), reason);
  release_slot_locked(s, true);
}

std::vector<bool> Engine::forward_isolated(const std::vector<Seq*>& seqs, const std::vector<int64_t>& ends,
                                           std::vector<std::string>* errors) {
  const int64_t V = m_.config.vocab_size;
  auto entries = [&](size_t i, std::vector<BatchEntry>* b) {
    const Seq& s = *seqs[i];
    const int64_t N = static_cast<int64_t>(s.tokens.size());
    for (int64_t p = s.computed; p < ends[i]; ++p) b->push_back({s.tokens[p], s.slot, p, p + 1 == N});
    return ends[i] == N;
  };
  std::vector<BatchEntry> batch;
  std::vector<int64_t> row(seqs.size(), -1);
  int64_t n_logits = 0;
  for (size_t i = 0; i < seqs.size(); ++i)
    if (entries(i, &batch)) row[i] = n_logits++;
  logits_.resize(static_cast<size_t>(std::max<int64_t>(1, n_logits) * V));
  std::vector<bool> ok(seqs.size(), true);
  errors->assign(seqs.size(), "");
  try {
    dec_->forward(batch, *kv_, logits_.data());
    return ok;
  } catch (const Error& e) {
    if (seqs.size() == 1) {
      ok[0] = false;
      (*errors)[0] = e.what();
      return ok;
    }
  }
  // Rerun every sequence alone (storing the same positions again rewinds its KV), so only the failing ones
  // fail.
  std::vector<float> one(V);
  for (size_t i = 0; i < seqs.size(); ++i) {
    std::vector<BatchEntry> b;
    const bool has_logits = entries(i, &b);
    try {
      dec_->forward(b, *kv_, one.data());
      if (has_logits) std::copy(one.begin(), one.end(), logits_.begin() + row[i] * V);
    } catch (const Error& e) {
      ok[i] = false;
      (*errors)[i] = e.what();
    }
  }
  return ok;
}

bool Engine::step() {
  std::lock_guard step_lock(step_mu_);
  std::vector<Seq*> seqs;
  std::vector<int64_t> ends;
  {
    std::lock_guard lk(mu_);
    const int64_t before = st_.requests_aborted + st_.requests_failed;
    drop_cancelled_locked();
    admit_locked();
    plan_batch_locked(&seqs, &ends);
    st_.kv_pages_free = kv_->paged_cache()->free_blocks();
    if (seqs.empty()) return st_.requests_aborted + st_.requests_failed != before;
  }
  std::vector<std::string> errors;
  const double t_start = now();
  const std::vector<bool> ok = forward_isolated(seqs, ends, &errors);
  // Sampling, one sequence per task: a 150k-vocabulary draw costs 0.1 ms (greedy) to ~1 ms (temperature).
  const int64_t V = m_.config.vocab_size;
  std::vector<TokenEvent> sampled(seqs.size());
  std::vector<std::pair<size_t, int64_t>> rows;  // (sequence, its logits row)
  for (size_t i = 0, row = 0; i < seqs.size(); ++i)
    if (ends[i] == static_cast<int64_t>(seqs[i]->tokens.size())) {
      if (ok[i]) rows.emplace_back(i, row);
      ++row;
    }
  parallel_for(static_cast<int64_t>(rows.size()), 1, [&](int64_t a, int64_t b) {
    for (int64_t j = a; j < b; ++j)
      sampled[rows[j].first] = sample_token(*seqs[rows[j].first], logits_.data() + rows[j].second * V);
  });
  const double t = now();
  std::lock_guard lk(mu_);
  st_.busy_seconds += t - t_start;
  st_.steps++;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Seq& s = *seqs[i];
    if (!ok[i]) {
      finish_locked(s, "error", errors[i]);
      release_slot_locked(s, false);
      continue;
    }
    if (s.computed < s.n_prompt) st_.prompt_tokens_total += std::min(ends[i], s.n_prompt) - s.computed;
    s.computed = ends[i];
    if (sampled[i].token >= 0) emit_locked(s, std::move(sampled[i]), t);
  }
  st_.kv_pages_free = kv_->paged_cache()->free_blocks();
  return true;
}

void Engine::start() {
  std::lock_guard lk(mu_);
  if (thread_.joinable()) return;
  thread_ = std::thread([this] {
    for (;;) {
      {
        std::unique_lock lk2(mu_);
        work_cv_.wait(lk2, [&] { return quit_ || has_work_locked(); });
        if (quit_ && !has_work_locked()) return;
      }
      if (!step()) {  // work that cannot proceed yet (nothing admissible): do not spin
        std::unique_lock lk2(mu_);
        work_cv_.wait_for(lk2, std::chrono::milliseconds(20));
      }
    }
  });
}

void Engine::stop(double deadline_s) {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  const double until = now() + std::max(0.0, deadline_s);
  const bool threaded = thread_.joinable();
  for (;;) {
    {
      std::lock_guard lk(mu_);
      if (!has_work_locked()) break;
      if (now() >= until) {
        for (auto& sp : slots_)
          if (sp) sp->req->cancel();
        for (auto& sp : waiting_) sp->req->cancel();
      }
    }
    if (threaded) {
      work_cv_.notify_all();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    } else {
      step();
    }
  }
  if (threaded) {
    {
      std::lock_guard lk(mu_);
      quit_ = true;
    }
    work_cv_.notify_all();
    thread_.join();
  }
}

EngineStats Engine::stats() const {
  std::lock_guard lk(mu_);
  EngineStats s = st_;
  s.running = 0;
  for (const auto& sp : slots_) s.running += sp != nullptr;
  s.waiting = static_cast<int>(waiting_.size());
  return s;
}

}  // namespace lowbit
