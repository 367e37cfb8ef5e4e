// DuQuant's dual transformation (Lin et al. 2024, "DuQuant: Distributing Outliers via Dual Transformation"),
// without training, as an orthogonal R1 for lowbit's rotation framework (quant/rotate.h).
//
// From calibration activations X [rows, n] of the residual stream's normalised form (the attention and FFN
// norm outputs with gamma divided out, i.e. the inputs of the gamma-folded model, pooled over layers):
//   1. R_blk1: block-diagonal, blocks of `block` channels. In each block, greedily: take the channel with the
//      largest |x| in the block, swap it to the block's first position, mix the other channels with a seeded
//      random orthogonal matrix and apply an orthogonal matrix whose first row is uniform (1/sqrt(block)), so
//      that channel is spread evenly over the whole block; compose and repeat (`steps` times at most,
//      stopping when the block's max |x| no longer falls).
//   2. P_zigzag: channels sorted by their max |x| after step 1 are dealt to the blocks in zigzag order (block
//      0, 1, ..., K-1, K-1, ..., 0, 0, 1, ...), so every block gets a share of the large channels.
//   3. R_blk2: the same greedy block rotation on the permuted activations.
// G = R_blk2 . P_zigzag . R_blk1 (acting on column vectors) is orthogonal, so it is fused offline exactly as
// QuaRot's R1 is (after gamma folding); no kernel changes and nothing recomputed when a checkpoint is loaded.
// The paper's per-linear smoothing step is not part of this transform.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "model/model.h"
#include "quant/recipe.h"

namespace lowbit::quant {

struct DuquantOptions {
  int64_t block = 0;  // channels per block; 0 = auto (duquant_block_size)
  int steps = 8;      // greedy rotation steps per block, at most
  uint64_t seed = 0;  // random orthogonal mixing of the non-outlier channels
};

// The block size for order n: `requested` when it divides n (UsageError("quant") naming n otherwise), else
// the paper's 128 when it divides n, else the largest divisor of n not above 128.
int64_t duquant_block_size(int64_t n, int64_t requested);

// zigzag[i] = the channel placed at position i: channels by decreasing chan_max dealt to the n / block blocks
// in zigzag order, block b holding positions [b * block, (b + 1) * block) in dealing order.
std::vector<int64_t> zigzag_permutation(const std::vector<double>& chan_max, int64_t block);

struct DuquantTransform {
  int64_t n = 0, block = 0;
  std::vector<double> g;                 // [n, n] row-major: x' = G x (column vectors); orthogonal
  std::vector<int64_t> zigzag;           // [n] the permutation of step 2 (position -> channel after R_blk1)
  int steps1 = 0, steps2 = 0;            // greedy steps taken, summed over blocks
  double max_before = 0, max_after = 0;  // max |x| of the calibration rows before and after G
  double rms = 0;                        // their RMS (unchanged by an orthogonal G)
  nlohmann::json describe() const;
};

// Builds G from calibration rows x [rows, n] (row-major).
DuquantTransform build_duquant(const std::vector<float>& x, int64_t rows, int64_t n, const DuquantOptions& o);

// Calibration rows for R1: the attn_in and mlp_in activations of every layer of `m` over `seqs`, each divided
// by its norm's gamma (what the gamma-folded model's linears read), at most `max_rows` of them: the
// max_rows / 4 rows with the largest max |x| plus a seeded uniform sample of the others. Returns [rows, dim].
std::vector<float> duquant_calibration_rows(const Model& m, const std::vector<std::vector<int32_t>>& seqs,
                                            int64_t max_rows, uint64_t seed, int64_t* rows);

// rotate=duquant: rotate_model (rotate.h) with R1 replaced by G. G is built from calibration rows of
// `windows` (at most 4096) of the model as given; then rotate_model folds the norms and applies R2 / R4
// (QuaRot's), and G is fused as R1 is: the embedding rows, the input side of q/k/v/gate/up/lm_head and the
// output side of o/down. Returns rotate_model's record with "r1" = G's record (describe() plus the rows
// used). UsageError("quant") without R1 (rotate_r1=0), without windows, or for a block that does not divide
// hidden_size.
nlohmann::json rotate_model_duquant(Model& m, const RotationSpec& s,
                                    const std::vector<std::vector<int32_t>>& windows);

}  // namespace lowbit::quant
