#include "eval/compare_report.h"
#include "core/html.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/json_text.h"
#include "eval/compare_runner.h"
#include "io/mapped_file.h"

using nlohmann::json;

namespace lowbit::compare {
namespace {

// Reads a number at a JSON path ("a.b.c"); NaN when absent.
double num(const json& j, const std::string& path) {
  const json* cur = &j;
  std::stringstream ss(path);
  std::string key;
  while (std::getline(ss, key, '.')) {
    if (!cur->is_object() || !cur->contains(key)) return NAN;
    cur = &(*cur)[key];
  }
  return cur->is_number() ? cur->get<double>() : NAN;
}

const json& step_out(const json& v, const std::string& step) {
  static const json kNull;
  if (!v["steps"].contains(step)) return kNull;
  const json& s = v["steps"][step];
  return s.contains("output") ? s["output"] : kNull;
}

json jnum(double x) {
  return std::isfinite(x) ? json(x) : json(nullptr);
}

std::string fmt(const json& v, const char* f) {
  if (!v.is_number()) return "–";
  char b[64];
  std::snprintf(b, sizeof b, f, v.get<double>());
  return b;
}

std::string mib(const json& v) {
  if (!v.is_number()) return "–";
  char b[64];
  std::snprintf(b, sizeof b, "%.2f", v.get<double>() / 1048576.0);
  return b;
}

}  // namespace

std::string check_number(const json& v) {
  if (!v.is_number_float()) return json_text(v);
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v.get<double>());
  return b;
}

