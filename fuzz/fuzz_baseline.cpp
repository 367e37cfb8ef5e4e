// libFuzzer target: the .lbb evaluation-baseline reader (eval::parse_baseline). The input is a whole file,
// but its sha256 trailer is recomputed first (bytes [n-40, n-8)): otherwise nearly every mutation would stop
// at the checksum and the header JSON / record checks behind it would never run. Only lowbit::Error may
// escape.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/hash.h"
#include "eval/baseline.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> b(data, data + size);
  if (size >= 40) {
    const std::string hex = lowbit::sha256_hex(b.data(), size - 40);
    for (size_t i = 0; i < 32; ++i)
      b[size - 40 + i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  try {
    const lowbit::eval::Baseline base = lowbit::eval::parse_baseline(b.data(), b.size(), "fuzz.lbb");
    if (base.table.rows.size() != static_cast<size_t>(base.meta.rows)) __builtin_trap();
  } catch (const lowbit::Error&) {
  }
  return 0;
}
