// Turns the results of run_experiment into the decision report: per-variant numbers, pass/fail against the
// thresholds (with the deciding number), and three files: report.md, report.json, report.html
// (self-contained, inline SVG charts: memory breakdown, quality vs bits per weight with the Pareto front,
// speed).
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "eval/compare_experiment.h"

namespace lowbit::compare {

// One row per variant with every measured number and its verdict:
// {"name", "changed", "bpw", "weight_bytes", "kv_bytes_per_token", "peak_rss_bytes", "load_seconds",
//  "ttft_ms", "prefill_tps", "decode_tps", "decode_fraction_of_bound", "throughput": [...], "ppl",
//  "dppl_pct", "kld_mean", "kld_p99", "top1", "greedy_match", "batch_max_delta", "nan", "checks": [{name,
//  value, limit, pass}], "pass", "commands": [...] }
nlohmann::json summarize(const nlohmann::json& results, const Thresholds& t);

// Writes report.md, report.json and report.html into dir (each atomically). Returns the summary.
nlohmann::json write_reports(const nlohmann::json& results, const Experiment& e, const std::string& dir,
                             const std::string& rerun_command);

std::string markdown_report(const nlohmann::json& summary, const nlohmann::json& results,
                            const std::string& rerun_command);
std::string html_report(const nlohmann::json& summary, const nlohmann::json& results,
                        const std::string& rerun_command);

// A check's value or limit for people: numbers with 4 significant digits ("0.7583"), anything else as JSON.
std::string check_number(const nlohmann::json& v);

}  // namespace lowbit::compare