json summarize(const json& results, const Thresholds& t) {
  json rows = json::array();
  const json* base = nullptr;
  for (const auto& v : results["variants"])
    if (v.value("baseline", false)) base = &v;
  std::vector<std::vector<int>> base_ids;
  double base_decode = NAN;
  if (base) {
    for (int i = 0;; ++i) {
      const json& g = step_out(*base, "generate-" + std::to_string(i));
      if (g.is_null() && !base->at("steps").contains("generate-" + std::to_string(i))) break;
      base_ids.push_back(g.is_null() ? std::vector<int>{} : g.value("output_ids", std::vector<int>{}));
    }
    base_decode = num(step_out(*base, "bench"), "decode.tokens_per_second");
  }
  for (const auto& v : results["variants"]) {
    const bool is_base = v.value("baseline", false);
    json r;
    r["name"] = v["name"];
    r["baseline"] = is_base;
    r["changed"] = v["changed"];
    r["description"] = v["spec"].value("description", "");
    const json& bench = step_out(v, "bench");
    const json& q = step_out(v, "quality");
    const json& gen0 = step_out(v, "generate-0");
    double params = num(bench, "params"), size = num(bench, "size_bytes");
    r["weight_bytes"] = jnum(size);
    r["bpw"] = jnum(params > 0 ? size * 8 / params : NAN);
    r["bpw_quantized"] = jnum(num(step_out(v, "inspect"), "summary.bits_per_weight_quantized"));
    // Whole-file accounting (inspect): every byte of the model files over every parameter.
    r["file_bytes"] = jnum(num(step_out(v, "inspect"), "whole_file.bytes"));
    r["file_bpw"] = jnum(num(step_out(v, "inspect"), "whole_file.bits_per_parameter"));
    r["kv_bytes_per_token"] = jnum(num(gen0, "kv_cache.bytes_per_token"));
    r["peak_rss_bytes"] = jnum(num(bench, "peak_rss_bytes"));
    r["load_seconds"] = jnum(num(bench, "load_seconds"));
    r["ttft_ms"] = jnum(num(gen0, "ttft_seconds") * 1e3);
    r["prefill_tps"] = jnum(num(bench, "prefill.tokens_per_second"));
    r["decode_tps"] = jnum(num(bench, "decode.tokens_per_second"));
    r["decode_fraction_of_bound"] = jnum(num(bench, "decode.fraction_of_bound"));
    r["decode_speedup"] = jnum(num(bench, "decode.tokens_per_second") / base_decode);
    r["throughput"] =
        step_out(v, "throughput").is_null() ? json::array() : step_out(v, "throughput")["levels"];
    if (is_base) {
      r["ppl"] = jnum(num(q, "perplexity.ppl"));
      r["dppl_pct"] = 0.0;
      r["kld_mean"] = 0.0;
      r["top1"] = 1.0;
      r["position_curve"] = q.is_null() ? json() : q.value("position_curve", json());
      r["histograms"] = q.is_null() ? json() : q.value("histograms", json());
    } else {
      double pb = num(q, "comparison.ppl_baseline.ppl"), pv = num(q, "comparison.ppl_variant.ppl");
      r["ppl"] = jnum(pv);
      r["dppl_pct"] = jnum((pv / pb - 1) * 100);
      r["kld_mean"] = jnum(num(q, "comparison.kld.mean"));
      r["kld_p99"] = jnum(num(q, "comparison.kld.p99"));
      r["top1"] = jnum(num(q, "comparison.top1_agreement.value"));
      r["rms_dp"] = jnum(num(q, "comparison.delta_p.rms"));
      const json& pc = step_out(v, "positions");
      r["position_curve"] = pc.is_null() ? json() : pc.value("position_curve", json());
      r["histograms"] = q.is_null() ? json() : q["comparison"].value("histograms", json());
    }
    // Greedy outputs against the baseline's on the same prompts: tokens equal before the first difference.
    int64_t same = 0, total = 0;
    for (size_t i = 0; i < base_ids.size(); ++i) {
      const json& g = step_out(v, "generate-" + std::to_string(i));
      auto ids = g.is_null() ? std::vector<int>{} : g.value("output_ids", std::vector<int>{});
      size_t k = 0;
      while (k < ids.size() && k < base_ids[i].size() && ids[k] == base_ids[i][k]) ++k;
      same += static_cast<int64_t>(k);
      total += static_cast<int64_t>(base_ids[i].size());
    }
    r["greedy_match"] = total > 0 ? json(static_cast<double>(same) / total) : json(nullptr);
    r["batch_max_delta"] = jnum(num(step_out(v, "batch"), "max_abs_delta_logit_mixed"));
    // NaN/Inf: the engine exits 3 (or 1 with a [model] NaN message) when it finds one.
    bool nan = false;
    json failures = json::array();
    json commands = json::array();
    for (auto& [name, s] : v["steps"].items()) {
      commands.push_back(s.value("command", ""));
      const bool measured_failure =
          s.value("exit_code", 0) == 3 && s.contains("output") && !s["output"].is_null();
      if (s.value("exit_code", 0) != 0 && !measured_failure) {
        std::string err = s.value("error", "");
        failures.push_back({{"step", name}, {"exit_code", s["exit_code"]}, {"error", err}});
        if (err.find("NaN") != std::string::npos || err.find("Inf") != std::string::npos) nan = true;
      }
    }
    r["nan"] = nan;
    r["failures"] = failures;
    r["commands"] = commands;
    // Checks against the thresholds: each with the deciding number.
    json checks = json::array();
    auto check = [&](const std::string& name, const json& value, double limit, bool upper) {
      if (limit <= 0) return;
      bool pass = value.is_number() && (upper ? value.get<double>() <= limit : value.get<double>() >= limit);
      checks.push_back({{"name", name},
                        {"value", value},
                        {"limit", limit},
                        {"pass", pass},
                        {"rule", upper ? "<=" : ">="}});
    };
    if (!is_base) {
      check("dppl_pct", r["dppl_pct"], t.max_dppl_pct, true);
      check("kld_mean", r["kld_mean"], t.max_kld, true);
      check("top1", r["top1"], t.min_top1, false);
      check("decode_speedup", r["decode_speedup"], t.min_decode_speedup, false);
    }
    // Batch consistency: the same sequence alone and inside a mixed batch (eval batch's own tolerance). A
    // dynamic per-tensor KV scale taken from the first batch, for example, makes results depend on the batch.
    const json& bo = step_out(v, "batch");
    if (!bo.is_null() && bo.contains("pass"))
      checks.push_back({{"name", "batch_consistency"},
                        {"value", bo.value("max_abs_delta_logit_mixed", 0.0)},
                        {"limit", bo.value("tolerance", 0.0)},
                        {"pass", bo["pass"].get<bool>()},
                        {"rule", "<="}});
    if (t.max_peak_mib > 0)
      check("peak_mib", jnum(num(bench, "peak_rss_bytes") / 1048576.0), t.max_peak_mib, true);
    if (t.no_nan)
      checks.push_back(
          {{"name", "no_nan"}, {"value", nan}, {"limit", false}, {"pass", !nan}, {"rule", "=="}});
    if (!failures.empty() && !nan)
      checks.push_back({{"name", "all_steps_ran"},
                        {"value", failures.size()},
                        {"limit", 0},
                        {"pass", false},
                        {"rule", "=="}});
    bool pass = true;
    for (auto& c : checks) pass = pass && c["pass"].get<bool>();
    r["checks"] = checks;
    r["pass"] = pass;
    rows.push_back(r);
  }
  return rows;
}

