// Runs an Experiment: every measurement is one `lowbit` subprocess with --json (so each variant's peak memory
// is its own process's, and every number can be reproduced by re-running the recorded command). Results are
// written per variant and step under OUT/results/; a rerun skips finished steps (resume after interruption)
// only when nothing they depend on changed: the same argv, the same bytes of every input (model files,
// evaluation and calibration text, the baseline a variant is scored against) and the same lowbit binary.
// Quantized checkpoints are cached by (model hash, recipe, calibration hash, binary hash) under
// OUT/../.lowbit-cache or --cache DIR. Commands run with posix_spawn from an argv (no shell, so no quoting).
#pragma once
#include <functional>
#include <nlohmann/json.hpp>  // complete type: StepRecord holds a json by value
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
  bool reused = false;        // loaded from a previous run
  std::string inputs_sha256;  // hash of every input's bytes and of the binary: reuse needs it unchanged
  nlohmann::json output;      // the subprocess's --json stdout (null on failure)
  std::string error;          // last lines of stderr on failure
  nlohmann::json to_json() const;
};

// Runs everything; returns {"experiment":..., "variants": [{name, spec, steps: {...}}...], "manifest": ...}.
nlohmann::json run_experiment(const Experiment& e, const RunnerOptions& o);

// Shell-quotes argv into one command line (for the report: what a person pastes to reproduce a step).
std::string shell_join(const std::vector<std::string>& argv);

}  // namespace lowbit::compare
