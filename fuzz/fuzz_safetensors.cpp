// libFuzzer target: safetensors header + data-section validation. Only lowbit::Error may escape the parser.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = lowbit::io::SafetensorsFile::parse(data, size, "fuzz.safetensors");
    for (const auto& [name, v] : f.tensors) {
      if (v.data < data || v.data + v.nbytes > data + size) __builtin_trap();  // view outside the input
    }
  } catch (const lowbit::Error&) {
  }
  return 0;
}