std::string markdown_report(const json& s, const json& results, const std::string& rerun) {
  std::ostringstream o;
  const json& m = results["manifest"];
  o << "# lowbit compare report\n\n";
  o << "Model `" << m.value("model", "") << "` (sha256 " << m.value("model_sha256", "").substr(0, 16)
    << "…), "
    << "preset `" << results["experiment"].value("preset", "") << "`, evaluated on `"
    << m.value("eval_text", "") << "`.\n\n";
  o << "## Verdict\n\n| variant | changes | result | deciding numbers |\n|---|---|---|---|\n";
  for (const auto& r : s) {
    std::string changed;
    for (auto& c : r["changed"]) changed += (changed.empty() ? "" : ", ") + c.get<std::string>();
    std::string deciding;
    for (auto& c : r["checks"]) {
      if (!c["pass"].get<bool>() || r["pass"].get<bool>())
        deciding += (deciding.empty() ? "" : "; ") + c["name"].get<std::string>() + " " +
                    check_number(c["value"]) + " " + c["rule"].get<std::string>() + " " +
                    check_number(c["limit"]);
    }
    o << "| " << r["name"].get<std::string>() << " | " << (r["baseline"].get<bool>() ? "baseline" : changed)
      << " | " << (r["pass"].get<bool>() ? "PASS" : "**FAIL**") << " | " << deciding << " |\n";
  }
  o << "\n## Quality (same text, same settings as the baseline)\n\n"
    << "| variant | bpw | file bytes | file bits/param | PPL | ΔPPL % | mean KLD | KLD p99 | top-1 | greedy "
       "match | "
       "batch max Δ |\n"
    << "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : s)
    o << "| " << r["name"].get<std::string>() << " | " << fmt(r["bpw"], "%.2f") << " | "
      << fmt(r.value("file_bytes", json()), "%.0f") << " | " << fmt(r.value("file_bpw", json()), "%.3f")
      << " | " << fmt(r["ppl"], "%.4f") << " | " << fmt(r["dppl_pct"], "%+.3f") << " | "
      << fmt(r["kld_mean"], "%.5f") << " | " << fmt(r.value("kld_p99", json()), "%.4f") << " | "
      << fmt(r["top1"], "%.4f") << " | " << fmt(r["greedy_match"], "%.3f") << " | "
      << fmt(r["batch_max_delta"], "%.2e") << " |\n";
  o << "\n## Memory and speed\n\n"
    << "| variant | weights MiB | KV B/token | peak RSS MiB | load s | TTFT ms | prefill tok/s | decode "
       "tok/s | decode × baseline | decode % of bound |\n"
       "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : s)
    o << "| " << r["name"].get<std::string>() << " | " << mib(r["weight_bytes"]) << " | "
      << fmt(r["kv_bytes_per_token"], "%.0f") << " | " << mib(r["peak_rss_bytes"]) << " | "
      << fmt(r["load_seconds"], "%.3f") << " | " << fmt(r["ttft_ms"], "%.1f") << " | "
      << fmt(r["prefill_tps"], "%.1f") << " | " << fmt(r["decode_tps"], "%.1f") << " | "
      << fmt(r["decode_speedup"], "%.2f") << " | "
      << fmt(r["decode_fraction_of_bound"].is_number()
                 ? json(r["decode_fraction_of_bound"].get<double>() * 100)
                 : json(),
             "%.0f")
      << " |\n";
  o << "\n## Throughput under concurrency\n\n"
    << "| variant | concurrency | gen tok/s | TTFT mean ms | queue mean ms |\n"
    << "|---|---|---|---|---|\n";
  for (const auto& r : s)
    for (const auto& l : r["throughput"])
      o << "| " << r["name"].get<std::string>() << " | " << l["concurrency"] << " | "
        << fmt(l["gen_tokens_per_second"], "%.1f") << " | "
        << fmt(json(num(l, "ttft_seconds.mean") * 1e3), "%.1f") << " | "
        << fmt(json(num(l, "queue_seconds.mean") * 1e3), "%.1f") << " |\n";
  o << "\n## Failures\n\n";
  bool any = false;
  for (const auto& r : s)
    for (const auto& f : r["failures"]) {
      any = true;
      o << "- " << r["name"].get<std::string>() << " / " << f["step"].get<std::string>() << " (exit "
        << f["exit_code"] << "): `" << f["error"].get<std::string>() << "`\n";
    }
  if (!any) o << "None: every step of every variant ran.\n";
  o << "\n## Rollback and reproduction\n\nBaseline artefacts: `" << m.value("baseline_file", "")
    << "` (saved distributions), checkpoints cached in `" << m.value("cache_dir", "") << "`.\n"
    << "Rerun the whole experiment (finished steps are reused; `--fresh` recomputes):\n\n```sh\n"
    << rerun
    << "\n```\n\nEach variant's exact commands (the same inputs reproduce the same quality numbers):\n";
  for (const auto& r : s) {
    o << "\n<details><summary>" << r["name"].get<std::string>() << "</summary>\n\n```sh\n";
    for (const auto& c : r["commands"]) o << c.get<std::string>() << "\n";
    o << "```\n</details>\n";
  }
  o << "\n## Manifest\n\n```json\n" << json_text(m, 2) << "\n```\n";
  return o.str();
}

