// Rotary position embeddings: frequencies (with linear / llama3 scaling or GGUF per-frequency factors) and
// the rotation in either pairing convention.
#pragma once
#include <cstdint>
#include <vector>

#include "arch/config.h"

namespace lowbit {

class Rope {
 public:
  Rope(const ModelConfig& c, const std::vector<float>& freq_factors);
  // Rotates n_heads vectors of head_dim in place at position pos. x: [n_heads, head_dim].
  void apply(float* x, int64_t n_heads, int64_t pos) const;
  // The rotation split in two, for callers that rotate several vectors at one position (a decoder step's
  // queries and keys in every layer): angles() fills cs [head_dim] with cos then sin of each frequency at pos
  // ([head_dim/2] each), apply(x, n_heads, cs) rotates with them. Same values as apply(x, n_heads, pos).
  void angles(int64_t pos, float* cs) const;
  void apply(float* x, int64_t n_heads, const float* cs) const;
  const std::vector<double>& inv_freq() const { return inv_freq_; }

 private:
  int64_t head_dim_;
  RopeStyle style_;
  std::vector<double> inv_freq_;  // [head_dim/2]
};

}  // namespace lowbit
