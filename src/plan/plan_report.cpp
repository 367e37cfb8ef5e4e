// Plan reports: JSON for machines, a table for people.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "plan/plan.h"

namespace lowbit::plan {
namespace {

std::string fb(int64_t b) {
  return fmt_bytes(static_cast<double>(b));
}

std::string tokens_str(int64_t t, bool capped) {
  if (capped) return ">=" + std::to_string(t >> 20) + "M";
  return std::to_string(t);
}

nlohmann::json device_json(const Device& d) {
  return {{"id", d.id},
          {"name", d.name},
          {"memory_bytes", d.memory_bytes},
          {"reserve_bytes", d.reserve_bytes},
          {"usable_bytes", d.usable()},
          {"compute_capability", d.compute_capability},
          {"bf16", d.bf16},
          {"int8", d.int8},
          {"fp8", d.fp8},
          {"fp4", d.fp4},
          {"attn_workers", d.attn_workers},
          {"features", d.features}};
}

nlohmann::json weights_json(const WeightBytes& w) {
  return {{"elements", w.elements},
          {"scales", w.scales},
          {"zeros", w.zeros},
          {"metadata", w.metadata},
          {"unquantized", w.unquantized},
          {"total", w.total()},
          {"quantized_params", w.quantized_params},
          {"unquantized_params", w.unquantized_params},
          {"unquantized_tensors", w.unquantized_names},
          {"notes", w.notes}};
}

nlohmann::json stages_json(const ParallelRow& pr, const ShardLayout& sl) {
  nlohmann::json st = nlohmann::json::array();
  for (const auto& b : pr.stages)
    st.push_back({{"stage", b.stage},
                  {"ranks", sl.tp},
                  {"layers", {b.layer_begin, b.layer_end}},
                  {"embedding", b.embedding},
                  {"lm_head", b.lm_head},
                  {"weight_bytes", b.weights.total()},
                  {"weights", weights_json(b.weights)},
                  {"embed_bytes", b.embed_bytes},
                  {"lm_head_bytes", b.lm_head_bytes},
                  {"kv_bytes_per_token", b.kv_per_token},
                  {"kv_bytes", b.kv},
                  {"workspace_bytes", b.workspace.total()},
                  {"total_bytes", b.total},
                  {"limit_bytes", b.limit},
                  {"fits", b.fits},
                  {"max_concurrency", b.max_concurrency}});
  return {{"per_device", st},
          {"weights_all_devices", pr.weights_all_devices},
          {"kv_all_devices", pr.kv_all_devices},
          {"peak_bytes", pr.peak},
          {"fits", pr.fits}};
}

nlohmann::json launch_json(const std::vector<LaunchLine>& ls) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& l : ls)
    a.push_back(
        {{"engine", l.engine}, {"available", l.available}, {"command", l.command}, {"notes", l.notes}});
  return a;
}

std::string launch_text(const std::vector<LaunchLine>& ls) {
  std::string out;
  for (const auto& l : ls) {
    out += "  " + l.engine + ": " + (l.available ? l.command : std::string("(no launch line)")) + "\n";
    for (const auto& n : l.notes) out += "      " + n + "\n";
  }
  return out;
}

std::string caps(const Device& d) {
  std::string s;
  if (d.bf16) s += " bf16";
  if (d.int8) s += " int8";
  if (d.fp8) s += " fp8";
  if (d.fp4) s += " fp4";
  return s.empty() ? " none" : s;
}

}  // namespace