namespace {

struct Series {
  std::string name;
  double value;
};

std::string bar_chart(const std::string& title, const std::vector<std::string>& labels,
                      const std::vector<std::vector<double>>& stacks, const std::vector<std::string>& parts,
                      const std::string& unit) {
  static const char* kColors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948"};
  const int W = 760, row = 26, left = 150, top = 40;
  const int H = top + row * static_cast<int>(labels.size()) + 50;
  double mx = 0;
  for (auto& s : stacks) {
    double t = 0;
    for (double v : s) t += std::isfinite(v) ? v : 0;
    mx = std::max(mx, t);
  }
  if (mx <= 0) mx = 1;
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H
    << "' font-family='sans-serif' "
    << "font-size='12'><text x='10' y='20' font-size='14' font-weight='bold'>" << html_escape(title)
    << "</text>";
  for (size_t i = 0; i < labels.size(); ++i) {
    int y = top + static_cast<int>(i) * row;
    o << "<text x='" << left - 6 << "' y='" << y + 16 << "' text-anchor='end'>" << html_escape(labels[i])
      << "</text>";
    double x = left, total = 0;
    for (size_t k = 0; k < stacks[i].size(); ++k) {
      double v = std::isfinite(stacks[i][k]) ? stacks[i][k] : 0;
      double w = v / mx * (W - left - 90);
      o << "<rect x='" << x << "' y='" << y + 4 << "' width='" << w << "' height='" << row - 8 << "' fill='"
        << kColors[k % 6] << "'><title>" << html_escape(labels[i] + " " + parts[k]) << ": " << v << " "
        << unit << "</title></rect>";
      x += w;
      total += v;
    }
    char b[64];
    std::snprintf(b, sizeof b, "%.3g %s", total, unit.c_str());
    o << "<text x='" << x + 4 << "' y='" << y + 16 << "'>" << b << "</text>";
  }
  int ly = top + row * static_cast<int>(labels.size()) + 20;
  for (size_t k = 0; k < parts.size() && parts.size() > 1; ++k)
    o << "<rect x='" << left + 140 * k << "' y='" << ly << "' width='12' height='12' fill='" << kColors[k % 6]
      << "'/><text x='" << left + 140 * k + 16 << "' y='" << ly + 11 << "'>" << html_escape(parts[k])
      << "</text>";
  o << "</svg>";
  return o.str();
}

// Quality (mean KLD) against bits per weight; the Pareto front (no variant both smaller and better) is drawn.
std::string pareto_chart(const json& s) {
  const int W = 760, H = 420, L = 70, R = 30, T = 40, B = 50;
  std::vector<std::tuple<double, double, std::string>> pts;
  for (const auto& r : s)
    if (r["bpw"].is_number() && r["kld_mean"].is_number())
      pts.emplace_back(r["bpw"].get<double>(), r["kld_mean"].get<double>(), r["name"].get<std::string>());
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H
    << "' font-family='sans-serif' "
    << "font-size='12'><text x='10' y='20' font-size='14' font-weight='bold'>Quality against size: mean KLD "
       "vs bits per weight (lower left is better; line = Pareto front)</text>";
  if (pts.empty()) {
    o << "<text x='" << W / 2 << "' y='" << H / 2
      << "' text-anchor='middle'>no variant has both numbers</text></svg>";
    return o.str();
  }
  double xmin = 1e9, xmax = 0, ymax = 0;
  for (auto& [x, y, n] : pts) xmin = std::min(xmin, x), xmax = std::max(xmax, x), ymax = std::max(ymax, y);
  xmin = std::floor(xmin) - 0.5, xmax = std::ceil(xmax) + 0.5;
  if (ymax <= 0) ymax = 1e-6;
  ymax *= 1.1;
  auto X = [&](double x) { return L + (x - xmin) / (xmax - xmin) * (W - L - R); };
  auto Y = [&](double y) { return H - B - y / ymax * (H - T - B); };
  o << "<line x1='" << L << "' y1='" << H - B << "' x2='" << W - R << "' y2='" << H - B
    << "' stroke='black'/>"
    << "<line x1='" << L << "' y1='" << T << "' x2='" << L << "' y2='" << H - B << "' stroke='black'/>";
  for (int i = 0; i <= 5; ++i) {
    double xv = xmin + (xmax - xmin) * i / 5, yv = ymax * i / 5;
    char b[32];
    std::snprintf(b, sizeof b, "%.1f", xv);
    o << "<text x='" << X(xv) << "' y='" << H - B + 16 << "' text-anchor='middle'>" << b << "</text>";
    std::snprintf(b, sizeof b, "%.3g", yv);
    o << "<text x='" << L - 6 << "' y='" << Y(yv) + 4 << "' text-anchor='end'>" << b << "</text>";
  }
  o << "<text x='" << (L + W - R) / 2 << "' y='" << H - 12
    << "' text-anchor='middle'>bits per weight (all "
       "weights, incl. unquantized embeddings)</text>"
    << "<text x='16' y='" << (T + H - B) / 2 << "' transform='rotate(-90 16 " << (T + H - B) / 2
    << ")' text-anchor='middle'>mean KL divergence vs baseline</text>";
  auto sorted = pts;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::pair<double, double>> front;
  double best = 1e300;
  for (auto& [x, y, n] : sorted)
    if (y < best) front.push_back({x, y}), best = y;
  o << "<polyline fill='none' stroke='#59a14f' stroke-width='2' points='";
  for (auto& [x, y] : front) o << X(x) << "," << Y(y) << " ";
  o << "'/>";
  for (auto& [x, y, n] : pts)
    o << "<circle cx='" << X(x) << "' cy='" << Y(y) << "' r='5' fill='#4e79a7'><title>" << html_escape(n)
      << "</title>"
      << "</circle><text x='" << X(x) + 7 << "' y='" << Y(y) - 6 << "'>" << html_escape(n) << "</text>";
  o << "</svg>";
  return o.str();
}

}  // namespace

