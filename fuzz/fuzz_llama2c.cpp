// libFuzzer target: llama2.c checkpoint header and size checks. Only lowbit::Error may escape the parser.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "io/llama2c.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto ck = lowbit::io::Llama2cCheckpoint::parse(data, size, "fuzz.bin");
    for (const auto& [name, v] : ck.tensors) {
      if (v.data < data || v.data + v.nbytes > data + size) __builtin_trap();  // view outside the input
    }
  } catch (const lowbit::Error&) {
  }
  return 0;
}
