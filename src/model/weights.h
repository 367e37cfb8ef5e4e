// The decoder's weights, by role, in their storage formats. Every source (HF safetensors, GGUF, llama2.c) is
// mapped onto these fields; the decoder never sees file names.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "arch/config.h"
#include "kernels/hadamard.h"
#include "kernels/weight.h"
#include "kv/kv_cache.h"
#include "tensor/tensor.h"

namespace lowbit {

struct LayerWeights {
  std::vector<float> attn_norm;   // [dim]
  std::vector<float> ffn_norm;    // [dim]
  WeightMatrix wq;                // [n_heads*head_dim, dim]
  WeightMatrix wk;                // [n_kv_heads*head_dim, dim]
  WeightMatrix wv;                // [n_kv_heads*head_dim, dim]
  WeightMatrix wo;                // [dim, n_heads*head_dim]
  WeightMatrix w_gate;            // [ffn_dim, dim]
  WeightMatrix w_up;              // [ffn_dim, dim]
  WeightMatrix w_down;            // [dim, ffn_dim]
  std::vector<float> bq, bk, bv;  // [q_dim], [kv_dim], [kv_dim] when config.qkv_bias
  std::vector<float> q_norm;      // [head_dim] when config.qk_norm
  std::vector<float> k_norm;      // [head_dim] when config.qk_norm
  // Calibrated KV-cache scales (absmax / format max of K after RoPE and of V) from a quantized checkpoint:
  // [1] per tensor or [n_kv_heads] per head; empty when none were calibrated.
  std::vector<float> k_scale, v_scale;
};

struct ModelWeights {
  WeightMatrix tok_embed;  // [vocab, dim]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [dim]
  WeightMatrix lm_head;           // [vocab, dim]; shares storage with tok_embed when tied
  std::vector<float>
      rope_freq_factors;  // [head_dim/2] divisors from GGUF rope_freqs.weight (llama3), or empty
  // Online R4 of a rotated model (quant/rotate.h): when valid (order ffn_dim), every layer's down_proj input
  // is Hadamard-transformed before the product; w_down holds W_down H^T, so the product is unchanged.
  Hadamard down_rotation;

  // The field of a tensor role (arch/arch_table.h; layer ignored for model-level roles): matrix() for
  // RoleKind::Matrix roles, vector() for norms and biases; nullptr for a role of the other kind.
  WeightMatrix* matrix(TensorRole r, int64_t layer);
  std::vector<float>* vector(TensorRole r, int64_t layer);
  // Every weight matrix with a stable name ("layers.3.wq", "lm_head", ...), for reports and quantization.
  std::vector<std::pair<std::string, WeightMatrix*>> named_matrices();
  size_t weight_bytes() const;  // bytes of all stored weights (tied embeddings counted once)
  int64_t parameters() const;   // elements of all weights: matrices (tied embeddings once), norms, biases
  // lm_head and tok_embed share their storage (the same dense data pointer, or the same QuantizedMatrix).
  bool tied() const { return lm_head.data == tok_embed.data && lm_head.q == tok_embed.q; }
};

// How dense (F32/F16/BF16) source tensors are held in memory.
enum class DenseMode {
  Native,  // keep the stored dtype (zero-copy from the mmap where possible)
  F32,     // widen everything to float32 (the reference path)
  F16,     // store as IEEE half (e.g. an "F16 copy" for evaluation)
  BF16,    // store as bfloat16
};
DenseMode dense_mode_from_string(const std::string& s);  // native|f32|f16|bf16; UsageError otherwise

// Maps tensors named with Hugging Face Llama names (see io/llama2c.h) or GGUF names onto ModelWeights.
// `gguf_names` selects the naming scheme. Missing tensors and shape mismatches give Error("model") naming the
// tensor, its expected shape and the file. `owner` keeps the mapped files alive.
// `hook` (optional) is asked first for every 2-D weight: it returns true when it filled `out` itself
// (quantized checkpoints map their packed tensors this way, see model/quantized_checkpoint.h).
using WeightHook = std::function<bool(const std::string& name, const TensorView& view, WeightMatrix* out)>;
ModelWeights map_weights(const ModelConfig& c, const std::map<std::string, TensorView>& tensors,
                         bool gguf_names, std::shared_ptr<const void> owner, DenseMode mode,
                         const std::string& source, const WeightHook& hook = {});

// The checkpoint's calibrated FP8 KV scales (layers' k_scale / v_scale) handed to the cache
// (KvCache::use_checkpoint_scales); returns the number of layer sides that use them.
int use_checkpoint_kv_scales(KvCache& kv, const ModelWeights& w);

}  // namespace lowbit
