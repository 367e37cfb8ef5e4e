// Recipe presets, the W/A/KV notation, JSON recipes and their validation against a model (see recipe.h).
#include "quant/recipe.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include "core/error.h"
#include "model/quantized_checkpoint.h"

namespace lowbit::quant {
namespace {

using nlohmann::json;

[[noreturn]] void usage(const std::string& msg) {
  throw UsageError("quant", msg);
}

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

QuantScheme scheme_or_usage(const std::string& s, const std::string& where) {
  try {
    return parse_scheme(s);
  } catch (const UsageError& e) {
    usage(where + ": " + e.what());
  }
}

FormatId act_format_from_name(const std::string& s, const std::string& where) {
  std::string l = lower(s);
  if (l == "none" || l == "f16" || l == "bf16" || l == "f32" || l == "16" || l.empty()) return FormatId::F32;
  const FormatInfo* fi = find_format(l);
  if (!fi)
    usage(where + ": unknown activation format '" + s + "'; use int8, int4, nvfp4, e4m3 (fp8), e5m2 or none");
  return fi->id;
}

ActScale act_scale_from_name(const std::string& s, const std::string& where) {
  const std::string l = lower(s);
  if (l == "amax" || l == "max") return ActScale::Amax;
  if (l == "mse") return ActScale::Mse;
  usage(where + ": unknown block-scale rule '" + s + "'; use amax (NVIDIA's, the default) or mse");
}

Algorithm algorithm_from_name(const std::string& s, bool* smooth, const std::string& where) {
  std::string l = lower(s);
  *smooth = false;
  const std::string sq = "smoothquant+";
  if (l.rfind(sq, 0) == 0) {
    *smooth = true;
    l = l.substr(sq.size());
  } else if (l == "smoothquant") {
    *smooth = true;
    l = "rtn";
  }
  if (l == "rtn") return Algorithm::Rtn;
  if (l == "rtn-mse" || l == "mse") return Algorithm::RtnMse;
  if (l == "imatrix" || l == "imatrix-rtn") return Algorithm::Imatrix;
  if (l == "gptq") return Algorithm::Gptq;
  if (l == "awq") {
    if (*smooth) usage(where + ": smoothquant+awq is not a combination; AWQ already migrates scales");
    return Algorithm::Awq;
  }
  usage(where + ": unknown algorithm '" + s +
        "'; use rtn, rtn-mse, imatrix, gptq, awq, smoothquant+rtn or smoothquant+gptq");
}

Recipe base_recipe(const std::string& name, const std::string& scheme) {
  Recipe r;
  r.name = name;
  r.weights = parse_scheme(scheme);
  return r;
}

void default_ignore(Recipe* r) {
  r->ignore = {
      {"tok_embed", {}, "embedding: a gather, not a matmul; kept in source precision (default ignore)"},
      {"lm_head",
       {},
       "lm_head: the most sensitive layer (logits); kept in source precision (default ignore)"}};
}

void check_keys(const json& j, const std::set<std::string>& allowed, const std::string& where) {
  if (!j.is_object()) usage(where + " must be a JSON object");
  std::vector<std::string> bad;
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!allowed.count(it.key())) bad.push_back(it.key());
  if (!bad.empty()) {
    std::string list, known;
    for (auto& b : bad) list += (list.empty() ? "'" : ", '") + b + "'";
    for (auto& a : allowed) known += (known.empty() ? "" : ", ") + a;
    usage(where + ": unknown key" + (bad.size() > 1 ? "s " : " ") + list + "; known keys: " + known);
  }
}

template <class T>
T get_as(const json& j, const std::string& key, const std::string& where) {
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    usage(where + "." + key + " has the wrong type (" + std::string(j.at(key).type_name()) + ")");
  }
}

}  // namespace

const char* algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::Rtn:
      return "rtn";
    case Algorithm::RtnMse:
      return "rtn-mse";
    case Algorithm::Imatrix:
      return "imatrix";
    case Algorithm::Gptq:
      return "gptq";
    case Algorithm::Awq:
      return "awq";
  }
  return "?";
}

bool Recipe::needs_calibration() const {
  return algorithm == Algorithm::Gptq || algorithm == Algorithm::Awq || algorithm == Algorithm::Imatrix ||
         smoothquant || (act.enabled() && !act.dynamic) || kv.enabled() || rotation.method == "spinquant" ||
         rotation.method == "duquant" || tune.enabled();
}

std::vector<std::string> preset_names() {
  return {"W4A16",     "W4A16_ASYM", "W8A16", "W8A8",     "W4A8",  "FP8",  "FP8_DYNAMIC",
          "FP8_BLOCK", "NF4",        "NVFP4", "NVFP4A16", "MXFP4", "MXFP8"};
}

