// libFuzzer target: a Hugging Face model directory above the safetensors parser. Input layout:
//   <config.json> NUL <model.safetensors.index.json> NUL <shard bytes>
// written into a per-process scratch directory: with an index the shard is model-00001-of-00001.safetensors
// (what the seeds' index names), without one it is model.safetensors. config_from_hf and
// apply_lowbit_config_keys run on the parsed config.json alone and again after HfCheckpoint::open.
// Only lowbit::Error may escape.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "arch/config.h"
#include "core/error.h"
#include "fuzz_util.h"
#include "io/hf_checkpoint.h"
#include "model/quantized_checkpoint.h"

namespace {

void model_config(const nlohmann::json& j) {
  try {
    lowbit::ModelConfig c = lowbit::config_from_hf(j);
    lowbit::apply_lowbit_config_keys(j, &c);
    (void)lowbit::is_quantized_config(j);
    (void)c.to_json();
  } catch (const lowbit::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lowbit;
  const auto parts = fuzz::split_parts(data, size, 3);
  const nlohmann::json cfg = nlohmann::json::parse(parts[0], nullptr, /*allow_exceptions=*/false);
  if (!cfg.is_discarded()) model_config(cfg);

  const auto& dir = fuzz::scratch_dir("hf");
  const bool indexed = !parts[1].empty();
  fuzz::put_file(dir / "config.json", parts[0]);
  fuzz::put_file(dir / "model.safetensors.index.json", parts[1], indexed);
  fuzz::put_file(dir / "model-00001-of-00001.safetensors", parts[2], indexed);
  fuzz::put_file(dir / "model.safetensors", parts[2], !indexed);
  try {
    const io::HfCheckpoint ck = io::HfCheckpoint::open(dir.string());
    for (const auto& [name, v] : ck.tensors) {
      if (v.nbytes && !v.data) __builtin_trap();
    }
    model_config(ck.config);
  } catch (const Error&) {
  }
  return 0;
}
