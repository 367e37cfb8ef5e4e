// Far software prefetch of streamed weights (a few KiB ahead of the loads), into L1 or only into L2.
//
// Why two targets: a decode kernel re-reads its activations for every row while each weight line passes
// through once. With T0 the prefetched weight lines land in L1; once a tile's rows of codes plus the
// activations they multiply need more than half the L1D (32 KiB on Zen 4), the weight lines evict activation
// lines the next row reads again, and the stream slows down (int4:g128 1024 x 14336 from DRAM, 2
// threads: 19.7 GB/s with T0, 29.7 with T1). Then the prefetch fills L2 only (T1): the codes come from L2 at
// demand and the activations stay in L1. Below that size T0 measured faster (the L2 round trip is exposed:
// int4:g128 896 x 4864 1.05x, BF16 128256 x 2048 1.17x the time with T1). Measurements: docs/kernels.md,
// "Prefetch into L1 or L2".
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace lowbit::kern {

constexpr int64_t kL1StreamBytes = 16 * 1024;

// stream_bytes: code bytes one pass of the tile reads per row set (R rows); act_bytes: the activation bytes
// it multiplies them with (T tokens).
constexpr bool prefetch_to_l2(int64_t stream_bytes, int64_t act_bytes) {
  return stream_bytes + act_bytes >= kL1StreamBytes;
}

inline void prefetch_far(const void* p, bool l2) {
  if (l2)
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1);
  else
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
}

}  // namespace lowbit::kern
