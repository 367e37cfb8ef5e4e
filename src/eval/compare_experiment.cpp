#include "eval/compare_experiment.h"

#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/memory.h"

using nlohmann::json;

namespace lowbit::compare {

json VariantSpec::to_json() const {
  json j = {{"name", name}, {"dtype", dtype}, {"kv_cache", kv_cache}};
  if (!recipe.empty()) j["recipe"] = recipe, j["online"] = online;
  if (!budget.empty()) j["budget"] = budget;
  if (!kv_evict.empty()) j["kv_evict"] = kv_evict;
  if (!description.empty()) j["description"] = description;
  return j;
}

json Thresholds::to_json() const {
  return {{"max_dppl_pct", max_dppl_pct},
          {"max_kld", max_kld},
          {"min_top1", min_top1},
          {"max_peak_mib", max_peak_mib},
          {"min_decode_speedup", min_decode_speedup},
          {"no_nan", no_nan}};
}

json Experiment::to_json() const {
  json vs = json::array();
  for (auto& v : variants) vs.push_back(v.to_json());
  return {{"model", model},
          {"preset", preset},
          {"baseline", baseline.to_json()},
          {"variants", vs},
          {"eval", {{"text", eval_text}, {"ctx", ctx}, {"chunks", chunks}}},
          {"calib", {{"text", calib_text}}},
          {"prompts", prompts},
          {"generation", {{"n", gen_tokens}}},
          {"bench", {{"prompt", bench_prompt}, {"gen", bench_gen}, {"repetitions", bench_reps}}},
          {"throughput", {{"concurrency", concurrency}, {"prompt", tp_prompt}, {"gen", tp_gen}}},
          {"thresholds", thresholds.to_json()}};
}

namespace {

VariantSpec kv(const std::string& name, const std::string& fmt, const std::string& why) {
  VariantSpec v;
  v.name = name;
  v.kv_cache = fmt;
  v.description = why;
  return v;
}

VariantSpec w(const std::string& name, const std::string& recipe, const std::string& why) {
  VariantSpec v;
  v.name = name;
  v.recipe = recipe;
  v.description = why;
  return v;
}

std::vector<VariantSpec> kv_first() {
  return {kv("kv-e4m3", "e4m3", "KV grows with long documents and concurrency: FP8 E4M3 KV first"),
          kv("kv-int8", "int8", "INT8 per-token KV: the same bytes as FP8, integer scales"),
          kv("kv-int4", "int4", "INT4 KV (keys per channel, values per token): ~3.5x the tokens of F16")};
}

std::vector<VariantSpec> weights_first() {
  return {
      w("w-fp8", "FP8_DYNAMIC", "weights dominate: FP8 weight-only is the safest first step"),
      w("w4a16-rtn", "W4A16", "INT4 g128 weights, round-to-nearest: the reference point for the algorithms"),
      w("w4a16-gptq", "W4A16,algo=gptq", "INT4 g128 with GPTQ error compensation"),
      w("w4a16-awq", "W4A16,algo=awq", "INT4 g128 with AWQ activation-aware scales"),
      w("nf4", "NF4", "NF4 (QLoRA code book) for normally distributed weights")};
}

std::vector<VariantSpec> compute() {
  return {
      w("w8a8", "W8A8", "arithmetic-bound: INT8 weights and per-token INT8 activations"),
      w("w8a8-sq", "W8A8,algo=smoothquant+rtn", "W8A8 with SmoothQuant moving outliers into the weights")};
}

std::vector<VariantSpec> fp4() {
  return {w("nvfp4", "NVFP4", "native FP4 hardware: NVFP4 (block 16, E4M3 scales)"),
          w("mxfp4", "MXFP4", "native FP4 hardware: MXFP4 (block 32, E8M0 scales)")};
}

template <typename T>
T get(const json& j, const char* key, const std::string& where, T def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  try {
    return j[key].get<T>();
  } catch (const std::exception&) {
    throw UsageError("compare", where + ": '" + key + "' has the wrong type");
  }
}

void check_keys(const json& j, const std::set<std::string>& allowed, const std::string& where) {
  if (!j.is_object()) throw UsageError("compare", where + " must be a JSON object");
  for (auto& [k, v] : j.items())
    if (!allowed.count(k)) {
      std::string list;
      for (auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      throw UsageError("compare", where + ": unknown key '" + k + "' (known: " + list + ")");
    }
}

VariantSpec variant_from_json(const json& j, const std::string& where) {
  check_keys(j, {"name", "dtype", "recipe", "online", "budget", "kv_cache", "kv_evict", "description"},
             where);
  VariantSpec v;
  v.name = get<std::string>(j, "name", where, "");
  if (v.name.empty()) throw UsageError("compare", where + ": every variant needs a \"name\"");
  for (char c : v.name)
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'))
      throw UsageError("compare",
                       where + ": variant name '" + v.name + "' may use letters, digits, - _ . only");
  v.dtype = get<std::string>(j, "dtype", where, "f16");
  v.recipe = get<std::string>(j, "recipe", where, "");
  v.online = get<bool>(j, "online", where, false);
  v.budget = get<std::string>(j, "budget", where, "");
  if (!v.budget.empty()) {
    if (v.recipe.empty() || v.online)
      throw UsageError("compare", where +
                                      ": \"budget\" chooses formats for an offline \"recipe\" (lowbit "
                                      "quantize --budget); add a recipe and drop \"online\"");
    parse_bytes(v.budget, "compare");  // a bad size is an error here, not after the baseline ran
  }
  v.kv_cache = get<std::string>(j, "kv_cache", where, "f16");
  v.kv_evict = get<std::string>(j, "kv_evict", where, "");
  v.description = get<std::string>(j, "description", where, "");
  return v;
}

}  // namespace

std::vector<std::string> preset_names() {
  return {"default", "kv-first", "weights-first", "compute", "fp4"};
}

void apply_preset(Experiment& e, const std::string& p) {
  e.preset = p;
  std::vector<VariantSpec> v;
  auto add = [&](std::vector<VariantSpec> x) { v.insert(v.end(), x.begin(), x.end()); };
  if (p == "default") {
    add({kv_first()[0], kv_first()[2]});
    add(weights_first());
    add({compute()[0]});
    add(fp4());
  } else if (p == "kv-first") {
    add(kv_first());
  } else if (p == "weights-first") {
    add(weights_first());
  } else if (p == "compute") {
    add(compute());
  } else if (p == "fp4") {
    add(fp4());
  } else {
    std::string list;
    for (auto& n : preset_names()) list += (list.empty() ? "" : ", ") + n;
    throw UsageError("compare", "unknown preset '" + p + "'; presets: " + list);
  }
  e.variants = v;
  e.baseline = VariantSpec{};
  e.baseline.name = "baseline";
  e.baseline.description = "16-bit baseline: F16 weights, F16 KV cache";
  // Default acceptance thresholds, in line with what llama.cpp's q4_K_M reaches on LLaMA-3-8B (TARGETS.md),
  // loosened for tiny models whose distributions are flatter.
  e.thresholds.max_dppl_pct = 10;
  e.thresholds.max_kld = 0.1;
  e.thresholds.min_top1 = 0.85;
  e.thresholds.no_nan = true;
}

Experiment experiment_from_json(const json& j, const std::string& where) {
  check_keys(j,
             {"model", "preset", "baseline", "variants", "eval", "calib", "prompts", "generation", "bench",
              "throughput", "thresholds"},
             where);
  Experiment e;
  std::string preset = get<std::string>(j, "preset", where, "");
  if (!preset.empty() || !j.contains("variants")) apply_preset(e, preset.empty() ? "default" : preset);
  e.model = get<std::string>(j, "model", where, "");
  if (j.contains("baseline")) e.baseline = variant_from_json(j["baseline"], where + ".baseline");
  if (j.contains("variants")) {
    if (!j["variants"].is_array()) throw UsageError("compare", where + ".variants must be an array");
    e.variants.clear();
    for (size_t i = 0; i < j["variants"].size(); ++i)
      e.variants.push_back(
          variant_from_json(j["variants"][i], where + ".variants[" + std::to_string(i) + "]"));
  }
  if (j.contains("eval")) {
    const json& x = j["eval"];
    check_keys(x, {"text", "ctx", "chunks"}, where + ".eval");
    e.eval_text = get<std::string>(x, "text", where + ".eval", "");
    e.ctx = get<int>(x, "ctx", where + ".eval", 0);
    e.chunks = get<int>(x, "chunks", where + ".eval", 8);
  }
  if (j.contains("calib")) {
    check_keys(j["calib"], {"text"}, where + ".calib");
    e.calib_text = get<std::string>(j["calib"], "text", where + ".calib", "");
  }
  if (j.contains("prompts")) e.prompts = get<std::vector<std::string>>(j, "prompts", where, {});
  if (j.contains("generation")) {
    check_keys(j["generation"], {"n"}, where + ".generation");
    e.gen_tokens = get<int>(j["generation"], "n", where + ".generation", 32);
  }
  if (j.contains("bench")) {
    const json& x = j["bench"];
    check_keys(x, {"prompt", "gen", "repetitions"}, where + ".bench");
    e.bench_prompt = get<int>(x, "prompt", where + ".bench", 128);
    e.bench_gen = get<int>(x, "gen", where + ".bench", 32);
    e.bench_reps = get<int>(x, "repetitions", where + ".bench", 2);
  }
  if (j.contains("throughput")) {
    const json& x = j["throughput"];
    check_keys(x, {"concurrency", "prompt", "gen"}, where + ".throughput");
    e.concurrency = get<std::vector<int>>(x, "concurrency", where + ".throughput", {1, 4});
    e.tp_prompt = get<int>(x, "prompt", where + ".throughput", 32);
    e.tp_gen = get<int>(x, "gen", where + ".throughput", 16);
  }
  if (j.contains("thresholds")) {
    const json& x = j["thresholds"];
    const std::string w = where + ".thresholds";
    check_keys(x, {"max_dppl_pct", "max_kld", "min_top1", "max_peak_mib", "min_decode_speedup", "no_nan"}, w);
    e.thresholds.max_dppl_pct = get<double>(x, "max_dppl_pct", w, e.thresholds.max_dppl_pct);
    e.thresholds.max_kld = get<double>(x, "max_kld", w, e.thresholds.max_kld);
    e.thresholds.min_top1 = get<double>(x, "min_top1", w, e.thresholds.min_top1);
    e.thresholds.max_peak_mib = get<double>(x, "max_peak_mib", w, e.thresholds.max_peak_mib);
    e.thresholds.min_decode_speedup =
        get<double>(x, "min_decode_speedup", w, e.thresholds.min_decode_speedup);
    e.thresholds.no_nan = get<bool>(x, "no_nan", w, true);
  }
  std::set<std::string> names = {e.baseline.name};
  for (auto& v : e.variants)
    if (!names.insert(v.name).second)
      throw UsageError("compare", where + ": two variants are named '" + v.name + "'");
  if (e.chunks < 1 || e.gen_tokens < 0 || e.bench_reps < 1)
    throw UsageError("compare", where + ": chunks and repetitions must be >= 1, generation.n >= 0");
  return e;
}

std::vector<std::string> changed_variables(const VariantSpec& b, const VariantSpec& v) {
  std::vector<std::string> out;
  if (b.recipe != v.recipe || b.dtype != v.dtype || b.budget != v.budget) out.push_back("weights");
  if (b.kv_cache != v.kv_cache) out.push_back("kv_cache");
  if (b.kv_evict != v.kv_evict) out.push_back("kv_evict");
  return out;
}

void fill_defaults(Experiment& e, const std::string& shared) {
  if (e.eval_text.empty()) e.eval_text = shared + "/data/tinystories/tinystories_train_head.txt";
  if (e.calib_text.empty()) e.calib_text = shared + "/data/wikitext-2-raw/wiki.test.raw";
  if (e.prompts.empty())
    e.prompts = {"Once upon a time", "The little dog", "One day, Lily went to the park and"};
}

}  // namespace lowbit::compare
