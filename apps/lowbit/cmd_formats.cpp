// `lowbit formats`: the number formats lowbit knows (table), how values encode (`show`), and the measured
// error of each format on seeded Gaussian and heavy-tailed data (`error`).
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "apps/lowbit/command.h"
#include "core/error.h"
#include "core/json_text.h"
#include "formats/format.h"
#include "formats/scheme.h"
#include "tensor/qtensor.h"

namespace {
using namespace lowbit;
using nlohmann::json;

std::string routes_str(int r) {
  std::string s;
  s += (r & kRouteWeights) ? "W" : "-";
  s += (r & kRouteActivations) ? "A" : "-";
  s += (r & kRouteKv) ? "KV" : "--";
  return s;
}

std::string fmt_num(double v) {
  char b[32];
  if (v == 0) return "0";
  if (std::fabs(v) >= 1e5 || std::fabs(v) < 1e-3)
    std::snprintf(b, sizeof b, "%.3g", v);
  else
    std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

// Effective scale type shown in the table: native for MX/NVFP4/GGUF, the default scheme's otherwise.
std::string scale_col(const FormatInfo& f) {
  if (f.is_gguf()) return "in-block";
  if (f.kind == FormatKind::Scale) return "-";
  QuantScheme s = default_scheme(f.id);
  if (s.scale_type == ScaleType::None) return "-";
  return scale_type_name(s.scale_type);
}

void list_formats(bool as_json) {
  const int64_t R = 4096, C = 4096;
  json arr = json::array();
  for (const auto& f : format_table()) {
    json j = {{"name", f.name},
              {"bits", f.bits},
              {"block", f.block_elems},
              {"routes", routes_str(f.routes)},
              {"description", f.description}};
    j["block_bytes"] = f.block_bytes;
    j["scale"] = scale_col(f);
    if (f.kind != FormatKind::Scale) {
      QuantScheme s = default_scheme(f.id);
      j["default_scheme"] = to_string(s);
      j["bpw_4096x4096"] = bits_per_weight(s, R, C);
      if (s.gran == Granularity::Group && !f.is_microscaled()) j["block"] = s.group_size;
    }
    if (!f.is_gguf()) {
      j["min_positive"] = f.min_positive;
      j["max_finite"] = f.max_finite;
    }
    if (f.ggml_type >= 0) j["ggml_type"] = f.ggml_type;
    arr.push_back(j);
  }
  if (as_json) {
    std::cout << lowbit::json_text(json{{"formats", arr}}, 2) << "\n";
    return;
  }
  std::printf("%-12s %4s %6s %-8s %7s  %-22s %-5s %s\n", "format", "bits", "block", "scale", "bpw",
              "range (min..max)", "route", "description");
  for (auto& j : arr) {
    std::string range = j.contains("max_finite") ? fmt_num(j["min_positive"].get<double>()) + ".." +
                                                       fmt_num(j["max_finite"].get<double>())
                                                 : "-";
    std::string bpw = j.contains("bpw_4096x4096") ? fmt_num(j["bpw_4096x4096"].get<double>()) : "-";
    std::printf("%-12s %4d %6d %-8s %7s  %-22s %-5s %s\n", j["name"].get<std::string>().c_str(),
                j["bits"].get<int>(), j["block"].get<int>(), j["scale"].get<std::string>().c_str(),
                bpw.c_str(), range.c_str(), j["routes"].get<std::string>().c_str(),
                j["description"].get<std::string>().c_str());
  }
  std::printf(
      "\nbpw: default scheme on a 4096x4096 matrix, counting elements + scales + zeros + second-level "
      "scales.\nblock: elements per scale (default group for int/nf4/fp4 schemes). Routes: W weights, A "
      "activations, KV cache.\nMore: lowbit formats show e4m3 448 500 | lowbit formats error --formats "
      "int4,nf4 --granularity g64\n");
}

std::string bin(uint32_t v, int bits) {
  std::string s;
  for (int i = bits - 1; i >= 0; --i) s += ((v >> i) & 1) ? '1' : '0';
  return s;
}

// "S.EEEE.MMM" for floats, plain binary otherwise.
std::string fields(const FormatInfo& f, uint32_t code) {
  std::string b = bin(code, f.bits);
  if (f.exp_bits > 0) return b.substr(0, 1) + "." + b.substr(1, f.exp_bits) + "." + b.substr(1 + f.exp_bits);
  return b;
}

void show_values(const std::string& name, const std::vector<std::string>& values, double scale,
                 bool as_json) {
  const FormatInfo& f0 = format_by_name(name);
  if (f0.is_gguf())
    throw UsageError("cli",
                     std::string("'") + f0.name +
                         "' is a block format (codes share in-block scales); `show` takes element formats "
                         "such as e4m3, e2m1, int4, nf4, mxfp4 (its element)");
  const FormatInfo& f = format_info(f0.elem);
  if (!(scale > 0) || !std::isfinite(scale))
    throw UsageError("cli", "--scale must be a positive finite number");
  json arr = json::array();
  for (const auto& vs : values) {
    double v;
    try {
      size_t pos = 0;
      v = std::stod(vs, &pos);
      if (pos != vs.size()) throw std::invalid_argument(vs);
    } catch (const std::exception&) {
      throw UsageError("cli", "cannot parse value '" + vs + "' as a number (nan, inf, 1e-3 are accepted)");
    }
    const float x = static_cast<float>(v / scale);
    const uint32_t c = f.encode(x, true);
    const uint32_t cn = f.encode(x, false);
    const double back = static_cast<double>(f.decode(c)) * scale;
    json j = {{"input", v},
              {"code", c},
              {"hex",
               [&] {
                 char b[16];
                 std::snprintf(b, sizeof b, "0x%0*X", (f.bits + 3) / 4, c);
                 return std::string(b);
               }()},
              {"bits", fields(f, c)},
              {"decoded", back}};
    if (cn != c) j["non_saturating_decoded"] = static_cast<double>(f.decode(cn)) * scale;
    j["error"] = std::isfinite(back) && std::isfinite(v) ? back - v : 0.0;
    arr.push_back(j);
  }
  if (as_json) {
    std::cout << lowbit::json_text(json{{"format", f.name}, {"scale", scale}, {"values", arr}}, 2) << "\n";
    return;
  }
  std::printf(
      "format %s (%d bits%s)%s\n", f.name, f.bits,
      f.exp_bits ? (", fields S." + std::string(f.exp_bits, 'E') + "." + std::string(f.man_bits, 'M')).c_str()
                 : "",
      scale != 1.0 ? (", scale " + fmt_num(scale)).c_str() : "");
  std::printf("%14s  %-6s %-14s %14s %12s  %s\n", "input", "hex", "bits", "decoded", "error",
              "non-saturating");
  for (auto& j : arr) {
    std::string ns =
        j.contains("non_saturating_decoded") ? fmt_num(j["non_saturating_decoded"].get<double>()) : "";
    std::printf("%14s  %-6s %-14s %14s %12s  %s\n", fmt_num(j["input"].get<double>()).c_str(),
                j["hex"].get<std::string>().c_str(), j["bits"].get<std::string>().c_str(),
                fmt_num(j["decoded"].get<double>()).c_str(), fmt_num(j["error"].get<double>()).c_str(),
                ns.c_str());
  }
}

// A scheme from a --formats entry: a full scheme string, or a format name + the --granularity token.
QuantScheme scheme_for(const std::string& entry, const std::string& gran) {
  if (entry.find(':') != std::string::npos || gran.empty()) return parse_scheme(entry);
  const FormatInfo& f = format_by_name(entry);
  const bool fixed = f.is_gguf() || f.is_microscaled() || f.kind == FormatKind::Scale || f.bits >= 16;
  return parse_scheme(fixed ? entry : entry + ":" + gran);
}

struct Stats {
  double rmse = 0, snr_db = 0, max_abs = 0;
};
Stats measure(const std::vector<float>& w, const std::vector<float>& y) {
  double e = 0, s = 0, mx = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    const double d = double(y[i]) - w[i];
    e += d * d;
    s += double(w[i]) * w[i];
    mx = std::max(mx, std::fabs(d));
  }
  Stats st;
  st.rmse = std::sqrt(e / static_cast<double>(w.size()));
  st.snr_db = e > 0 ? 10 * std::log10(s / e) : INFINITY;
  st.max_abs = mx;
  return st;
}

void error_table(const std::string& formats, const std::string& gran, int64_t rows, int64_t cols,
                 uint32_t seed, bool as_json) {
  if (rows < 1 || cols < 1 || rows * cols > (int64_t{1} << 28))
    throw UsageError("cli", "--rows and --cols must be >= 1 with rows*cols <= 2^28");
  std::vector<std::string> entries;
  if (formats.empty()) {
    for (const auto& f : format_table()) {
      if (f.kind == FormatKind::Scale || f.id == FormatId::F32) continue;
      if (f.is_gguf() && !f.quantize_row) continue;
      entries.push_back(f.name);
    }
  } else {
    std::stringstream ss(formats);
    std::string e;
    while (std::getline(ss, e, ','))
      if (!e.empty()) entries.push_back(e);
  }
  std::vector<QuantScheme> schemes;
  for (auto& e : entries) {
    QuantScheme s = scheme_for(e, gran);
    validate(s, rows, cols);
    if (s.info().is_gguf() && !s.info().quantize_row)
      throw UsageError("cli",
                       std::string("'") + s.info().name +
                           "' can be read but not quantized; GGUF quantizers: " + gguf_quantizer_names());
    schemes.push_back(s);
  }
  // Seeded data: N(0,1), and a heavy-tailed copy (Student-t with 3 dof, plus 0.1% outliers at 50x).
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::student_t_distribution<float> td(3.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  std::vector<float> gauss(static_cast<size_t>(rows * cols)), heavy(gauss.size());
  for (auto& v : gauss) v = nd(rng);
  for (auto& v : heavy) v = td(rng) * (ud(rng) < 0.001f ? 50.0f : 1.0f);
  const std::vector<std::pair<std::string, const std::vector<float>*>> data = {{"gaussian", &gauss},
                                                                               {"heavy_tailed", &heavy}};
  json arr = json::array();
  std::vector<float> y(gauss.size());
  for (auto& s : schemes) {
    json j = {{"scheme", to_string(s)}, {"bpw", bits_per_weight(s, rows, cols)}};
    for (auto& [dname, d] : data) {
      auto q = quantize_matrix(d->data(), rows, cols, s);
      dequantize_matrix(q, y.data());
      Stats st = measure(*d, y);
      j[dname] = {{"rmse", st.rmse}, {"snr_db", st.snr_db}, {"max_abs_err", st.max_abs}};
    }
    arr.push_back(j);
  }
  if (as_json) {
    std::cout << lowbit::json_text(json{{"rows", rows}, {"cols", cols}, {"seed", seed}, {"results", arr}}, 2)
              << "\n";
    return;
  }
  std::printf("matrix [%lld, %lld], seed %u; gaussian N(0,1) | heavy-tailed (t3 + 0.1%% outliers x50)\n",
              static_cast<long long>(rows), static_cast<long long>(cols), seed);
  std::printf("%-26s %7s | %9s %8s %9s | %9s %8s %9s\n", "scheme", "bpw", "rmse", "snr dB", "max err", "rmse",
              "snr dB", "max err");
  for (auto& j : arr) {
    auto& g = j["gaussian"];
    auto& h = j["heavy_tailed"];
    std::printf("%-26s %7.4f | %9.5f %8.2f %9.4f | %9.5f %8.2f %9.4f\n",
                j["scheme"].get<std::string>().c_str(), j["bpw"].get<double>(), g["rmse"].get<double>(),
                g["snr_db"].get<double>(), g["max_abs_err"].get<double>(), h["rmse"].get<double>(),
                h["snr_db"].get<double>(), h["max_abs_err"].get<double>());
  }
}

void setup(CLI::App& cmd) {
  static bool json_out = false;
  cmd.add_flag("--json", json_out,
               "Machine-readable output (also accepted by the show and error subcommands)");
  cmd.require_subcommand(0, 1);

  auto* show = cmd.add_subcommand("show",
                                  "How values encode in a format: code in hex and binary with the fields "
                                  "split (S.EEEE.MMM), the decoded value, "
                                  "the error, and the non-saturating result where it differs.\n"
                                  "Example: lowbit formats show e4m3 1.0 448 500 nan   |   lowbit formats "
                                  "show int4 0.3 -1 --scale 0.125");
  static std::string show_fmt;
  static std::vector<std::string> show_vals;
  static double show_scale = 1.0;
  show->add_option("format", show_fmt,
                   "Element format: e4m3fn, e5m2, e2m1, e2m3, e3m2, e8m0, int4, nf4, bf16, ...")
      ->required();
  show->add_option("values", show_vals, "Values to encode (decimal; nan and inf accepted)")->required();
  show->add_option("--scale", show_scale,
                   "Divide by this scale before encoding, multiply after decoding (default 1)");
  show->add_flag("--json", json_out, "Machine-readable output");
  show->callback([] { show_values(show_fmt, show_vals, show_scale, json_out); });

  auto* err = cmd.add_subcommand(
      "error",
      "Measured RMSE, SNR (dB) and max abs error of each format on seeded Gaussian and heavy-tailed data.\n"
      "Example: lowbit formats error --formats int4,nf4,mxfp4,nvfp4,q4_k --granularity g64 --rows 256 --cols "
      "1024");
  static std::string err_formats, err_gran;
  static int64_t err_rows = 256, err_cols = 1024;
  static uint32_t err_seed = 1;
  err->add_option(
      "--formats", err_formats,
      "Comma-separated formats or full schemes (int4,nf4,int4:g32:asym,...); default: every format "
      "that can be quantized");
  err->add_option("--granularity", err_gran,
                  "Applied to formats given by name whose layout is not fixed: g<N>, channel, tensor, "
                  "block<R>x<C> (default: each format's default scheme)");
  err->add_option("--rows", err_rows, "Rows of the test matrix (default 256)");
  err->add_option("--cols", err_cols,
                  "Columns of the test matrix (default 1024; GGUF needs a multiple of 256)");
  err->add_option("--seed", err_seed, "Random seed for the data (default 1)");
  err->add_flag("--json", json_out, "Machine-readable output");
  err->callback([] { error_table(err_formats, err_gran, err_rows, err_cols, err_seed, json_out); });

  cmd.callback([&cmd] {
    if (cmd.get_subcommands().empty()) list_formats(json_out);
  });
}
}  // namespace

LOWBIT_COMMAND(
    "formats", 10,
    "Number formats: the table (bits, block, scale, bpw, range, routes), how values encode (show), and "
    "measured error per format (error).\nExample: lowbit formats   |   lowbit formats show e4m3 448 500   "
    "|   lowbit formats error --formats int4,nf4 --granularity g64",
    setup);
