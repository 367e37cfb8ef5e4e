// libFuzzer target: the layers above the GGUF parser. A GGUF that parses becomes a ModelConfig
// (config_from_gguf) and a tokenizer (load_tokenizer_gguf), which then encodes, decodes and streams a fixed
// text; every metadata array is decoded element by element (lazy decoding). Only lowbit::Error may escape.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "arch/config.h"
#include "core/error.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace {

void decode_arrays(const lowbit::io::GgufValue& v, int depth) {
  if (v.type != lowbit::io::GgufType::ARRAY || depth > 8) return;
  const lowbit::io::GgufArray& a = v.as_array();
  // Ends and a sample of the middle: whole 1 M-element arrays would make each run slow.
  for (size_t i = 0; i < a.size(); i = i < 32 || i + 32 >= a.size() ? i + 1 : a.size() - 32) {
    decode_arrays(a[i], depth + 1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lowbit;
  io::GgufFile g;
  try {
    g = io::GgufFile::parse(data, size, "fuzz.gguf");
  } catch (const Error&) {
    return 0;
  }
  for (const auto& [key, v] : g.kv) decode_arrays(v, 0);
  try {
    ModelConfig c = config_from_gguf(g);
    (void)c.to_json();
  } catch (const Error&) {
  }
  try {
    const Tokenizer tok = load_tokenizer_gguf(g);
    const std::string text =
        "Hello, world! I've 12345 naïve 日本語 🦙\t\n  <s></s><|endoftext|>\xff\xc3";
    for (bool special : {false, true}) {
      const std::vector<int32_t> ids = tok.encode(text, /*add_bos=*/true, special);
      (void)tok.decode(ids, special);
      TokenStreamDecoder dec(tok, special);
      for (int32_t id : ids) (void)dec.push(id);
      (void)dec.flush();
    }
  } catch (const Error&) {
  }
  return 0;
}
