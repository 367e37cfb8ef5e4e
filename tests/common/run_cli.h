// Runs the built `lowbit` binary for end-to-end tests: exit code and stdout (stderr discarded, or merged into
// the output with merge_stderr). The binary is LOWBIT_BINARY_DIR/apps/lowbit/lowbit; its CMake target is a
// dependency of every test that includes this.
#pragma once
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace lowbit::testing_cli {

inline const std::string& lowbit_exe() {
  static const std::string p = std::string(LOWBIT_BINARY_DIR) + "/apps/lowbit/lowbit";
  return p;
}

struct CliResult {
  int rc = -1;      // exit code (124: the deadline passed); -1 when the process could not run or was killed
  std::string out;  // stdout (and stderr with merge_stderr)
};

// Each command gets a deadline (coreutils timeout: TERM after `seconds`, KILL 5 s later), so a hung child
// fails its test with rc 124 / 137 instead of stalling the suite.
inline CliResult run_cli(const std::string& args, bool merge_stderr = false, int seconds = 240) {
  const std::string cmd = "timeout -k 5 " + std::to_string(seconds) + " " + lowbit_exe() + " " + args +
                          (merge_stderr ? " 2>&1" : " 2>/dev/null");
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace lowbit::testing_cli
