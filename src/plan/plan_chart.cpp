// `lowbit plan --chart FILE.svg|.html`: total memory vs context length for the candidate configurations, with
// the budget as a horizontal line. Self-contained SVG (no scripts, no external fonts or styles).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "core/html.h"
#include "plan/plan.h"

namespace lowbit::plan {
namespace {

constexpr double kW = 1060, kH = 560;                   // canvas
constexpr double kL = 80, kR = 640, kT = 60, kB = 490;  // plot area (legend to the right of kR)
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

std::string tok_label(int64_t t) {
  if (t >= (1 << 20) && t % (1 << 20) == 0) return std::to_string(t >> 20) + "M";
  if (t >= 1024 && t % 1024 == 0) return std::to_string(t >> 10) + "K";
  return std::to_string(t);
}

// Short names for the legend (the table has the long ones).
std::string short_label(const std::string& w, const std::string& kv) {
  static const std::pair<const char*, const char*> names[] = {
      {"bf16", "BF16"},         {"fp8-w", "FP8 weight-only"}, {"w8a8-int8", "W8A8 INT8"},
      {"w8a8-fp8", "W8A8 FP8"}, {"w4a16", "W4A16 g128"},      {"w4a16-asym", "W4A16 g128 asym"},
      {"nf4", "NF4"},           {"nf4-dq", "NF4 + DQ"},       {"mxfp4", "MXFP4"},
      {"nvfp4", "NVFP4"},       {"stored", "as stored"}};
  std::string n = w;
  for (auto& [id, name] : names)
    if (w == id) n = name;
  std::string k = kv;
  for (auto& ch : k) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return n + " / KV " + k;
}

constexpr const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
                                   "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#d62728"};

struct Series {
  std::string w, kv, label;
  WeightBytes weights;
  const KvConfig* kvc;
};

// Candidate lines: the seed's path (baseline, KV first, weights first, both), the recommendations, FP4 on
// FP4 hardware and the checkpoint as stored.
std::vector<Series> candidates(const Plan& p) {
  std::vector<std::pair<std::string, std::string>> want = {
      {"bf16", "bf16"},  {"bf16", "fp8"},  {"bf16", "int4"}, {"fp8-w", "bf16"},
      {"w4a16", "bf16"}, {"w4a16", "fp8"}, {"w4a16", "int4"}};
  if (p.req.device.fp4) want.push_back({"nvfp4", "fp8"});
  if (p.req.device.fp8 && p.req.concurrency >= 8) want.push_back({"w8a8-fp8", "fp8"});
  if (p.model.stored_bytes) want.push_back({"stored", "bf16"});
  for (const auto& cp : p.per_ctx)
    if (!cp.rec.weight_id.empty()) want.push_back({cp.rec.weight_id, cp.rec.kv_id});
  std::vector<Series> out;
  if (p.per_ctx.empty()) return out;
  for (const auto& [w, k] : want) {
    const Row* r = p.per_ctx[0].find(w, k);
    if (!r) continue;
    bool dup = false;
    for (const auto& s : out) dup |= s.w == w && s.kv == k;
    if (dup) continue;
    out.push_back({w, k, short_label(w, k), r->weights, &kv_config(k)});
  }
  return out;
}

// Line style of a KV format: solid BF16, dashed 8-bit, dotted INT4.
const char* kv_dash(const std::string& kv) {
  if (kv == "fp8" || kv == "int8") return " stroke-dasharray=\"8,4\"";
  return kv == "int4" ? " stroke-dasharray=\"2,3\"" : "";
}

// The legend right of the plot: one entry per series (where it is recommended, or off scale), then the
// budget.
std::string legend_svg(const Plan& p, const std::vector<Series>& series, double lx0, double ymax) {
  const ModelConfig& c = p.model.config;
  const int64_t budget = p.req.device.memory_bytes;
  std::string s;
  double ly = kT + 4;
  s += "<text x=\"" + num(kR + 20) + "\" y=\"" + num(ly) +
       "\" font-size=\"12\" font-weight=\"bold\">configuration " + "(weights + KV)</text>\n";
  ly += 20;
  for (size_t i = 0; i < series.size(); ++i) {
    const auto& sr = series[i];
    const char* dash = kv_dash(sr.kv);
    s += "<line x1=\"" + num(kR + 20) + "\" y1=\"" + num(ly - 4) + "\" x2=\"" + num(kR + 48) + "\" y2=\"" +
         num(ly - 4) + "\" stroke=\"" + kColors[i % 10] + "\" stroke-width=\"2.5\"" + dash + "/>\n";
    std::string rec;
    for (const auto& cp : p.per_ctx)
      if (cp.rec.fits && cp.rec.weight_id == sr.w && cp.rec.kv_id == sr.kv)
        rec += (rec.empty() ? "recommended at " : ", ") + tok_label(cp.tokens);
    const double lowest =
        total_bytes(c, sr.weights, *sr.kvc, static_cast<int64_t>(std::exp2(lx0)), p.req.concurrency, p.req) /
        kGiB;
    if (lowest > ymax)
      rec += (rec.empty() ? "" : "; ") + std::string("off scale, ") + num(lowest) + " GiB at " +
             tok_label(static_cast<int64_t>(std::exp2(lx0)));
    s += "<text x=\"" + num(kR + 54) + "\" y=\"" + num(ly) + "\" font-size=\"11\">" + html_escape(sr.label) +
         (rec.empty() ? "" : " (" + rec + ")") + "</text>\n";
    ly += 18;
  }
  s += "<line x1=\"" + num(kR + 20) + "\" y1=\"" + num(ly - 4) + "\" x2=\"" + num(kR + 48) + "\" y2=\"" +
       num(ly - 4) + "\" stroke=\"#d62728\" stroke-width=\"2.5\"/>\n";
  s += "<text x=\"" + num(kR + 54) + "\" y=\"" + num(ly) + "\" font-size=\"11\">memory budget (" +
       html_escape(fmt_bytes(static_cast<double>(budget))) + ")</text>\n";
  return s;
}

}  // namespace

