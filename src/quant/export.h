// `lowbit export`: re-emits a quantized Hugging Face checkpoint (lowbit's compressed-tensors output, or an
// imported GPTQ / AWQ checkpoint) in another engine's layout, without touching a single code or scale:
//   gptq               AutoGPTQ / GPTQModel layout (model/hub_layouts.h), config.json quantization_config +
//                      quantize_config.json; checkpoint_format "gptq" (v1, zero - 1) or "gptq_v2"
//   awq                AutoAWQ GEMM layout, config.json quantization_config (zero_point true, version gemm)
//   compressed-tensors lowbit's quantized checkpoint layout (model/quantized_checkpoint.h); a
//                      compressed-tensors source keeps its config as is
// Every tensor that is not a quantized matrix (norms, embeddings, lm_head, biases, KV scales) is copied byte
// for byte, as are the tokenizer files and lowbit_manifest.json. GPTQ / AWQ hold one INT scheme for every
// decoder linear, weight-only: mixed recipes, quantized embeddings / lm_head, activation quantization and
// rotated models with an online R4 are refused with what to do instead. Atomic like the checkpoint writer
// (io/durable.h): OUT is complete or absent.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lowbit::quant {

struct ExportOptions {
  std::string to;        // "gptq" | "awq" | "compressed-tensors"
  bool gptq_v2 = false;  // GPTQ: write checkpoint_format "gptq_v2" (zero points stored as they are)
  bool force = false;    // replace an existing OUT
};

struct ExportResult {
  std::string dir;
  int64_t bytes = 0;
  int modules = 0;  // quantized matrices re-packed
  std::vector<std::string> files;
  std::vector<std::string> warnings;  // e.g. interleaved RoPE rows other engines do not expect
};

ExportResult export_checkpoint(const std::string& src_dir, const std::string& out_dir,
                               const ExportOptions& o);

}  // namespace lowbit::quant