std::optional<Recipe> preset_recipe(const std::string& name_in) {
  const std::string n = upper(name_in);
  Recipe r;
  if (n == "W4A16")
    r = base_recipe(n, "int4:g128:sym:f16");
  else if (n == "W4A16_ASYM")
    r = base_recipe(n, "int4:g128:asym:f16");
  else if (n == "W8A16")
    r = base_recipe(n, "int8:channel:sym:f16");
  else if (n == "W8A8" || n == "W8A8_INT8") {
    r = base_recipe("W8A8", "int8:channel:sym:f32");
    r.act = {FormatId::INT8, true};
  } else if (n == "W4A8") {
    r = base_recipe(n, "int4:g128:sym:f16");
    r.act = {FormatId::INT8, true};
  } else if (n == "FP8") {
    r = base_recipe(n, "e4m3:tensor:f32");
    r.act = {FormatId::E4M3FN, false};
  } else if (n == "FP8_DYNAMIC") {
    r = base_recipe(n, "e4m3:channel:f32");
    r.act = {FormatId::E4M3FN, true};
  } else if (n == "FP8_BLOCK") {
    r = base_recipe(n, "e4m3:block128x128:f32");
    r.act = {FormatId::E4M3FN, true};
    r.notes.push_back(
        "FP8_BLOCK: compressed-tensors quantizes activations per token in groups of 128; lowbit "
        "kernels use one scale per token");
  } else if (n == "NF4")
    r = base_recipe(n, "nf4:g64:f32");
  else if (n == "NVFP4" || n == "NVFP4A16") {
    r = base_recipe(n, "nvfp4");
    if (n == "NVFP4")
      r.notes.push_back(
          "NVFP4: compressed-tensors' NVFP4 also quantizes activations to FP4 (with a calibrated per-tensor "
          "global scale); this preset runs as NVFP4A16 (weight-only): add act=nvfp4 for lowbit's FP4 "
          "activations with dynamic per-token global scales");
  } else if (n == "MXFP4" || n == "MXFP4A16")
    r = base_recipe(n, "mxfp4");
  else if (n == "MXFP8" || n == "MXFP8A16")
    r = base_recipe(n, "mxfp8");
  else
    return std::nullopt;
  default_ignore(&r);
  return r;
}

std::optional<Recipe> parse_wakv(const std::string& s_in) {
  // At most 3 digits per width: std::stoi below must not overflow (longer runs are not this notation).
  static const std::regex re("^W(\\d{1,3})A(\\d{1,3})(?:KV(\\d{1,3}))?$", std::regex::icase);
  std::smatch m;
  std::string s = s_in;
  if (!std::regex_match(s, m, re)) return std::nullopt;
  const int wb = std::stoi(m[1].str()), ab = std::stoi(m[2].str());
  const int kb = m[3].matched ? std::stoi(m[3].str()) : 16;
  Recipe r;
  r.name = upper(s);
  if (wb == 8) {
    r.weights = parse_scheme("int8:channel:sym:f16");
    r.notes.push_back(
        "W8: weight format not stated: int8, per-channel symmetric scales (compressed-tensors W8A8)");
  } else if (wb >= 2 && wb <= 4) {
    r.weights = parse_scheme("int" + std::to_string(wb) + ":g128:sym:f16");
    r.notes.push_back("W" + std::to_string(wb) + ": weight format not stated: int" + std::to_string(wb) +
                      ", groups of 128, symmetric, f16 scales");
  } else if (wb == 16) {
    r.weights = parse_scheme("f16");
    r.notes.push_back("W16: weights stay 16-bit");
  } else {
    usage("'" + s + "': W" + std::to_string(wb) +
          " is not a weight width lowbit quantizes (2, 3, 4, 8 or 16)");
  }
  if (ab == 16) {
    r.notes.push_back("A16: activations stay 16-bit (weight-only quantization)");
  } else if (ab == 8) {
    r.act = {FormatId::INT8, true};
    r.notes.push_back("A8: activation format not stated: int8, dynamic per-token scales");
  } else if (ab == 4) {
    r.act = {FormatId::INT4, true};
    r.notes.push_back("A4: int4 activations, dynamic per-token scales");
  } else {
    usage("'" + s + "': A" + std::to_string(ab) + " is not an activation width (4, 8 or 16)");
  }
  if (!m[3].matched) {
    r.notes.push_back("KV format not stated: KV stays 16-bit");
  } else if (kb == 16) {
    r.notes.push_back("KV16: KV cache stays 16-bit");
  } else if (kb == 8) {
    r.kv = {FormatId::E4M3FN, false};
    r.notes.push_back(
        "KV8: 8-bit KV format not stated: e4m3 (FP8, as vLLM stores it) with calibrated "
        "per-tensor k_scale/v_scale");
  } else if (kb == 4) {
    r.kv = {FormatId::INT4, true};
    r.notes.push_back("KV4: int4 KV cache with calibrated per-head k_scale/v_scale");
  } else {
    usage("'" + s + "': KV" + std::to_string(kb) + " is not a KV width (4, 8 or 16)");
  }
  default_ignore(&r);
  return r;
}

