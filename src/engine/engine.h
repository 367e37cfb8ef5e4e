// The serving engine: a request queue and a scheduler over one Decoder and one paged KV cache.
//
// Every step() forms ONE forward batch: one decode token of every running sequence, then prefill chunks of
// admitted sequences, up to `step_tokens` tokens in all (chunked prefill: a long prompt never stalls the
// running sequences' decode for more than one step's budget). A prompt is always cut at the same offsets
// (multiples of `prefill_chunk`, and its end), whatever else runs; its first chunk runs in a step of its own
// (dynamic KV scales come from the first stored chunk), later ones as many per step as the budget allows. So
// a sequence's numbers do not depend on its neighbours: greedy output alone == greedy output among others
// (tested).
//
// Admission: a waiting request takes a free sequence slot when the pool has the pages its next chunk needs.
// Preemption (recompute): when a step's decode tokens need more pages than are free, the most recently
// admitted running sequence gives its pages back and returns to the head of the queue; on readmission its
// prompt plus the tokens it had already generated are prefilled again and generation continues where it
// stopped (its already-sent tokens are not sent twice). Cancellation frees the slot and pages at the next
// step.
//
// Prefix cache: the KV of full prompt blocks is identified by the hash of every token up to the block's end.
// When a sequence finishes, its slot keeps its KV (if the cache format allows) and the hashes of its prompt
// blocks are remembered; a new request whose prompt starts with those blocks is given that slot and prefills
// only from the first block it does not share (prefix_hits / prefix_tokens_reused count it). The slot's pages
// are reused in place: nothing is copied, and an idle cached slot is the first to be reclaimed when memory
// runs short.
//
// Threading: submit(), Request::next/cancel and stats() are thread-safe. Either call step() in a loop from
// one thread (lowbit throughput does), or start() a background thread that steps while there is work.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/sampler.h"

namespace lowbit {

class Decoder;

struct EngineOptions {
  int max_num_seqs = 16;      // sequences decoded together (KV sequence slots)
  int64_t max_model_len = 0;  // tokens per sequence (prompt + output); 0 = the model's context
  int step_tokens = 512;      // tokens per forward batch (decode tokens + prefill chunks)
  int prefill_chunk = 64;     // prompts are cut into chunks of this many tokens at fixed offsets
  int max_queue = 1024;       // waiting requests; submit() beyond that throws QueueFull
  bool prefix_cache = true;   // reuse the KV of shared prompt prefixes
  KvCacheSpec kv;             // any --kv-cache/--kv-evict spec; always served by the paged cache
};

struct RequestOptions {
  std::vector<int32_t> prompt;  // token ids, at least one
  int max_tokens = 16;          // >= 1; generation also ends at max_model_len
  SamplerParams sampler;
  float presence_penalty = 0, frequency_penalty = 0;  // OpenAI semantics, over the generated tokens
  // OpenAI's logit_bias: (token id, bias in [-100, 100]) added to that token's logit before sampling (not to
  // the reported logprobs, which are the model's); each id at most once.
  std::vector<std::pair<int32_t, float>> logit_bias;
  bool stop_at_eos = true;
  std::vector<int32_t> stop_tokens;  // extra ids that end generation (finish_reason "stop")
  int top_logprobs = -1;             // -1: no logprobs; 0..20: the token's logprob and that many alternatives
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
};

// One event per generated token; the last event of a request has done = true (it may also carry a token).
struct TokenEvent {
  int32_t token = -1;             // -1: no token (abort, error)
  float logprob = 0;              // log-probability of `token` under the model (raw logits, log-softmax)
  std::vector<TokenLogprob> top;  // top_logprobs alternatives, most likely first
  bool done = false;
  std::string finish_reason;  // on done: "stop" (EOS / stop token), "length", "abort", "error"
  std::string error;          // on finish_reason "error": what went wrong
  double time = 0;            // seconds since the engine started (steady clock)
};

struct RequestTimes {
  double arrival = 0, admitted = -1, first_token = -1, finished = -1;  // engine seconds; -1 = not yet
  int64_t prompt_tokens = 0, generated = 0, cached_tokens = 0;         // cached: prompt tokens reused
  int preemptions = 0;
};

class QueueFull : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Request {
 public:
  uint64_t id() const { return id_; }
  // Waits up to timeout_s for the next event; false on timeout. After the done event, returns false at once.
  bool next(TokenEvent* e, double timeout_s);
  // Ends the request: its sequence and pages are freed at the engine's next step, then a done event with
  // finish_reason "abort" is delivered (unless it had already finished).
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  RequestTimes times() const;

