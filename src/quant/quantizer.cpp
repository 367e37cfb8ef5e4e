// The quantization driver: recipe -> per-layer statistics -> scale migration -> quantized weights
// (quantizer.h).
#include "quant/quantizer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "core/memory.h"
#include "core/parallel.h"
#include "core/progress.h"
#include "core/timer.h"
#include "kernels/matmul.h"
#include "model/quantized_checkpoint.h"
#include "quant/awq.h"
#include "quant/duquant.h"
#include "quant/gptq.h"
#include "quant/rotate.h"
#include "quant/tune.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::quant {
namespace {

using nlohmann::json;

constexpr int kRoles = 7;
// A layer's quantized linears in this order (the index sets below, e.g. {4, 5} = gate and up, refer to it)
// and the activation each one reads; their names come from the tensor-role table (arch/arch_table.h).
const TensorRole kRole[kRoles] = {TensorRole::Q,    TensorRole::K,  TensorRole::V,   TensorRole::O,
                                  TensorRole::Gate, TensorRole::Up, TensorRole::Down};
const ActSite kRoleSite[kRoles] = {ActSite::AttnIn, ActSite::AttnIn, ActSite::AttnIn, ActSite::OIn,
                                   ActSite::MlpIn,  ActSite::MlpIn,  ActSite::DownIn};

WeightMatrix* role_matrix(LayerWeights& L, int k) {
  WeightMatrix* m[kRoles] = {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down};
  return m[k];
}

// Largest code magnitude a format represents (symmetric INT: 2^(b-1) - 1; floats: max finite).
float format_max(FormatId f) {
  const FormatInfo& fi = format_info(f);
  if (fi.kind == FormatKind::Int) return static_cast<float>((1 << (fi.bits - 1)) - 1);
  return static_cast<float>(fi.max_finite);
}

std::string dense_name(const WeightMatrix& w) {
  return w.format_name();
}

double dense_bits(const WeightMatrix& w) {
  switch (w.kind) {
    case WeightKind::F32:
      return 32;
    case WeightKind::F16:
    case WeightKind::BF16:
      return 16;
    default:
      return w.rows * w.cols > 0
                 ? 8.0 * static_cast<double>(w.nbytes()) / static_cast<double>(w.rows * w.cols)
                 : 0;
  }
}

std::string scale_source(const QuantScheme& s, Algorithm a) {
  if (s.info().is_gguf()) {  // the block format's own scale/min search; the k-quants weight it by importance
    if (!s.info().quantize_row_weighted) return "ggml block quantizer";
    if (a == Algorithm::Gptq) return "gptq (k-quant block scales weighted by diag H)";
    if (a == Algorithm::Imatrix) return "k-quant scale/min search (imatrix weights)";
    return a == Algorithm::Awq ? "awq + k-quant scale/min search" : "k-quant scale/min search";
  }
  if (s.info().kind == FormatKind::Codebook) {  // lut2/3/4: per-row k-means tables, no scales
    if (a == Algorithm::Gptq) return "gptq (k-means tables weighted by diag H)";
    if (a == Algorithm::Imatrix) return "k-means tables (imatrix weights)";
    return a == Algorithm::Awq ? "awq + k-means tables" : "k-means tables";
  }
  if (a == Algorithm::Gptq)
    return s.search == ScaleSearch::Mse ? "gptq (mse clip search, hessian weights)" : "gptq";
  if (s.info().is_microscaled() && s.format != FormatId::NVFP4) return "mx shared exponent";
  if (a == Algorithm::Imatrix) return "mse clip search (imatrix weights)";
  if (s.search == ScaleSearch::Mse) return a == Algorithm::Awq ? "awq + mse clip search" : "mse clip search";
  return a == Algorithm::Awq ? "awq scales + absmax" : "absmax";
}

TensorReport& report_of(QuantReport& rep, const std::string& name) {
  for (auto& t : rep.tensors)
    if (t.name == name) return t;
  fail("quant", "internal: no report row for " + name);
}

struct Ctx {
  Model& m;
  const Recipe& r;
  const QuantizeOptions& o;
  QuantReport& rep;
  std::map<std::string, const TensorPlan*> plan;
};

// Seconds one quantize_one call spent quantizing and measuring its error.
struct OneTimes {
  double quantize = 0, report = 0;
};

// Quantizes one float matrix under the recipe's algorithm, fills the report row, and returns the weight.
// The caller adds *times to the report's phases (several calls run at once: see process_layer).
WeightMatrix quantize_one(Ctx& cx, const TensorPlan& p, const std::vector<float>& w, const SiteStats* ss,
                          TensorReport* tr, OneTimes* times, float nvfp4_amax = 0.0f) {
  QuantScheme s = p.scheme;
  Algorithm a = cx.r.algorithm;
  // Statistics-driven algorithms fall back to RTN where no statistics exist (tok_embed, lm_head).
  if (!ss && (a == Algorithm::Gptq || a == Algorithm::Awq || a == Algorithm::Imatrix)) a = Algorithm::Rtn;
  std::vector<float> imp;
  const float* importance = nullptr;
  QuantizedMatrix q;
  if (a == Algorithm::RtnMse) s.search = ScaleSearch::Mse;
  if (a == Algorithm::Imatrix) {
    s.search = ScaleSearch::Mse;
    imp = ss->mean_sq();
    importance = imp.data();
  }
  if (a == Algorithm::Awq && cx.r.awq_clip && (ss->gram.size() > 0 || !ss->acts.empty())) {
    s.search = ScaleSearch::Mse;
    imp.resize(static_cast<size_t>(p.cols));
    // diag(G) = sum over tokens of x_j^2 (the per-channel sum of squares where only the inputs were kept)
    for (int64_t j = 0; j < p.cols; ++j)
      imp[j] = ss->gram.size() > 0 ? ss->gram(j, j) : static_cast<float>(ss->sum_sq[j]);
    importance = imp.data();
  }
  Timer tq;
  if (a == Algorithm::Gptq) {
    GptqOptions go{cx.r.gptq_block, cx.r.gptq_damp, cx.r.gptq_act_order, nvfp4_amax};
    std::vector<float> fit;  // the float target: GPTQ of the least-squares fit W' (gptq.h)
    if (ss->cross.size() > 0)
      fit = fit_float_target(w.data(), p.rows, p.cols, ss->gram, ss->cross, cx.r.gptq_target_damp);
    q = gptq_quantize(fit.empty() ? w.data() : fit.data(), p.rows, p.cols, ss->gram, s, go);
  } else {
    q = quantize_matrix(w.data(), p.rows, p.cols, s, importance, nvfp4_amax);
  }
  times->quantize = tq.seconds();
  Timer tr_timer;
  std::vector<float> wq(w.size());
  dequantize_matrix(q, wq.data());
  tr->quantized = true;
  tr->scheme = to_string(q.scheme);
  tr->layout = layout_name(checkpoint_layout(q.scheme, q.cols));
  tr->algorithm = std::string(cx.r.smoothquant ? "smoothquant+" : "") + algorithm_name(a);
  tr->scale_source = scale_source(q.scheme, a);
  tr->bpw = q.bits_per_weight();
  tr->bytes = static_cast<int64_t>(storage_bits(q.scheme, q.rows, q.cols).total() / 8);
  tr->rel_error_w = relative_frobenius(w.data(), wq.data(), static_cast<int64_t>(w.size()));
  if (ss && ss->gram.size() > 0) {
    // A report, not a choice: large matrices are measured on every k-th row (output_error_rows).
    double base = 0;
    const double e = output_error_rows(w.data(), wq.data(), p.rows, p.cols, ss->gram, &base, &tr->error_rows);
    tr->rel_error_out = base > 0 ? std::sqrt(std::max(0.0, e) / base) : 0.0;
    if (a == Algorithm::Gptq) {
      QuantizedMatrix qr = quantize_matrix(w.data(), p.rows, p.cols, p.scheme);
      std::vector<float> wr(w.size());
      dequantize_matrix(qr, wr.data());
      const double er = output_error_rows(w.data(), wr.data(), p.rows, p.cols, ss->gram);
      tr->rel_error_out_rtn = base > 0 ? std::sqrt(std::max(0.0, er) / base) : 0.0;
    }
  } else if (ss && !ss->acts.empty()) {  // AWQ's down_proj: its inputs were kept instead of a Gram matrix
    double base = 0;
    const int64_t T = static_cast<int64_t>(ss->acts.size()) / p.cols;
    const double e = output_error_rows_acts(w.data(), wq.data(), p.rows, p.cols, ss->acts.data(), T, &base,
                                            &tr->error_rows);
    tr->rel_error_out = base > 0 ? std::sqrt(std::max(0.0, e) / base) : 0.0;
  }
  times->report = tr_timer.seconds();
  WeightMatrix out = make_quant_weight(std::make_shared<QuantizedMatrix>(std::move(q)));
  out.act_format = p.act.format;
  out.act_clip = p.act.clip;
  out.act_scale = p.act.scale;
  tr->act_format = p.act.format;
  tr->act_clip = p.act.clip;
  tr->act_block_scale = p.act.scale;
  if (p.act.enabled() && !p.act.dynamic) {
    if (!ss)
      throw UsageError("quant", "static activation scales for " + p.name +
                                    " need calibration statistics; "
                                    "use dynamic activations for it or ignore it");
    const float amax = ss->absmax();
    out.act_static_scale = amax > 0 ? amax / format_max(p.act.format) : 1.0f;
    tr->act_static = true;
    tr->act_scale = out.act_static_scale;
  }
  return out;
}

// The activation routes of layer l's quantized linears per input site, for statistics of the inputs as the
// kernels will multiply them (GPTQ's float target). Dynamic routes only: a static scale is calibrated from
// these very statistics. Empty when no linear of the layer rounds its input.
ActRoute layer_act_route(const Ctx& cx, int l) {
  const std::string pre = "layers." + std::to_string(l) + ".";
  std::array<ActivationSpec, 4> site_act{};
  bool any = false;
  for (int k = 0; k < kRoles; ++k) {
    const TensorPlan& p = *cx.plan.at(pre + role_row(kRole[k]).key);
    if (!p.quantize || !p.act.enabled() || !p.act.dynamic) continue;
    site_act[static_cast<size_t>(site_index(kRoleSite[k]))] = p.act;
    any = true;
  }
  if (!any) return {};
  return [site_act](ActSite site, const float* x, int64_t T, int64_t cols, float* xq) {
    const ActivationSpec& a = site_act[static_cast<size_t>(site_index(site))];
    quantize_activations(a.format, a.clip, a.scale, x, T, cols, xq);
  };
}

void process_layer(Ctx& cx, int l, LayerStats* st) {
  Model& m = cx.m;
  const Recipe& r = cx.r;
  LayerWeights& L = m.weights.layers[l];
  const std::string pre = "layers." + std::to_string(l) + ".";
  const TensorPlan* pl[kRoles];
  bool any = false;
  for (int k = 0; k < kRoles; ++k) {
    pl[k] = cx.plan.at(pre + role_row(kRole[k]).key);
    any = any || pl[k]->quantize;
  }
  json info = {{"layer", l}};
  std::vector<float> W[kRoles];
  bool modified[kRoles] = {};
  auto need_w = [&](int k) {
    if (W[k].empty()) W[k] = weight_to_f32(*role_matrix(L, k));
  };
  if (any)
    for (int k = 0; k < kRoles; ++k) need_w(k);
  const int64_t D = m.config.dim, Q = m.config.q_dim(), F = m.config.ffn_dim, KVd = m.config.kv_dim();
  auto rows_of = [&](int k) { return role_matrix(L, k)->rows; };
  auto targets_of = [&](const std::vector<int>& ks, bool only_quantized) {
    std::vector<AwqTarget> t;
    for (int k : ks)
      if (!only_quantized || pl[k]->quantize) t.push_back({W[k].data(), rows_of(k), pl[k]->scheme});
    return t;
  };
  auto any_q = [&](const std::vector<int>& ks) {
    for (int k : ks)
      if (pl[k]->quantize) return true;
    return false;
  };
  // SmoothQuant: migrate activation outliers into the weights, folded into the two RMSNorms.
  if (any && r.smoothquant && st) {
    struct G {
      ActSite site;
      std::vector<int> ks;
      std::vector<float>* norm;
      const char* name;
    };
    const std::vector<G> groups = {{ActSite::AttnIn, {0, 1, 2}, &L.attn_norm, "attn"},
                                   {ActSite::MlpIn, {4, 5}, &L.ffn_norm, "mlp"}};
    for (const G& g : groups) {
      if (!any_q(g.ks)) continue;
      SiteStats& ss = st->at(g.site);
      auto s = smoothquant_scales(ss.max_abs, targets_of(g.ks, false), D, r.smoothquant_alpha);
      divide_elements(*g.norm, s);
      for (int k : g.ks) {
        scale_columns(W[k].data(), rows_of(k), D, s);
        modified[k] = true;
      }
      ss.divide_channels(s);
      info["smoothquant"][g.name] = {{"alpha", r.smoothquant_alpha},
                                     {"scale_min", *std::min_element(s.begin(), s.end())},
                                     {"scale_max", *std::max_element(s.begin(), s.end())}};
    }
  }
  // AWQ: per-channel scales searched on the output error, folded into norms / the preceding linear.
  if (any && r.algorithm == Algorithm::Awq && st) {
    const bool o_foldable = m.config.n_heads == m.config.n_kv_heads && !m.config.qkv_bias && Q == KVd;
    struct G {
      ActSite site;
      std::vector<int> ks;
      int prev;
      std::vector<float>* norm;
      int64_t cols;
      const char* name;
    };
    const std::vector<G> groups = {{ActSite::AttnIn, {0, 1, 2}, -1, &L.attn_norm, D, "attn"},
                                   {ActSite::OIn, {3}, 2, nullptr, Q, "o"},
                                   {ActSite::MlpIn, {4, 5}, -1, &L.ffn_norm, D, "mlp"},
                                   {ActSite::DownIn, {6}, 5, nullptr, F, "down"}};
    for (const G& g : groups) {
      if (!any_q(g.ks)) continue;
      if (g.prev == 5 && m.weights.down_rotation.valid()) {
        info["awq"][g.name] = "skipped: the online Hadamard of the rotated model mixes up_proj's channels";
        continue;
      }
      if (g.prev == 2 && !o_foldable) {
        info["awq"][g.name] =
            "skipped: o_proj scales cannot be folded into v_proj with grouped-query attention";
        continue;
      }
      SiteStats& ss = st->at(g.site);
      Timer ts;
      AwqResult res =
          awq_search(targets_of(g.ks, true), g.cols, ss.mean_abs(), ss.gram, r.awq_grid, &ss.acts);
      cx.rep.phase_seconds.search += ts.seconds();
      info["awq"][g.name] = {{"alpha", res.alpha},
                             {"output_error_vs_rtn", res.loss_plain > 0 ? res.loss / res.loss_plain : 1.0},
                             {"scored_on", ss.gram.size() > 0 ? "gram matrix" : "calibration inputs"}};
      if (res.alpha == 0.0f) continue;
      const auto& s = res.scales;
      if (g.norm) divide_elements(*g.norm, s);
      if (g.prev >= 0) {
        divide_rows(W[g.prev].data(), rows_of(g.prev), D, s);
        modified[g.prev] = true;
      }
      for (int k : g.ks) {
        scale_columns(W[k].data(), rows_of(k), g.cols, s);
        modified[k] = true;
      }
      ss.divide_channels(s);
    }
  }
  // NVFP4: vLLM serves q/k/v and gate/up as one fused matrix each, with one global scale (it takes the
  // smallest of the parts'); the parts share the scale of their group's largest |w|, as llm-compressor writes
  // them, so that each part's values are what vLLM computes.
  float nvfp4_amax[kRoles] = {};
  for (const std::vector<int>& fused : {std::vector<int>{0, 1, 2}, std::vector<int>{4, 5}}) {
    float amax = 0;
    for (int k : fused)
      if (pl[k]->quantize && pl[k]->scheme.format == FormatId::NVFP4)
        for (float x : W[k]) amax = std::fmax(amax, std::fabs(x));
    for (int k : fused)
      if (pl[k]->quantize && pl[k]->scheme.format == FormatId::NVFP4) nvfp4_amax[k] = amax;
  }
  // The seven matrices are independent: quantize them in parallel (one task each), so the many small parallel
  // loops inside quantize_matrix run inline instead of paying a thread barrier each.
  std::vector<WeightMatrix> outs(kRoles);
  std::vector<std::exception_ptr> errs(kRoles);
  std::vector<OneTimes> times(kRoles);
  Timer tw;
  parallel_for(kRoles, 1, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      if (!pl[k]->quantize) continue;
      try {
        outs[k] = quantize_one(cx, *pl[k], W[k], st ? &st->at(kRoleSite[k]) : nullptr,
                               &report_of(cx.rep, pre + role_row(kRole[k]).key), &times[k], nvfp4_amax[k]);
      } catch (...) {
        errs[k] = std::current_exception();
      }
    }
  });
  // The phases are wall time: the tasks overlap, so the region's wall time is split by their summed shares.
  const double wall = tw.seconds();
  double sq = 0, sr = 0;
  for (const OneTimes& t : times) sq += t.quantize, sr += t.report;
  if (sq + sr > 0) {
    cx.rep.phase_seconds.quantize += wall * sq / (sq + sr);
    cx.rep.phase_seconds.report += wall * sr / (sq + sr);
  }
  for (auto& e : errs)
    if (e) std::rethrow_exception(e);
  for (int k = 0; k < kRoles; ++k) {
    WeightMatrix* wm = role_matrix(L, k);
    TensorReport& tr = report_of(cx.rep, pre + role_row(kRole[k]).key);
    if (pl[k]->quantize) {
      *wm = std::move(outs[k]);
    } else if (modified[k]) {
      // A dense matrix that received folded scales is kept in float32 so the fold stays exact.
      *wm = make_f32_weight(W[k].data(), wm->rows, wm->cols);
      tr.scheme = "f32";
      tr.reason += " (scales folded in: stored as f32)";
    }
  }
  if (r.kv.enabled() && st) {
    const int64_t hd = m.config.head_dim, nkv = m.config.n_kv_heads;
    const float fmax = format_max(r.kv.format);
    for (int kv = 0; kv < 2; ++kv) {
      const SiteStats& ss = st->at(kv ? ActSite::ValueOut : ActSite::KeyOut);
      std::vector<float> head(static_cast<size_t>(nkv), 0.0f);
      for (int64_t h = 0; h < nkv; ++h)
        for (int64_t j = 0; j < hd; ++j) head[h] = std::max(head[h], ss.max_abs[h * hd + j]);
      const float all = *std::max_element(head.begin(), head.end());
      std::vector<float> scales;
      if (r.kv.per_head)
        for (float a : head) scales.push_back(a > 0 ? a / fmax : 1.0f);
      else
        scales.push_back(all > 0 ? all / fmax : 1.0f);
      (kv ? L.v_scale : L.k_scale) = scales;
      info["kv"][kv ? "v" : "k"] = {{"absmax", all}, {"absmax_per_head", head}, {"scales", scales}};
    }
  }
  cx.rep.layers.push_back(info);
}

}  // namespace

