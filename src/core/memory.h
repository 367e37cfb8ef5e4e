// Aligned, owning byte buffers and process memory statistics.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

namespace lowbit {

constexpr size_t kAlign = 64;  // cache line and AVX-512 register width

struct AlignedFree {
  void operator()(void* p) const noexcept;
};

// The product of non-negative sizes (elements, bytes), checked: throws UsageError(module) naming `what` when
// a factor is negative or the product passes 2^62, so a huge flag value gets a clear error instead of a
// wrapped size and a too-small buffer.
int64_t checked_size(std::initializer_list<int64_t> factors, std::string_view module, std::string_view what);

// "24GiB", "24 GB", "512MiB", "4.5MB", "1.5e9", "80G" -> bytes. Units: B, K/KB, KiB, M/MB, MiB, G/GB, GiB,
// T/TB, TiB (case-insensitive; K/M/G/T alone are binary, KB/MB/GB/TB decimal). UsageError(module) for
// non-numbers,
// <= 0, NaN/Inf, unknown units, > 1 PiB.
int64_t parse_bytes(std::string_view s, std::string_view module = "core");

// 64-byte aligned, zero-initialised bytes. Throws lowbit::Error("core") when allocation fails.
std::unique_ptr<uint8_t[], AlignedFree> aligned_bytes(size_t n);

// Peak resident set size of this process (VmHWM), bytes.
uint64_t peak_rss_bytes();
// Current resident set size (VmRSS), bytes.
uint64_t current_rss_bytes();
// Anonymous memory of this process held in transparent huge pages (AnonHugePages of /proc/self/smaps_rollup),
// bytes; 0 where the kernel does not report it.
uint64_t anon_huge_page_bytes();

// The kernel's transparent-huge-page mode (/sys/kernel/mm/transparent_hugepage/enabled): "always", "madvise",
// "never", or "" where the file is missing.
std::string thp_mode();

// Weights stream from memory at every decoded token, and on 4 KiB pages the stream takes a TLB miss (and a
// page walk) every 4 KiB. glibc's malloc advises its memory into transparent huge pages under the tunable
// glibc.malloc.hugetlb=1, which glibc reads only at process start. Returns the GLIBC_TUNABLES value a process
// should be re-executed with to get it, or "" when it should not: LOWBIT_HUGEPAGES=0, THP mode "never" or
// unknown, or GLIBC_TUNABLES already naming the tunable (the re-executed process itself). Throws
// UsageError("core") for a LOWBIT_HUGEPAGES other than 0 or 1.
std::string huge_page_tunables(const char* lowbit_hugepages, const char* glibc_tunables,
                               const std::string& thp);
// True when this process runs with that tunable (large heap blocks land in huge pages) and THP is not
// "never".
bool malloc_huge_pages();

// Returns freed heap pages to the OS (glibc malloc_trim) after a large transient structure is released, so it
// does not count in later peaks.
void release_free_heap();

}  // namespace lowbit
