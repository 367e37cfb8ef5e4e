#include "core/parallel.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace lowbit {
namespace {
int initial_threads() {
  if (const char* s = std::getenv("LOWBIT_THREADS")) {
    int n = std::atoi(s);
    if (n > 0) return n;
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}
int g_threads = initial_threads();
}  // namespace

int num_threads() { return g_threads; }
void set_num_threads(int n) { g_threads = std::max(1, n); }
int thread_index() { return omp_get_thread_num(); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int nt = static_cast<int>(std::min<int64_t>(g_threads, (n + grain - 1) / grain));
  if (nt <= 1 || omp_in_parallel()) {
    fn(0, n);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    int t = omp_get_thread_num();
    int64_t chunk = (n + nt - 1) / nt;
    int64_t b = t * chunk, e = std::min(n, b + chunk);
    if (b < e) fn(b, e);
  }
}

}  // namespace lowbit
