// The planner's arithmetic: weight bytes per configuration (from formats/scheme.h's exact storage
// accounting), KV bytes per token, the engine's activation workspace, and the per-row fit / largest
// concurrency / largest context searches. Formulas: plan.h and docs/plan.md.
#include <algorithm>
#include <limits>

#include "core/error.h"
#include "formats/scheme.h"
#include "model/quantized_checkpoint.h"
#include "plan/plan.h"

namespace lowbit::plan {
namespace {

using i128 = __int128;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

int64_t sat(i128 v) {
  return v > static_cast<i128>(kInt64Max) ? kInt64Max : static_cast<int64_t>(v);
}

// The linear layers the quantizer targets, per decoder layer: {name, rows (out), cols (in)}.
struct Linear {
  std::string name;
  int64_t rows, cols;
};
std::vector<Linear> linears(const ModelConfig& c) {
  std::vector<Linear> v;
  for (TensorRole r : layer_matrix_roles()) {
    const std::string module = hf_module_name(r, 0);  // "model.layers.0.self_attn.q_proj" -> "q_proj"
    const auto s = role_shape(r, c);
    v.push_back({module.substr(module.rfind('.') + 1), s[0], s[1]});
  }
  return v;
}

}  // namespace

// ---------------------------------------------------------------- configurations

const std::vector<WeightConfig>& weight_configs() {
  static const std::vector<WeightConfig> v = {
      {"bf16", "BF16 baseline", "", "bf16", "baseline"},
      {"fp8-w", "FP8 weight-only (E4M3, per-channel)", "e4m3fn:channel:f32", "bf16", "weight-only"},
      {"w8a8-int8", "W8A8 INT8 (per-channel W, per-token A)", "int8:channel:sym:f16",
       "int8 per-token dynamic", "w8a8"},
      {"w8a8-fp8", "W8A8 FP8 (per-channel W, per-token A)", "e4m3fn:channel:f32", "fp8 per-token dynamic",
       "w8a8"},
      {"w4a16", "W4A16 INT4 g128 sym", "int4:g128:sym:f16", "bf16", "weight-only"},
      {"w4a16-asym", "W4A16 INT4 g128 asym", "int4:g128:asym:f16", "bf16", "weight-only"},
      {"nf4", "NF4 g64 (f32 absmax)", "nf4:g64:f32", "bf16", "weight-only"},
      {"nf4-dq", "NF4 g64 + double quant", "nf4:g64:dq", "bf16", "weight-only"},
      {"mxfp4", "MXFP4 (E2M1, g32 E8M0)", "mxfp4", "bf16 (fp4 on Blackwell)", "fp4"},
      {"nvfp4", "NVFP4 (E2M1, g16 E4M3 + FP32)", "nvfp4", "bf16 (fp4 on Blackwell)", "fp4"},
  };
  return v;
}

const WeightConfig& weight_config(std::string_view id) {
  static const WeightConfig stored{"stored", "as stored in the checkpoint", "", "as stored", "stored"};
  if (id == "stored") return stored;
  std::vector<std::string> ids;
  for (const auto& w : weight_configs()) {
    if (w.id == id) return w;
    ids.push_back(w.id);
  }
  std::string msg = "unknown weight configuration '" + std::string(id) + "'";
  auto s = suggest_names(id, ids);
  if (!s.empty()) msg += "; did you mean '" + s[0] + "'?";
  msg += " Known:";
  for (auto& i : ids) msg += " " + i;
  throw UsageError("plan", msg);
}

const std::vector<KvConfig>& kv_configs() {
  static const std::vector<KvConfig> v = {
      {"bf16", "BF16", 16, 0, 0, 0, "no scales", "bf16"},
      {"fp8", "FP8 E4M3", 8, 0, 0, 0,
       "per-layer static k_scale/v_scale (2 FP32 per layer, constant, not per token)", "e4m3"},
      {"int8", "INT8", 8, 0, 0, 0, "per-layer static scales (2 FP32 per layer, constant, not per token)",
       "int8"},
      {"int4", "INT4 g32 + 128-token BF16 window", 4, 32, 4, 128,
       "per-token groups of 32 along head_dim, f16 scale + f16 zero each (+1 bit/element); the last 128 "
       "tokens of every sequence stay BF16 (KIVI-style residual window)",
       "int4:window128"},
  };
  return v;
}

const KvConfig& kv_config(std::string_view id) {
  std::vector<std::string> ids;
  for (const auto& k : kv_configs()) {
    if (k.id == id) return k;
    ids.push_back(k.id);
  }
  std::string msg = "unknown KV configuration '" + std::string(id) + "'";
  auto s = suggest_names(id, ids);
  if (!s.empty()) msg += "; did you mean '" + s[0] + "'?";
  msg += " Known: bf16 fp8 int8 int4";
  throw UsageError("plan", msg);
}

// ---------------------------------------------------------------- arithmetic

int64_t kv_bytes_per_token(const ModelConfig& c, const KvConfig& kv) {
  const int64_t hd = c.head_dim;
  int64_t per_head = (hd * kv.elem_bits + 7) / 8;
  if (kv.group > 0) per_head += (hd + kv.group - 1) / kv.group * kv.scale_bytes;
  return 2 * c.n_layers * c.n_kv_heads * per_head;
}

int64_t kv_bytes_per_token(const ModelConfig& c, KvDtype d) {
  const int64_t elem = d == KvDtype::F32 ? 4 : 2;
  return 2 * c.n_layers * c.n_kv_heads * c.head_dim * elem;
}

KvFootprint engine_kv_footprint(const ModelConfig& c, const KvConfig& kv) {
  return kv_footprint(c, parse_kv_spec(kv.engine_spec));
}

int64_t kv_bytes_per_sequence(const ModelConfig& c, const KvConfig& kv, int64_t tokens) {
  i128 b = static_cast<i128>(tokens) * kv_bytes_per_token(c, kv);
  if (kv.residual_window > 0) {
    const int64_t extra = kv_bytes_per_token(c, kv_config("bf16")) - kv_bytes_per_token(c, kv);
    b += static_cast<i128>(std::min(tokens, kv.residual_window)) * std::max<int64_t>(extra, 0);
  }
  return sat(b);
}

WeightBytes weight_bytes(const ModelConfig& c, const std::string& scheme) {
  WeightBytes w;
  const int64_t D = c.dim, V = c.vocab_size;
  // 16-bit tensors the quantizer's default ignore list leaves alone.
  int64_t small = c.n_layers * 2 * D + D;  // input/post-attention norms + final norm
  if (c.qkv_bias) small += c.n_layers * (c.q_dim() + 2 * c.kv_dim());
  if (c.qk_norm) small += c.n_layers * 2 * c.head_dim;
  const int64_t emb = V * D * (c.tie_embeddings ? 1 : 2);
  w.unquantized_params = emb + small;
  w.unquantized_names.push_back("model.embed_tokens [" + std::to_string(V) + ", " + std::to_string(D) + "]");
  w.unquantized_names.push_back(c.tie_embeddings
                                    ? "lm_head (tied to embed_tokens, stored once)"
                                    : "lm_head [" + std::to_string(V) + ", " + std::to_string(D) + "]");
  std::string smalls = "norms";
  if (c.qkv_bias) smalls += ", q/k/v biases";
  if (c.qk_norm) smalls += ", q/k norms";
  w.unquantized_names.push_back(smalls + " (" + std::to_string(small) + " params)");

  if (scheme.empty()) {
    for (const auto& l : linears(c)) w.unquantized_params += c.n_layers * l.rows * l.cols;
    w.unquantized = 2 * w.unquantized_params;
    w.unquantized_names = {"all tensors (16-bit)"};
    return w;
  }
  const QuantScheme s = parse_scheme(scheme);
  for (const auto& l : linears(c)) {
    try {
      validate(s, l.rows, l.cols);
    } catch (const UsageError& e) {
      // The quantizer leaves a matrix the scheme cannot cover in 16 bits; so does the plan.
      w.unquantized_params += c.n_layers * l.rows * l.cols;
      w.unquantized_names.push_back(std::string(l.name) + " x" + std::to_string(c.n_layers) + " (16-bit)");
      w.notes.push_back(std::string(l.name) + " kept 16-bit: " + e.what());
      continue;
    }
    // Exactly what the checkpoint writer stores for this matrix (int32 packing, row padding, shape metadata).
    const PackedBytes b = packed_checkpoint_bytes(s, l.rows, l.cols);
    w.elements += c.n_layers * b.codes;
    w.scales += c.n_layers * b.scales;
    w.zeros += c.n_layers * b.zeros;
    w.metadata += c.n_layers * b.metadata;
    w.quantized_params += c.n_layers * l.rows * l.cols;
  }
  w.unquantized = 2 * w.unquantized_params;
  return w;
}

Workspace workspace_bytes(const ModelConfig& c, int64_t tokens, int64_t concurrency, int prefill_chunk,
                          int attn_workers) {
  Workspace ws;
  const int64_t T = std::max<int64_t>(std::min<int64_t>(std::max(prefill_chunk, 1), tokens), concurrency);
  ws.batch_tokens = T;
  const int64_t per_token = 3 * c.dim + 2 * c.q_dim() + 2 * c.kv_dim() + 2 * c.ffn_dim;
  ws.hidden = sat(static_cast<i128>(T) * per_token * 4);
  const int64_t group = c.n_kv_heads > 0 ? c.n_heads / c.n_kv_heads : 1;
  ws.attention = sat(static_cast<i128>(std::max(attn_workers, 1)) * group * tokens * 4);
  ws.logits = sat(static_cast<i128>(concurrency) * (c.vocab_size + c.dim) * 4);
  return ws;
}

int64_t total_bytes(const ModelConfig& c, const WeightBytes& w, const KvConfig& kv, int64_t tokens,
                    int64_t concurrency, const PlanRequest& r) {
  const Workspace ws = workspace_bytes(c, tokens, concurrency, r.prefill_chunk, r.device.attn_workers);
  const i128 kvb = r.device.is_cpu ? static_cast<i128>(engine_kv_footprint(c, kv).bytes(concurrency, tokens))
                                   : static_cast<i128>(concurrency) * kv_bytes_per_sequence(c, kv, tokens);
  i128 t = static_cast<i128>(w.total()) + kvb + ws.total() + r.device.reserve_bytes;
  return sat(t);
}

const Row* CtxPlan::find(std::string_view w, std::string_view kv) const {
  for (const auto& r : rows)
    if (r.weight_id == w && r.kv_id == kv) return &r;
  return nullptr;
}

Plan make_plan(const PlanModel& m, const PlanRequest& r) {
  if (r.ctx.empty()) throw UsageError("plan", "no context length given; pass --ctx N (e.g. --ctx 2048,8192)");
  for (int64_t x : r.ctx)
    if (x < 1 || x > kMaxTokens)
      throw UsageError("plan", "--ctx " + std::to_string(x) + " is out of range; use 1.." +
                                   std::to_string(kMaxTokens) + " tokens");
  if (r.concurrency < 1 || r.concurrency > kMaxConcurrency)
    throw UsageError("plan", "--concurrency " + std::to_string(r.concurrency) + " is out of range; use 1.." +
                                 std::to_string(kMaxConcurrency));
  if (r.output < 0 || r.output > kMaxTokens)
    throw UsageError("plan", "--output " + std::to_string(r.output) + " is out of range; use 0.." +
                                 std::to_string(kMaxTokens) + " tokens");
  if (r.prefill_chunk < 1) throw UsageError("plan", "prefill chunk must be >= 1 token");
  if (r.device.memory_bytes < 1) throw UsageError("plan", "the device has no memory; pass --budget SIZE");
  m.config.validate();
  // validate() bounds dim, layers, ffn, vocab and head_dim; heads come from files too, so bound what the byte
  // arithmetic multiplies (q_dim, kv_dim) before it can overflow.
  const ModelConfig& mc = m.config;
  if (mc.n_heads > (1 << 16) || mc.q_dim() > (int64_t(1) << 22) || mc.kv_dim() > (int64_t(1) << 22))
    throw UsageError("plan", "model config has implausible attention sizes (" + std::to_string(mc.n_heads) +
                                 " heads x " + std::to_string(mc.head_dim) +
                                 "); the config is probably corrupt");

  if (!(r.gpu_memory_utilization > 0 && r.gpu_memory_utilization <= 1))
    throw UsageError("plan", "--gpu-memory-utilization " + std::to_string(r.gpu_memory_utilization) +
                                 " is out of range; use a fraction in (0, 1], e.g. 0.9 (vLLM's default)");
  if (r.parallel() && r.device.is_cpu)
    throw UsageError(
        "plan",
        "--tp/--pp/--gpu-memory-utilization plan a vLLM split over GPUs, but the device is this "
        "machine's CPU; pass --device h100 (or another GPU preset, see --list-presets) or --budget SIZE "
        "per GPU");

  Plan p;
  p.model = m;
  p.req = r;
  if (r.parallel()) p.shards = shard_layout(m.config, r.tp, r.pp);
  std::vector<const WeightConfig*> ws;
  if (m.stored_bytes) ws.push_back(&weight_config("stored"));
  // The BF16/BF16 baseline is always planned: the recommendation measures every share against it.
  auto has = [](const std::vector<std::string>& v, const char* id) {
    return std::find(v.begin(), v.end(), id) != v.end();
  };
  if (r.weights.empty()) {
    for (const auto& w : weight_configs()) ws.push_back(&w);
  } else {
    if (!has(r.weights, "bf16")) ws.push_back(&weight_config("bf16"));
    for (const auto& id : r.weights)
      if (id != "stored") ws.push_back(&weight_config(id));
  }
  std::vector<const KvConfig*> kvs;
  if (r.kv.empty()) {
    for (const auto& k : kv_configs()) kvs.push_back(&k);
  } else {
    if (!has(r.kv, "bf16")) kvs.push_back(&kv_config("bf16"));
    for (const auto& id : r.kv) kvs.push_back(&kv_config(id));
  }

  // Weight bytes do not depend on the context: compute once per configuration.
  std::vector<WeightBytes> wb;
  for (const auto* w : ws) {
    if (w->id == "stored") {
      WeightBytes s;
      s.elements = *m.stored_bytes;
      s.unquantized_names = {"as stored: " + m.stored_desc};
      wb.push_back(s);
    } else {
      wb.push_back(weight_bytes(m.config, w->scheme));
    }
  }
  // Per-stage weights of one rank (multi-GPU plans): they do not depend on the context either.
  std::vector<std::vector<StageBytes>> sw(ws.size());
  if (p.shards)
    for (size_t wi = 0; wi < ws.size(); ++wi)
      if (ws[wi]->id != "stored") sw[wi] = stage_weights(m.config, *p.shards, ws[wi]->scheme);
  const ModelConfig& c = m.config;
  const int64_t budget = r.device.memory_bytes;
  for (int64_t ctx : r.ctx) {
    CtxPlan cp;
    cp.ctx = ctx;
    cp.tokens = std::min(ctx + r.output, kMaxTokens);
    for (size_t wi = 0; wi < ws.size(); ++wi) {
      for (const auto* kv : kvs) {
        Row row;
        row.weight_id = ws[wi]->id;
        row.kv_id = kv->id;
        row.weights = wb[wi];
        // lowbit's own engine: its exact allocation (pages, per-token scales, staging)
        if (r.device.is_cpu) {
          const KvFootprint f = engine_kv_footprint(c, *kv);
          row.kv_per_token = (f.block_bytes + f.block_tokens - 1) / f.block_tokens;
          row.kv_total = f.bytes(r.concurrency, cp.tokens);
        } else {
          row.kv_per_token = kv_bytes_per_token(c, *kv);
          row.kv_total = sat(static_cast<i128>(r.concurrency) * kv_bytes_per_sequence(c, *kv, cp.tokens));
        }
        row.workspace = workspace_bytes(c, cp.tokens, r.concurrency, r.prefill_chunk, r.device.attn_workers);
        row.total = total_bytes(c, row.weights, *kv, cp.tokens, r.concurrency, r);
        row.fits = row.total <= budget;
        auto fits = [&](int64_t tokens, int64_t conc) {
          return total_bytes(c, row.weights, *kv, tokens, conc, r) <= budget;
        };
        // Largest concurrency at these tokens, largest tokens at this concurrency: totals grow monotonically
        // in both, so binary search.
        if (fits(cp.tokens, 1)) {
          int64_t lo = 1, hi = kMaxConcurrency;
          while (lo < hi) {
            int64_t mid = lo + (hi - lo + 1) / 2;
            if (fits(cp.tokens, mid))
              lo = mid;
            else
              hi = mid - 1;
          }
          row.max_concurrency = lo;
        }
        if (fits(1, r.concurrency)) {
          int64_t lo = 1, hi = kMaxTokens;
          while (lo < hi) {
            int64_t mid = lo + (hi - lo + 1) / 2;
            if (fits(mid, r.concurrency))
              lo = mid;
            else
              hi = mid - 1;
          }
          row.max_tokens = lo;
          row.max_tokens_capped = lo == kMaxTokens;
        }
        if (p.shards && !sw[wi].empty()) {
          // The split: every device must fit under memory x utilization; the row's total is the fullest
          // device.
          const ShardLayout& sl = *p.shards;
          auto pfits = [&](int64_t tokens, int64_t conc) {
            return parallel_row(c, sl, sw[wi], *kv, tokens, conc, r).fits;
          };
          row.parallel = parallel_row(c, sl, sw[wi], *kv, cp.tokens, r.concurrency, r);
          row.total = row.parallel->peak;
          row.fits = row.parallel->fits;
          row.max_concurrency = kMaxConcurrency;
          for (const auto& st : row.parallel->stages)
            row.max_concurrency = std::min(row.max_concurrency, st.max_concurrency);
          row.max_tokens = 0;
          row.max_tokens_capped = false;
          if (pfits(1, r.concurrency)) {
            int64_t lo = 1, hi = kMaxTokens;
            while (lo < hi) {
              int64_t mid = lo + (hi - lo + 1) / 2;
              if (pfits(mid, r.concurrency))
                lo = mid;
              else
                hi = mid - 1;
            }
            row.max_tokens = lo;
            row.max_tokens_capped = lo == kMaxTokens;
          }
        }
        row.weight_support = weight_support(r.device, *ws[wi]);
        row.kv_support = kv_support(r.device, *kv);
        cp.rows.push_back(std::move(row));
      }
    }
    p.per_ctx.push_back(std::move(cp));
  }
  for (auto& cp : p.per_ctx) cp.rec = recommend(p, cp);
  return p;
}

std::string fmt_bytes(double b) {
  const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int i = 0;
  while (b >= 1024 && i < 5) b /= 1024, ++i;
  char buf[32];
  std::snprintf(buf, sizeof buf, i == 0 ? "%.0f %s" : "%.2f %s", b, u[i]);
  return buf;
}

}  // namespace lowbit::plan
