// Budgeted mixed precision: sensitivities by measured KL divergence, a multiple-choice knapsack over bytes.
#include "quant/budget.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <set>

#include "arch/arch_table.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/timer.h"
#include "kernels/matmul.h"
#include "kv/kv_cache.h"
#include "model/decoder.h"
#include "model/gguf_model_export.h"
#include "model/quantized_checkpoint.h"
#include "quant/checkpoint_writer.h"
#include "quant/gptq.h"

namespace lowbit::quant {

using nlohmann::json;

// ---- knapsack ----

namespace {

// LP relaxation of the multiple-choice knapsack: per item the lower convex hull of (bytes, loss), then
// upgrades taken in order of loss saved per byte until the capacity is used (the last one fractionally).
double lp_lower_bound(const std::vector<KnapsackItem>& items, int64_t capacity) {
  struct Step {
    double slope, bytes, gain;
  };
  std::vector<Step> steps;
  double loss = 0, used = 0;
  for (const auto& it : items) {
    std::vector<int> idx(it.bytes.size());
    for (size_t j = 0; j < idx.size(); ++j) idx[j] = static_cast<int>(j);
    std::sort(idx.begin(), idx.end(), [&](int a, int b) {
      return it.bytes[a] != it.bytes[b] ? it.bytes[a] < it.bytes[b] : it.loss[a] < it.loss[b];
    });
    std::vector<int> hull;  // increasing bytes, decreasing loss, convex
    for (int j : idx) {
      if (!hull.empty() && it.loss[j] >= it.loss[hull.back()]) continue;
      while (hull.size() >= 2) {
        const int a = hull[hull.size() - 2], b = hull.back();
        const double s1 = (it.loss[a] - it.loss[b]) / std::max<double>(1, it.bytes[b] - it.bytes[a]);
        const double s2 = (it.loss[b] - it.loss[j]) / std::max<double>(1, it.bytes[j] - it.bytes[b]);
        if (s2 >= s1)
          hull.pop_back();
        else
          break;
      }
      hull.push_back(j);
    }
    loss += it.loss[hull[0]];
    used += static_cast<double>(it.bytes[hull[0]]);
    for (size_t h = 1; h < hull.size(); ++h) {
      const double db = static_cast<double>(it.bytes[hull[h]] - it.bytes[hull[h - 1]]);
      const double dl = it.loss[hull[h - 1]] - it.loss[hull[h]];
      steps.push_back({dl / std::max(1.0, db), db, dl});
    }
  }
  std::sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) { return a.slope > b.slope; });
  double room = static_cast<double>(capacity) - used;
  for (const auto& st : steps) {
    if (room <= 0) break;
    const double f = std::min(1.0, room / st.bytes);
    loss -= f * st.gain;
    room -= f * st.bytes;
  }
  return loss;
}

}  // namespace

KnapsackResult solve_knapsack(const std::vector<KnapsackItem>& items, int64_t capacity, int64_t max_states) {
  KnapsackResult res;
  int64_t min_bytes = 0;
  for (const auto& it : items) {
    if (it.bytes.empty() || it.bytes.size() != it.loss.size() || it.bytes.size() > 255)
      fail("quant", "knapsack item needs 1..255 options with bytes and loss each");
    min_bytes += *std::min_element(it.bytes.begin(), it.bytes.end());
  }
  if (capacity < min_bytes) return res;
  res.step = std::max<int64_t>(1, (capacity + max_states - 1) / max_states);
  const int64_t S = capacity / res.step;  // states 0..S (units of step bytes, options rounded up)
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> best(static_cast<size_t>(S + 1), 0.0), next(static_cast<size_t>(S + 1));
  std::vector<std::vector<uint8_t>> pick(items.size(), std::vector<uint8_t>(static_cast<size_t>(S + 1)));
  // best[c] = least loss of the items so far with at most c steps used.
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& it = items[i];
    std::fill(next.begin(), next.end(), inf);
    for (size_t j = 0; j < it.bytes.size(); ++j) {
      const int64_t w = (it.bytes[j] + res.step - 1) / res.step;
      for (int64_t c = w; c <= S; ++c) {
        const double v = best[static_cast<size_t>(c - w)] + it.loss[j];
        if (v < next[static_cast<size_t>(c)]) {
          next[static_cast<size_t>(c)] = v;
          pick[i][static_cast<size_t>(c)] = static_cast<uint8_t>(j);
        }
      }
    }
    best.swap(next);
  }
  if (!(best[static_cast<size_t>(S)] < inf)) return res;  // rounding up made it infeasible
  res.feasible = true;
  res.choice.assign(items.size(), 0);
  int64_t c = S;
  for (size_t i = items.size(); i-- > 0;) {
    const int j = pick[i][static_cast<size_t>(c)];
    res.choice[i] = j;
    c -= (items[i].bytes[static_cast<size_t>(j)] + res.step - 1) / res.step;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    res.bytes += items[i].bytes[static_cast<size_t>(res.choice[i])];
    res.loss += items[i].loss[static_cast<size_t>(res.choice[i])];
  }
  res.lower_bound = std::min(res.loss, lp_lower_bound(items, capacity));
  return res;
}