double short_decimal(float f) {
  for (int digits = 1; digits < 9; ++digits) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(f));
    const double d = std::strtod(buf, nullptr);
    if (static_cast<float>(d) == f) return d;
  }
  return static_cast<double>(f);
}

nlohmann::json Recipe::to_json() const {
  json j;
  j["name"] = name;
  j["scheme"] = to_string(weights);
  j["algorithm"] = (smoothquant ? std::string("smoothquant+") : std::string()) + algorithm_name(algorithm);
  j["activations"] = act.enabled() ? json{{"format", format_info(act.format).name}, {"dynamic", act.dynamic}}
                                   : json(nullptr);
  // The clip goes out whenever it is set, so that plan_recipe can refuse it on a format it does not apply to.
  if (!act.enabled() && act.clip != 1.0f) j["activations"] = {{"format", "none"}, {"dynamic", act.dynamic}};
  if (act.format == FormatId::INT4 || act.format == FormatId::NVFP4 || act.clip != 1.0f)
    j["activations"]["clip"] = short_decimal(act.clip);
  if (act.scale != ActScale::Amax) {  // set: out, so that plan_recipe can refuse it off NVFP4
    if (!j["activations"].is_object()) j["activations"] = {{"format", "none"}, {"dynamic", act.dynamic}};
    j["activations"]["scale"] = act_scale_name(act.scale);
  }
  j["kv_cache"] = kv.enabled() ? json{{"format", format_info(kv.format).name},
                                      {"strategy", kv.per_head ? "head" : "tensor"}}
                               : json(nullptr);
  json ov = json::array();
  for (auto& o : overrides) ov.push_back({{"pattern", o.pattern}, {"scheme", to_string(o.scheme)}});
  j["overrides"] = ov;
  json ig = json::array();
  for (auto& o : ignore) ig.push_back({{"pattern", o.pattern}, {"reason", o.reason}});
  j["ignore"] = ig;
  j["calibration"] = {
      {"file", calib.file}, {"samples", calib.samples}, {"length", calib.length}, {"seed", calib.seed}};
  j["gptq"] = {{"block_size", gptq_block},
               {"damp", gptq_damp},
               {"act_order", gptq_act_order},
               {"target", gptq_target},
               {"target_damp", gptq_target_damp}};
  j["awq"] = {{"grid", awq_grid}, {"clip", awq_clip}};
  j["smoothquant"] = {{"alpha", smoothquant_alpha}};
  j["unquantized_dtype"] = unquantized_dtype;
  j["rotation"] = rotation.enabled() ? json{{"method", rotation.method}, {"seed", rotation.seed},
                                            {"r1", rotation.r1},         {"r2", rotation.r2},
                                            {"r4", rotation.r4},         {"factors", rotation.factors}}
                                     : json(nullptr);
  if (rotation.method == "spinquant")
    j["rotation"].update({{"steps", rotation.spin_steps},
                          {"lr", rotation.spin_lr},
                          {"tokens", rotation.spin_tokens},
                          {"loss", rotation.spin_loss}});
  if (rotation.method == "duquant")
    j["rotation"].update({{"block", rotation.duquant_block}, {"greedy_steps", rotation.duquant_steps}});
  j["tune"] = tune.enabled()
                  ? json{{"steps", tune.steps}, {"lr", tune.lr}, {"batch", tune.batch}, {"norms", tune.norms}}
                  : json(nullptr);
  if (!notes.empty()) j["notes"] = notes;
  return j;
}