nlohmann::json TensorReport::to_json() const {
  json j = {{"name", name},     {"hf_name", hf_name}, {"shape", {rows, cols}},  {"quantized", quantized},
            {"scheme", scheme}, {"layout", layout},   {"bits_per_weight", bpw}, {"bytes", bytes}};
  if (!quantized) j["reason"] = reason;
  if (quantized) {
    j["algorithm"] = algorithm;
    j["scale_source"] = scale_source;
    j["rel_error_weight"] = rel_error_w;
    if (rel_error_out >= 0) j["rel_error_output"] = rel_error_out;
    if (rel_error_out >= 0 && error_rows < rows) j["rel_error_output_rows"] = error_rows;  // every k-th row
    if (rel_error_out_rtn >= 0) j["rel_error_output_rtn"] = rel_error_out_rtn;
    j["activations"] =
        act_format == FormatId::F32
            ? json(nullptr)
            : json{{"format", format_info(act_format).name},
                   {"dynamic", !act_static},
                   {"static_scale", act_static ? json(act_scale) : json(nullptr)},
                   {"scale_source", act_static ? "calibrated absmax / format max" : "per token"}};
    if (act_format == FormatId::INT4 || act_format == FormatId::NVFP4)
      j["activations"]["clip"] = short_decimal(act_clip);
    if (act_format == FormatId::NVFP4) j["activations"]["block_scale"] = act_scale_name(act_block_scale);
  }
  return j;
}