 private:
  friend class Engine;
  void push(TokenEvent e);
  uint64_t id_ = 0;
  RequestOptions opt_;
  std::atomic<bool> cancelled_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TokenEvent> events_;
  bool delivered_done_ = false;
  RequestTimes times_;
};

struct EngineStats {
  int running = 0, waiting = 0, max_num_seqs = 0;
  int64_t kv_pages_total = 0, kv_pages_free = 0, kv_block_tokens = 0;
  int64_t prompt_tokens_total = 0, generation_tokens_total = 0;  // prompt: computed (not reused) tokens
  int64_t prefix_hits = 0, prefix_queries = 0, prefix_tokens_reused = 0;
  int64_t preemptions_total = 0, requests_finished = 0, requests_aborted = 0, requests_failed = 0;
  int64_t steps = 0;
  double busy_seconds = 0;  // time spent in forward passes
};

class Engine {
 public:
  Engine(const Model& m, const EngineOptions& o);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineOptions& options() const { return o_; }
  int64_t max_model_len() const { return max_len_; }
  const KvCache& kv() const { return *kv_; }

  // Queues a request. UsageError("engine") for an empty / too long prompt, bad ids or sampler parameters;
  // QueueFull when max_queue requests are waiting; Error("engine") after stop().
  std::shared_ptr<Request> submit(RequestOptions r);

  // One scheduler step in the calling thread. Returns false when there was nothing to do.
  bool step();

  // Background stepping: start() launches the thread; stop(deadline_s) refuses new requests, lets the running
  // ones finish for up to deadline_s seconds, aborts the rest and joins the thread.
  void start();
  void stop(double deadline_s);

  EngineStats stats() const;
  double now() const;  // engine seconds

 private:
  struct Seq;
  bool has_work_locked() const;
  void drop_cancelled_locked();
  void admit_locked();
  // Picks the decode tokens and prefill chunks of this step (seqs[i] feeds tokens [computed, ends[i])) and
  // makes sure the pool has their pages, reclaiming cached prefixes and preempting the newest sequences if
  // not.
  void plan_batch_locked(std::vector<Seq*>* seqs, std::vector<int64_t>* ends);
  int64_t chunk_end(const Seq& s) const;                // end of the next chunk from s.computed
  int64_t chunk_end(const Seq& s, int64_t from) const;  // end of the chunk that starts at `from`
  int64_t pages_for(int64_t tokens) const;
  int64_t pages_needed(const Seq& s, int64_t end) const;
  // The slot for a request and how many of its tokens are already in some KV: in that slot itself (an idle
  // slot that kept a prefix) or, when *copy_from >= 0, in a running sequence whose rows are copied over.
  int find_slot_locked(const std::vector<int32_t>& tokens, int64_t* reuse, int* copy_from) const;
  int64_t shareable_prefix(const Seq& s) const;  // tokens of s in whole, computed prompt chunks
  int lru_cached_slot_locked(
      int except) const;  // least recently used idle slot that keeps a prefix; -1: none
  bool reclaim_cached_locked(int keep_slot);
  void release_slot_locked(Seq& s, bool keep_prefix);
  void preempt_locked(Seq& s);
  void finish_locked(Seq& s, const std::string& reason, const std::string& error = "");  // a tokenless end
  void end_locked(Seq& s, TokenEvent e, const std::string& reason);  // e becomes the request's last event
  // Samples the next token of `s` from its logits row, delivers it and ends the request when it should.
  TokenEvent sample_token(Seq& s, const float* logits) const;
  void emit_locked(Seq& s, TokenEvent e, double t);
  // Runs the batch; when the model fails (NaN / Inf logits), reruns each sequence alone so that only the
  // failing ones end with an error. Returns per sequence whether its logits row is valid.
  std::vector<bool> forward_isolated(const std::vector<Seq*>& seqs, const std::vector<int64_t>& ends,
                                     std::vector<std::string>* errors);

  const Model& m_;
  EngineOptions o_;
  int64_t max_len_ = 0;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<Decoder> dec_;
  std::vector<std::unique_ptr<Seq>> slots_;  // [max_num_seqs]; null = free
  struct SlotCache {                         // what a free slot still holds in its KV (prefix cache)
    std::vector<int32_t> tokens;             // prompt chunks whose KV is stored, positions 0..n-1
    uint64_t last_used = 0;
  };
  std::vector<SlotCache> slot_cache_;
  std::deque<std::unique_ptr<Seq>> waiting_;
  mutable std::mutex mu_;  // queue, slots, stats
  std::mutex step_mu_;     // one step at a time
  std::condition_variable work_cv_;
  std::thread thread_;
  bool stopping_ = false, quit_ = false;
  uint64_t next_id_ = 1, tick_ = 0;
  EngineStats st_;
  std::vector<float> logits_;  // [rows with logits, vocab] of the current step
  const double t0_;
};

}  // namespace lowbit
