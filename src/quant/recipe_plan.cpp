// Recipe patterns (globs and regexes over tensor names) and a recipe's plan for a model: which matrix gets
// which scheme, what is ignored and why (see recipe.h).
#include <algorithm>
#include <map>
#include <regex>
#include <set>
#include <string>

#include "arch/arch_table.h"
#include "core/error.h"
#include "formats/format.h"
#include "model/quantized_checkpoint.h"
#include "quant/recipe.h"

namespace lowbit::quant {
namespace {

[[noreturn]] void usage(const std::string& msg) {
  throw UsageError("quant", msg);
}

bool is_fp8(FormatId f) {
  return f == FormatId::E4M3FN || f == FormatId::E5M2 || f == FormatId::E4M3FNUZ || f == FormatId::E5M2FNUZ;
}

}  // namespace
namespace {

// Glob match ('*' any run, '?' one character) in O(|pattern| x |name|): the classic two-pointer walk that
// backtracks only to the last '*'. (As a std::regex, "****...x" made ".*.*.*...x", whose backtracking grows
// as name length ^ star count.)
bool glob_match(const std::string& g, const std::string& s) {
  size_t p = 0, i = 0, star = std::string::npos, mark = 0;
  while (i < s.size()) {
    if (p < g.size() && (g[p] == '?' || g[p] == s[i])) {
      ++p, ++i;
    } else if (p < g.size() && g[p] == '*') {
      star = p++, mark = i;
    } else if (star != std::string::npos) {
      p = star + 1, i = ++mark;
    } else {
      return false;
    }
  }
  while (p < g.size() && g[p] == '*') ++p;
  return p == g.size();
}

// libstdc++'s std::regex backtracks without bound: a quantifier on a quantified atom (".?*", "(a+)*") or on
// an alternation ("(a|ab)*") can take seconds to hours on a 20-character name (found by fuzz_recipe).
// Python's re, which llm-compressor's "re:" patterns are written for, refuses "multiple repeat" too. Returns
// what is wrong, or "" for a pattern of the safe shape: quantifiers on single atoms and on groups without
// quantifiers or '|'.
std::string unsafe_regex_shape(const std::string& re) {
  if (re.size() > 256) return "longer than 256 characters";
  struct Group {
    bool quant = false, alt = false;
  };
  std::vector<Group> stack(1);
  // What the previous token was: 0 nothing / an opening, 1 an atom, 2 a group just closed, 3 a quantifier.
  int prev = 0;
  Group closed;
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    const bool quant = c == '*' || c == '+' || c == '?' || c == '{';
    if (quant) {
      if (c == '?' && prev == 3 && i > 0 && re[i - 1] != '?') continue;  // lazy suffix: "*?", "+?", "}?"
      if (prev == 3) return "a quantifier follows another quantifier (\"" + re.substr(i - 1, 2) + "\")";
      if (prev == 2 && (closed.quant || closed.alt))
        return "a quantified group contains a quantifier or '|'; quantify single characters or classes only";
      if (c == '{') {
        const size_t e = re.find('}', i);
        if (e == std::string::npos) return "'{' without '}'";
        i = e;
      }
      stack.back().quant = true;
      prev = 3;
      continue;
    }
    if (c == '\\') {
      ++i;  // the escaped character is one atom
      prev = 1;
    } else if (c == '[') {
      size_t j = i + 1;
      if (j < re.size() && re[j] == '^') ++j;
      if (j < re.size() && re[j] == ']') ++j;
      while (j < re.size() && re[j] != ']') j += re[j] == '\\' ? 2 : 1;
      if (j >= re.size()) return "'[' without ']'";
      i = j;
      prev = 1;
    } else if (c == '(') {
      stack.emplace_back();
      prev = 0;
    } else if (c == ')') {
      if (stack.size() == 1) return "')' without '('";
      closed = stack.back();
      stack.pop_back();
      stack.back().quant |= closed.quant;
      stack.back().alt |= closed.alt;
      prev = 2;
    } else if (c == '|') {
      stack.back().alt = true;
      prev = 0;
    } else {
      prev = 1;
    }
  }
  return "";
}

}  // namespace