namespace {

std::string rotation_method(const std::string& m, const std::string& where) {
  const std::string l = lower(m);
  if (l == "quarot" || l == "spinquant" || l == "duquant") return l;
  if (l == "none" || l.empty()) return "";
  usage(where + ": unknown rotation '" + m + "'; use quarot, spinquant, duquant or none");
}

RotationSpec rotation_from_json(const json& j, const std::string& where) {
  RotationSpec s;
  if (j.is_null() || (j.is_boolean() && !j.get<bool>())) return s;
  if (j.is_boolean()) {
    s.method = "quarot";
  } else if (j.is_string()) {
    s.method = rotation_method(j.get<std::string>(), where);
  } else {
    check_keys(j,
               {"method", "seed", "r1", "r2", "r4", "factors", "steps", "lr", "tokens", "loss", "block",
                "greedy_steps"},
               where);
    s.method =
        rotation_method(j.contains("method") ? get_as<std::string>(j, "method", where) : "quarot", where);
    if (j.contains("seed")) s.seed = get_as<uint64_t>(j, "seed", where);
    if (j.contains("r1")) s.r1 = get_as<bool>(j, "r1", where);
    if (j.contains("r2")) s.r2 = get_as<bool>(j, "r2", where);
    if (j.contains("r4")) s.r4 = get_as<bool>(j, "r4", where);
    if (j.contains("factors")) s.factors = get_as<std::string>(j, "factors", where);
    if ((j.contains("steps") || j.contains("lr") || j.contains("tokens") || j.contains("loss")) &&
        s.method != "spinquant")
      usage(where +
            ": steps, lr, tokens and loss train SpinQuant's rotations; set \"method\": \"spinquant\"");
    if (j.contains("loss")) s.spin_loss = get_as<std::string>(j, "loss", where);
    if (s.spin_loss != "kl" && s.spin_loss != "ce")
      usage(where + ": SpinQuant loss '" + s.spin_loss + "' is not kl (from the float model) or ce");
    if (j.contains("steps")) s.spin_steps = get_as<int>(j, "steps", where);
    if (j.contains("lr")) s.spin_lr = get_as<double>(j, "lr", where);
    if (j.contains("tokens")) s.spin_tokens = get_as<int64_t>(j, "tokens", where);
    if (s.spin_steps < 0 || !(s.spin_lr > 0) || s.spin_tokens < 2)
      usage(where + ": SpinQuant needs steps >= 0, lr > 0 and tokens >= 2");
    if ((j.contains("block") || j.contains("greedy_steps")) && s.method != "duquant")
      usage(where + ": block and greedy_steps shape DuQuant's rotation; set \"method\": \"duquant\"");
    if (j.contains("block")) s.duquant_block = get_as<int64_t>(j, "block", where);
    if (j.contains("greedy_steps")) s.duquant_steps = get_as<int>(j, "greedy_steps", where);
    if (s.duquant_block < 0 || s.duquant_steps < 0)
      usage(where + ": DuQuant needs block >= 0 (0 = auto) and greedy_steps >= 0");
    if (s.enabled() && !s.r1 && !s.r2 && !s.r4)
      usage(where + ": r1, r2 and r4 are all off; drop \"rotation\" or turn one on");
  }
  return s;
}

}  // namespace

