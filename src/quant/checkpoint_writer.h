// Writes a quantized model as a Hugging Face style directory (layouts: model/quantized_checkpoint.h):
//   config.json                 the model config + quantization_config (compressed-tensors; lowbit_*
//   extension keys) model.safetensors           or model-0000i-of-0000n.safetensors +
//   model.safetensors.index.json when large tokenizer files             copied from the source (HF:
//   tokenizer.json & co; llama2.c: tokenizer.bin) lowbit_manifest.json        provenance: source + sha256,
//   recipe, calibration + sha256, per-tensor formats and
//                               errors, unquantized tensors with reasons, warnings, tool version/commit
// Atomic: everything is written into DIR.tmp-XXXXXX next to DIR and renamed at the end; an existing DIR is
// refused unless force; any failure removes the temporary directory, so DIR is either complete or absent.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/model.h"
#include "quant/quantizer.h"

namespace lowbit::quant {

struct WriteOptions {
  bool force = false;                      // replace an existing output directory
  int64_t shard_bytes = int64_t{2} << 30;  // shard model.safetensors above this size
  std::string tokenizer_path;              // llama2.c tokenizer (default: found next to the source model)
  int64_t max_model_bytes = 0;             // > 0: refuse (write nothing) when the model files exceed it
  int fail_after_files = -1;               // test hook: throw after writing this many files (atomicity tests)
};

struct WriteResult {
  std::string dir;
  int64_t bytes = 0;        // all files written
  int64_t model_bytes = 0;  // checkpoint_model_bytes: all but the manifest
  int64_t parameters = 0;   // weights in the files: matrices (tied ones once), norms, biases
  int shards = 0;
  std::vector<std::string> files;
};

// The tokenizer files the writer copies from the source: {source path, name in the checkpoint}.
std::vector<std::pair<std::string, std::string>> tokenizer_files(const Model& m,
                                                                 const std::string& tokenizer_path);

// The files of a Hugging Face / lowbit checkpoint directory an engine reads to run it, with their sizes, by
// name: safetensors, JSON (config, index, tokenizer) and tokenizer.model / tokenizer.bin, not
// lowbit_manifest.json, which is a report. Everything the writer puts next to the manifest is one of these.
std::vector<std::pair<std::string, int64_t>> checkpoint_model_files(const std::string& dir);
// Their total: the model bytes `lowbit quantize --budget`, inspect and whole-file bpw count.
int64_t checkpoint_model_bytes(const std::string& dir);

WriteResult write_quantized_checkpoint(const Model& m, const QuantReport& rep, const std::string& out_dir,
                                       const WriteOptions& o = {});

}  // namespace lowbit::quant