bool pattern_matches(const std::string& pattern, const std::string& name) {
  if (pattern.rfind("re:", 0) != 0) return glob_match(pattern, name);
  const std::string re = pattern.substr(3);
  if (const std::string why = unsafe_regex_shape(re); !why.empty())
    usage("pattern '" + pattern + "': " + why + " (such regular expressions can take hours to match)");
  try {
    return std::regex_match(name, std::regex(re));
  } catch (const std::regex_error&) {
    usage("pattern '" + pattern + "' is not a valid regular expression");
  }
}

std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> matrix_shapes(const ModelConfig& c) {
  std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> out;
  auto add = [&](TensorRole r, int64_t layer) {
    const auto s = role_shape(r, c);
    out.push_back({lowbit_tensor_name(r, layer), {s[0], s[1]}});
  };
  add(TensorRole::TokEmbed, -1);
  for (int64_t i = 0; i < c.n_layers; ++i)
    for (TensorRole r : layer_matrix_roles()) add(r, i);
  add(TensorRole::LmHead, -1);
  return out;
}

std::vector<TensorPlan> plan_recipe(const Recipe& r, const ModelConfig& c,
                                    std::vector<std::string>* warnings) {
  std::vector<std::string> warn;
  std::vector<std::string> errors;
  // Activation route checks (model independent).
  if (r.act.enabled()) {
    const FormatId f = r.act.format;
    const bool clip_ok = f == FormatId::INT4 || f == FormatId::NVFP4;  // the formats with a per-token absmax
    if (f != FormatId::INT8 && !clip_ok && !is_fp8(f))
      errors.push_back(
          std::string("activation format '") + format_info(f).name +
          "' cannot serve activations: lowbit kernels quantize activations to int8, int4, nvfp4 or an FP8 "
          "format (e4m3fn, e5m2); use act=int8, act=int4, act=nvfp4 or act=e4m3, or drop activation "
          "quantization (A16)");
    if (clip_ok && !r.act.dynamic)
      errors.push_back(std::string(format_info(f).name) +
                       " activations are dynamic only (per-token scales); drop act_static / \"dynamic\": "
                       "false");
    if (!(r.act.clip > 0.0f && r.act.clip <= 1.0f))
      errors.push_back("activation clip " + std::to_string(r.act.clip) +
                       " is outside (0, 1]; it scales the per-token absmax (QuaRot uses 0.9)");
    else if (r.act.clip != 1.0f && !clip_ok)
      errors.push_back(std::string("activation clip applies to int4 and nvfp4 activations, not ") +
                       format_info(f).name + "; drop act_clip or use act=int4 or act=nvfp4");
    const int wb = r.weights.elem_info().bits;
    if (wb <= 4 && format_info(f).bits <= 4 && !r.rotation.enabled())
      warn.push_back(
          "W4A4 without rotation: 4-bit activations collapse on outlier channels (SmoothQuant W4A4KV4 "
          "PPL 83 vs QuaRot 6.1 on LLaMA-2-7B); add a Hadamard rotation");
  } else if (r.act.clip != 1.0f)
    errors.push_back("act_clip without activation quantization; add act=int4 or drop act_clip");
  if (r.act.scale != ActScale::Amax && r.act.format != FormatId::NVFP4)
    errors.push_back(std::string("act_scale=") + act_scale_name(r.act.scale) +
                     " picks NVFP4 activation block scales, but the activations are " +
                     (r.act.enabled() ? format_info(r.act.format).name : "not quantized") +
                     "; add act=nvfp4 or drop act_scale");
  if (r.kv.enabled()) {
    const FormatId f = r.kv.format;
    if (f != FormatId::INT8 && f != FormatId::INT4 && !is_fp8(f))
      errors.push_back(std::string("KV format '") + format_info(f).name +
                       "' is not a KV-cache format; use e4m3, e5m2, int8 or int4");
    if (c.n_kv_heads <= 0) errors.push_back("the model has no KV heads");
  }
  if (r.smoothquant && !r.act.enabled())
    warn.push_back(
        "smoothquant without activation quantization only moves scale into the weights; it helps "
        "W8A8-style recipes");
  if (r.rotation.enabled() && r.rotation.r4 && r.algorithm == Algorithm::Awq)
    warn.push_back(
        "rotation with R4 and AWQ: the up -> down scale fold is skipped (the online Hadamard between them "
        "mixes channels); AWQ still folds into the norms and v -> o");

  std::vector<TensorPlan> plans;
  std::map<std::string, int> ragged;  // role -> count
  for (auto& [name, shape] : matrix_shapes(c)) {
    TensorPlan p;
    p.name = name;
    p.hf_name = hf_module_name(name);
    p.rows = shape.first;
    p.cols = shape.second;
    p.quantize = true;
    p.scheme = r.weights;
    for (const auto& o : r.overrides)
      if (pattern_matches(o.pattern, name) || pattern_matches(o.pattern, p.hf_name)) p.scheme = o.scheme;
    for (const auto& ig : r.ignore)
      if (pattern_matches(ig.pattern, name) || pattern_matches(ig.pattern, p.hf_name)) {
        p.quantize = false;
        p.reason = ig.reason;
      }
    if (p.quantize && p.scheme.gran == Granularity::Native && !p.scheme.info().is_gguf()) {
      p.quantize = false;
      p.reason = std::string("scheme '") + p.scheme.info().name + "' keeps the tensor dense";
    }
    if (p.quantize) {
      try {
        validate(p.scheme, p.rows, p.cols);
      } catch (const UsageError& e) {
        errors.push_back(name + " (" + p.hf_name + ", [" + std::to_string(p.rows) + ", " +
                         std::to_string(p.cols) + "]): " + e.what() + "; add an override or ignore it");
        plans.push_back(p);
        continue;
      }
      if (p.scheme.gran == Granularity::Group && p.cols % p.scheme.group_size != 0) {
        std::string role = name.substr(name.rfind('.') + 1);
        ragged[role + " (" + std::to_string(p.cols) + " columns, group " +
               std::to_string(p.scheme.group_size) + ")"]++;
      }
      const bool is_linear = name != "tok_embed";
      if (is_linear) p.act = r.act;
      if (name == "tok_embed" && r.act.enabled()) p.act = {};
      if (r.algorithm == Algorithm::Gptq && p.scheme.info().is_gguf() && !p.scheme.info().row_grid)
        errors.push_back(
            name + ": GPTQ cannot produce " + p.scheme.info().name +
            " blocks (of the GGUF types it produces the k-quants q2_k..q6_k and iq4_xs); use rtn, a "
            "k-quant or an int/nf4/fp scheme");
      if (r.algorithm == Algorithm::Gptq && name == "tok_embed")
        warn.push_back(
            "tok_embed: GPTQ needs a matmul input and the embedding is a gather; it is quantized with RTN");
    }
    plans.push_back(p);
  }
  for (auto& [role, n] : ragged)
    warn.push_back(
        "group size does not divide " + role + " in " + std::to_string(n) +
        " matrices: the last group of each row is shorter (lowbit handles it; vLLM needs divisible "
        "groups)");
  if (!errors.empty()) {
    std::string msg = "recipe '" + r.name + "' does not fit this model:";
    for (auto& e : errors) msg += "\n  - " + e;
    usage(msg);
  }
  if (warnings)
    for (auto& w : warn) warnings->push_back(w);
  return plans;
}

}  // namespace lowbit::quant