nlohmann::json plan_to_json(const Plan& p) {
  nlohmann::json j;
  j["model"] = {{"name", p.model.name},
                {"source", p.model.source},
                {"compare_model", p.model.compare_model},
                {"config", p.model.config.to_json()}};
  if (p.model.stored_bytes) {
    j["model"]["stored_bytes"] = *p.model.stored_bytes;
    j["model"]["stored"] = p.model.stored_desc;
  }
  if (!p.model.files.empty()) {
    nlohmann::json fs = nlohmann::json::array();
    for (const auto& [name, n] : p.model.files) fs.push_back({{"name", name}, {"bytes", n}});
    j["model"]["files"] = fs;
    j["model"]["files_bytes"] = p.model.files_bytes();
  }
  j["device"] = device_json(p.req.device);
  j["request"] = {{"ctx", p.req.ctx},
                  {"concurrency", p.req.concurrency},
                  {"output", p.req.output},
                  {"prefill_chunk", p.req.prefill_chunk},
                  {"tp", p.req.tp},
                  {"pp", p.req.pp},
                  {"gpu_memory_utilization", p.req.gpu_memory_utilization},
                  {"device_limit_bytes", p.req.device_limit()}};
  if (p.shards) {
    const ShardLayout& sl = *p.shards;
    j["parallel"] = {{"tp", sl.tp},
                     {"pp", sl.pp},
                     {"devices", sl.devices()},
                     {"heads_per_rank", sl.heads_per_rank},
                     {"kv_heads_per_rank", sl.kv_heads_per_rank},
                     {"kv_head_replicas", sl.kv_head_replicas},
                     {"ffn_per_rank", sl.ffn_per_rank},
                     {"vocab_padded", sl.vocab_padded},
                     {"vocab_per_rank", sl.vocab_per_rank},
                     {"stage_layers", sl.stage_layers},
                     {"gpu_memory_utilization", p.req.gpu_memory_utilization},
                     {"limit_bytes_per_device", p.req.device_limit()},
                     {"assumption",
                      "each device may use memory x gpu_memory_utilization (vLLM --gpu-memory-utilization, "
                      "default 0.9 here) for weights + KV + activations + the runtime reserve"}};
  }
  j["formulas"] = {
      {"kv_bytes_per_token", "2 x layers x kv_heads x (ceil(head_dim x bits / 8) + groups x scale_bytes)"},
      {"kv_bytes", "concurrency x (tokens x kv_bytes_per_token + min(tokens, window) x (bf16 - quantized))"},
      {"workspace",
       "4 x [T x (3 dim + 2 q_dim + 2 kv_dim + 2 ffn) + workers x (heads/kv_heads) x tokens + "
       "concurrency x (vocab + dim)], T = max(min(prefill_chunk, tokens), concurrency)"},
      {"total", "weights + kv + workspace + device reserve"}};
  nlohmann::json kvs = nlohmann::json::array();
  for (const auto& k : kv_configs())
    kvs.push_back({{"id", k.id},
                   {"label", k.label},
                   {"elem_bits", k.elem_bits},
                   {"group", k.group},
                   {"scale_bytes", k.scale_bytes},
                   {"residual_window", k.residual_window},
                   {"scales", k.scale_note},
                   {"bytes_per_token", kv_bytes_per_token(p.model.config, k)}});
  j["kv_configs"] = kvs;
  nlohmann::json wcs = nlohmann::json::array();
  std::set<std::string> seen;
  if (!p.per_ctx.empty())
    for (const auto& r : p.per_ctx[0].rows) {
      if (!seen.insert(r.weight_id).second) continue;
      const WeightConfig& w = weight_config(r.weight_id);
      wcs.push_back({{"id", w.id},
                     {"label", w.label},
                     {"scheme", w.scheme.empty() ? "bf16" : w.scheme},
                     {"activations", w.activations},
                     {"family", w.family},
                     {"support", {{"level", r.weight_support.level}, {"note", r.weight_support.note}}},
                     {"bytes", weights_json(r.weights)}});
    }
  j["weight_configs"] = wcs;
  nlohmann::json ctxs = nlohmann::json::array();
  for (const auto& cp : p.per_ctx) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : cp.rows) {
      rows.push_back({{"weights", r.weight_id},
                      {"kv", r.kv_id},
                      {"weight_bytes", r.weights.total()},
                      {"kv_bytes_per_token", r.kv_per_token},
                      {"kv_bytes", r.kv_total},
                      {"workspace",
                       {{"hidden", r.workspace.hidden},
                        {"attention", r.workspace.attention},
                        {"logits", r.workspace.logits},
                        {"batch_tokens", r.workspace.batch_tokens},
                        {"total", r.workspace.total()}}},
                      {"reserve_bytes", p.req.device.reserve_bytes},
                      {"total_bytes", r.total},
                      {"fits", r.fits},
                      {"max_concurrency", r.max_concurrency},
                      {"max_tokens", r.max_tokens},
                      {"max_tokens_capped", r.max_tokens_capped},
                      {"max_tokens_exceeds_model_context", r.max_tokens > p.model.config.max_seq_len},
                      {"weight_support", r.weight_support.level},
                      {"kv_support", r.kv_support.level}});
      if (r.parallel && p.shards) rows.back()["parallel"] = stages_json(*r.parallel, *p.shards);
      if (r.weight_id != "stored")
        rows.back()["launch"] = launch_json(launch_lines(p.model, p.req, cp.ctx, r.weight_id, r.kv_id));
    }
    const Recommendation& rec = cp.rec;
    ctxs.push_back({{"ctx", cp.ctx},
                    {"tokens_per_sequence", cp.tokens},
                    {"rows", rows},
                    {"recommendation",
                     {{"weights", rec.weight_id},
                      {"kv", rec.kv_id},
                      {"fits", rec.fits},
                      {"bottleneck", rec.bottleneck},
                      {"reasons", rec.reasons},
                      {"next", rec.commands}}}});
  }
  j["contexts"] = ctxs;
  return j;
}

