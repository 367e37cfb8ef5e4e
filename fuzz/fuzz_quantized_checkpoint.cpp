// libFuzzer target: the quantized-checkpoint loader (compressed-tensors config.json + safetensors shard) in
// memory. Input layout: <config.json> NUL <safetensors bytes>. A config with a quantization_config goes
// through config_from_hf, apply_lowbit_config_keys and load_quantized_weights (scheme_from_ct_args per config
// group, unpack_quantized per quantized module); each config group's "weights" args also go through
// scheme_from_ct_args directly. quant_method gptq / awq configs go through hub_quant_config and
// unpack_hub_matrix (model/hub_layouts.h; make_corpus.sh adds GPTQ and AWQ seeds). Only lowbit::Error may
// escape.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "arch/config.h"
#include "core/error.h"
#include "fuzz_util.h"
#include "io/hf_checkpoint.h"
#include "io/safetensors.h"
#include "model/quantized_checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lowbit;
  const auto parts = fuzz::split_parts(data, size, 2);
  const nlohmann::json cfg = nlohmann::json::parse(parts[0], nullptr, /*allow_exceptions=*/false);
  if (cfg.is_discarded() || !is_quantized_config(cfg)) return 0;

  if (const auto& groups = cfg["quantization_config"].value("config_groups", nlohmann::json());
      groups.is_object()) {
    for (const auto& g : groups) {
      if (!g.is_object() || !g.contains("weights")) continue;
      try {
        (void)scheme_from_ct_args(g["weights"], g.value("format", std::string("pack-quantized")), "fuzz");
      } catch (const Error&) {
      }
    }
  }
  try {
    ModelConfig c = config_from_hf(cfg);
    apply_lowbit_config_keys(cfg, &c);
    io::HfCheckpoint ck;
    ck.dir = "fuzz";
    ck.config = cfg;
    ck.shards.push_back(io::SafetensorsFile::parse(reinterpret_cast<const uint8_t*>(parts[1].data()),
                                                   parts[1].size(), "fuzz.safetensors"));
    ck.tensors = ck.shards.back().tensors;
    (void)load_quantized_weights(ck, c, nullptr, DenseMode::Native);
  } catch (const Error&) {
  }
  return 0;
}