std::vector<QuantScheme> default_candidates() {
  std::vector<QuantScheme> out;
  for (const char* s : {"q2_k", "q3_k", "iq4_xs", "q4_k", "q5_k", "q6_k", "int3:g32:sym:f16",
                        "int4:g32:sym:f16", "int4:g64:sym:f16", "int8:channel:sym:f16", "int8:g32:sym:f16"})
    out.push_back(parse_scheme(s));
  return out;
}

std::vector<std::vector<int32_t>> sensitivity_windows(const CalibData& calib, int samples, int length,
                                                      int64_t vocab, std::vector<std::string>* warnings) {
  // The probe keeps the reference log-probabilities of every token it scores: at most 2^26 floats (256 MiB).
  const int64_t max_tokens = std::max<int64_t>(16, (int64_t{1} << 26) / std::max<int64_t>(1, vocab));
  std::vector<std::vector<int32_t>> out;
  int64_t kept = 0;
  for (size_t i = 0; i < calib.seqs.size() && static_cast<int>(i) < samples; ++i) {
    const auto& s = calib.seqs[i];
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(s.size()), length);
    if (kept + n > max_tokens) {  // the first window is cut, later ones dropped
      if (out.empty()) out.emplace_back(s.begin(), s.begin() + max_tokens);
      if (warnings)
        warnings->push_back("sensitivity windows cut to " + std::to_string(max_tokens) +
                            " tokens: the reference log-probabilities of a " + std::to_string(vocab) +
                            "-token vocabulary are kept for each");
      break;
    }
    out.emplace_back(s.begin(), s.begin() + n);
    kept += n;
  }
  return out;
}

// ---- KL probe ----

KldProbe::KldProbe(Model& m, const std::vector<std::vector<int32_t>>& windows) : m_(m) {
  const ModelConfig& c = m.config;
  int64_t cap = 1;
  int seq = 0;
  for (const auto& w : windows) {
    if (w.size() < 2) continue;
    for (size_t p = 0; p < w.size(); ++p) {
      if (p + 1 < w.size()) scored_.push_back(static_cast<int64_t>(batch_.size()));
      batch_.push_back({w[p], seq, static_cast<int64_t>(p), false});
    }
    ++seq;
    cap = std::max<int64_t>(cap, static_cast<int64_t>(w.size()));
  }
  if (batch_.empty()) throw UsageError("quant", "no calibration window of 2 or more tokens to measure KL on");
  kv_ = std::make_unique<KvCache>(c, seq, cap, KvDtype::F32);
  const int L = static_cast<int>(c.n_layers);
  const int64_t T = static_cast<int64_t>(batch_.size());
  Decoder dec(c, m.weights);
  streams_.assign(static_cast<size_t>(L + 1), std::vector<float>(static_cast<size_t>(T * c.dim)));
  dec.embed(batch_, streams_[0].data());
  for (int l = 0; l < L; ++l) {
    streams_[static_cast<size_t>(l + 1)] = streams_[static_cast<size_t>(l)];
    dec.forward_layers(batch_, *kv_, streams_[static_cast<size_t>(l + 1)].data(), l, l);
  }
  ref_ = logprobs(dec, streams_[static_cast<size_t>(L)].data());
}

KldProbe::~KldProbe() = default;

std::vector<float> KldProbe::logprobs(const Decoder& dec, const float* x) const {
  const int64_t V = m_.config.vocab_size, D = m_.config.dim;
  const int64_t n = static_cast<int64_t>(scored_.size());
  std::vector<float> xs(static_cast<size_t>(n * D)), lg(static_cast<size_t>(n * V));
  for (int64_t i = 0; i < n; ++i) std::copy_n(x + scored_[i] * D, D, xs.data() + i * D);
  dec.head(xs.data(), n, lg.data());
  for (int64_t t = 0; t < n; ++t) {
    float* r = lg.data() + t * V;
    const float mx = *std::max_element(r, r + V);
    double s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(static_cast<double>(r[v] - mx));
    const float lse = mx + static_cast<float>(std::log(s));
    for (int64_t v = 0; v < V; ++v) r[v] -= lse;
  }
  return lg;
}