double QuantReport::bpw_quantized() const {
  double bits = 0, n = 0;
  for (auto& t : tensors)
    if (t.quantized) bits += t.bpw * t.rows * t.cols, n += static_cast<double>(t.rows * t.cols);
  return n > 0 ? bits / n : 0;
}

double QuantReport::bpw_all() const {
  double bits = 0, n = 0;
  for (auto& t : tensors)
    if (!(tied_embeddings && t.name == "lm_head"))
      bits += t.bpw * t.rows * t.cols, n += static_cast<double>(t.rows * t.cols);
  return n > 0 ? bits / n : 0;
}

nlohmann::json QuantReport::to_json() const {
  json t = json::array();
  for (auto& x : tensors) t.push_back(x.to_json());
  int64_t nq = 0;
  for (auto& x : tensors) nq += x.quantized;
  return {{"recipe", recipe.to_json()},
          {"calibration", calibration},
          {"tensors", t},
          {"layers", layers},
          {"warnings", warnings},
          {"requantized", requantized},
          {"tied_embeddings", tied_embeddings},
          {"rotation", rotation},
          {"budget", budget},
          {"tune", tune},
          {"summary",
           {{"quantized_tensors", nq},
            {"tensors", static_cast<int64_t>(tensors.size())},
            {"bits_per_weight_quantized", bpw_quantized()},
            {"bits_per_weight_all_matrices", bpw_all()},
            {"seconds", seconds},
            {"seconds_by_phase",
             {{"calibration", phase_seconds.calibration},
              {"search", phase_seconds.search},
              {"quantize", phase_seconds.quantize},
              {"report", phase_seconds.report},
              {"tune", phase_seconds.tune}}},
            {"peak_rss_bytes", peak_rss_bytes}}}};
}

