// `lowbit inspect`: what a checkpoint holds — tensors, formats, bits per weight (overall and per tensor),
// scales and where they came from, unquantized layers and why, KV-cache scales, provenance (from
// lowbit_manifest.json). Works on any model lowbit loads (quantized HF directory, plain HF directory,
// .safetensors, GGUF, llama2.c).
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace lowbit::quant {

// Loads the model (validating every quantized tensor) and returns the report. Throws Error/UsageError.
nlohmann::json inspect_checkpoint(const std::string& path);
// Readable tables of the same report.
std::string inspect_table(const nlohmann::json& report, bool per_tensor);

}  // namespace lowbit::quant
