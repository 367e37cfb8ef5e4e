// Parallel loops over the machine's cores: one process-wide pool (parallel.cpp) in which the calling thread
// works too and never waits for a worker to wake up, so a loaded machine slows a loop down instead of
// stalling it. Loops do not nest (an inner parallel_for runs on the thread that reached it).
#pragma once
#include <cstdint>
#include <functional>

namespace lowbit {

// Number of worker threads used by parallel_for (default: all logical cores, or LOWBIT_THREADS).
int num_threads();
void set_num_threads(int n);

// Calls fn(begin, end) on disjoint chunks covering [0, n), in parallel (chunks shrink from (n / 2 threads) to
// n / (16 threads) as the loop drains, each at least `grain` long; any thread may run any number of them).
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// Index of the calling thread in [0, num_threads()): 0 for the thread that called parallel_for (and outside
// loops), 1.. for pool workers.
int thread_index();

}  // namespace lowbit
