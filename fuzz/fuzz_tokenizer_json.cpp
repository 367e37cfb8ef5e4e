// libFuzzer target: arbitrary bytes as tokenizer.json, then encode/decode/stream with whatever loaded.
// Input layout: <tokenizer.json bytes> [NUL <text to encode>]; without a NUL a fixed multilingual text is
// used. Any lowbit::Error is an expected rejection; crashes, sanitizer reports and other exceptions are bugs.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t json_len = nul ? static_cast<size_t>(nul - data) : size;
  std::string text = "Hello, world! I've 12345 naïve 日本語 🦙\t\n  <|endoftext|><s>\xff\xc3";
  if (nul) text.assign(reinterpret_cast<const char*>(nul + 1), size - json_len - 1);

  const nlohmann::json tj = nlohmann::json::parse(data, data + json_len, nullptr, /*allow_exceptions=*/false);
  if (tj.is_discarded()) return 0;
  try {
    const lowbit::Tokenizer tok = lowbit::load_tokenizer_hf(tj, nlohmann::json::object());
    for (bool special : {false, true}) {
      const std::vector<int32_t> ids = tok.encode(text, /*add_bos=*/true, special);
      (void)tok.decode(ids, special);
      lowbit::TokenStreamDecoder dec(tok, special);
      for (int32_t id : ids) (void)dec.push(id);
      (void)dec.flush();
    }
  } catch (const lowbit::Error&) {
    // rejected input: fine
  }
  return 0;
}
