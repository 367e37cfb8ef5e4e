// Checkpoint inspection (see inspect.h).
#include "quant/inspect.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include <algorithm>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/json_text.h"
#include "io/hf_checkpoint.h"
#include "model/model.h"
#include "model/quantized_checkpoint.h"
#include "quant/checkpoint_writer.h"

namespace fs = std::filesystem;

namespace lowbit::quant {

using nlohmann::json;

// The files an engine reads to run the model at `path`, with their sizes: a GGUF or llama.c file (+ its
// tokenizer), or a Hugging Face directory's model files (checkpoint_model_files, as --budget counts them).
std::vector<std::pair<std::string, int64_t>> model_files(const Model& m, const std::string& path) {
  if (m.format == "hf")
    return checkpoint_model_files(fs::is_directory(path) ? path : fs::path(path).parent_path().string());
  std::vector<std::pair<std::string, int64_t>> out;
  auto add = [&](const fs::path& f) {
    std::error_code ec;
    const auto n = fs::file_size(f, ec);
    if (!ec) out.push_back({f.filename().string(), static_cast<int64_t>(n)});
  };
  add(path);
  if (m.format == "llama2c") {
    const std::string tok = find_llama2c_tokenizer(path, "");
    if (!tok.empty()) add(tok);
  }
  return out;
}

json inspect_checkpoint(const std::string& path) {
  LoadOptions lo;
  auto m = load_model(path, lo);
  json rep;
  rep["path"] = path;
  rep["format"] = m->format;
  rep["config"] = m->config.to_json();
  // Manifest and quantization_config (HF directories).
  json manifest = nullptr, qc = nullptr;
  std::map<std::string, std::vector<json>> tensor_files;  // module -> stored tensors
  if (m->format == "hf") {
    fs::path dir = fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
    if (fs::exists(dir / "lowbit_manifest.json")) {
      std::ifstream in(dir / "lowbit_manifest.json");
      manifest = json::parse(in, nullptr, false);
      if (manifest.is_discarded()) manifest = nullptr;
    }
    auto ck = io::HfCheckpoint::open(dir.string());
    if (is_quantized_config(ck.config)) qc = ck.config["quantization_config"];
    for (auto& [name, v] : ck.tensors) {
      auto dot = name.rfind('.');
      std::string module = dot == std::string::npos ? name : name.substr(0, dot);
      tensor_files[module].push_back(
          {{"name", name.substr(dot + 1)}, {"dtype", dtype_name(v.dtype)}, {"shape", v.shape}});
    }
  }
  std::map<std::string, json> man_t;
  if (manifest.is_object() && manifest.contains("tensors"))
    for (auto& t : manifest["tensors"]) man_t[t.value("name", "")] = t;
  json tensors = json::array(), unq = json::array();
  int64_t matrix_bytes = 0;
  double qbits = 0, qn = 0, abits = 0, an = 0;
  const bool tied = m->weights.tied();
  for (auto& [name, w] : m->weights.named_matrices()) {
    const double n = static_cast<double>(w->rows * w->cols);
    json t = {{"name", name}, {"hf_name", hf_module_name(name)}, {"shape", {w->rows, w->cols}}};
    double bpw;
    if (w->kind == WeightKind::Quant) {
      bpw = w->q->bits_per_weight();
      t["quantized"] = true;
      t["scheme"] = to_string(w->q->scheme);
      // GPTQ / AWQ imports run as lowbit INT schemes but are stored in their own layout.
      const std::string method = qc.is_object() ? qc.value("quant_method", std::string()) : std::string();
      t["layout"] = method == "gptq" || method == "awq"
                        ? method
                        : std::string(layout_name(checkpoint_layout(w->q->scheme, w->cols)));
      t["scale_grid"] = {w->q->grid.rows, w->q->grid.cols};
      auto sc = w->q->decoded_scales();
      if (!sc.empty()) {
        float mn = sc[0], mx = sc[0];
        for (float s : sc) mn = std::min(mn, s), mx = std::max(mx, s);
        t["scale_range"] = {mn, mx};
      }
      if (w->act_format != FormatId::F32)
        t["activations"] = {
            {"format", format_info(w->act_format).name},
            {"dynamic", !(w->act_static_scale > 0)},
            {"static_scale", w->act_static_scale > 0 ? json(w->act_static_scale) : json(nullptr)}};
      qbits += bpw * n;
      qn += n;
    } else if (w->kind == WeightKind::Ggml) {
      // The stored block rows (a load-time pack, counted in "bytes", is the kernels' copy of them).
      bpw = 8.0 * static_cast<double>(w->row_bytes() * static_cast<size_t>(w->rows)) / n;
      t["quantized"] = true;
      t["scheme"] = w->format_name();
      // GGUF blocks come from a GGUF file or from a lowbit checkpoint's GGUF-block modules.
      t["layout"] = m->format == "gguf" ? "gguf" : "lowbit-packed";
      qbits += bpw * n;
      qn += n;
    } else {
      bpw = 8.0 * static_cast<double>(w->nbytes()) / n;
      t["quantized"] = false;
      t["scheme"] = w->format_name();
    }
    t["bits_per_weight"] = bpw;
    t["bytes"] = w->nbytes();
    if (name == "lm_head" && tied) t["tied_to"] = "tok_embed";
    auto mt = man_t.find(name);
    if (mt != man_t.end()) {
      for (const char* k : {"algorithm", "scale_source", "rel_error_weight", "rel_error_output",
                            "rel_error_output_rtn", "reason"})
        if (mt->second.contains(k)) t[k] = mt->second[k];
    }
    auto tf = tensor_files.find(hf_module_name(name));
    if (tf != tensor_files.end()) t["stored_tensors"] = tf->second;
    if (!t["quantized"].get<bool>()) {
      unq.push_back({{"name", name},
                     {"dtype", t["scheme"]},
                     {"reason", t.value("reason", std::string("not quantized"))}});
    }
    if (!(name == "lm_head" && tied)) {
      abits += bpw * n, an += n;
      // Stored bytes (codes, scales, zero points; rows as stored), without the kernels' side tables.
      matrix_bytes += w->kind == WeightKind::Quant
                          ? static_cast<int64_t>(storage_bits(w->q->scheme, w->rows, w->cols).total() / 8)
                          : w->rows * static_cast<int64_t>(w->row_bytes());
    }
    tensors.push_back(t);
  }
  rep["tensors"] = tensors;
  rep["unquantized"] = unq;
  // Whole-file accounting: every byte of the model files over every parameter (matrices once, norms,
  // biases), split into matrix storage (codes, scales, zero points), norms / biases, and the rest
  // (headers, config, tokenizer, metadata).
  int64_t file_bytes = 0;
  json files = json::array();
  for (const auto& [name, n] : model_files(*m, path)) {
    files.push_back({{"name", name}, {"bytes", n}});
    file_bytes += n;
  }
  const int64_t params = m->weights.parameters();
  rep["whole_file"] = {
      {"bytes", file_bytes},
      {"files", files},
      {"parameters", params},
      {"bits_per_parameter", params > 0 ? 8.0 * static_cast<double>(file_bytes) / params : 0.0},
      {"matrix_bytes", matrix_bytes},
      {"other_bytes", file_bytes - matrix_bytes}};
  json kv = json::array();
  for (size_t i = 0; i < m->weights.layers.size(); ++i) {
    const auto& L = m->weights.layers[i];
    if (!L.k_scale.empty() || !L.v_scale.empty())
      kv.push_back({{"layer", i}, {"k_scale", L.k_scale}, {"v_scale", L.v_scale}});
  }
  rep["kv_scales"] = kv;
  rep["summary"] = {{"bits_per_weight_quantized", qn > 0 ? qbits / qn : 0.0},
                    {"bits_per_weight_all_matrices", an > 0 ? abits / an : 0.0},
                    {"quantized_params", static_cast<int64_t>(qn)},
                    {"matrix_params", static_cast<int64_t>(an)},
                    {"weight_bytes", m->weights.weight_bytes()}};
  rep["quantization_config"] = qc;
  if (manifest.is_object()) {
    json prov;
    for (const char* k :
         {"tool", "created_utc", "source", "recipe", "calibration", "warnings", "requantized", "tokenizer"})
      if (manifest.contains(k)) prov[k] = manifest[k];
    if (prov.contains("source")) prov["source"].erase("config");
    rep["provenance"] = prov;
  } else {
    rep["provenance"] = nullptr;
  }
  return rep;
}

std::string inspect_table(const json& r, bool per_tensor) {
  std::ostringstream os;
  char buf[512];
  const json& c = r["config"];
  os << "model: " << r["path"].get<std::string>() << " (" << r["format"].get<std::string>() << ", "
     << c.value("arch", "?") << ", hidden " << c.value("hidden_size", 0) << ", "
     << c.value("num_hidden_layers", 0) << " layers)\n";
  const json& s = r["summary"];
  std::snprintf(buf, sizeof buf,
                "bits per weight: %.4f over quantized matrices, %.4f over all matrices; weights %lld bytes\n",
                s["bits_per_weight_quantized"].get<double>(), s["bits_per_weight_all_matrices"].get<double>(),
                static_cast<long long>(s["weight_bytes"].get<int64_t>()));
  os << buf;
  if (r.contains("whole_file")) {
    const json& w = r["whole_file"];
    std::snprintf(buf, sizeof buf,
                  "whole file: %lld bytes in %zu file(s) over %lld parameters = %.4f bits per parameter "
                  "(matrices %lld bytes, norms / headers / config / tokenizer %lld)\n",
                  static_cast<long long>(w["bytes"].get<int64_t>()), w["files"].size(),
                  static_cast<long long>(w["parameters"].get<int64_t>()),
                  w["bits_per_parameter"].get<double>(),
                  static_cast<long long>(w["matrix_bytes"].get<int64_t>()),
                  static_cast<long long>(w["other_bytes"].get<int64_t>()));
    os << buf;
  }
  if (!r["quantization_config"].is_null()) {
    const json& q = r["quantization_config"];
    const std::string method = q.value("quant_method", "?");
    if (method == "gptq" || method == "awq") {  // one scheme for all decoder linears, no config groups
      os << "quantization_config: " << method << ", bits " << json_text(q.value("bits", json()))
         << ", group_size " << json_text(q.value("group_size", json()));
      if (method == "gptq")
        os << ", sym " << json_text(q.value("sym", json())) << ", desc_act "
           << json_text(q.value("desc_act", json())) << ", checkpoint_format "
           << q.value("checkpoint_format", std::string("gptq"));
      else
        os << ", version " << q.value("version", std::string("gemm"));
    } else {
      os << "quantization_config: " << method << ", format " << q.value("format", "?") << ", "
         << q["config_groups"].size() << " group(s)";
    }
    if (q.contains("kv_cache_scheme") && !q["kv_cache_scheme"].is_null())
      os << ", kv_cache_scheme " << json_text(q["kv_cache_scheme"]);
    os << "\n";
  }
  // Per format summary, then per tensor.
  std::map<std::string, std::pair<int, double>> by;
  for (auto& t : r["tensors"]) {
    auto& b = by[t["scheme"].get<std::string>() +
                 (t.contains("scale_source") ? "  [" + t["scale_source"].get<std::string>() + "]" : "")];
    b.first++;
    b.second = t["bits_per_weight"].get<double>();
  }
  os << "formats:\n";
  for (auto& [k, v] : by) {
    std::snprintf(buf, sizeof buf, "  %-60s x%-3d %.4f bpw\n", k.c_str(), v.first, v.second);
    os << buf;
  }
  if (per_tensor) {
    std::snprintf(buf, sizeof buf, "%-18s %-14s %-26s %-22s %8s %9s %9s %s\n", "tensor", "shape", "scheme",
                  "layout", "bpw", "errW", "errOut", "activations");
    os << buf;
    for (auto& t : r["tensors"]) {
      std::string shape =
          std::to_string(t["shape"][0].get<int64_t>()) + "x" + std::to_string(t["shape"][1].get<int64_t>());
      auto num = [&](const char* k) {
        if (!t.contains(k) || t[k].is_null()) return std::string("-");
        char b[32];
        std::snprintf(b, sizeof b, "%.4f", t[k].get<double>());
        return std::string(b);
      };
      std::string act = t.contains("activations")
                            ? t["activations"]["format"].get<std::string>() +
                                  (t["activations"]["dynamic"].get<bool>() ? " dyn" : " static")
                            : "-";
      std::snprintf(buf, sizeof buf, "%-18s %-14s %-26s %-22s %8.4f %9s %9s %s\n",
                    t["name"].get<std::string>().c_str(), shape.c_str(),
                    t["scheme"].get<std::string>().c_str(), t.value("layout", "dense").c_str(),
                    t["bits_per_weight"].get<double>(), num("rel_error_weight").c_str(),
                    num("rel_error_output").c_str(), act.c_str());
      os << buf;
    }
  }
  if (!r["unquantized"].empty()) {
    os << "unquantized:\n";
    for (auto& u : r["unquantized"])
      os << "  " << u["name"].get<std::string>() << " (" << u["dtype"].get<std::string>()
         << "): " << u["reason"].get<std::string>() << "\n";
  }
  if (!r["kv_scales"].empty()) {
    os << "kv-cache scales:\n";
    for (auto& k : r["kv_scales"])
      os << "  layer " << k["layer"] << ": k " << json_text(k["k_scale"]) << ", v " << json_text(k["v_scale"])
         << "\n";
  }
  const json& p = r["provenance"];
  if (p.is_object()) {
    os << "provenance:\n";
    if (p.contains("tool"))
      os << "  tool: lowbit " << p["tool"].value("version", "?") << " (" << p["tool"].value("commit", "?")
         << ")\n";
    if (p.contains("created_utc")) os << "  created: " << p["created_utc"].get<std::string>() << "\n";
    if (p.contains("source")) {
      os << "  source: " << p["source"].value("path", "?") << " (" << p["source"].value("format", "?") << ")";
      if (p["source"].contains("files"))
        for (auto& f : p["source"]["files"])
          os << "\n    " << f.value("file", "") << " sha256 " << f.value("sha256", "");
      os << "\n";
    }
    if (p.contains("recipe"))
      os << "  recipe: " << p["recipe"].value("name", "?") << " (" << p["recipe"].value("scheme", "?") << ", "
         << p["recipe"].value("algorithm", "?") << ")\n";
    if (p.contains("calibration") && p["calibration"].is_object())
      os << "  calibration: " << p["calibration"].value("file", "") << " sha256 "
         << p["calibration"].value("sha256", "") << ", " << p["calibration"].value("samples", 0) << " x "
         << p["calibration"].value("length", 0) << " tokens, seed " << p["calibration"].value("seed", 0)
         << "\n";
    if (p.contains("requantized") && p["requantized"].get<bool>())
      os << "  REQUANTIZED from an already-quantized model\n";
    if (p.contains("warnings"))
      for (auto& w : p["warnings"]) os << "  warning: " << w.get<std::string>() << "\n";
  } else {
    os << "provenance: none recorded (no lowbit_manifest.json)\n";
  }
  return os.str();
}

}  // namespace lowbit::quant