std::string QuantReport::summary_table() const {
  // Group rows by role ("wq", "w_down", "lm_head", ...).
  struct Agg {
    int n = 0;
    std::string scheme, alg;
    double bpw = 0, ew = 0, ewmax = 0, eo = 0, eo_rtn = 0;
    int no = 0, nr = 0;
  };
  std::map<std::string, Agg> by;
  std::vector<std::string> order;
  std::vector<std::pair<std::string, std::string>> dense;
  for (auto& t : tensors) {
    if (!t.quantized) {
      dense.push_back({t.name, t.scheme + ": " + t.reason});
      continue;
    }
    std::string role = t.name.rfind("layers.", 0) == 0 ? t.name.substr(t.name.rfind('.') + 1) : t.name;
    if (!by.count(role)) order.push_back(role);
    Agg& a = by[role];
    a.n++;
    a.scheme = t.scheme;
    a.alg = t.algorithm;
    a.bpw = t.bpw;
    a.ew += t.rel_error_w;
    a.ewmax = std::max(a.ewmax, t.rel_error_w);
    if (t.rel_error_out >= 0) a.eo += t.rel_error_out, a.no++;
    if (t.rel_error_out_rtn >= 0) a.eo_rtn += t.rel_error_out_rtn, a.nr++;
  }
  std::ostringstream os;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-10s %3s %-26s %-14s %7s %9s %9s %10s %10s\n", "tensor", "n", "scheme",
                "algorithm", "bpw", "errW mean", "errW max", "errOut", "errOut RTN");
  os << buf;
  for (auto& role : order) {
    const Agg& a = by[role];
    auto num = [](double v, int n) {
      char b[32];
      if (n == 0) return std::string("-");
      std::snprintf(b, sizeof b, "%.4f", v / n);
      return std::string(b);
    };
    std::snprintf(buf, sizeof buf, "%-10s %3d %-26s %-14s %7.3f %9.4f %9.4f %10s %10s\n", role.c_str(), a.n,
                  a.scheme.c_str(), a.alg.c_str(), a.bpw, a.ew / a.n, a.ewmax, num(a.eo, a.no).c_str(),
                  num(a.eo_rtn, a.nr).c_str());
    os << buf;
  }
  for (auto& [n, why] : dense) os << "  unquantized " << n << " (" << why << ")\n";
  std::snprintf(buf, sizeof buf,
                "bits per weight: %.4f over quantized matrices, %.4f over all weight matrices\n",
                bpw_quantized(), bpw_all());
  os << buf;
  if (!rotation.is_null()) {
    auto kind = [&](const char* r) {
      return rotation[r].is_null() ? std::string("off") : rotation[r]["kind"].get<std::string>();
    };
    os << "rotation " << rotation["method"].get<std::string>() << " (seed " << rotation["seed"].dump()
       << "): norms folded, R1 " << kind("r1") << ", R2 " << kind("r2") << ", R4 "
       << (rotation["r4"].is_null() ? "off" : "online hadamard")
       << (rotation["untied_embeddings"].get<bool>() ? ", tied embeddings untied" : "") << "\n";
  }
  if (!tune.is_null()) {
    const bool back = tune.value("reverted", false);
    std::snprintf(buf, sizeof buf,
                  "scale tuning: KL from the float model on the calibration text %.6f -> %.6f nats/token%s "
                  "(%d Adam steps, %lld factors, %.1f s)\n",
                  tune["loss_before"].get<double>(),
                  back ? tune["reverted_loss"].get<double>() : tune["loss_after"].get<double>(),
                  back ? ", higher: reverted" : "", tune["steps"].get<int>(),
                  static_cast<long long>(tune["parameters"].get<int64_t>()), tune["seconds"].get<double>());
    os << buf;
  }
  for (auto& w : warnings) os << "warning: " << w << "\n";
  return os.str();
}

