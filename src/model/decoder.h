// The generic decoder: one forward pass for a batch of tokens from one or several sequences.
// LLaMA, Mistral, Qwen2/2.5, Qwen3 and SmolLM differ only in ModelConfig flags (bias, q/k norm, rope style).
#pragma once
#include <cstdint>
#include <vector>

#include "arch/config.h"
#include "kv/kv_cache.h"
#include "model/observer.h"
#include "model/weights.h"
#include "ops/rope.h"

namespace lowbit {

struct BatchEntry {
  int32_t token;
  int32_t seq;  // sequence slot in the KV cache
  int64_t pos;  // position in its sequence (0-based); tokens of a sequence appear in order
  bool logits;  // return logits for this entry
};

struct ForwardOptions {
  bool check_layers = false;  // check every layer's output for NaN/Inf (naming layer and position on failure)
};

class Decoder {
 public:
  Decoder(const ModelConfig& c, const ModelWeights& w);
  const ModelConfig& config() const { return c_; }

  // Runs the batch through all layers, writing K/V into `kv`. Logits of the entries with logits=true are
  // written to `logits` in batch order: [n_logits, vocab]. Logits are always checked for NaN/Inf:
  // Error("model") names the first bad position.
  void forward(const std::vector<BatchEntry>& batch, KvCache& kv, float* logits,
               const ForwardOptions& o = {});

  // Runs layers [first, last] on the residual stream x [T, dim] of the batch, in place: no embedding, no
  // final norm, no logits. Calibration streams its tokens through the model one layer at a time with it (each
  // layer's inputs come from the already quantized layers before it) instead of a forward from the embedding
  // per layer. The same code as forward(), so forward == embedding + forward_layers(0, n_layers - 1) + head.
  void forward_layers(const std::vector<BatchEntry>& batch, KvCache& kv, float* x, int first, int last);
  // The residual stream's start: token embeddings x [T, dim] (times sqrt(dim) where the architecture scales).
  void embed(const std::vector<BatchEntry>& batch, float* x) const;
  // The end of the residual stream: final norm + classifier for T rows of x [T, dim] -> logits [T, vocab]
  // (not checked for NaN/Inf; forward() checks what it returns).
  void head(const float* x, int64_t T, float* logits) const;
  void set_observer(ActivationObserver* obs) { observer_ = obs; }

 private:
  void run_layers(const std::vector<BatchEntry>& batch, KvCache& kv, float* x, int first, int last,
                  const ForwardOptions& o);
  // One layer's attention for the batch: q [T, q_dim] pre-scaled, att [T, q_dim] out.
  void run_attention(int layer, const std::vector<BatchEntry>& batch, const KvCache& kv, const float* q,
                     float* att) const;

  const ModelConfig& c_;
  const ModelWeights& w_;
  Rope rope_;
  ActivationObserver* observer_ = nullptr;
};

}  // namespace lowbit
