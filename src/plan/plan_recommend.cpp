// The recommendation: the decision path of the seed article, applied to the measured shares of one context.
//   baseline BF16 W / BF16 A / BF16 KV
//   KV grows with long documents and concurrency -> change only the KV to FP8 (then INT4 with a residual
//   window,
//                                                   then eviction)
//   weights take most of the memory              -> FP8 weight-only or W4A16
//   matmuls are the bottleneck (high concurrency) -> W8A8 INT8 / FP8 where the hardware has the units
//   native FP4 hardware                          -> NVFP4 / MXFP4 compared separately
// Each step changes one variable against the baseline, so a regression can be traced back to it.
#include <algorithm>
#include <cstdio>

#include "plan/plan.h"

namespace lowbit::plan {
namespace {

std::string pct(int64_t part, int64_t whole) {
  char b[16];
  std::snprintf(b, sizeof b, "%.0f%%", whole > 0 ? 100.0 * static_cast<double>(part) / whole : 0.0);
  return b;
}
std::string fb(int64_t b) {
  return fmt_bytes(static_cast<double>(b));
}

std::string label(const Row& r) {
  return weight_config(r.weight_id).label + " + KV " + kv_config(r.kv_id).label;
}

// Nothing on the decision path fits: the smallest configuration, the smallest preset device where it would,
// and what else lowers the memory (eviction, less load, more devices).
void explain_nothing_fits(const Plan& p, const CtxPlan& cp, const Row& base, Recommendation& rec) {
  const Device& dev = p.req.device;
  const int64_t budget = p.req.device_limit();
  const Row* best = nullptr;
  for (const auto& r : cp.rows)
    if (r.weight_id != "stored" && (!best || r.total < best->total)) best = &r;
  rec.reasons.push_back("nothing fits at " + std::to_string(cp.tokens) + " tokens x " +
                        std::to_string(p.req.concurrency) + " sequences: the smallest configuration (" +
                        label(*best) + ") needs " + fb(best->total) + " of " + fb(budget));
  int64_t fixed = best->weights.total() + best->workspace.total() + dev.reserve_bytes;
  if (best->parallel) {  // per device: the fullest stage without its KV
    fixed = 0;
    for (const auto& st : best->parallel->stages)
      fixed = std::max(fixed, st.weights.total() + st.workspace.total() + dev.reserve_bytes);
  }
  // The smallest preset device on which the closest configuration (and the baseline) would fit as asked.
  auto smallest_device = [&](const Row& r) -> std::string {
    PlanRequest other = p.req;
    std::vector<Device> by_size = device_presets();
    std::stable_sort(by_size.begin(), by_size.end(),
                     [](const Device& a, const Device& b) { return a.memory_bytes < b.memory_bytes; });
    for (const auto& d : by_size) {
      if (d.memory_bytes <= dev.memory_bytes) continue;
      other.device = d;
      const int64_t t =
          total_bytes(p.model.config, r.weights, kv_config(r.kv_id), cp.tokens, p.req.concurrency, other);
      if (t <= d.memory_bytes) return d.id + " (" + fb(t) + " of " + fb(d.memory_bytes) + ")";
    }
    return "";
  };
  const std::string dev_best = smallest_device(*best), dev_base = smallest_device(base);
  if (!dev_best.empty())
    rec.reasons.push_back("smallest preset device where it fits: " + dev_best +
                          (dev_base.empty() ? "" : "; the BF16 baseline fits on " + dev_base));
  if (fixed > budget) {
    rec.reasons.push_back("even its weights + workspace (" + fb(fixed) +
                          ") exceed the budget: use a larger device or split the model across devices "
                          "(tensor/pipeline parallelism)");
  } else {
    rec.reasons.push_back(
        "KV eviction caps the cache at a window: StreamingLLM (4 sink + recent tokens) or H2O "
        "(heavy hitters + recent, ~20% budget); or lower the load: with " +
        label(*best) + " the largest concurrency at this context is " +
        std::to_string(best->max_concurrency) + " and the largest context at this concurrency is " +
        std::to_string(best->max_tokens) + " tokens");
  }
  rec.weight_id = best->weight_id;
  rec.kv_id = best->kv_id;
}

}  // namespace

Recommendation recommend(const Plan& p, const CtxPlan& cp) {
  Recommendation rec;
  const Device& dev = p.req.device;
  const int64_t budget = p.req.device_limit();
  const Row* base = cp.find("bf16", "bf16");
  if (!base) {
    rec.reasons.push_back("no BF16/BF16 baseline row in this plan (filtered out); no recommendation");
    return rec;
  }
  const int64_t W = base->weights.total(), K = base->kv_total, A = base->workspace.total();
  // Shares of one copy of the model; under a multi-GPU split base->total is the fullest device's.
  const int64_t whole = base->parallel ? W + K + A + dev.reserve_bytes : base->total;
  rec.bottleneck = K > W ? "kv" : "weights";
  rec.reasons.push_back(
      "BF16 baseline at " + std::to_string(cp.tokens) + " tokens x " + std::to_string(p.req.concurrency) +
      " sequences: weights " + fb(W) + " (" + pct(W, whole) + "), KV " + fb(K) + " (" + pct(K, whole) +
      "), workspace " + fb(A) + (dev.reserve_bytes ? ", runtime reserve " + fb(dev.reserve_bytes) : "") +
      "; total " + fb(base->total) + " of " + fb(budget) +
      (p.shards ? " on the fullest of " + std::to_string(p.shards->devices()) + " devices (tp " +
                      std::to_string(p.shards->tp) + " x pp " + std::to_string(p.shards->pp) + ", memory x " +
                      std::to_string(p.req.gpu_memory_utilization).substr(0, 4) + ")"
                : std::string()));

  auto pick = [&](std::initializer_list<std::pair<const char*, const char*>> order) -> const Row* {
    for (auto& [w, k] : order) {
      const Row* r = cp.find(w, k);
      if (r && r->fits) return r;
    }
    return nullptr;
  };

  const Row* chosen = nullptr;
  if (base->fits) {
    chosen = base;
    rec.bottleneck = "none";
    rec.reasons.push_back("the BF16 baseline fits with " + fb(budget - base->total) +
                          " to spare: no quantization is needed for memory; quantize only to serve more "
                          "sequences or to speed up decode, and measure quality against this baseline");
    const Row* kv8 = cp.find("bf16", "fp8");
    if (K > W && kv8)
      rec.reasons.push_back(
          "KV is the larger share: FP8 KV raises the largest concurrency at this context from " +
          std::to_string(base->max_concurrency) + " to " + std::to_string(kv8->max_concurrency));
  } else if (K > W) {
    rec.reasons.push_back("KV dominates (" + fb(K) + " vs " + fb(W) +
                          " of weights; it grows with context and concurrency): quantize the KV cache first");
    chosen = pick({{"bf16", "fp8"}, {"bf16", "int4"}});
    if (chosen && chosen->kv_id == "fp8") {
      rec.reasons.push_back("FP8 KV halves the cache and fits (" + fb(chosen->total) + ")");
    } else {
      const Row* f8 = cp.find("bf16", "fp8");
      if (f8) rec.reasons.push_back("FP8 KV alone is not enough (" + fb(f8->total) + ")");
      if (chosen) {
        rec.reasons.push_back("INT4 KV with a 128-token BF16 window fits (" + fb(chosen->total) + ")");
      } else {
        chosen = pick({{"fp8-w", "fp8"}, {"w4a16", "fp8"}, {"fp8-w", "int4"}, {"w4a16", "int4"}});
        if (chosen)
          rec.reasons.push_back("quantized KV alone is not enough; adding weight quantization fits: " +
                                label(*chosen) + " (" + fb(chosen->total) + ")");
      }
    }
  } else {
    rec.reasons.push_back("weights dominate (" + fb(W) + " vs " + fb(K) +
                          " of KV): quantize the weights first (FP8 weight-only, then W4A16)");
    chosen = pick({{"fp8-w", "bf16"}, {"w4a16", "bf16"}});
    if (chosen) {
      rec.reasons.push_back(label(*chosen) + " fits (" + fb(chosen->total) + ")");
    } else {
      chosen = pick({{"fp8-w", "fp8"}, {"w4a16", "fp8"}, {"w4a16", "int4"}});
      if (chosen)
        rec.reasons.push_back("weight quantization alone is not enough; adding KV quantization fits: " +
                              label(*chosen) + " (" + fb(chosen->total) + ")");
    }
  }

  if (chosen) {
    rec.weight_id = chosen->weight_id;
    rec.kv_id = chosen->kv_id;
    rec.fits = true;
    if (chosen->kv_id == "int4") {
      rec.reasons.push_back(
          "check long-context quality: 4-bit KV without a residual window or calibration can "
          "collapse (KIVI 2-bit without the window; SGLang FP4 KV on AIME25 0.75 -> 0.35)");
      // Two 8-bit changes can be safer than one 4-bit change: name the alternative.
      const Row* alt = cp.find("fp8-w", "fp8");
      if (chosen->weight_id == "bf16" && alt && alt->fits)
        rec.reasons.push_back("alternative without 4-bit KV: " + label(*alt) + " also fits (" +
                              fb(alt->total) + "); compare both against the baseline");
    }
  } else {
    explain_nothing_fits(p, cp, *base, rec);
  }

  // Compute-bound: many sequences make prefill and batched decode matmul-bound, where 8-bit units pay off.
  const bool compute_bound = p.req.concurrency >= 8;
  std::string w8;
  if (compute_bound) {
    w8 = dev.fp8 ? "w8a8-fp8" : (dev.int8 ? "w8a8-int8" : "");
    if (!w8.empty()) {
      const Row* r = cp.find(w8, rec.kv_id.empty() ? "bf16" : rec.kv_id);
      std::string msg = std::to_string(p.req.concurrency) +
                        " concurrent sequences make prefill/batched decode compute-bound: evaluate " +
                        weight_config(w8).label + " on this device's " + (w8 == "w8a8-fp8" ? "FP8" : "INT8") +
                        " units";
      if (r) msg += "; " + label(*r) + (r->fits ? " fits (" : " does not fit (") + fb(r->total) + ")";
      rec.reasons.push_back(msg);
    } else {
      rec.reasons.push_back(
          "high concurrency is compute-bound, but this device has no fast 8-bit units: keep "
          "16-bit activations");
    }
  }
  if (dev.fp4) {
    const Row* nv = cp.find("nvfp4", rec.kv_id.empty() ? "bf16" : rec.kv_id);
    const Row* mx = cp.find("mxfp4", rec.kv_id.empty() ? "bf16" : rec.kv_id);
    rec.reasons.push_back(
        "this device has FP4 tensor cores: evaluate NVFP4 and MXFP4 separately" +
        (nv && mx ? " (totals " + fb(nv->total) + " / " + fb(mx->total) + ")" : std::string()));
  }

  // The experiments to run next, one variable at a time against the baseline.
  // Flags that `lowbit compare` takes: the evaluation context, the concurrency levels of its throughput test,
  // and the generation length. (Compare measures on lowbit's CPU engine; the device only shapes this plan.)
  const int64_t conc = std::max<int64_t>(1, p.req.concurrency);
  std::string common = " --ctx " + std::to_string(cp.ctx) + " --concurrency " +
                       (conc == 1 ? std::string("1") : "1," + std::to_string(conc));
  if (p.req.output > 0) common += " --output " + std::to_string(p.req.output);
  const std::string m = "lowbit compare --model " + p.model.compare_model;
  const std::string first = K > W ? "kv-first" : "weights-first";
  rec.commands.push_back(m + " --preset " + first + common);
  if (compute_bound && !w8.empty()) rec.commands.push_back(m + " --preset compute" + common);
  if (dev.fp4) rec.commands.push_back(m + " --preset fp4" + common);
  return rec;
}

}  // namespace lowbit::plan
