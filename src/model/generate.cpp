#include "model/generate.h"

#include <algorithm>

#include "core/error.h"
#include "core/timer.h"
#include "model/decoder.h"

namespace lowbit {

std::vector<int32_t> generate(const Model& m, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                              const std::function<void(int32_t)>& on_token, GenerateStats* stats) {
  const auto& c = m.config;
  if (prompt.empty()) throw UsageError("model", "the prompt is empty; give at least one token (e.g. BOS)");
  int64_t want = static_cast<int64_t>(prompt.size()) + std::max(0, o.max_new_tokens);
  int64_t cap = o.ctx > 0 ? o.ctx : std::min<int64_t>(want, c.max_seq_len);
  if (static_cast<int64_t>(prompt.size()) > cap)
    throw UsageError("model", "the prompt has " + std::to_string(prompt.size()) +
                                  " tokens but the context is " + std::to_string(cap) +
                                  "; shorten the prompt or raise --ctx");
  KvCache kv(c, 1, cap, o.kv_spec);
  Decoder dec(c, m.weights);
  Sampler sampler(o.sampler);
  GenerateStats st;
  st.prompt_tokens = static_cast<int64_t>(prompt.size());
  st.kv_bytes_per_token = kv.bytes_per_token();
  st.kv_capacity_tokens = kv.capacity_tokens();
  st.kv_total_bytes = kv.total_bytes();
  st.kv_bytes_per_token_exact = kv.bytes_per_token_exact();
  st.kv_format = kv.describe();
  if (o.on_kv_cache) o.on_kv_cache(kv);
  std::vector<float> logits(c.vocab_size);
  std::vector<int32_t> history(prompt), out;

  Timer t;
  int64_t pos = 0;
  const int64_t n = static_cast<int64_t>(prompt.size());
  while (pos < n) {
    int64_t end = std::min<int64_t>(n, pos + std::max(1, o.prefill_chunk));
    std::vector<BatchEntry> b;
    for (int64_t i = pos; i < end; ++i) b.push_back({prompt[i], 0, i, i == n - 1});
    dec.forward(b, kv, logits.data());
    pos = end;
  }
  st.prefill_seconds = t.seconds();
  st.stop_reason = "length";
  Timer td;
  for (int i = 0; i < o.max_new_tokens; ++i) {
    int32_t next = sampler.sample(logits.data(), c.vocab_size, history);
    if (i == 0) st.ttft_seconds = t.seconds();
    out.push_back(next);
    history.push_back(next);
    if (on_token) on_token(next);
    if (o.stop_at_eos && next == c.eos_id) {
      st.stop_reason = "eos";
      break;
    }
    if (i + 1 == o.max_new_tokens) break;
    if (pos >= kv.capacity()) {  // with eviction the cache takes any position
      st.stop_reason = "context";
      break;
    }
    if (i == 0) td.reset();
    std::vector<BatchEntry> b{{next, 0, pos, true}};
    dec.forward(b, kv, logits.data());
    ++pos;
  }
  st.generated_tokens = static_cast<int64_t>(out.size());
  st.decode_seconds = out.size() > 1 ? td.seconds() : 0;
  if (stats) *stats = st;
  return out;
}

}  // namespace lowbit
