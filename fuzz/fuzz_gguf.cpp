// libFuzzer target: GGUF v2/v3 metadata and tensor infos. Only lowbit::Error may escape the parser.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto g = lowbit::io::GgufFile::parse(data, size, "fuzz.gguf");
    for (const auto& [name, v] : g.tensors) {
      if (v.data < data || v.data + v.nbytes > data + size) __builtin_trap();  // view outside the input
    }
  } catch (const lowbit::Error&) {
  }
  return 0;
}
