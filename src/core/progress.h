// Progress reporting for long work: a redrawn bar on a TTY, plain lines (every ~10 %) otherwise.
// Writes to stderr so that --json on stdout stays clean. Silenced with set_quiet(true).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace lowbit {

class Progress {
 public:
  Progress(std::string label, int64_t total);
  ~Progress();
  void update(int64_t done, const std::string& detail = "");
  void add(int64_t n = 1, const std::string& detail = "") { update(done_ + n, detail); }
  void finish(const std::string& detail = "");
  static void set_quiet(bool q);

 private:
  std::string label_;
  int64_t total_, done_ = 0;
  int last_pct_ = -1;
  bool tty_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace lowbit
