// Runs an Experiment: every measurement is one `lowbit` subprocess with --json (so each variant's peak memory
// is its own process's, and every number can be reproduced by re-running the recorded command). Results are
// written per variant and step under OUT/results/; a rerun skips finished steps (resume after interruption).
// Quantized checkpoints are cached by (model hash, recipe, calibration hash) under OUT/../.lowbit-cache or
// --cache DIR, so reruns reuse them.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/compare_experiment.h"

namespace lowbit::compare {

struct RunnerOptions {
  std::string exe;        // path of the lowbit binary (/proc/self/exe)
  std::string out_dir;    // report directory
  std::string cache_dir;  // quantized checkpoint cache
  int threads = 0;        // passed to every subprocess (0 = default)
  bool fresh = false;     // ignore finished steps and recompute
};

// One step's outcome, as stored in OUT/results/<variant>/<step>.json.
struct StepRecord {
  std::string variant, step;
  std::vector<std::string> argv;  // the exact command (rollback / reproduction)
  int exit_code = 0;
  double seconds = 0;
  bool reused = false;            // loaded from a previous run
  nlohmann::json output;          // the subprocess's --json stdout (null on failure)
  std::string error;              // last lines of stderr on failure
  nlohmann::json to_json() const;
};

// Runs everything; returns {"experiment":..., "variants": [{name, spec, steps: {...}}...], "manifest": ...}.
nlohmann::json run_experiment(const Experiment& e, const RunnerOptions& o);

// Shell-quotes argv into one command line.
std::string shell_join(const std::vector<std::string>& argv);

}  // namespace lowbit::compare