double KldProbe::kld_from(int first_layer) {
  const ModelConfig& c = m_.config;
  const int L = static_cast<int>(c.n_layers);
  const int64_t V = c.vocab_size;
  Decoder dec(c, m_.weights);
  std::vector<float> x;
  if (first_layer < 0) {
    x.resize(streams_[0].size());
    dec.embed(batch_, x.data());
  } else {
    x = streams_[static_cast<size_t>(std::min(first_layer, L))];
  }
  const int from = std::max(first_layer, 0);
  if (from < L) dec.forward_layers(batch_, *kv_, x.data(), from, L - 1);
  const std::vector<float> lq = logprobs(dec, x.data());
  const int64_t n = tokens();
  double sum = 0;
  for (int64_t t = 0; t < n; ++t) {
    double kl = 0;
    for (int64_t v = 0; v < V; ++v) {
      const double lp = ref_[static_cast<size_t>(t * V + v)];
      kl += std::exp(lp) * (lp - static_cast<double>(lq[static_cast<size_t>(t * V + v)]));
    }
    if (!std::isfinite(kl)) kl = 1e3;  // a NaN/Inf from a degenerate format: the worst option, not a crash
    sum += std::max(0.0, kl);
  }
  return sum / static_cast<double>(n);
}

}  // namespace lowbit::quant

// ---- allocation ----