std::string plan_table(const Plan& p) {
  std::string out;
  char buf[512];
  const ModelConfig& c = p.model.config;
  const Device& d = p.req.device;
  std::snprintf(
      buf, sizeof buf,
      "model:  %s (%s; %s, %.2f B params, %lld layers, %lld/%lld heads x %lld, ffn %lld, vocab %lld%s%s, "
      "max ctx %lld)\n",
      p.model.name.c_str(),
      p.model.source == "preset" ? p.model.compare_model.c_str() : p.model.source.c_str(), c.arch.c_str(),
      c.n_params() / 1e9, (long long)c.n_layers, (long long)c.n_heads, (long long)c.n_kv_heads,
      (long long)c.head_dim, (long long)c.ffn_dim, (long long)c.vocab_size, c.tie_embeddings ? ", tied" : "",
      c.qkv_bias ? ", qkv bias" : "", (long long)c.max_seq_len);
  out += buf;
  std::snprintf(buf, sizeof buf, "device: %s: %s%s; fast:%s (%s)\n", d.name.c_str(),
                fb(d.memory_bytes).c_str(),
                d.reserve_bytes ? (", " + fb(d.reserve_bytes) + " reserved for the runtime").c_str() : "",
                caps(d).c_str(), d.features.c_str());
  out += buf;
  if (p.model.stored_bytes)
    out += "stored: " + fb(*p.model.stored_bytes) + " (" + p.model.stored_desc + ")\n";
  if (!p.model.files.empty()) {
    out += "files:  " + fb(p.model.files_bytes()) + " (" + std::to_string(p.model.files_bytes()) +
           " bytes) in " + std::to_string(p.model.files.size()) +
           " files an engine reads, headers, configs and tokenizer included:";
    for (const auto& [name, n] : p.model.files) out += " " + name + " " + fb(n) + ";";
    out.back() = '\n';
  }
  if (p.shards) {
    const ShardLayout& sl = *p.shards;
    std::string layers;
    for (size_t i = 0; i < sl.stage_layers.size(); ++i)
      layers += (i ? "," : "") + std::to_string(sl.stage_layers[i]);
    std::snprintf(buf, sizeof buf,
                  "split:  tp %d x pp %d = %d devices as vLLM shards them; per rank %lld/%lld heads, "
                  "%lld/%lld KV heads%s, "
                  "ffn %lld/%lld, vocab %lld/%lld (padded to 64); layers per stage %s\n",
                  sl.tp, sl.pp, sl.devices(), (long long)sl.heads_per_rank, (long long)c.n_heads,
                  (long long)sl.kv_heads_per_rank, (long long)c.n_kv_heads,
                  sl.kv_head_replicas > 1 ? (" (each replicated on " + std::to_string(sl.kv_head_replicas) +
                                             " ranks: tp > KV heads)")
                                                .c_str()
                                          : "",
                  (long long)sl.ffn_per_rank, (long long)c.ffn_dim, (long long)sl.vocab_per_rank,
                  (long long)c.vocab_size, layers.c_str());
    out += buf;
  }
  if (p.req.parallel()) {
    std::snprintf(buf, sizeof buf, "%.2f", p.req.gpu_memory_utilization);
    out += "limit:  " + fb(p.req.device_limit()) + " per device = memory x " + buf +
           " (assumed: vLLM --gpu-memory-utilization; change with --gpu-memory-utilization); fits and totals "
           "below "
           "are per device (the fullest one)\n";
  }

  for (const auto& cp : p.per_ctx) {
    std::snprintf(
        buf, sizeof buf, "\nctx %lld + output %lld = %lld tokens/sequence x %lld sequences (%s %s)\n",
        (long long)cp.ctx, (long long)p.req.output, (long long)cp.tokens, (long long)p.req.concurrency,
        p.req.parallel() ? "limit per device" : "budget", fb(p.req.device_limit()).c_str());
    out += buf;
    std::snprintf(buf, sizeof buf, "%-38s %-6s %11s %10s %11s %10s %11s %-4s %8s %9s %s\n", "weights", "KV",
                  "W bytes", "KV/token", "KV total", "workspace", p.req.parallel() ? "peak/dev" : "total",
                  "fits", "max conc", "max ctx", "weights run");
    out += buf;
    std::string last_w;
    for (const auto& r : cp.rows) {
      std::string wl = r.weight_id == last_w ? "" : weight_config(r.weight_id).label;
      last_w = r.weight_id;
      std::string mt = tokens_str(r.max_tokens, r.max_tokens_capped);
      if (r.max_tokens > c.max_seq_len && !r.max_tokens_capped) mt += "*";
      const bool is_rec = r.weight_id == cp.rec.weight_id && r.kv_id == cp.rec.kv_id;
      std::snprintf(buf, sizeof buf, "%-38s %-6s %11s %10s %11s %10s %11s %-4s %8lld %9s %s%s\n", wl.c_str(),
                    r.kv_id.c_str(), fb(r.weights.total()).c_str(), fb(r.kv_per_token).c_str(),
                    fb(r.kv_total).c_str(), fb(r.workspace.total()).c_str(), fb(r.total).c_str(),
                    r.fits ? "yes" : "no", (long long)r.max_concurrency, mt.c_str(),
                    r.weight_support.level.c_str(), is_rec ? "  <- recommended" : "");
      out += buf;
    }
    const Recommendation& rec = cp.rec;
    if (rec.fits)
      out += "\nrecommendation: " + weight_config(rec.weight_id).label + " + KV " +
             kv_config(rec.kv_id).label + "\n";
    else
      out += "\nrecommendation: nothing fits as asked; closest is " +
             (rec.weight_id.empty()
                  ? std::string("-")
                  : weight_config(rec.weight_id).label + " + KV " + kv_config(rec.kv_id).label) +
             "\n";
    for (const auto& s : rec.reasons) out += "  - " + s + "\n";
    out += "next:\n";
    for (const auto& s : rec.commands) out += "  " + s + "\n";
    const Row* rr = rec.weight_id.empty() ? nullptr : cp.find(rec.weight_id, rec.kv_id);
    if (rr && rr->parallel) {
      out += "per device (" + weight_config(rr->weight_id).label + " + KV " + rr->kv_id +
             "; every tp rank of a "
             "stage holds the same):\n";
      for (const auto& b : rr->parallel->stages) {
        std::string part = b.embedding && b.lm_head ? ", embedding + lm_head"
                           : b.embedding            ? ", embedding"
                           : b.lm_head              ? ", lm_head"
                                                    : "";
        std::snprintf(
            buf, sizeof buf,
            "  stage %d x %d ranks (layers %lld-%lld%s): weights %s, KV %s (%s/token), workspace %s, "
            "reserve %s = %s of %s: %s, max conc %lld\n",
            b.stage, p.shards->tp, (long long)b.layer_begin, (long long)b.layer_end - 1, part.c_str(),
            fb(b.weights.total()).c_str(), fb(b.kv).c_str(), fb(b.kv_per_token).c_str(),
            fb(b.workspace.total()).c_str(), fb(d.reserve_bytes).c_str(), fb(b.total).c_str(),
            fb(b.limit).c_str(), b.fits ? "fits" : "does not fit", (long long)b.max_concurrency);
        out += buf;
      }
      out += "  all " + std::to_string(p.shards->devices()) + " devices: weights " +
             fb(rr->parallel->weights_all_devices) + " (one copy: " + fb(rr->weights.total()) + "), KV " +
             fb(rr->parallel->kv_all_devices) + " (one copy: " + fb(rr->kv_total) + ")\n";
    }
    // Launch lines: the recommended configuration, and each one asked for with --weights / --kv.
    std::vector<const Row*> launch;
    if (rr) launch.push_back(rr);
    if (!p.req.weights.empty() || !p.req.kv.empty())
      for (const auto& r : cp.rows) {
        if (r.weight_id == "stored" || &r == rr) continue;
        auto listed = [](const std::vector<std::string>& v, const std::string& id) {
          return v.empty() || std::find(v.begin(), v.end(), id) != v.end();
        };
        if (listed(p.req.weights, r.weight_id) && listed(p.req.kv, r.kv_id)) launch.push_back(&r);
      }
    for (const Row* r : launch) {
      out += "launch (" + weight_config(r->weight_id).label + " + KV " + kv_config(r->kv_id).label +
             (r == rr ? ", recommended" : "") + "):\n";
      out += launch_text(launch_lines(p.model, p.req, cp.ctx, r->weight_id, r->kv_id));
    }
  }

  // Footnotes: what every quantized row keeps in 16 bits, how KV scales are stored, the workspace formula.
  out += "\nnotes:\n";
  for (const auto& cp : p.per_ctx) {
    std::set<std::string> seen;
    for (const auto& r : cp.rows) {
      if (r.weight_id == "bf16" || r.weight_id == "stored" || !seen.insert(r.weight_id).second) continue;
      if (seen.size() == 1) {
        out += "  16-bit in quantized configurations (quantizer's default ignore list):";
        for (size_t i = 0; i < 3 && i < r.weights.unquantized_names.size(); ++i)
          out += (i ? "; " : " ") + r.weights.unquantized_names[i];
        out += "\n";
      }
      for (const auto& n : r.weights.notes) out += "  " + r.weight_id + ": " + n + "\n";
    }
    break;
  }
  for (const auto& k : kv_configs())
    if (k.id != "bf16") out += "  KV " + k.id + ": " + k.scale_note + "\n";
  out +=
      "  workspace = engine float32 buffers: T x (3 dim + 2 q_dim + 2 kv_dim + 2 ffn) + attention score rows "
      "+ logits (concurrency x vocab); T = max(min(" +
      std::to_string(p.req.prefill_chunk) + ", tokens), concurrency)\n";
  out += "  max ctx counts prompt + output tokens per sequence; * = beyond the model's trained context (" +
         std::to_string(c.max_seq_len) + ")\n";
  return out;
}

}  // namespace lowbit::plan
