// Helpers shared by the CLI commands: model options, human-readable numbers, kernel reports.
#pragma once
#include <CLI/CLI.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model.h"

namespace lowbit::app {

std::string human_bytes(double bytes);  // "1.25 GiB"

// Which kernel serves each weight matrix: {"f32.avx512": ["layers.0.wq", ...]} collapsed to counts, and
// whether any slow reference fallback ran.
struct KernelReport {
  std::map<std::string, int> by_kernel;                // kernel -> number of matrices
  std::map<std::string, std::string> by_tensor;        // matrix name -> kernel
  bool fallback = false;
  nlohmann::json to_json() const;
  void print(bool per_tensor) const;                   // to stderr
};
KernelReport kernel_report(Model& m);

// Parses a comma-separated list of concurrency levels ("1,4,8"), each in [1, 4096]; UsageError naming the flag
// and an example otherwise.
std::vector<int> parse_concurrency_list(const std::string& s, const std::string& module, const std::string& flag);

// Applies --threads (0 = all cores).
void apply_threads(int threads);

}  // namespace lowbit::app
