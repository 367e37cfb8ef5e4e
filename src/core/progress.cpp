#include "core/progress.h"

#include <unistd.h>

#include <cstdio>

namespace lowbit {
namespace {
bool g_quiet = false;
}

void Progress::set_quiet(bool q) {
  g_quiet = q;
}

Progress::Progress(std::string label, int64_t total)
    : label_(std::move(label)), total_(total > 0 ? total : 1), tty_(isatty(STDERR_FILENO)) {
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

Progress::~Progress() {
  if (!finished_ && tty_ && !g_quiet && last_pct_ >= 0) std::fprintf(stderr, "\n");
}

void Progress::update(int64_t done, const std::string& detail) {
  done_ = done;
  if (g_quiet) return;
  int pct = static_cast<int>(100.0 * done_ / total_);
  auto now = std::chrono::steady_clock::now();
  double el = std::chrono::duration<double>(now - start_).count();
  double eta = done_ > 0 ? el * (total_ - done_) / done_ : 0.0;
  if (tty_) {
    if (pct == last_pct_ && now - last_draw_ < std::chrono::milliseconds(200) && done_ < total_) return;
    int w = 30, fill = pct * w / 100;
    std::string bar(fill, '#');
    bar.resize(w, '.');
    std::fprintf(stderr, "\r%s [%s] %3d%% %lld/%lld %.1fs eta %.1fs %s\033[K", label_.c_str(), bar.c_str(),
                 pct, (long long)done_, (long long)total_, el, eta, detail.c_str());
    std::fflush(stderr);
    last_draw_ = now;
  } else if (pct / 10 != last_pct_ / 10 || done_ >= total_) {
    std::fprintf(stderr, "%s: %d%% (%lld/%lld) %.1fs %s\n", label_.c_str(), pct, (long long)done_,
                 (long long)total_, el, detail.c_str());
  }
  last_pct_ = pct;
}

void Progress::finish(const std::string& detail) {
  if (finished_) return;
  if (done_ < total_) update(total_, detail);
  if (tty_ && !g_quiet) std::fprintf(stderr, "\n");
  finished_ = true;
}

}  // namespace lowbit