Recipe recipe_from_json(const json& j, const std::string& where) {
  check_keys(j,
             {"name", "preset", "scheme", "algorithm", "activations", "kv_cache", "overrides", "ignore",
              "calibration", "gptq", "awq", "smoothquant", "unquantized_dtype", "rotation", "tune", "notes"},
             where);
  Recipe r;
  bool have_scheme = false;
  if (j.contains("preset")) {
    std::string p = get_as<std::string>(j, "preset", where);
    auto pr = preset_recipe(p);
    if (!pr) pr = parse_wakv(p);
    if (!pr) {
      std::string names;
      for (auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
      usage(where + ".preset: unknown preset '" + p + "'; known: " + names + " or the WxAy[KVz] notation");
    }
    r = *pr;
    have_scheme = true;
  } else {
    default_ignore(&r);
  }
  if (j.contains("name")) r.name = get_as<std::string>(j, "name", where);
  if (j.contains("scheme")) {
    r.weights = scheme_or_usage(get_as<std::string>(j, "scheme", where), where + ".scheme");
    have_scheme = true;
  }
  if (!have_scheme)
    usage(where + ": no weight scheme; give \"scheme\" (e.g. \"int4:g128:sym:f16\") or \"preset\"");
  if (j.contains("algorithm"))
    r.algorithm =
        algorithm_from_name(get_as<std::string>(j, "algorithm", where), &r.smoothquant, where + ".algorithm");
  if (j.contains("activations")) {
    const json& a = j["activations"];
    if (a.is_null()) {
      r.act = {};
    } else if (a.is_string()) {
      r.act = {act_format_from_name(a.get<std::string>(), where + ".activations"), true};
    } else {
      check_keys(a, {"format", "dynamic", "clip", "scale"}, where + ".activations");
      if (a.contains("format"))
        r.act.format = act_format_from_name(get_as<std::string>(a, "format", where + ".activations"),
                                            where + ".activations");
      if (a.contains("dynamic")) r.act.dynamic = get_as<bool>(a, "dynamic", where + ".activations");
      if (a.contains("clip")) r.act.clip = get_as<float>(a, "clip", where + ".activations");
      if (a.contains("scale"))
        r.act.scale = act_scale_from_name(get_as<std::string>(a, "scale", where + ".activations"),
                                          where + ".activations.scale");
    }
  }
  if (j.contains("kv_cache")) {
    const json& k = j["kv_cache"];
    if (k.is_null()) {
      r.kv = {};
    } else {
      check_keys(k, {"format", "strategy"}, where + ".kv_cache");
      if (k.contains("format"))
        r.kv.format =
            act_format_from_name(get_as<std::string>(k, "format", where + ".kv_cache"), where + ".kv_cache");
      if (k.contains("strategy")) {
        std::string st = get_as<std::string>(k, "strategy", where + ".kv_cache");
        if (st != "tensor" && st != "head" && st != "attn_head")
          usage(where + ".kv_cache.strategy: '" + st + "' is not tensor or head");
        r.kv.per_head = st != "tensor";
      }
    }
  }
  if (j.contains("overrides")) {
    if (!j["overrides"].is_array()) usage(where + ".overrides must be an array of {pattern, scheme}");
    r.overrides.clear();
    int i = 0;
    for (const auto& o : j["overrides"]) {
      std::string w = where + ".overrides[" + std::to_string(i++) + "]";
      check_keys(o, {"pattern", "scheme"}, w);
      if (!o.contains("pattern") || !o.contains("scheme"))
        usage(w + " needs both \"pattern\" and \"scheme\"");
      TensorRule t;
      t.pattern = get_as<std::string>(o, "pattern", w);
      t.scheme = scheme_or_usage(get_as<std::string>(o, "scheme", w), w + ".scheme");
      r.overrides.push_back(t);
    }
  }
  if (j.contains("ignore")) {
    if (!j["ignore"].is_array()) usage(where + ".ignore must be an array of patterns or {pattern, reason}");
    r.ignore.clear();
    int i = 0;
    for (const auto& o : j["ignore"]) {
      std::string w = where + ".ignore[" + std::to_string(i++) + "]";
      TensorRule t;
      if (o.is_string()) {
        t.pattern = o.get<std::string>();
        t.reason = "ignored by the recipe";
      } else {
        check_keys(o, {"pattern", "reason"}, w);
        if (!o.contains("pattern")) usage(w + " needs \"pattern\"");
        t.pattern = get_as<std::string>(o, "pattern", w);
        t.reason = o.contains("reason") ? get_as<std::string>(o, "reason", w) : "ignored by the recipe";
      }
      r.ignore.push_back(t);
    }
  }
  if (j.contains("calibration")) {
    const json& c = j["calibration"];
    std::string w = where + ".calibration";
    check_keys(c, {"file", "samples", "length", "seed"}, w);
    if (c.contains("file")) r.calib.file = get_as<std::string>(c, "file", w);
    if (c.contains("samples")) r.calib.samples = get_as<int>(c, "samples", w);
    if (c.contains("length")) r.calib.length = get_as<int>(c, "length", w);
    if (c.contains("seed")) r.calib.seed = get_as<uint64_t>(c, "seed", w);
  }
  if (j.contains("gptq")) {
    const json& g = j["gptq"];
    std::string w = where + ".gptq";
    check_keys(g, {"block_size", "damp", "act_order", "target", "target_damp"}, w);
    if (g.contains("block_size")) r.gptq_block = get_as<int>(g, "block_size", w);
    if (g.contains("damp")) r.gptq_damp = get_as<float>(g, "damp", w);
    if (g.contains("act_order")) r.gptq_act_order = get_as<bool>(g, "act_order", w);
    if (g.contains("target")) r.gptq_target = get_as<std::string>(g, "target", w);
    if (g.contains("target_damp")) r.gptq_target_damp = get_as<float>(g, "target_damp", w);
  }
  if (j.contains("awq")) {
    const json& a = j["awq"];
    std::string w = where + ".awq";
    check_keys(a, {"grid", "clip"}, w);
    if (a.contains("grid")) r.awq_grid = get_as<int>(a, "grid", w);
    if (a.contains("clip")) r.awq_clip = get_as<bool>(a, "clip", w);
  }
  if (j.contains("smoothquant")) {
    const json& a = j["smoothquant"];
    check_keys(a, {"alpha"}, where + ".smoothquant");
    if (a.contains("alpha")) r.smoothquant_alpha = get_as<float>(a, "alpha", where + ".smoothquant");
  }
  if (j.contains("unquantized_dtype"))
    r.unquantized_dtype = get_as<std::string>(j, "unquantized_dtype", where);
  if (j.contains("rotation")) r.rotation = rotation_from_json(j["rotation"], where + ".rotation");
  if (j.contains("tune") && !j["tune"].is_null()) {
    const json& t = j["tune"];
    const std::string w = where + ".tune";
    if (!t.is_object()) usage(w + " must be null or {\"steps\", \"lr\", \"batch\", \"norms\"}");
    check_keys(t, {"steps", "lr", "batch", "norms"}, w);
    r.tune.steps = t.contains("steps") ? get_as<int>(t, "steps", w) : 64;
    if (t.contains("lr")) r.tune.lr = get_as<double>(t, "lr", w);
    if (t.contains("batch")) r.tune.batch = get_as<int>(t, "batch", w);
    if (t.contains("norms")) r.tune.norms = get_as<bool>(t, "norms", w);
    if (r.tune.steps < 1 || r.tune.steps > 100000) usage(w + ".steps must be in [1, 100000], e.g. 64");
    if (!(r.tune.lr > 0 && r.tune.lr <= 1)) usage(w + ".lr must be in (0, 1], e.g. 0.001");
    if (r.tune.batch < 1 || r.tune.batch > 4096) usage(w + ".batch must be in [1, 4096], e.g. 4");
  }
  if (j.contains("notes") && j["notes"].is_array())
    for (auto& n : j["notes"])
      if (n.is_string()) r.notes.push_back(n.get<std::string>());
  // Range checks that do not need the model.
  if (r.calib.samples < 1 || r.calib.samples > 100000)
    usage(where + ".calibration.samples = " + std::to_string(r.calib.samples) +
          " is out of range [1, 100000]");
  if (r.calib.length < 2 || r.calib.length > 1 << 20)
    usage(where + ".calibration.length = " + std::to_string(r.calib.length) +
          " is out of range [2, 1048576]");
  if (r.gptq_block < 1 || r.gptq_block > 4096) usage(where + ".gptq.block_size must be in [1, 4096]");
  if (!(r.gptq_damp > 0 && r.gptq_damp < 1)) usage(where + ".gptq.damp must be in (0, 1), e.g. 0.01");
  if (r.gptq_target != "layer" && r.gptq_target != "float")
    usage(where + ".gptq.target '" + r.gptq_target + "' is not one of layer, float");
  if (r.gptq_target == "float" && (r.algorithm != Algorithm::Gptq || r.smoothquant))
    usage(where +
          ".gptq.target 'float' fits GPTQ's weights to the float model's outputs; it needs algorithm "
          "gptq without smoothquant (add algo=gptq)");
  if (!(r.gptq_target_damp > 0 && r.gptq_target_damp <= 100))
    usage(where + ".gptq.target_damp must be in (0, 100], e.g. 1");
  if (r.awq_grid < 1 || r.awq_grid > 1000) usage(where + ".awq.grid must be in [1, 1000]");
  if (!(r.smoothquant_alpha >= 0 && r.smoothquant_alpha <= 1))
    usage(where + ".smoothquant.alpha must be in [0, 1] (0.5 is the usual migration strength)");
  const std::string& ud = r.unquantized_dtype;
  if (ud != "source" && ud != "f32" && ud != "f16" && ud != "bf16")
    usage(where + ".unquantized_dtype '" + ud + "' is not one of source, f32, f16, bf16");
  return r;
}

Recipe parse_recipe_arg(const std::string& arg) {
  if (arg.empty())
    usage("empty --recipe; give a preset (W4A16, W8A8, FP8, NF4, ...), a scheme or a .json file");
  bool looks_file = arg.size() > 5 && arg.compare(arg.size() - 5, 5, ".json") == 0;
  // A path in the head is a file; a path in a key's value (calib=, rotate_factors=) is not.
  if (looks_file || arg.substr(0, arg.find(',')).find('/') != std::string::npos) {
    std::ifstream in(arg);
    if (!in) usage("cannot open recipe file '" + arg + "'; give an existing .json file or a preset name");
    json j;
    try {
      j = json::parse(in);
    } catch (const json::exception& e) {
      usage("recipe file '" + arg + "' is not valid JSON: " + e.what());
    }
    Recipe r = recipe_from_json(j, arg);
    if (r.name.empty()) r.name = arg;
    return r;
  }
  // Shorthand: HEAD[,key=value...]
  std::vector<std::string> parts;
  {
    std::stringstream ss(arg);
    std::string p;
    while (std::getline(ss, p, ',')) parts.push_back(p);
  }
  const std::string head = parts.empty() ? arg : parts[0];
  std::optional<Recipe> r = preset_recipe(head);
  if (!r) r = parse_wakv(head);
  if (!r) {
    if (head.find(':') != std::string::npos || find_format(head)) {
      Recipe x;
      x.name = head;
      x.weights = scheme_or_usage(head, "--recipe");
      default_ignore(&x);
      r = x;
    } else {
      std::string names;
      for (auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
      usage("unknown recipe '" + head + "'; give a preset (" + names +
            "), the WxAy[KVz] notation, a scheme such as int4:g32:sym, or a .json recipe file");
    }
  }
  const QuantScheme preset_weights = r->weights;
  std::string spin_key;            // a spin_* key, which needs rotate=spinquant (given in any order)
  bool target_damp_given = false;  // target_damp= needs target=float (given in any order)
  std::string duquant_key;         // likewise a duquant_* key, rotate=duquant
  std::string tune_key;            // a tune_* key, which needs tune=STEPS
  std::optional<int> group_override;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    auto eq = p.find('=');
    if (eq == std::string::npos) usage("--recipe '" + arg + "': '" + p + "' is not key=value");
    std::string k = lower(p.substr(0, eq)), v = p.substr(eq + 1);
    // Every value is parsed whole and range-checked here: "nan", "32.5" or "1e12" for an integer key would
    // otherwise reach a float -> int cast (undefined beyond the int range) or be silently truncated.
    auto num = [&](const std::string& what) {
      double d = 0;
      try {
        size_t used = 0;
        d = std::stod(v, &used);
        if (used != v.size()) throw std::invalid_argument("x");
      } catch (const std::exception&) {
        usage("--recipe '" + arg + "': " + what + " '" + v + "' is not a number");
      }
      if (!std::isfinite(d)) usage("--recipe '" + arg + "': " + what + " '" + v + "' is not a finite number");
      return d;
    };
    auto integer = [&](const std::string& what, double lo, double hi) {
      const double d = num(what);
      if (d != std::floor(d) || d < lo || d > hi)
        usage("--recipe '" + arg + "': " + what + " '" + v + "' must be an integer in [" +
              std::to_string(static_cast<long long>(lo)) + ", " + std::to_string(static_cast<long long>(hi)) +
              "]");
      return d;
    };
    auto flag = [&](const std::string& what) { return integer(what, 0, 1) != 0; };
    if (k == "algo" || k == "algorithm")
      r->algorithm = algorithm_from_name(v, &r->smoothquant, "--recipe");
    else if (k == "scheme")
      r->weights = scheme_or_usage(v, "--recipe scheme");
    else if (k == "group")
      group_override = static_cast<int>(integer("group", 1, 1 << 20));
    else if (k == "act")
      r->act.format = act_format_from_name(v, "--recipe act");
    else if (k == "act_clip")
      r->act.clip = static_cast<float>(num("act_clip"));
    else if (k == "act_scale")
      r->act.scale = act_scale_from_name(v, "--recipe act_scale");
    else if (k == "act_static")
      r->act.dynamic = !flag("act_static");
    else if (k == "kv")
      r->kv.format = act_format_from_name(v, "--recipe kv");
    else if (k == "kv_strategy")
      r->kv.per_head = v != "tensor";
    else if (k == "alpha")
      r->smoothquant_alpha = static_cast<float>(num("alpha"));
    else if (k == "samples")
      r->calib.samples = static_cast<int>(integer("samples", 1, 100000));
    else if (k == "length")
      r->calib.length = static_cast<int>(integer("length", 2, 1 << 20));
    else if (k == "seed")
      r->calib.seed = static_cast<uint64_t>(integer("seed", 0, 9007199254740992.0));
    else if (k == "calib")
      r->calib.file = v;
    else if (k == "act_order")
      r->gptq_act_order = flag("act_order");
    else if (k == "damp")
      r->gptq_damp = static_cast<float>(num("damp"));
    else if (k == "target")
      r->gptq_target = lower(v);
    else if (k == "target_damp")
      r->gptq_target_damp = static_cast<float>(num("target_damp")), target_damp_given = true;
    else if (k == "clip")
      r->awq_clip = flag("clip");
    else if (k == "ignore")
      r->ignore.push_back({v, {}, "ignored by the recipe"});
    else if (k == "dtype")
      r->unquantized_dtype = v;
    else if (k == "rotate")
      r->rotation.method = rotation_method(v, "--recipe '" + arg + "': rotate");
    else if (k == "rotate_seed")
      r->rotation.seed = static_cast<uint64_t>(integer("rotate_seed", 0, 9007199254740992.0));
    else if (k == "rotate_r1")
      r->rotation.r1 = flag("rotate_r1");
    else if (k == "rotate_r2")
      r->rotation.r2 = flag("rotate_r2");
    else if (k == "rotate_r4")
      r->rotation.r4 = flag("rotate_r4");
    else if (k == "rotate_factors")
      r->rotation.factors = v;
    else if (k == "spin_steps")
      r->rotation.spin_steps = static_cast<int>(integer("spin_steps", 0, 100000));
    else if (k == "spin_lr" && num("spin_lr") > 0)
      r->rotation.spin_lr = num("spin_lr");
    else if (k == "spin_lr")
      usage("--recipe '" + arg + "': spin_lr '" + v + "' must be > 0");
    else if (k == "spin_tokens")
      r->rotation.spin_tokens = static_cast<int64_t>(integer("spin_tokens", 2, 1 << 24));
    else if (k == "spin_loss")
      r->rotation.spin_loss = lower(v);
    else if (k == "duquant_block")
      r->rotation.duquant_block = static_cast<int64_t>(integer("duquant_block", 1, 1 << 20));
    else if (k == "duquant_steps")
      r->rotation.duquant_steps = static_cast<int>(integer("duquant_steps", 0, 4096));
    else if (k == "tune")
      r->tune.steps = static_cast<int>(integer("tune", 0, 100000));
    else if (k == "tune_lr" && num("tune_lr") > 0 && num("tune_lr") <= 1)
      r->tune.lr = num("tune_lr");
    else if (k == "tune_lr")
      usage("--recipe '" + arg + "': tune_lr '" + v + "' must be in (0, 1], e.g. 0.001");
    else if (k == "tune_batch")
      r->tune.batch = static_cast<int>(integer("tune_batch", 1, 4096));
    else if (k == "tune_norms")
      r->tune.norms = flag("tune_norms");
    else
      usage(
          "--recipe '" + arg + "': unknown key '" + k +
          "'; known: algo, scheme, group, act, act_clip, act_scale, act_static, kv, kv_strategy, alpha, "
          "samples, "
          "length, seed, "
          "calib, act_order, damp, target, target_damp, clip, ignore, dtype, rotate, rotate_seed, "
          "rotate_r1, rotate_r2, "
          "rotate_r4, "
          "rotate_factors, spin_steps, spin_lr, spin_tokens, spin_loss, duquant_block, duquant_steps, tune, "
          "tune_lr, tune_batch, tune_norms");
    if (k.rfind("spin_", 0) == 0) spin_key = k;
    if (k.rfind("duquant_", 0) == 0) duquant_key = k;
    if (k.rfind("tune_", 0) == 0) tune_key = k;
  }
  if (!tune_key.empty() && !r->tune.enabled())
    usage("--recipe '" + arg + "': " + tune_key + " shapes scale tuning; add tune=STEPS (e.g. tune=64)");
  if (!spin_key.empty() && r->rotation.method != "spinquant")
    usage("--recipe '" + arg + "': " + spin_key + " trains SpinQuant's rotations; add rotate=spinquant");
  if (target_damp_given && r->gptq_target != "float")
    usage("--recipe '" + arg + "': target_damp regularises GPTQ's float target; add target=float");
  if (!duquant_key.empty() && r->rotation.method != "duquant")
    usage("--recipe '" + arg + "': " + duquant_key + " shapes DuQuant's rotation; add rotate=duquant");
  if (group_override) {
    if (r->weights.gran != Granularity::Group)
      usage("--recipe '" + arg + "': group=" + std::to_string(*group_override) + " given but scheme " +
            to_string(r->weights) + " is not per-group");
    r->weights.group_size = *group_override;
  }
  // A preset's "weight format not stated" note describes its default weights: drop it once scheme= or group=
  // has stated them (the plan prints the scheme that is applied).
  if (r->weights != preset_weights)
    std::erase_if(r->notes,
                  [](const std::string& n) { return n.find("weight format not stated") != n.npos; });
  if (parts.size() > 1) r->name = arg;
  // Re-run the range checks through the JSON path so both forms validate the same way.
  json j = r->to_json();
  j.erase("notes");
  Recipe out = recipe_from_json(j, "--recipe '" + arg + "'");
  out.notes = r->notes;
  return out;
}

}  // namespace lowbit::quant