namespace lowbit::quant {
namespace {

int64_t digits(int64_t v) {
  return static_cast<int64_t>(std::to_string(std::max<int64_t>(v, 0)).size());
}

// A safetensors header entry, from above: "NAME":{"dtype":"F8_E4M3","shape":[A,B],"data_offsets":[X,Y]}, is
// the name + 54 characters + the shape's digits (at most those of rows and cols: packed shapes are narrower)
// + two offsets of at most `offset_digits` digits.
int64_t header_entry_bytes(const std::string& name, int64_t rows, int64_t cols, int64_t offset_digits) {
  return static_cast<int64_t>(name.size()) + 54 + digits(rows) + digits(cols) + 2 * offset_digits;
}

// The layer and input site of a per-layer linear matrix (false for the embedding, lm_head, ...).
bool input_site(const std::string& name, int64_t* layer, ActSite* site) {
  RoleRef ref{};
  if (!parse_lowbit_tensor_name(name, &ref) || ref.layer < 0) return false;
  *layer = ref.layer;
  switch (ref.role) {
    case TensorRole::Q:
    case TensorRole::K:
    case TensorRole::V:
      *site = ActSite::AttnIn;
      break;
    case TensorRole::O:
      *site = ActSite::OIn;
      break;
    case TensorRole::Gate:
    case TensorRole::Up:
      *site = ActSite::MlpIn;
      break;
    case TensorRole::Down:
      *site = ActSite::DownIn;
      break;
    default:
      return false;
  }
  return true;
}

// The input statistics a layer matrix's imatrix search reads (nullptr: not a layer matrix, or no statistics).
const SiteStats* input_stats(const std::vector<LayerStats>& stats, const std::string& name) {
  int64_t layer = 0;
  ActSite site{};
  if (stats.empty() || !input_site(name, &layer, &site)) return nullptr;
  return &stats[static_cast<size_t>(layer)].at(site);
}

int first_layer_of(const std::string& unit, int n_layers) {
  if (unit.rfind("tok_embed", 0) == 0) return -1;  // also the tied pair
  if (unit == "lm_head") return n_layers;
  RoleRef ref{};
  if (parse_lowbit_tensor_name(unit, &ref) && ref.layer >= 0) return static_cast<int>(ref.layer);
  return -1;
}

bool is_default_ignore(const TensorRule& t) {
  const std::string tag = "(default ignore)";
  return t.reason.size() >= tag.size() &&
         t.reason.compare(t.reason.size() - tag.size(), tag.size(), tag) == 0;
}

int64_t dense_elem_bytes(const Recipe& r, const WeightMatrix& w) {
  if (r.unquantized_dtype == "f16" || r.unquantized_dtype == "bf16") return 2;
  if (r.unquantized_dtype == "f32") return 4;
  return w.kind == WeightKind::F16 || w.kind == WeightKind::BF16 ? 2 : 4;  // GGUF blocks are widened to F32
}

// GGUF file bytes instead of checkpoint bytes: the exporter's own sizes (header, vectors, each matrix's
// padded data in its GGUF type). Options the GGUF file cannot hold unchanged are dropped; what no choice
// changes is recomputed from scratch.
void count_gguf_bytes(Model& m, const Recipe& r, const std::vector<TensorPlan>& plans,
                      const std::map<std::string, WeightMatrix*>& mats, const std::string& name,
                      Allocation& a) {
  GgufModelExportOptions o;
  o.name = name;  // general.name: its length can move the header's padding
  const GgufExportSizes z = gguf_export_sizes(m, o);
  auto dense = [&](const std::string& name) {
    return z.matrix_bytes(name, dense_elem_bytes(r, *mats.at(name)) == 2 ? 1 /*F16*/ : 0 /*F32*/);
  };
  a.counts = "gguf";
  a.fixed_bytes = z.fixed_bytes;
  for (const auto& p : plans) {
    if (!z.matrices.count(p.name)) continue;  // a tied lm_head: token_embd serves it
    const bool unit = std::any_of(a.units.begin(), a.units.end(),
                                  [&](const AllocUnit& u) { return u.members[0] == p.name; });
    if (unit) continue;
    if (!p.quantize) {
      a.fixed_bytes += dense(p.name);
      continue;
    }
    const int t = gguf_exact_type(p.scheme, p.rows, p.cols);
    if (t < 0)
      throw UsageError("quant", "--format gguf: the recipe gives " + p.name + " " + to_string(p.scheme) +
                                    ", which a GGUF file cannot hold unchanged; override it with a GGUF "
                                    "type (q4_k, ...) or int4:g32 / int8:g32, or leave it to the allocator");
    a.fixed_bytes += z.matrix_bytes(p.name, t);
  }
  for (auto& u : a.units) {
    std::vector<AllocOption> kept;
    for (AllocOption o : u.options) {
      if (o.scheme == "keep") {
        o.bytes = dense(u.members[0]);
      } else {
        const int t = gguf_exact_type(parse_scheme(o.scheme), u.rows, u.cols);
        if (t < 0) continue;
        o.bytes = z.matrix_bytes(u.members[0], t);
      }
      kept.push_back(o);
    }
    u.options = std::move(kept);
  }
}

}  // namespace

Allocation allocate_budget(Model& m, const Recipe& r, const CalibData& calib, KldProbe& probe,
                           const BudgetSpec& spec, const std::string& tokenizer_path) {
  Timer timer;
  if (r.rotation.enabled())
    throw UsageError("quant",
                     "--budget with rotate=" + r.rotation.method +
                         " is not supported: sensitivities are measured on the unrotated model; quantize "
                         "without the rotation or choose the formats yourself with overrides");
  const ModelConfig& c = m.config;
  const int L = static_cast<int>(c.n_layers);
  Allocation a;
  a.sens_tokens = static_cast<int>(probe.tokens());
  a.parameters = m.weights.parameters();
  if (spec.sensitivity != "kld" && spec.sensitivity != "proxy" && spec.sensitivity != "auto")
    throw UsageError("quant", "sensitivity '" + spec.sensitivity + "' is not one of auto, kld, proxy");
  // Units: every matrix the recipe (without its default embedding / lm_head ignores) would quantize.
  Recipe r0 = r;
  r0.ignore.erase(std::remove_if(r0.ignore.begin(), r0.ignore.end(), is_default_ignore), r0.ignore.end());
  // The recipe's own scheme is replaced by the allocation everywhere, so it must not stop a model whose rows
  // it does not fit (W4A16's group 128 on 64-column rows): int8 per channel fits every matrix.
  r0.weights = parse_scheme("int8:channel:sym:f16");
  std::vector<std::string> warn;
  const std::vector<TensorPlan> plans = plan_recipe(r0, c, &warn);
  std::map<std::string, WeightMatrix*> mats;
  for (auto& [n, w] : m.weights.named_matrices()) mats[n] = w;
  const bool tied = m.weights.tied();
  std::vector<QuantScheme> cands = spec.candidates.empty() ? default_candidates() : spec.candidates;
  // Refused before minutes of sensitivity measurement, not after.
  for (const QuantScheme& s : cands)
    if (r.algorithm == Algorithm::Gptq && s.info().is_gguf() && !s.info().row_grid)
      throw UsageError(
          "quant", std::string("--candidates ") + s.info().name + ": GPTQ cannot produce " + s.info().name +
                       " blocks (only the k-quants q2_k..q6_k and iq4_xs); use " +
                       (s.format == FormatId::Q8_0   ? "int8:g32 (written to GGUF as Q8_0, exactly)"
                        : s.format == FormatId::Q4_0 ? "int4:g32 (written to GGUF as Q4_0, exactly)"
                                                     : "a k-quant") +
                       " or a recipe without algo=gptq");
  std::set<std::string> group_schemes, pinned_schemes;  // config.json groups: candidates, overrides
  // Offsets in the safetensors header have at most the digits of the F32 model's size.
  int64_t od = 1;
  for (auto& [n, w] : m.weights.named_matrices()) od += 4 * w->rows * w->cols;
  od = digits(od + (int64_t{1} << 20));
  for (const auto& p : plans) {
    if (!p.quantize) {
      a.ignored.push_back(p.name);
      if (!(tied && p.name == "lm_head"))
        a.fixed_bytes += p.rows * p.cols * dense_elem_bytes(r, *mats.at(p.name)) +
                         header_entry_bytes(p.hf_name + ".weight", p.rows, p.cols, od);
      continue;
    }
    // A matrix the recipe's overrides name keeps that format: the user chose it.
    const bool pinned = std::any_of(r.overrides.begin(), r.overrides.end(), [&](const TensorRule& o) {
      return pattern_matches(o.pattern, p.name) || pattern_matches(o.pattern, p.hf_name);
    });
    if (pinned && !(tied && p.name == "lm_head")) {
      a.pinned.push_back(p.name + " (" + to_string(p.scheme) + ")");
      a.fixed_bytes += packed_checkpoint_bytes(p.scheme, p.rows, p.cols).total() +
                       6 * header_entry_bytes(p.hf_name + ".weight_zero_point", p.rows, p.cols, od) +
                       static_cast<int64_t>(p.hf_name.size()) + 16;
      pinned_schemes.insert(to_string(p.scheme));
      continue;
    }
    AllocUnit u;
    u.name = p.name;
    u.members = {p.name};
    u.rows = p.rows;
    u.cols = p.cols;
    if (tied && p.name == "lm_head") {
      auto it = std::find_if(a.units.begin(), a.units.end(), [](auto& x) { return x.name == "tok_embed"; });
      if (it != a.units.end()) {
        it->name = "tok_embed+lm_head";
        it->members.push_back("lm_head");
        continue;
      }
      // tok_embed is ignored or given its format by the recipe: the tied lm_head stays with it (same storage,
      // counted with tok_embed).
      const TensorPlan& e =
          *std::find_if(plans.begin(), plans.end(), [](auto& x) { return x.name == "tok_embed"; });
      if (e.quantize) {
        a.head_follows = to_string(e.scheme);
        a.pinned.push_back("lm_head (tied to tok_embed, " + a.head_follows + ")");
      } else {
        a.ignored.push_back(p.name);
        a.keep_with_embedding = true;
      }
      continue;
    }
    a.units.push_back(u);
  }
  // Options and their bytes.
  for (auto& u : a.units) {
    const std::string hf = hf_module_name(u.members[0]);
    // A tied pair quantized with activation routes is stored twice (lm_head gets its own route).
    const int copies = u.members.size() > 1 && r.act.enabled() ? 2 : 1;
    AllocOption keep;
    keep.scheme = "keep";
    keep.bytes = u.rows * u.cols * dense_elem_bytes(r, *mats.at(u.members[0])) +
                 header_entry_bytes(hf + ".weight", u.rows, u.cols, od) + static_cast<int64_t>(hf.size()) +
                 16;
    u.options.push_back(keep);
    for (const QuantScheme& s : cands) {
      try {
        validate(s, u.rows, u.cols);
      } catch (const UsageError&) {
        continue;  // e.g. a 256-element k-quant block on a 172-column matrix
      }
      const PackedBytes pb = packed_checkpoint_bytes(s, u.rows, u.cols);
      // Separate tensors: codes, scales, zero points, weight_shape, plus NVFP4's global scale and NF4's two
      // double-quantization tables (counted in PackedBytes::scales).
      const FormatId f = s.info().id;
      const int entries = (pb.codes > 0) + (pb.scales > 0) + (pb.zeros > 0) + (pb.metadata > 0) +
                          (f == FormatId::NVFP4 ? 1
                           : f == FormatId::NF4 ? 2
                                                : 0);
      AllocOption o;
      o.scheme = to_string(s);
      o.bytes = copies * (pb.total() +
                          entries * header_entry_bytes(hf + ".weight_zero_point", u.rows, u.cols, od)) +
                static_cast<int64_t>(hf.size()) + 16;  // its name in a config_groups "targets" list
      u.options.push_back(o);
      group_schemes.insert(o.scheme);
    }
  }
  // What no choice changes: norms and biases, KV scales, tokenizer files, config.json, safetensors framing.
  // The writer keeps norms 16-bit only while the embedding is 16-bit: count 4 bytes (an upper bound).
  const int64_t vb = 4;
  for (const TensorRoleRow& row : tensor_roles()) {
    if (row.kind == RoleKind::Matrix || !role_present(row.role, c)) continue;
    for (int64_t l = row.per_layer ? 0 : -1; l < (row.per_layer ? L : 0); ++l) {
      const std::vector<float>* v = m.weights.vector(row.role, l);
      if (!v || v->empty()) continue;
      a.fixed_bytes +=
          static_cast<int64_t>(v->size()) * vb +
          header_entry_bytes(hf_tensor_name(row.role, l), static_cast<int64_t>(v->size()), 0, od);
    }
  }
  if (r.kv.enabled())
    a.fixed_bytes += L * 2 *
                     ((r.kv.per_head ? c.n_kv_heads : 1) * 4 +
                      header_entry_bytes("model.layers.00.self_attn.k_scale", c.n_kv_heads, 0, od));
  for (const auto& [src, name] : tokenizer_files(m, tokenizer_path))
    a.fixed_bytes += static_cast<int64_t>(std::filesystem::file_size(src));
  a.fixed_bytes += 8 + 256;  // safetensors length prefix, metadata and padding
  // config.json: the source's config (re-indented; generated configs are ~600 characters),
  // quantization_config's fixed keys, and one group per scheme that may be chosen (its weights args and
  // lowbit_scheme, ~370 characters pretty-printed); each module's name in a targets or ignore list is counted
  // with its option.
  int64_t cfg = 1024;
  const std::filesystem::path src_cfg = std::filesystem::path(m.path) / "config.json";
  std::error_code ec;
  if (m.format == "hf" && std::filesystem::is_regular_file(src_cfg, ec))
    cfg += 2 * static_cast<int64_t>(std::filesystem::file_size(src_cfg, ec));
  a.fixed_bytes += cfg + 512;  // + 480 per scheme group, counted with the allocation below
  if (spec.gguf_file) {
    count_gguf_bytes(m, r, plans, mats, spec.gguf_name, a);
    group_schemes.clear(), pinned_schemes.clear();  // GGUF has no config.json groups
  }
  a.budget = spec.bytes > 0
                 ? spec.bytes
                 : static_cast<int64_t>(std::floor(spec.bpw * static_cast<double>(a.parameters) / 8));

  // Sensitivities: each unit alone in each candidate format, KL on the probe's windows.
  std::vector<LayerStats> stats;
  const bool weighted =
      r.algorithm == Algorithm::Imatrix || r.algorithm == Algorithm::Gptq || r.algorithm == Algorithm::Awq;
  if (weighted) stats = collect_stats(m, calib, 0, L - 1, false);
  // auto: every option measured below 100 M parameters (seconds to minutes on 2 cores), the proxy above.
  a.sensitivity = spec.sensitivity != "auto" ? spec.sensitivity : a.parameters < 100000000 ? "kld" : "proxy";
  const bool proxy = a.sensitivity == "proxy";
  // Under GPTQ the measured sensitivities quantize each matrix with GPTQ on its layer's Gram matrices (the
  // float model's inputs), so the allocation weighs the errors the checkpoint will have: GPTQ lowers a
  // k-quant matrix's KL by a different factor at each bit width and not at all for the embedding, so
  // imatrix-RTN sensitivities misprice the trade. The proxy keeps imatrix-RTN (one Gram per layer would
  // defeat it).
  const bool gptq_sens = !proxy && r.algorithm == Algorithm::Gptq;
  a.sens_algorithm = gptq_sens                          ? "gptq"
                     : weighted                         ? "imatrix"
                     : r.algorithm == Algorithm::RtnMse ? "rtn-mse"
                                                        : "rtn";
  // The classifier's input statistics: lm_head (and a tied embedding with it) is quantized with them, as
  // quantize_model does.
  SiteStats head;
  if (weighted) head = head_input_stats(m, calib, gptq_sens);
  // GPTQ's Gram matrices one layer at a time from a stream of the float model (units come in layer order;
  // every matrix is restored before the stream moves on): bit for bit collect_stats(l, l), at one layer
  // forward per layer instead of a forward from the embedding.
  std::unique_ptr<CalibStream> gram_stream;
  if (gptq_sens) gram_stream = std::make_unique<CalibStream>(m, calib);
  LayerStats grams;
  int64_t gram_layer = -1;
  int64_t total = 0;
  for (auto& u : a.units) total += proxy ? 1 : static_cast<int64_t>(u.options.size()) - 1;
  Progress prog("sensitivity", total);
  int64_t done = 0;
  for (auto& u : a.units) {
    std::vector<WeightMatrix> saved;
    for (auto& n : u.members) saved.push_back(*mats.at(n));
    const std::vector<float> w = weight_to_f32(saved[0]);
    const SiteStats* ss = input_stats(stats, u.members[0]);
    const bool is_head = std::find(u.members.begin(), u.members.end(), "lm_head") != u.members.end();
    if (!ss && is_head && head.cols > 0) ss = &head;
    std::vector<float> imp = ss ? ss->mean_sq() : std::vector<float>{};
    // proxy: the importance-weighted squared weight error of every option (the diagonal of the layer's
    // Hessian, E = sum_ij x2_j (W - Q)_ij^2), and one KL measurement at the smallest option to convert it.
    size_t ref = 1;
    for (size_t k = 2; k < u.options.size(); ++k)
      if (u.options[k].bytes < u.options[ref].bytes) ref = k;
    std::vector<double> err(u.options.size(), 0.0);
    for (size_t k = 1; k < u.options.size(); ++k) {
      const QuantScheme scheme = parse_scheme(u.options[k].scheme);
      QuantizedMatrix q;
      if (gptq_sens && ss) {
        const SiteStats* gs = &head;
        int64_t l = 0;
        ActSite site{};
        if (!is_head && input_site(u.members[0], &l, &site)) {
          if (l != gram_layer) {
            if (l >= gram_stream->next_layer()) {
              while (gram_stream->next_layer() < l) gram_stream->advance();
              grams = gram_stream->stats(true);
            } else {  // a unit before the stream (not in layer order): from the embedding
              grams = std::move(collect_stats(m, calib, static_cast<int>(l), static_cast<int>(l), true)[0]);
            }
            gram_layer = l;
          }
          gs = &grams.at(site);
        }
        q = gptq_quantize(w.data(), u.rows, u.cols, gs->gram, scheme,
                          GptqOptions{r.gptq_block, r.gptq_damp, r.gptq_act_order, 0.0f});
      } else {
        QuantScheme s = scheme;
        if (r.algorithm == Algorithm::RtnMse || ss) s.search = ScaleSearch::Mse;
        q = quantize_matrix(w.data(), u.rows, u.cols, s, ss ? imp.data() : nullptr);
      }
      if (proxy) {
        std::vector<float> wq(w.size());
        dequantize_matrix(q, wq.data());
        for (int64_t i = 0; i < u.rows; ++i)
          for (int64_t j = 0; j < u.cols; ++j) {
            const double d = static_cast<double>(w[i * u.cols + j]) - wq[i * u.cols + j];
            err[k] += (ss ? imp[static_cast<size_t>(j)] : 1.0) * d * d;
          }
        if (k != ref) continue;
      }
      WeightMatrix qw = make_quant_weight(std::make_shared<QuantizedMatrix>(std::move(q)));
      for (auto& n : u.members) *mats.at(n) = qw;
      u.options[k].kld = probe.kld_from(first_layer_of(u.name, L));
      prog.update(++done, u.name + " " + u.options[k].scheme);
    }
    if (proxy)
      for (size_t k = 1; k < u.options.size(); ++k)
        if (k != ref) u.options[k].kld = err[ref] > 0 ? u.options[ref].kld * err[k] / err[ref] : 0.0;
    for (size_t i = 0; i < u.members.size(); ++i) *mats.at(u.members[i]) = saved[i];
  }
  prog.finish();

  // Allocation.
  std::vector<KnapsackItem> items;
  int64_t least = a.fixed_bytes;
  for (auto& u : a.units) {
    KnapsackItem it;
    for (auto& o : u.options) {
      it.bytes.push_back(o.bytes);
      it.loss.push_back(o.kld);
    }
    least += *std::min_element(it.bytes.begin(), it.bytes.end());
    items.push_back(std::move(it));
  }
  // config.json has one group per scheme in use. Solve assuming every candidate is used, then assume only
  // the schemes chosen and solve again, adding any newly chosen scheme, until the choice uses only schemes
  // assumed: the estimate then bounds the written file.
  constexpr int64_t kGroupBytes = 480;
  std::set<std::string> assumed = group_schemes;
  assumed.insert(pinned_schemes.begin(), pinned_schemes.end());
  auto groups_bytes = [&](const std::set<std::string>& g) {
    return a.counts == "gguf" ? 0 : kGroupBytes * static_cast<int64_t>(g.size());
  };
  KnapsackResult kr = solve_knapsack(items, a.budget - a.fixed_bytes - groups_bytes(assumed));
  int64_t used_groups = groups_bytes(assumed);
  for (int iter = 0; kr.feasible && iter < 8; ++iter) {
    std::set<std::string> chosen = pinned_schemes;
    for (size_t i = 0; i < a.units.size(); ++i) {
      const std::string& sch = a.units[i].options[static_cast<size_t>(kr.choice[i])].scheme;
      if (sch != "keep") chosen.insert(sch);
    }
    if (chosen == assumed) break;
    KnapsackResult next = solve_knapsack(items, a.budget - a.fixed_bytes - groups_bytes(chosen));
    if (!next.feasible) break;
    std::set<std::string> next_chosen = pinned_schemes;
    for (size_t i = 0; i < a.units.size(); ++i) {
      const std::string& sch = a.units[i].options[static_cast<size_t>(next.choice[i])].scheme;
      if (sch != "keep") next_chosen.insert(sch);
    }
    if (!std::includes(chosen.begin(), chosen.end(), next_chosen.begin(), next_chosen.end())) {
      assumed = chosen;
      assumed.insert(next_chosen.begin(), next_chosen.end());
      continue;  // a scheme outside the assumption: assume the union and solve again
    }
    kr = next;
    used_groups = groups_bytes(chosen);
    assumed = chosen;
  }
  a.fixed_bytes += used_groups;
  if (!kr.feasible)
    throw UsageError("quant", "a budget of " + std::to_string(a.budget) +
                                  " bytes is below the smallest checkpoint these candidates allow (about " +
                                  std::to_string(least) +
                                  " bytes with every matrix in its smallest format); raise --budget or add "
                                  "smaller candidates (--candidates int2:g32:sym, ...)");
  for (size_t i = 0; i < a.units.size(); ++i) a.units[i].chosen = kr.choice[i];
  a.predicted_bytes = a.fixed_bytes + kr.bytes;
  a.predicted_kld = kr.loss;
  a.lower_bound_kld = kr.lower_bound;
  a.step = kr.step;
  a.seconds = timer.seconds();
  return a;
}

Recipe Allocation::apply(const Recipe& r) const {
  Recipe out = r;
  out.ignore.erase(std::remove_if(out.ignore.begin(), out.ignore.end(), is_default_ignore), out.ignore.end());
  if (keep_with_embedding)
    out.ignore.push_back({"lm_head", {}, "tied to tok_embed, which the recipe keeps unquantized"});
  if (!head_follows.empty()) out.overrides.push_back({"lm_head", parse_scheme(head_follows), ""});
  for (const auto& u : units) {
    const AllocOption& o = u.options[static_cast<size_t>(u.chosen)];
    for (const auto& n : u.members) {
      if (o.scheme == "keep")
        out.ignore.push_back({n, {}, "budget allocation: kept unquantized (the cheapest loss per byte)"});
      else
        out.overrides.push_back({n, parse_scheme(o.scheme), ""});
    }
  }
  out.notes.push_back("formats per matrix chosen by the budget allocator (" + std::to_string(budget) +
                      " model bytes)");
  return out;
}

nlohmann::json Allocation::to_json() const {
  json us = json::array();
  for (const auto& u : units) {
    json opts = json::array();
    for (const auto& o : u.options)
      opts.push_back({{"scheme", o.scheme}, {"bytes", o.bytes}, {"kld", o.kld}});
    us.push_back({{"unit", u.name},
                  {"members", u.members},
                  {"shape", {u.rows, u.cols}},
                  {"chosen", u.options[static_cast<size_t>(u.chosen)].scheme},
                  {"options", opts}});
  }
  return {
      {"budget_bytes", budget},
      {"counts", counts},
      {"fixed_bytes", fixed_bytes},
      {"predicted_bytes", predicted_bytes},
      {"parameters", parameters},
      {"predicted_kld", predicted_kld},
      {"lower_bound_kld", lower_bound_kld},
      {"solver", "multiple-choice knapsack, dynamic programming over bytes in steps of " +
                     std::to_string(step) + " (options rounded up); lower bound from the LP relaxation"},
      {"sensitivity_mode", sensitivity},
      {"sensitivity",
       "mean KL divergence on " + std::to_string(sens_tokens) +
           " calibration tokens with only that matrix quantized (" +
           (sens_algorithm == "gptq" ? std::string("GPTQ on the float model's layer inputs")
                                     : sens_algorithm) +
           "; lm_head and a tied embedding on the classifier's input, an untied embedding RTN); predicted = "
           "sum over matrices"},
      {"sensitivity_algorithm", sens_algorithm},
      {"seconds", seconds},
      {"ignored", ignored},
      {"pinned", pinned},
      {"units", us}};
}

std::string Allocation::summary() const {
  std::string out;
  char line[256];
  std::map<std::string, std::pair<int, int64_t>> by_scheme;
  for (const auto& u : units) {
    const auto& o = u.options[static_cast<size_t>(u.chosen)];
    by_scheme[o.scheme].first += static_cast<int>(u.members.size());
    by_scheme[o.scheme].second += o.bytes;
  }
  std::snprintf(line, sizeof line,
                "budget %lld bytes (%s): predicted %lld (fixed %lld), predicted KLD %.5f (bound %.5f)\n",
                static_cast<long long>(budget),
                counts == "gguf" ? "the GGUF file" : "the checkpoint's model files",
                static_cast<long long>(predicted_bytes), static_cast<long long>(fixed_bytes), predicted_kld,
                lower_bound_kld);
  out += line;
  for (const auto& [s, v] : by_scheme) {
    std::snprintf(line, sizeof line, "  %-24s %4d matrices %12lld bytes\n", s.c_str(), v.first,
                  static_cast<long long>(v.second));
    out += line;
  }
  return out;
}

}  // namespace lowbit::quant