std::string html_report(const json& s, const json& results, const std::string& rerun) {
  std::vector<std::string> labels;
  std::vector<std::vector<double>> mem, speed;
  for (const auto& r : s) {
    labels.push_back(r["name"].get<std::string>());
    double wb = r["weight_bytes"].is_number() ? r["weight_bytes"].get<double>() / 1048576.0 : 0;
    double peak = r["peak_rss_bytes"].is_number() ? r["peak_rss_bytes"].get<double>() / 1048576.0 : 0;
    // KV of the bench run: bytes/token x (prompt + generated) of the bench's single sequence.
    double kvb = r["kv_bytes_per_token"].is_number() ? r["kv_bytes_per_token"].get<double>() : 0;
    const json& ex = results["experiment"]["bench"];
    double kv = kvb * (ex.value("prompt", 0) + ex.value("gen", 0)) / 1048576.0;
    mem.push_back({wb, kv, std::max(0.0, peak - wb - kv)});
    speed.push_back({r["decode_tps"].is_number() ? r["decode_tps"].get<double>() : 0});
  }
  std::vector<std::vector<double>> prefill;
  for (const auto& r : s)
    prefill.push_back({r["prefill_tps"].is_number() ? r["prefill_tps"].get<double>() : 0});
  std::string md = markdown_report(s, results, rerun);
  std::ostringstream o;
  o << "<!DOCTYPE html><html><head><meta charset='utf-8'><title>lowbit compare report</title><style>"
    << "body{font-family:sans-serif;margin:24px;max-width:1100px}table{border-collapse:collapse;margin:8px 0}"
    << "td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}th{background:#f3f3f3}.pass{color:#1a7f37;"
    << "font-weight:bold}.fail{color:#cf222e;font-weight:bold}pre{background:#f6f8fa;padding:8px;overflow:"
       "auto;"
    << "font-size:12px}.charts svg{display:block;margin:12px 0;border:1px solid #eee}</style></head><body>";
  o << "<h1>lowbit compare report</h1><p>Model <code>" << html_escape(results["manifest"].value("model", ""))
    << "</code>, preset <code>" << html_escape(results["experiment"].value("preset", "")) << "</code>.</p>";
  o << "<h2>Verdict</h2><table><tr><th>variant</th><th>changes</th><th>result</th><th>checks</th></tr>";
  for (const auto& r : s) {
    std::string changed;
    for (auto& c : r["changed"]) changed += (changed.empty() ? "" : ", ") + c.get<std::string>();
    o << "<tr><td>" << html_escape(r["name"]) << "</td><td>"
      << (r["baseline"].get<bool>() ? "baseline" : html_escape(changed)) << "</td><td class='"
      << (r["pass"].get<bool>() ? "pass'>PASS" : "fail'>FAIL") << "</td><td>";
    for (auto& c : r["checks"])
      o << "<span class='" << (c["pass"].get<bool>() ? "pass" : "fail") << "'>" << html_escape(c["name"])
        << "</span> " << html_escape(check_number(c["value"])) << " " << html_escape(c["rule"]) << " "
        << html_escape(check_number(c["limit"])) << "<br>";
    o << "</td></tr>";
  }
  o << "</table><div class='charts'>";
  o << bar_chart("Memory per variant (MiB): weights, KV cache of the bench run, everything else (peak RSS)",
                 labels, mem, {"weights", "KV cache", "workspace + runtime"}, "MiB");
  o << pareto_chart(s);
  o << bar_chart("Decode speed (tokens/s, bench tg)", labels, speed, {"decode"}, "tok/s");
  o << bar_chart("Prefill speed (tokens/s, bench pp)", labels, prefill, {"prefill"}, "tok/s");
  o << "</div><h2>All numbers</h2><pre>" << html_escape(md) << "</pre></body></html>";
  return o.str();
}

json write_reports(const json& results, const Experiment& e, const std::string& dir,
                   const std::string& rerun) {
  json s = summarize(results, e.thresholds);
  json full = results;
  full["summary"] = s;
  full["rerun_command"] = rerun;
  auto put = [&](const std::string& name, const std::string& text) {
    io::write_file_atomic(dir + "/" + name, text.data(), text.size());
  };
  put("report.json", json_text(full, 2));
  put("report.md", markdown_report(s, results, rerun));
  put("report.html", html_report(s, results, rerun));
  return s;
}

}  // namespace lowbit::compare
