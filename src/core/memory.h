// Aligned, owning byte buffers and process memory statistics.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace lowbit {

constexpr size_t kAlign = 64;  // cache line and AVX-512 register width

struct AlignedFree {
  void operator()(void* p) const noexcept;
};

// 64-byte aligned, zero-initialised bytes. Throws lowbit::Error("core") when allocation fails.
std::unique_ptr<uint8_t[], AlignedFree> aligned_bytes(size_t n);

// Peak resident set size of this process (VmHWM), bytes.
uint64_t peak_rss_bytes();
// Current resident set size (VmRSS), bytes.
uint64_t current_rss_bytes();
// Returns freed heap pages to the OS (glibc malloc_trim) after a large transient structure is released, so it
// does not count in later peaks.
void release_free_heap();

}  // namespace lowbit
