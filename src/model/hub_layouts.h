// GPTQ and AWQ checkpoint layouts as the Hugging Face Hub carries them, mapped exactly onto lowbit's INT
// group QuantizedMatrix (tensor/qtensor.h: value = (u - z) * s, u the unsigned b-bit code, z the zero point).
// Used by the loader (quant_method "gptq" / "awq", model/quantized_checkpoint.cpp) and by `lowbit export`.
//
// W is [rows = out_features, cols = in_features]; pf = 32 / b values per int32, value k of a word at bits
// [k*b, k*b + b); groups = ceil(cols / group_size) (group_size -1: one group, lowbit "channel").
//   GPTQ (AutoGPTQ / GPTQModel, b = 2, 3, 4, 8):
//     M.qweight int32 [cols*b/32, rows] word (i, r) holds u(r, i*pf + k) at slot k (packed along input)
//     M.qzeros  int32 [groups, rows*b/32] word (g, j) holds zero(j*pf + k, g) at slot k (along output);
//                                        b = 3: 32 values per 3 words, one LSB-first bit stream (value k at
//                                        bit 3k of the words' concatenation; values 10 and 21 straddle);
//                                        checkpoint_format "gptq" (v1, AutoGPTQ) stores zero - 1 and every
//                                        reader adds 1 back (so a stored 2^b - 1 reads as zero 2^b);
//                                        "gptq_v2" (GPTQModel) stores the zero itself
//     M.scales  f16   [groups, rows]    M.g_idx int32 [cols] = group of input column c
//     value(r, c) = scales[g, r] * (u(r, c) - zero(r, g)), g = g_idx[c]
//   AWQ (AutoAWQ "gemm", b = 4):
//     M.qweight int32 [cols, rows/8]    word (c, j) holds u(j*8 + order[k], c) at slot k, order = [0, 2, 4,
//     6,
//                                        1, 3, 5, 7] (AutoAWQ's interleave for its GEMM kernel)
//     M.qzeros  int32 [groups, rows/8]  same order; zero stored as is
//     M.scales  f16   [groups, rows]    value(r, c) = scales[c / group_size, r] * (u(r, c) - zero)
// Import: a matrix whose zeros all equal 2^(b-1) becomes a symmetric scheme (identical values). A GPTQ g_idx
// that is not c / group_size (act-order, desc_act without static groups) must still give every group exactly
// group_size columns (the last one the rest); the columns are then stored sorted by g_idx (stable) so groups
// are consecutive, and QuantizedMatrix::input_perm records the original column of each (exact; the kernels
// gather x). Every tensor's dtype and shape is checked; errors say what, where and what to do.
#pragma once
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "model/quantized_checkpoint.h"

namespace lowbit {

// quantization_config of a GPTQ / AWQ checkpoint, validated.
struct HubQuantConfig {
  std::string method;       // "gptq" | "awq"
  int bits = 4;             // GPTQ 2/3/4/8, AWQ 4
  int group_size = 128;     // -1: one group per row
  bool sym = true;          // GPTQ declared symmetry (AWQ: false)
  bool desc_act = false;    // GPTQ act-order (informational: g_idx decides)
  bool gptq_v2 = false;     // GPTQ checkpoint_format "gptq_v2": zeros stored without the -1
  std::string awq_version;  // "gemm"
};
HubQuantConfig hub_quant_config(const nlohmann::json& qc, const std::string& source);
bool is_hub_quant_method(const std::string& method);  // "gptq" or "awq"

// An act-order group index (GPTQ g_idx, compressed-tensors weight_g_idx): g_idx[c] is the group of input
// column c of g_idx.size() columns in groups of `group_size` (<= 0 or wider than the row: one group). Every
// group must hold exactly group_size columns (the last one the rest), wherever they sit. Returns the columns
// sorted by group, stable (stored column j = input column perm[j], QuantizedMatrix::input_perm), or an empty
// vector for the trivial c / group_size. Error("model") naming `what` (the tensor and file) otherwise;
// `declared_group_size` is the config's value, for the message.
std::vector<int32_t> act_order_permutation(const std::vector<int32_t>& g_idx, int group_size,
                                           int declared_group_size, const std::string& what);

// Rebuilds module `m`'s QuantizedMatrix [rows, cols] from its GPTQ / AWQ tensors.
QuantizedMatrix unpack_hub_matrix(const std::map<std::string, TensorView>& tensors, const std::string& m,
                                  const HubQuantConfig& hc, int64_t rows, int64_t cols,
                                  const std::string& source);

// The GPTQ / AWQ tensors of one matrix (suffixes qweight, qzeros, scales[, g_idx]). q must be an INT group or
// channel scheme the layout can hold (GPTQ: b 2/3/4/8, rows and cols multiples of pf (32 for b = 3); AWQ:
// int4 groups dividing cols, rows a multiple of 8, no input_perm) with scales exactly representable in f16;
// GPTQ v1 cannot store a zero point 0 (it would read back as 2^b). GPTQ writes an input-permuted matrix in
// its original column order with the act-order g_idx. Throws UsageError("export") naming `module` and what to
// do otherwise.
std::vector<PackedTensor> pack_gptq(const QuantizedMatrix& q, bool v2, const std::string& module);
std::vector<PackedTensor> pack_awq(const QuantizedMatrix& q, const std::string& module);

// Decoder linear shapes by Hugging Face module name ("model.layers.0.self_attn.q_proj" -> [q_dim, dim]), with
// lm_head and model.embed_tokens.
std::map<std::string, std::pair<int64_t, int64_t>> hf_matrix_shapes(const ModelConfig& c);

// Loads a GPTQ / AWQ checkpoint onto ModelWeights (see load_quantized_weights).
ModelWeights load_hub_quantized_weights(const io::HfCheckpoint& ck, const ModelConfig& c,
                                        std::shared_ptr<const void> owner, DenseMode mode);

}  // namespace lowbit
