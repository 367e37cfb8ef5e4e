// libFuzzer target: quantization recipes. The first input byte picks the entry point, the rest is its text:
//   even: a --recipe argument (parse_recipe_arg: presets, WxAy[KVz], scheme[,key=value...]); arguments that
//         name a file (a '/' or a .json suffix) are skipped: the target must not read arbitrary paths;
//   odd:  a JSON recipe (recipe_from_json).
// A recipe that parses is planned against a small model (plan_recipe: group sizes against real shapes) and
// must survive its own to_json round trip. Only lowbit::Error may escape.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "arch/config.h"
#include "core/error.h"
#include "quant/recipe.h"

namespace {

lowbit::ModelConfig small_model() {
  lowbit::ModelConfig c;
  c.dim = 96;
  c.n_layers = 2;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.ffn_dim = 256;
  c.vocab_size = 320;
  c.tie_embeddings = true;
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lowbit;
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  quant::Recipe r;
  try {
    if (data[0] % 2 == 0) {
      if (text.find('/') != std::string::npos || (text.size() > 5 && text.ends_with(".json"))) return 0;
      r = quant::parse_recipe_arg(text);
    } else {
      const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded()) return 0;
      r = quant::recipe_from_json(j, "fuzz");
    }
  } catch (const Error&) {
    return 0;
  }
  // A parsed recipe re-reads from its own normalised JSON; a rejection there is a bug, not bad input.
  const nlohmann::json normal = r.to_json();
  try {
    (void)quant::recipe_from_json(normal, "fuzz round trip");
  } catch (const Error& e) {
    std::fprintf(stderr, "recipe does not round-trip: %s\n%s\n", e.what(), normal.dump().c_str());
    __builtin_trap();
  }
  try {
    static const ModelConfig c = small_model();
    std::vector<std::string> warnings;
    (void)quant::plan_recipe(r, c, &warnings);
  } catch (const Error&) {
  }
  return 0;
}
