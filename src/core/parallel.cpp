// A small thread pool for parallel_for, built so that a busy machine cannot stall it.
//
// Why not an OpenMP parallel region per call: a region ends in a barrier that waits until every thread of the
// team has arrived, so when the machine is oversubscribed (other processes, or more threads than free cores)
// each region costs a scheduler time slice (~4 ms) whenever one worker is not running. A decode step makes
// ~50 products, so 2-thread decode on a loaded 2-core machine fell from ~650 to ~5 tokens/s.
//
// Here the caller publishes a job (a cursor over the items) and works through chunks itself; workers that are
// running take chunks too. Chunks shrink as the job drains (guided: what is left / (2 x threads), down to
// 1/16 of a thread's share), so the threads finish within a small chunk of each other: with four fixed
// chunks, 2-thread decode of a 0.5B model spent ~7 % of the caller's time waiting for the last one (the two
// cores stream at different rates); guided chunks cut that wait about 4x (measured with a wait timer in
// run()). The caller only waits for chunks a worker has actually started, never for a worker to wake up: if
// no worker shows up, the caller does all the work and returns. Idle workers spin briefly (a decode step
// issues products back to back), then sleep on a condition variable.
//
// Job lifetime (the job lives on the caller's stack): a worker announces itself (inside += 1) before it loads
// the job pointer and retires (inside -= 1) when done with it; the caller clears the pointer and then waits
// for inside == 0. With sequentially consistent atomics, a worker either is seen by the caller's wait or sees
// the cleared pointer.
#include "core/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace lowbit {

namespace {
// Spin-wait hint (x86 PAUSE: lets the sibling hyperthread run and saves power); nothing elsewhere.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

int initial_threads() {
  if (const char* s = std::getenv("LOWBIT_THREADS")) {
    int n = std::atoi(s);
    if (n > 0) return n;
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

thread_local int t_index = 0;  // 0 for callers, 1..n-1 for pool workers
thread_local bool t_in_parallel = false;

struct Job {
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0;
  int64_t min_chunk = 1;         // smallest chunk handed out (items)
  int64_t div = 2;               // a chunk is (items left) / div, at least min_chunk
  std::atomic<int64_t> next{0};  // first item not yet taken
  std::mutex error_mu;
  std::exception_ptr error;  // the first exception thrown by any chunk; rethrown by the caller
};

// Runs chunks of `job` until none is left.
void run_chunks(Job& job) {
  for (;;) {
    int64_t b = job.next.load(), e;
    do {
      if (b >= job.n) return;
      e = std::min(job.n, b + std::max(job.min_chunk, (job.n - b) / job.div));
    } while (!job.next.compare_exchange_weak(b, e));
    try {
      (*job.fn)(b, e);
    } catch (...) {
      // Stop handing out chunks and keep the first exception for the caller (a worker must not let it
      // escape).
      std::lock_guard<std::mutex> lock(job.error_mu);
      if (!job.error) job.error = std::current_exception();
      job.next.store(job.n);
    }
  }
}

class Pool {
 public:
  explicit Pool(int workers) {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this, i] { worker(i + 1); });
  }
  ~Pool() {
    stop_.store(true);
    publish();
    for (auto& t : threads_) t.join();
  }
  int size() const { return static_cast<int>(threads_.size()) + 1; }

  void run(int64_t n, int64_t min_chunk, int64_t div, const std::function<void(int64_t, int64_t)>& fn) {
    // One job at a time: a second thread calling parallel_for concurrently runs its loop by itself.
    std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
    if (!busy.owns_lock()) {
      fn(0, n);
      return;
    }
    Job job;
    job.fn = &fn;
    job.n = n;
    job.min_chunk = min_chunk;
    job.div = div;
    job_.store(&job);
    publish();
    t_in_parallel = true;
    run_chunks(job);
    t_in_parallel = false;
    job_.store(nullptr);
    // Wait for workers still inside the job (they hold chunks or are about to see that none is left).
    for (int spins = 0; inside_.load() != 0; ++spins) {
      if (spins < 4096) {
        cpu_relax();
      } else {
        std::this_thread::yield();
      }
    }
    if (job.error) std::rethrow_exception(job.error);
  }

 private:
  // New generation, then wake sleepers. Taking the mutex orders the increment against a worker that is
  // between its predicate check and its wait, so no wake-up is lost (std::atomic::wait on 64-bit values could
  // lose them in this libstdc++).
  void publish() {
    gen_.fetch_add(1);
    { std::lock_guard<std::mutex> lk(sleep_mu_); }
    sleep_cv_.notify_all();
  }

  void worker(int index) {
    t_index = index;
    t_in_parallel = true;
    // Starts from generation 0, not the current one: a job or the stop published before this thread ran is
    // then seen at once instead of being waited for.
    uint64_t seen = 0;
    for (;;) {
      // Spin for a while (~50 us) before sleeping: decode issues products back to back.
      uint64_t g = gen_.load();
      for (int spins = 0; g == seen && spins < 20000; ++spins) {
        cpu_relax();
        g = gen_.load();
      }
      if (g == seen) {
        std::unique_lock<std::mutex> lk(sleep_mu_);
        sleep_cv_.wait(lk, [&] { return gen_.load() != seen || stop_.load(); });
        g = gen_.load();
      }
      seen = g;
      if (stop_.load()) return;
      inside_.fetch_add(1);
      if (Job* job = job_.load()) run_chunks(*job);
      inside_.fetch_sub(1);
    }
  }

  std::mutex run_mu_, sleep_mu_;
  std::condition_variable sleep_cv_;
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> gen_{0};
  std::atomic<Job*> job_{nullptr};
  std::atomic<int> inside_{0};
  std::atomic<bool> stop_{false};
};

int g_threads = initial_threads();
std::mutex g_pool_mu;
std::unique_ptr<Pool> g_pool;

Pool& pool() {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (!g_pool || g_pool->size() != g_threads) {
    g_pool.reset();
    g_pool = std::make_unique<Pool>(g_threads - 1);
  }
  return *g_pool;
}

}  // namespace

int num_threads() {
  return g_threads;
}
void set_num_threads(int n) {
  g_threads = std::max(1, n);
}
int thread_index() {
  return t_index;
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int nt = static_cast<int>(std::min<int64_t>(g_threads, (n + grain - 1) / grain));
  if (nt <= 1 || t_in_parallel) {  // no nesting: an inner loop runs on the thread that reached it
    fn(0, n);
    return;
  }
  // Guided chunks, the first a quarter of the job for two threads (a late worker still finds work, a lone
  // caller loses little to chunking), the last 1/16 of a thread's share.
  const int64_t min_chunk = std::max(grain, (n + 16 * nt - 1) / (16 * nt));
  pool().run(n, min_chunk, 2 * nt, fn);
}

}  // namespace lowbit
