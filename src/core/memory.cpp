#include "core/memory.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "core/error.h"

#include <malloc.h>

namespace lowbit {

void release_free_heap() { malloc_trim(0); }

void AlignedFree::operator()(void* p) const noexcept { std::free(p); }

std::unique_ptr<uint8_t[], AlignedFree> aligned_bytes(size_t n) {
  size_t sz = (n + kAlign - 1) / kAlign * kAlign;
  if (sz == 0) sz = kAlign;
  void* p = std::aligned_alloc(kAlign, sz);
  if (!p) fail("core", "out of memory allocating " + std::to_string(n) + " bytes; lower the context or batch size");
  std::memset(p, 0, sz);
  return std::unique_ptr<uint8_t[], AlignedFree>(static_cast<uint8_t*>(p));
}

namespace {
uint64_t status_kb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  size_t klen = std::strlen(key);
  while (std::getline(in, line)) {
    if (line.compare(0, klen, key) == 0) return std::strtoull(line.c_str() + klen, nullptr, 10) * 1024ull;
  }
  return 0;
}
}  // namespace

uint64_t peak_rss_bytes() { return status_kb("VmHWM:"); }
uint64_t current_rss_bytes() { return status_kb("VmRSS:"); }

}  // namespace lowbit