std::optional<CalibData> load_recipe_calibration(const Model& m, const Recipe& r,
                                                 std::vector<std::string>* warnings) {
  if (!r.needs_calibration() && r.calib.file.empty()) return std::nullopt;
  if (!m.tokenizer)
    throw UsageError("quant", "calibration needs the model's tokenizer, and none was found for '" + m.path +
                                  "'; pass --tokenizer PATH");
  return load_calibration(r.calib, *m.tokenizer, m.config.max_seq_len, m.tokenizer->bos_id(), warnings);
}

QuantReport quantize_model(Model& m, const Recipe& r, const QuantizeOptions& o) {
  Timer timer;
  QuantReport rep;
  rep.recipe = r;
  for (auto& n : r.notes) rep.warnings.push_back("recipe: " + n);
  std::vector<TensorPlan> plans = plan_recipe(r, m.config, &rep.warnings);
  Ctx cx{m, r, o, rep, {}};
  for (auto& p : plans) cx.plan[p.name] = &p;
  auto named = m.weights.named_matrices();
  std::map<std::string, WeightMatrix*> mats(named.begin(), named.end());
  // Double quantization compounds two rounding errors and hides the first one's provenance: refuse by
  // default.
  std::vector<std::string> already;
  for (auto& p : plans) {
    const WeightMatrix* w = mats.at(p.name);
    if (p.quantize && (w->kind == WeightKind::Quant || w->kind == WeightKind::Ggml))
      already.push_back(p.name + " (" + w->format_name() + ")");
  }
  if (!already.empty()) {
    if (!o.requantize)
      throw UsageError("quant",
                       "'" + m.path + "' is already quantized (" + already.front() +
                           (already.size() > 1 ? ", ..." : "") +
                           "); quantizing it again adds a second rounding error on top of the first. "
                           "Quantize the 16-bit source instead, or pass --requantize to start from the "
                           "dequantized weights (recorded as a warning in the manifest)");
    rep.requantized = true;
    rep.warnings.push_back(
        "requantized: " + std::to_string(already.size()) +
        " matrices were already quantized; the new quantization starts from their dequantized "
        "values, so its error adds to the original quantization error");
  }
  // Rotation first: calibration statistics, GPTQ and AWQ then see the rotated weights. Rotated matrices
  // become F32; those the recipe leaves unquantized go back to their source dtype below.
  std::map<std::string, WeightKind> source_kind;
  if (r.rotation.enabled()) {
    for (auto& [name, w] : mats) source_kind[name] = w->kind;
    RotationSpec rs = r.rotation;
    json spin;
    if (rs.method == "spinquant") {
      if (!o.calib)
        throw UsageError("quant",
                         "rotate=spinquant learns its rotations on calibration text; pass --calib FILE");
      Timer ts;
      spin = learn_spinquant(m, r, o.calib->seqs, &rs);
      rep.phase_seconds.search += ts.seconds();
    }
    if (rs.method == "duquant") {
      Timer td;  // calibration forwards and the greedy block search (quant/duquant.h)
      rep.rotation =
          rotate_model_duquant(m, rs, o.calib ? o.calib->seqs : std::vector<std::vector<int32_t>>{});
      rep.phase_seconds.search += td.seconds();
    } else {
      rep.rotation = rotate_model(m, rs);
    }
    if (!spin.is_null()) rep.rotation["spinquant"] = spin;
    named = m.weights.named_matrices();
    mats = std::map<std::string, WeightMatrix*>(named.begin(), named.end());
  }
  // Scale tuning's teacher: the network as it is now (rotated where the recipe rotates), before any matrix
  // is quantized. A copy of the handles; the float storage stays alive until tuning ends.
  std::optional<Model> reference;
  if (r.tune.enabled()) reference.emplace(m);
  if (r.needs_calibration() && !o.calib)
    throw UsageError("quant", "recipe '" + r.name + "' (" + std::string(r.smoothquant ? "smoothquant+" : "") +
                                  algorithm_name(r.algorithm) + (r.kv.enabled() ? ", KV scales" : "") +
                                  ((r.act.enabled() && !r.act.dynamic) ? ", static activation scales" : "") +
                                  ") needs calibration data; pass --calib FILE");
  rep.calibration = o.calib ? o.calib->to_json() : json(nullptr);
  for (auto& p : plans) {
    TensorReport t;
    t.name = p.name;
    t.hf_name = p.hf_name;
    t.rows = p.rows;
    t.cols = p.cols;
    const WeightMatrix* w = mats.at(p.name);
    t.scheme = dense_name(*w);
    t.layout = "dense";
    t.bpw = dense_bits(*w);
    t.bytes = static_cast<int64_t>(w->nbytes());
    t.reason = p.reason;
    rep.tensors.push_back(t);
  }
  const bool need_gram = r.algorithm == Algorithm::Gptq || r.algorithm == Algorithm::Awq;
  const bool need_stats = o.calib && r.needs_calibration();
  Progress::set_quiet(!o.progress);
  const int L = static_cast<int>(m.config.n_layers);
  std::vector<LayerStats> all;
  if (need_stats && !need_gram) {
    Timer tc;
    all = collect_stats(m, *o.calib, 0, L - 1, false, o.batch_seqs);
    rep.phase_seconds.calibration += tc.seconds();
  }
  {
    Progress prog("quantize", L + 1);
    // GPTQ / AWQ: layer l's statistics come from inputs through the already quantized layers before it.
    std::unique_ptr<CalibStream> stream;
    Timer tc;
    const bool float_target = r.algorithm == Algorithm::Gptq && r.gptq_target == "float";
    if (need_stats && need_gram)
      stream = std::make_unique<CalibStream>(m, *o.calib, o.batch_seqs, float_target);
    // AWQ takes each layer's inputs from the float layers before it, as AutoAWQ does: the scales and clips
    // are chosen for the float model's activations, and one layer forward per layer serves both the
    // statistics and the stream (GPTQ's error compensation needs the quantized layers' outputs instead).
    const bool awq_float = r.algorithm == Algorithm::Awq;
    // AWQ's down_proj is scored on its kept inputs where that is cheaper than their Gram matrix.
    const bool down_acts =
        awq_float && stream &&
        awq_token_space_cheaper(m.config.dim, m.config.ffn_dim, stream->tokens(), r.awq_grid);
    rep.phase_seconds.calibration += tc.seconds();
    for (int l = 0; l < L; ++l) {
      LayerStats one;
      LayerStats* st = nullptr;
      if (stream) {
        tc.reset();
        one = stream->stats(true, awq_float, down_acts, float_target ? layer_act_route(cx, l) : ActRoute{});
        rep.phase_seconds.calibration += tc.seconds();
        st = &one;
      } else if (!all.empty()) {
        st = &all[l];
      }
      process_layer(cx, l, st);
      tc.reset();
      if (stream && !awq_float && l + 1 < L) stream->advance();
      rep.phase_seconds.calibration += tc.seconds();
      if (!all.empty()) all[l] = LayerStats{};  // free as we go
      double ew = 0;
      int n = 0;
      for (auto& t : rep.tensors)
        if (t.quantized && t.name.rfind("layers." + std::to_string(l) + ".", 0) == 0)
          ew += t.rel_error_w, ++n;
      char detail[96];
      std::snprintf(detail, sizeof detail, "layer %d: mean rel. weight error %.4f", l, n ? ew / n : 0.0);
      prog.update(l + 1, detail);
    }
    // Embedding and classifier. lm_head is a matmul on the final RMSNorm's output: statistics-driven
    // algorithms get that input's statistics (through the quantized layers for GPTQ / AWQ, as every layer's),
    // and a tied embedding quantized in the same scheme shares them (its rows are lm_head's). An embedding of
    // its own is a gather with no input to weight: RTN.
    const bool tied_storage = m.weights.tied();
    const TensorPlan& head_plan = *cx.plan.at("lm_head");
    const TensorPlan& embed_plan = *cx.plan.at("tok_embed");
    const bool tied_same = tied_storage && head_plan.quantize && embed_plan.quantize &&
                           to_string(embed_plan.scheme) == to_string(head_plan.scheme) &&
                           !head_plan.act.enabled();
    const bool head_weighted =
        need_stats && (r.algorithm == Algorithm::Gptq || r.algorithm == Algorithm::Awq ||
                       r.algorithm == Algorithm::Imatrix);
    SiteStats head;
    if (head_weighted && head_plan.quantize) {
      tc.reset();
      if (stream) {
        if (!awq_float) stream->advance();  // the last layer, quantized (AWQ's stream has moved already)
        // A tied embedding is also the input's gather: fitted to lm_head's inputs it would change the
        // embedding of every token; it keeps GPTQ's own objective (no cross statistics).
        head = stream->head_stats(true, !tied_same);
      } else {
        head = head_input_stats(m, *o.calib, false, o.batch_seqs);
      }
      rep.phase_seconds.calibration += tc.seconds();
    }
    std::shared_ptr<WeightMatrix> embed_done;
    for (const char* name : {"tok_embed", "lm_head"}) {
      const TensorPlan& p = *cx.plan.at(name);
      WeightMatrix* wm = mats.at(name);
      TensorReport& tr = report_of(rep, name);
      if (!p.quantize) continue;
      const bool uses_head = std::string(name) == "lm_head" || tied_same;
      if (std::string(name) == "lm_head" && tied_same && embed_done) {
        *wm = *embed_done;  // tied and identically quantized: share the storage
        tr = report_of(rep, "tok_embed");
        tr.name = "lm_head";
        tr.hf_name = "lm_head";
        continue;
      }
      std::vector<float> w = weight_to_f32(*wm);
      OneTimes t1;
      *wm = quantize_one(cx, p, w, uses_head && head.cols > 0 ? &head : nullptr, &tr, &t1);
      rep.phase_seconds.quantize += t1.quantize;
      rep.phase_seconds.report += t1.report;
      if (std::string(name) == "tok_embed") embed_done = std::make_shared<WeightMatrix>(*wm);
    }
    prog.finish();
  }
  // Rotated matrices left unquantized return to their source dtype (the rotation worked in F32).
  if (r.unquantized_dtype == "source")
    for (auto& p : plans) {
      WeightMatrix* wm = mats.at(p.name);
      auto it = source_kind.find(p.name);
      if (p.quantize || it == source_kind.end() || wm->kind != WeightKind::F32) continue;
      if (it->second != WeightKind::F16 && it->second != WeightKind::BF16) continue;
      auto f = weight_to_f32(*wm);
      *wm = make_half_weight(f.data(), wm->rows, wm->cols, it->second);
      TensorReport& tr = report_of(rep, p.name);
      tr.scheme = dense_name(*wm);
      tr.bpw = dense_bits(*wm);
      tr.bytes = static_cast<int64_t>(wm->nbytes());
    }
  // Dense tensors in the dtype the recipe asks for.
  if (r.unquantized_dtype != "source") {
    DenseMode mode = dense_mode_from_string(r.unquantized_dtype);
    WeightKind k = mode == DenseMode::F32   ? WeightKind::F32
                   : mode == DenseMode::F16 ? WeightKind::F16
                                            : WeightKind::BF16;
    const bool tied = m.weights.tied();
    for (auto& p : plans) {
      WeightMatrix* wm = mats.at(p.name);
      if (p.quantize || wm->kind == k || wm->kind == WeightKind::Quant) continue;
      if (p.name == "lm_head" && tied && !cx.plan.at("tok_embed")->quantize) {
        *wm = m.weights.tok_embed;
      } else {
        auto f = weight_to_f32(*wm);
        *wm = k == WeightKind::F32 ? make_f32_weight(f.data(), wm->rows, wm->cols)
                                   : make_half_weight(f.data(), wm->rows, wm->cols, k);
      }
      TensorReport& tr = report_of(rep, p.name);
      tr.scheme = dense_name(*wm);
      tr.bpw = dense_bits(*wm);
      tr.bytes = static_cast<int64_t>(wm->nbytes());
    }
  }
  if (reference) {
    Timer tt;
    rep.tune = tune_quantized(*reference, m, r, o.calib->seqs);
    if (rep.tune.contains("warning"))
      rep.warnings.push_back("tune: " + rep.tune["warning"].get<std::string>());
    rep.phase_seconds.tune += tt.seconds();
    reference.reset();
  }
  rep.tied_embeddings = m.weights.tied();
  rep.seconds = timer.seconds();
  rep.peak_rss_bytes = peak_rss_bytes();
  return rep;
}

void quantize_model_online(Model& m, const Recipe& r, const QuantizeOptions& o, QuantReport* report) {
  QuantReport rep = quantize_model(m, r, o);
  m.load_seconds += rep.seconds;
  if (report) *report = std::move(rep);
}

}  // namespace lowbit::quant
