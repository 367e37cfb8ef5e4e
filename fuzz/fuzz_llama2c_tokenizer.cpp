// libFuzzer target: llama2.c tokenizer.bin. The first 4 input bytes choose vocab_size (so the fuzzer also
// explores mismatched and non-positive sizes); the rest is the file. Only lowbit::Error may escape.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "io/llama2c.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  int32_t vocab;
  std::memcpy(&vocab, data, 4);
  try {
    lowbit::io::Llama2cTokenizerData::parse(data + 4, size - 4, vocab, "fuzz.tokenizer");
  } catch (const lowbit::Error&) {
  }
  return 0;
}
