#include "core/memory.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "core/error.h"

#include <malloc.h>

namespace lowbit {

void release_free_heap() {
  malloc_trim(0);
}

void AlignedFree::operator()(void* p) const noexcept {
  std::free(p);
}

int64_t checked_size(std::initializer_list<int64_t> factors, std::string_view module, std::string_view what) {
  constexpr int64_t kMax = int64_t(1) << 62;
  int64_t p = 1;
  for (int64_t f : factors) {
    if (f < 0) throw UsageError(module, std::string(what) + ": negative size " + std::to_string(f));
    if (f != 0 && p > kMax / f)
      throw UsageError(module, std::string(what) + " would need more than 2^62 bytes; lower the sizes given");
    p *= f;
  }
  return p;
}

std::unique_ptr<uint8_t[], AlignedFree> aligned_bytes(size_t n) {
  size_t sz = (n + kAlign - 1) / kAlign * kAlign;
  if (sz == 0) sz = kAlign;
  void* p = std::aligned_alloc(kAlign, sz);
  if (!p)
    fail("core", "out of memory allocating " + std::to_string(n) + " bytes; lower the context or batch size");
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

uint64_t peak_rss_bytes() {
  return status_kb("VmHWM:");
}
uint64_t current_rss_bytes() {
  return status_kb("VmRSS:");
}

uint64_t anon_huge_page_bytes() {
  std::ifstream in("/proc/self/smaps_rollup");
  std::string line;
  const std::string key = "AnonHugePages:";
  while (std::getline(in, line))
    if (line.compare(0, key.size(), key) == 0)
      return std::strtoull(line.c_str() + key.size(), nullptr, 10) * 1024ull;
  return 0;
}

std::string thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(in, line)) return "";
  const size_t a = line.find('['),
               b = line.find(']');  // "always [madvise] never": the bracketed one is active
  return a != std::string::npos && b != std::string::npos && b > a ? line.substr(a + 1, b - a - 1) : "";
}

bool malloc_huge_pages() {
  const char* t = std::getenv("GLIBC_TUNABLES");
  const std::string mode = thp_mode();
  return t && std::string(t).find("glibc.malloc.hugetlb=1") != std::string::npos &&
         (mode == "always" || mode == "madvise");
}

std::string huge_page_tunables(const char* lowbit_hugepages, const char* glibc_tunables,
                               const std::string& thp) {
  if (lowbit_hugepages && std::string(lowbit_hugepages) != "0" && std::string(lowbit_hugepages) != "1")
    throw UsageError("core",
                     "LOWBIT_HUGEPAGES=" + std::string(lowbit_hugepages) +
                         " is not 0 or 1; use 0 to keep weights off huge pages, 1 (or unset) for huge pages");
  if (lowbit_hugepages && std::string(lowbit_hugepages) == "0") return "";
  if (thp != "always" && thp != "madvise") return "";
  const std::string t = glibc_tunables ? glibc_tunables : "";
  if (t.find("glibc.malloc.hugetlb") != std::string::npos) return "";
  return t.empty() ? "glibc.malloc.hugetlb=1" : t + ":glibc.malloc.hugetlb=1";
}

int64_t parse_bytes(std::string_view text, std::string_view module) {
  const std::string s(text);
  auto bad = [&](const std::string& why) -> int64_t {
    throw UsageError(std::string(module), "invalid size '" + s + "' (" + why +
                                              "); write a positive number with a unit, e.g. 24GiB, 80GB, "
                                              "512MiB, 4.5MB");
  };
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  if (i == s.size()) return bad("empty");
  if (s[i] == '-') return bad("negative");
  const char* begin = s.c_str() + i;
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  if (end == begin) return bad("no number");
  if (!std::isfinite(v)) return bad("not a finite number");
  std::string unit;
  for (const char* p = end; *p; ++p)
    if (!std::isspace(static_cast<unsigned char>(*p)))
      unit += static_cast<char>(std::tolower(static_cast<unsigned char>(*p)));
  double mul = 0;
  if (unit.empty() || unit == "b")
    mul = 1;
  else if (unit == "kb")
    mul = 1e3;
  else if (unit == "k" || unit == "kib")
    mul = 1024.0;
  else if (unit == "mb")
    mul = 1e6;
  else if (unit == "m" || unit == "mib")
    mul = 1024.0 * 1024;
  else if (unit == "gb")
    mul = 1e9;
  else if (unit == "g" || unit == "gib")
    mul = 1024.0 * 1024 * 1024;
  else if (unit == "tb")
    mul = 1e12;
  else if (unit == "t" || unit == "tib")
    mul = 1024.0 * 1024 * 1024 * 1024;
  else
    return bad("unknown unit '" + unit + "'; use B, KB, KiB, MB, MiB, GB, GiB, TB or TiB");
  const double bytes = v * mul;
  if (!(bytes >= 1)) return bad("must be at least 1 byte");
  if (bytes > 1125899906842624.0) return bad("larger than 1 PiB; no single device has that");
  return static_cast<int64_t>(bytes);
}

}  // namespace lowbit