std::string plan_chart_svg(const Plan& p) {
  const ModelConfig& c = p.model.config;
  const auto series = candidates(p);
  const int64_t budget = p.req.device.memory_bytes;

  // x: tokens per sequence, log2 scale covering the requested contexts and the model's context.
  int64_t xmin = 512, xmax = std::max<int64_t>(c.max_seq_len, 4096);
  for (const auto& cp : p.per_ctx) {
    xmin = std::min(xmin, std::max<int64_t>(cp.tokens / 2, 1));
    xmax = std::max(xmax, cp.tokens * 2);
  }
  xmax = std::min(xmax, kMaxTokens);
  double lx0 = std::floor(std::log2(static_cast<double>(xmin))),
         lx1 = std::ceil(std::log2(static_cast<double>(xmax)));
  if (lx1 <= lx0) lx1 = lx0 + 1;
  auto X = [&](double tokens) { return kL + (std::log2(tokens) - lx0) / (lx1 - lx0) * (kR - kL); };

  // y: GiB, linear; twice the budget so the line sits mid-chart, more when even the smallest total is above
  // it.
  double ymax = 2.0 * budget / kGiB;
  double smallest = 1e300;
  for (const auto& s : series)
    smallest = std::min(smallest, total_bytes(c, s.weights, *s.kvc, static_cast<int64_t>(std::exp2(lx0)),
                                              p.req.concurrency, p.req) /
                                      kGiB);
  if (!series.empty()) ymax = std::max(ymax, smallest * 1.25);
  auto nice_step = [](double range) {
    for (double base = 1e-3; base < 1e9; base *= 10)
      for (double m : {1.0, 2.0, 5.0})
        if (range / (base * m) <= 8) return base * m;
    return 1e9;
  };
  const double step = nice_step(ymax);
  ymax = std::ceil(ymax / step) * step;
  auto Y = [&](double gib) { return kB - gib / ymax * (kB - kT); };

  std::string s;
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kW) + "\" height=\"" + num(kH) +
       "\" viewBox=\"0 0 " + num(kW) + " " + num(kH) + "\" font-family=\"DejaVu Sans, Arial, sans-serif\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<defs><clipPath id=\"plot\"><rect x=\"" + num(kL) + "\" y=\"" + num(kT) + "\" width=\"" +
       num(kR - kL) + "\" height=\"" + num(kB - kT) + "\"/></clipPath></defs>\n";
  std::string title = "lowbit plan: " + p.model.name + " on " + p.req.device.name + ", " +
                      std::to_string(p.req.concurrency) + " concurrent sequence" +
                      (p.req.concurrency > 1 ? "s" : "");
  s += "<text x=\"" + num(kL) + "\" y=\"28\" font-size=\"16\" font-weight=\"bold\">" + html_escape(title) +
       "</text>\n";
  s += "<text x=\"" + num(kL) +
       "\" y=\"46\" font-size=\"11\" fill=\"#555\">total = weights + KV cache + workspace" +
       std::string(p.req.device.reserve_bytes ? " + runtime reserve" : "") +
       "; line style = KV format (solid BF16, dashed FP8, dotted INT4)</text>\n";

  // Grid and axes.
  for (double v = 0; v <= ymax + step / 2; v += step) {
    const double y = Y(v);
    s += "<line x1=\"" + num(kL) + "\" y1=\"" + num(y) + "\" x2=\"" + num(kR) + "\" y2=\"" + num(y) +
         "\" stroke=\"#e5e5e5\"/>\n";
    char lab[32];
    std::snprintf(lab, sizeof lab, step < 1 ? "%.2f" : "%.0f", v);
    s += "<text x=\"" + num(kL - 6) + "\" y=\"" + num(y + 4) + "\" font-size=\"11\" text-anchor=\"end\">" +
         lab + "</text>\n";
  }
  for (double lx = lx0; lx <= lx1 + 1e-9; lx += 1) {
    const double x = X(std::exp2(lx));
    s += "<line x1=\"" + num(x) + "\" y1=\"" + num(kT) + "\" x2=\"" + num(x) + "\" y2=\"" + num(kB) +
         "\" stroke=\"#f0f0f0\"/>\n";
    s += "<text x=\"" + num(x) + "\" y=\"" + num(kB + 16) + "\" font-size=\"11\" text-anchor=\"middle\">" +
         tok_label(static_cast<int64_t>(std::exp2(lx))) + "</text>\n";
  }
  s += "<line x1=\"" + num(kL) + "\" y1=\"" + num(kB) + "\" x2=\"" + num(kR) + "\" y2=\"" + num(kB) +
       "\" stroke=\"black\"/>\n";
  s += "<line x1=\"" + num(kL) + "\" y1=\"" + num(kT) + "\" x2=\"" + num(kL) + "\" y2=\"" + num(kB) +
       "\" stroke=\"black\"/>\n";
  s += "<text x=\"" + num((kL + kR) / 2) + "\" y=\"" + num(kB + 36) +
       "\" font-size=\"12\" text-anchor=\"middle\">context length, tokens per sequence (prompt + output, log "
       "scale)</text>\n";
  s += "<text transform=\"translate(24," + num((kT + kB) / 2) +
       ") rotate(-90)\" font-size=\"12\" text-anchor=\"middle\">total memory (GiB)</text>\n";

  // Requested contexts and the model's trained context.
  for (const auto& cp : p.per_ctx) {
    const double x = X(static_cast<double>(cp.tokens));
    s += "<line x1=\"" + num(x) + "\" y1=\"" + num(kT) + "\" x2=\"" + num(x) + "\" y2=\"" + num(kB) +
         "\" stroke=\"#999\" stroke-dasharray=\"2,4\"/>\n";
    s += "<text x=\"" + num(x + 3) + "\" y=\"" + num(kT + 12) + "\" font-size=\"10\" fill=\"#666\">ctx " +
         tok_label(cp.tokens) + "</text>\n";
  }
  if (c.max_seq_len >= std::exp2(lx0) && c.max_seq_len <= std::exp2(lx1)) {
    const double x = X(static_cast<double>(c.max_seq_len));
    s += "<text x=\"" + num(x - 3) + "\" y=\"" + num(kB - 6) +
         "\" font-size=\"10\" fill=\"#666\" text-anchor=\"end\">model max " + tok_label(c.max_seq_len) +
         "</text>\n";
    s += "<line x1=\"" + num(x) + "\" y1=\"" + num(kT) + "\" x2=\"" + num(x) + "\" y2=\"" + num(kB) +
         "\" stroke=\"#bbb\"/>\n";
  }

  // Series.
  s += "<g clip-path=\"url(#plot)\">\n";
  for (size_t i = 0; i < series.size(); ++i) {
    const auto& sr = series[i];
    const char* dash = kv_dash(sr.kv);
    std::string pts;
    const int n = 96;
    for (int k = 0; k <= n; ++k) {
      const double lx = lx0 + (lx1 - lx0) * k / n;
      const int64_t tokens = std::max<int64_t>(1, std::llround(std::exp2(lx)));
      const double gib = total_bytes(c, sr.weights, *sr.kvc, tokens, p.req.concurrency, p.req) / kGiB;
      pts += num(X(static_cast<double>(tokens))) + "," + num(Y(std::min(gib, ymax * 2))) + " ";
    }
    bool rec = false;
    for (const auto& cp : p.per_ctx) rec |= cp.rec.fits && cp.rec.weight_id == sr.w && cp.rec.kv_id == sr.kv;
    s += "<polyline fill=\"none\" stroke=\"" + std::string(kColors[i % 10]) + "\" stroke-width=\"" +
         (rec ? "3.5" : "2") + "\"" + dash + " points=\"" + pts + "\"/>\n";
    for (const auto& cp : p.per_ctx) {
      const Row* r = cp.find(sr.w, sr.kv);
      if (!r) continue;
      s += "<circle cx=\"" + num(X(static_cast<double>(cp.tokens))) + "\" cy=\"" +
           num(Y(std::min(r->total / kGiB, ymax * 2))) + "\" r=\"3.5\" fill=\"" + kColors[i % 10] + "\"/>\n";
    }
  }
  s += "</g>\n";

  // Budget line.
  const double yb = Y(budget / kGiB);
  s += "<line x1=\"" + num(kL) + "\" y1=\"" + num(yb) + "\" x2=\"" + num(kR) + "\" y2=\"" + num(yb) +
       "\" stroke=\"#d62728\" stroke-width=\"2.5\"/>\n";
  s += "<text x=\"" + num(kL + 6) + "\" y=\"" + num(yb - 6) +
       "\" font-size=\"11\" fill=\"#d62728\" font-weight=\"bold\" stroke=\"white\" stroke-width=\"3\" "
       "paint-order=\"stroke\">budget " +
       html_escape(fmt_bytes(static_cast<double>(budget))) + "</text>\n";

  s += legend_svg(p, series, lx0, ymax);
  s += "</svg>\n";
  return s;
}

std::string plan_chart_html(const Plan& p) {
  std::string h = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>lowbit plan: " +
                  html_escape(p.model.name) +
                  "</title>\n<style>body{font-family:sans-serif;margin:2em;max-width:1000px}"
                  "td,th{padding:2px 8px;text-align:right}td:first-child,th:first-child{text-align:left}"
                  "code{background:#f4f4f4;padding:2px 4px}</style></head><body>\n";
  h += plan_chart_svg(p);
  for (const auto& cp : p.per_ctx) {
    h += "<h3>ctx " + std::to_string(cp.ctx) + " (" + std::to_string(cp.tokens) + " tokens/sequence) x " +
         std::to_string(p.req.concurrency) + " sequences</h3>\n<ul>\n";
    for (const auto& r : cp.rec.reasons) h += "<li>" + html_escape(r) + "</li>\n";
    h += "</ul>\n<p>next:</p>\n<ul>\n";
    for (const auto& c : cp.rec.commands) h += "<li><code>" + html_escape(c) + "</code></li>\n";
    h += "</ul>\n";
  }
  h += "<pre>" + html_escape(plan_table(p)) + "</pre>\n</body></html>\n";
  return h;
}

}  // namespace lowbit::plan
