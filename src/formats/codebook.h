// Per-row codebook formats LUT2 / LUT3 / LUT4 (formats/lut_codebook.cpp): every output row of a weight has
// its own table of 2^b FP16 values (SqueezeLLM-style non-uniform grid), codes are b-bit indices into it. The
// table is fitted by weighted 1-D k-means (Lloyd iterations from weighted-quantile centroids), so the grid
// follows the row's distribution instead of a uniform step.
#pragma once
#include <cstdint>

namespace lowbit {

// Fits k = 2^bits centroids to x[n] under the per-element weights w[n] (nullptr = all 1; all-zero weights
// fall back to 1). Minimises sum_i w_i (x_i - c(x_i))^2 by Lloyd iterations on the sorted values (each
// iteration O(k log n) from prefix sums), started from the weighted quantiles (k + 0.5) / k: deterministic,
// no random seed. Writes the centroids rounded to FP16 (binary16 bits) in ascending order to table_f16[k].
void fit_row_codebook(const float* x, const float* w, int64_t n, int bits, uint16_t* table_f16);

// The code of the nearest entry of an ascending table[k] (k <= 16): the number of midpoints strictly below
// x, so at an exact midpoint the lower code wins (as NF4). NaN encodes code 0 (callers reject NaN first).
inline uint32_t codebook_encode(const float* table, int k, float x) {
  uint32_t u = 0;
  for (int i = 0; i + 1 < k; ++i) u += x > 0.5f * (table[i] + table[i + 1]) ? 1u : 0u;
  return u;
}

}  // namespace lowbit
