// Parallel loops over the machine's cores (OpenMP underneath). One pool for the whole process:
// callers never nest parallel regions, so there is no oversubscription.
#pragma once
#include <cstdint>
#include <functional>

namespace lowbit {

// Number of worker threads used by parallel_for (default: all logical cores, or LOWBIT_THREADS).
int num_threads();
void set_num_threads(int n);

// Calls fn(begin, end) on disjoint chunks covering [0, n), in parallel. Chunks are at least `grain` long.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// Index of the calling worker in [0, num_threads()), 0 outside parallel regions.
int thread_index();

}  // namespace lowbit
