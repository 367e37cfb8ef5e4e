// Quantized Hugging Face checkpoints (compressed-tensors conventions, ../shared/docs/FORMATS.md), shared by
// the loader (here, model rung) and the writer (quant rung) so both sides use one definition of every layout.
//
// config.json["quantization_config"] (quant_method "compressed-tensors") lists config_groups; each group has
// targets (exact module names, "re:" regexes or "Linear"), "weights" args, "input_activations" args and
// "format"; lowbit's exact QuantScheme string per group is in quantization_config.lowbit_groups (older
// checkpoints: "lowbit_scheme" inside the group), where compressed-tensors, which refuses extra group keys,
// ignores it. Tensors per quantized module M (M = "model.layers.0.self_attn.q_proj"), by layout:
//   pack-quantized (INT, f32/f16/bf16 scales):
//     M.weight_packed     int32 [rows, ceil(cols/pf)], pf = 32/b values per word, value k of a word at bits
//                         [k*b, k*b+b), stored offset-binary (signed q + 2^(b-1), i.e. lowbit's INT code)
//     M.weight_scale      [grid.rows, grid.cols] (tensor: [1]) in the scale dtype (F32/F16/BF16)
//     M.weight_zero_point int32 [ceil(grid.rows/pf), grid.cols] (asymmetric only): signed zero + 2^(b-1),
//                         packed along rows like pack_to_int32(packed_dim=0)
//     M.weight_shape      int64 [2] = [rows, cols]
//     M.weight_g_idx      int32 [cols] (act-order only, weights args "actorder": "group"): the group of each
//                         input column; weight_packed keeps the columns in their own order and the scale /
//                         zero point of column c is cell g_idx[c]. Loads as QuantizedMatrix::input_perm
//                         (columns sorted by group, as a GPTQ g_idx: model/hub_layouts.h); written for a
//                         matrix that has one.
//   float-quantized (E4M3FN/E5M2 elements, f32/f16/bf16 scales): M.weight F8 [rows, cols], M.weight_scale
//   nvfp4-pack-quantized: M.weight_packed uint8 [rows, cols/2] (two E2M1, low nibble first),
//     M.weight_scale F8_E4M3 [rows, ceil(cols/16)], M.weight_global_scale F32 [1] (x = e2m1 * s / global)
//   mxfp4-pack-quantized: M.weight_packed uint8 [rows, cols/2], M.weight_scale uint8 E8M0 [rows,
//   ceil(cols/32)] lowbit-packed (lowbit extension: NF4, FP4/FP6 with f16 scales, INT with e4m3/e8m0 scales,
//   MXFP8/6, GGUF
//     blocks, ...): M.weight_packed uint8 [rows, row_bytes] = QuantizedMatrix::codes exactly,
//     M.weight_scale raw scale codes (F32/F16/BF16/F8_E4M3, U8 for E8M0, I8 for NF4 double-quant codes),
//     M.weight_zero_point uint8 [grid] (asymmetric), M.weight_global_scale F32 [1] (NVFP4),
//     M.weight_dq_scale F32 [chunks] + M.weight_dq_offset F32 [1] (NF4 double quantization), M.weight_shape.
// Static activation scales: M.input_scale F32 [1]. KV-cache scales: model.layers.{i}.self_attn.k_scale /
// v_scale F32 [1] (per tensor) or [n_kv_heads] (per head).
#pragma once
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "arch/config.h"
#include "io/hf_checkpoint.h"
#include "model/weights.h"
#include "tensor/qtensor.h"

namespace lowbit {

// "layers.3.w_gate" -> "model.layers.3.mlp.gate_proj"; "tok_embed" -> "model.embed_tokens"; "lm_head" ->
// "lm_head".
std::string hf_module_name(const std::string& lowbit_name);

enum class CkptLayout { PackQuantized, FloatQuantized, Nvfp4Packed, Mxfp4Packed, LowbitPacked };
const char* layout_name(CkptLayout l);  // "pack-quantized", "float-quantized", ..., "lowbit-packed"
CkptLayout checkpoint_layout(const QuantScheme& s, int64_t cols);

// One tensor of a quantized module, e.g. {"weight_packed", I32, [rows, words], bytes}.
struct PackedTensor {
  std::string suffix;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
std::vector<PackedTensor> pack_quantized(const QuantizedMatrix& q);
// Bytes pack_quantized writes for a [rows, cols] matrix quantized with `s`, without quantizing anything (the
// planner's exact weight bytes): codes (incl. int32 packing, per-row byte rounding), scales (incl. NF4
// double-quant tables and NVFP4's global scale), zero points, and the weight_shape metadata tensor.
struct PackedBytes {
  int64_t codes = 0, scales = 0, zeros = 0, metadata = 0;
  int64_t total() const { return codes + scales + zeros + metadata; }
};
PackedBytes packed_checkpoint_bytes(const QuantScheme& s, int64_t rows, int64_t cols);
// Rebuilds the QuantizedMatrix of `module` from its tensors; every dtype, shape and size is checked against
// the scheme (Error("model") naming the tensor and `source` otherwise).
QuantizedMatrix unpack_quantized(const std::map<std::string, TensorView>& tensors, const std::string& module,
                                 const QuantScheme& s, int64_t rows, int64_t cols, const std::string& source);

// The scheme compressed-tensors "weights" args describe (used when a group has no "lowbit_scheme").
QuantScheme scheme_from_ct_args(const nlohmann::json& weights, const std::string& format,
                                const std::string& where);
// compressed-tensors "weights" args for a scheme (num_bits, type, symmetric, strategy, group_size, ...).
nlohmann::json ct_args_from_scheme(const QuantScheme& s);

// True when config.json declares a quantization_config.
bool is_quantized_config(const nlohmann::json& config);

// Maps a quantized checkpoint onto ModelWeights: quantized modules become WeightKind::Quant (with their
// activation route and static scale), everything else goes through map_weights, and k_scale/v_scale are read.
// quant_method "gptq" / "awq" go to load_hub_quantized_weights (model/hub_layouts.h). Throws
// Error("model") for other quant methods (bitsandbytes, ...) with what to do.
ModelWeights load_quantized_weights(const io::HfCheckpoint& ck, const ModelConfig& c,
                                    std::shared_ptr<const void> owner, DenseMode mode);

// Rotated checkpoints (quant/rotate.h): config.json["lowbit_rotation"] records the rotation; its "r4" entry
// ({"order": ffn_dim, "factor": m, "construction": ...}) makes the loader set ModelWeights::down_rotation,
// with H_m read from this tensor (F32 [m, m], present when m > 1): nothing is recomputed or looked up at
// load.
inline constexpr const char* kDownRotationTensor = "lowbit_rotation.down_hadamard";

// lowbit extension keys in config.json for models exported from non-HF sources: "lowbit_rope_style"
// ("interleaved" | "half") keeps llama2.c / GGUF q/k row order without permuting rows.
void apply_lowbit_config_keys(const nlohmann::json& config, ModelConfig* c);

}  // namespace lowbit
