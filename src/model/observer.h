// Hooks into the decoder's forward pass. The quant rung implements these to collect calibration statistics
// (GPTQ Hessians, AWQ/SmoothQuant channel magnitudes, KV-cache scales); eval uses them for health checks.
// The model rung never includes quant: it only calls this interface.
#pragma once
#include <cstdint>

namespace lowbit {

// Which activation a hook sees. Inputs of linear layers: q/k/v share AttnIn, gate/up share MlpIn.
enum class ActSite { AttnIn, OIn, MlpIn, DownIn, KeyOut, ValueOut, LayerOut };
const char* act_site_name(ActSite s);

class ActivationObserver {
 public:
  virtual ~ActivationObserver() = default;
  // x: [T, cols] row-major, the activations at `site` of `layer` for T tokens of the current batch.
  // KeyOut/ValueOut are per-token K and V rows [T, kv_dim] as stored in the cache (K after RoPE).
  virtual void observe(int layer, ActSite site, const float* x, int64_t T, int64_t cols) = 0;
};

}  // namespace lowbit
