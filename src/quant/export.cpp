// Checkpoint export to other engines' layouts (see export.h).
#include "quant/export.h"

#include <deque>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/json_text.h"
#include "core/version.h"
#include "io/durable.h"
#include "io/hf_checkpoint.h"
#include "io/mapped_file.h"
#include "model/hub_layouts.h"
#include "model/quantized_checkpoint.h"

namespace fs = std::filesystem;

namespace lowbit::quant {
namespace {

using nlohmann::json;

[[noreturn]] void refuse(const std::string& msg) {
  throw UsageError("export", msg);
}

// The per-module tensors a quantized matrix is stored as, in any of the layouts; everything else of the
// module (bias, input_scale) is copied.
bool is_matrix_suffix(const std::string& s) {
  static const std::set<std::string> k = {"weight",
                                          "weight_packed",
                                          "weight_scale",
                                          "weight_zero_point",
                                          "weight_shape",
                                          "weight_g_idx",
                                          "weight_dq_scale",
                                          "weight_dq_offset",
                                          "weight_global_scale",
                                          "qweight",
                                          "qzeros",
                                          "scales",
                                          "g_idx"};
  return k.count(s) > 0;
}

// Rows of a q_proj / k_proj in llama2.c's interleaved RoPE pairing (lowbit_rope_style) put into the Hugging
// Face "half" order other engines assume: new row h*hd + t*hd/2 + i = old row h*hd + 2i + t (the permutation
// of transformers' convert_llama_weights_to_hf). Exact: every row keeps its own codes, scales and zeros.
QuantizedMatrix rows_to_half_rope(const QuantizedMatrix& q, int64_t head_dim) {
  QuantizedMatrix o = q;
  const int64_t half = head_dim / 2, zb = q.zeros.empty() ? 0 : q.grid.cols;
  const int64_t sb = static_cast<int64_t>(q.scales.size()) / q.rows;
  for (int64_t r = 0; r < q.rows; ++r) {
    const int64_t h = r / head_dim, t = (r % head_dim) / half, i = r % half;
    const int64_t src = h * head_dim + 2 * i + t;
    std::copy_n(q.row_data(src), q.row_bytes, o.codes.data() + r * q.row_bytes);
    std::copy_n(q.scales.data() + src * sb, sb, o.scales.data() + r * sb);
    if (zb) std::copy_n(q.zeros.data() + src * zb, zb, o.zeros.data() + r * zb);
  }
  return o;
}

struct Modules {
  std::map<std::string, std::shared_ptr<const QuantizedMatrix>> q;  // HF module name -> matrix
  std::map<std::string, FormatId> act;
};

// The GPTQ / AWQ preconditions: every decoder linear quantized with one INT grid, weight-only, nothing else.
json hub_config(const Modules& mods, const ModelConfig& c, const ExportOptions& o) {
  const auto shapes = hf_matrix_shapes(c);
  const QuantizedMatrix* first = nullptr;
  bool all_sym = true, act_order = false;
  for (auto& [module, shape] : shapes) {
    auto it = mods.q.find(module);
    const bool decoder = module != "lm_head" && module != "model.embed_tokens";
    if (!decoder) {
      if (it != mods.q.end())
        refuse(
            "module '" + module + "' is quantized; " + o.to +
            " checkpoints keep the embedding and lm_head in 16-bit: quantize with them ignored (the default "
            "recipe does), or export to compressed-tensors");
      continue;
    }
    if (it == mods.q.end())
      refuse("module '" + module + "' is not quantized; " + o.to +
             " loaders quantize every decoder linear with one scheme: quantize all of them, or export to "
             "compressed-tensors");
    if (mods.act.at(module) != FormatId::F32)
      refuse("module '" + module + "' quantizes its activations (" + format_info(mods.act.at(module)).name +
             "); " + o.to + " is weight-only: export to compressed-tensors");
    const QuantizedMatrix& q = *it->second;
    if (!first) first = &q;
    const auto& a = first->scheme;
    const auto& b = q.scheme;
    if (a.format != b.format || a.gran != b.gran ||
        (a.gran == Granularity::Group && a.group_size != b.group_size))
      refuse("modules are quantized with different schemes (" + to_string(a) + " and " + to_string(b) +
             " at '" + module + "'); " + o.to +
             " holds one bits/group_size for all: export to compressed-tensors");
    all_sym = all_sym && b.symmetric;
    act_order = act_order || !q.input_perm.empty();
  }
  if (!first) refuse("the checkpoint has no decoder layers to export");
  const int bits = first->bits;
  const int gs = first->scheme.gran == Granularity::Group ? first->scheme.group_size : -1;
  if (o.to == "awq")
    return {{"quant_method", "awq"},      {"bits", bits},      {"group_size", gs},
            {"zero_point", true},         {"version", "gemm"}, {"modules_to_not_convert", nullptr},
            {"lowbit_version", version()}};
  return {{"quant_method", "gptq"},
          {"bits", bits},
          {"group_size", gs},
          {"desc_act", act_order},  // g_idx then names each input column's group
          {"static_groups", false},
          {"sym", all_sym},
          {"true_sequential", true},
          {"damp_percent", 0.01},
          {"checkpoint_format", o.gptq_v2 ? "gptq_v2" : "gptq"},
          {"model_file_base_name", "model"},
          {"lowbit_version", version()}};
}

// compressed-tensors quantization_config for matrices that came from a GPTQ / AWQ checkpoint.
// Matrices with act-order input columns (a GPTQ g_idx) go into their own groups with "actorder": "group"
// (compressed-tensors' ActivationOrdering.GROUP; vLLM reads weight_g_idx only then) and get a weight_g_idx
// (pack_quantized); a group never mixes them with matrices that have no g_idx.
json ct_config(const Modules& mods) {
  using Key = std::pair<std::string, bool>;  // scheme, act-order
  std::map<Key, std::vector<std::string>> groups;
  std::map<std::string, QuantScheme> schemes;
  for (auto& [module, q] : mods.q) {
    groups[{to_string(q->scheme), !q->input_perm.empty()}].push_back(module);
    schemes[to_string(q->scheme)] = q->scheme;
  }
  json cg = json::object(), lg = json::object();
  int i = 0;
  for (auto& [gk, modules] : groups) {
    const std::string& key = gk.first;
    json w = ct_args_from_scheme(schemes[key]);
    w["actorder"] = gk.second ? json("group") : json(nullptr);
    const std::string name = "group_" + std::to_string(i++);
    // compressed-tensors' own fields only (it refuses extra keys in a group); lowbit's exact scheme goes into
    // lowbit_groups, as the checkpoint writer does.
    cg[name] = {{"targets", modules},
                {"weights", w},
                {"input_activations", nullptr},
                {"output_activations", nullptr},
                {"format", layout_name(checkpoint_layout(schemes[key], 2))}};
    lg[name] = {{"scheme", key}};
  }
  std::set<std::string> formats;
  for (auto& [name, g] : cg.items()) formats.insert(g["format"].get<std::string>());
  json ignore = json::array();
  if (!mods.q.count("lm_head")) ignore.push_back("lm_head");
  return {{"quant_method", "compressed-tensors"},
          {"format", formats.size() == 1 ? json(*formats.begin()) : json("mixed-precision")},
          {"quantization_status", "compressed"},
          {"config_groups", cg},
          {"ignore", ignore},
          {"kv_cache_scheme", nullptr},
          {"lowbit_groups", lg},
          {"lowbit_version", version()}};
}

}  // namespace

ExportResult export_checkpoint(const std::string& src_dir, const std::string& out_dir,
                               const ExportOptions& o) {
  if (o.to != "gptq" && o.to != "awq" && o.to != "compressed-tensors")
    refuse("--to '" + o.to + "' is not a layout lowbit exports; use gptq, awq or compressed-tensors");
  if (out_dir.empty()) refuse("no output directory; pass -o OUT");
  const fs::path out = fs::absolute(fs::path(out_dir)).lexically_normal();
  std::error_code ec;
  if (fs::exists(out, ec) && !o.force)
    refuse("output directory '" + out_dir +
           "' already exists; choose another -o or pass --force to replace it");
  auto ck = std::make_shared<io::HfCheckpoint>(io::HfCheckpoint::open(src_dir));
  if (!is_quantized_config(ck->config))
    refuse("'" + src_dir +
           "' is not a quantized checkpoint (config.json has no quantization_config); quantize it "
           "first with lowbit quantize");
  ModelConfig c = config_from_hf(ck->config);
  apply_lowbit_config_keys(ck->config, &c);
  ModelWeights w = load_quantized_weights(*ck, c, ck, DenseMode::Native);
  const std::string method = ck->config["quantization_config"].value("quant_method", std::string());
  Modules mods;
  const bool tied = w.tied();
  for (auto& [name, m] : w.named_matrices()) {
    if (m->kind != WeightKind::Quant || (tied && name == "lm_head")) continue;
    mods.q[hf_module_name(name)] = m->q;
    mods.act[hf_module_name(name)] = m->act_format;
  }
  json cfg = ck->config;
  ExportResult res;
  const bool hub = o.to != "compressed-tensors";
  if (hub) {
    cfg["quantization_config"] = hub_config(mods, c, o);
    if (cfg.contains("lowbit_rotation") && cfg["lowbit_rotation"].is_object() &&
        cfg["lowbit_rotation"].contains("r4") && !cfg["lowbit_rotation"]["r4"].is_null())
      refuse(
          "the model is rotated with an online Hadamard before down_proj (lowbit_rotation.r4), which other "
          "engines do not apply; quantize with rotate=quarot without R4 to export to " +
          o.to);
    if (c.rope_style == RopeStyle::Interleaved) {
      if (c.qkv_bias || c.qk_norm)
        refuse(
            "q/k rows are in interleaved RoPE order with q/k biases or norms, which export cannot reorder");
      for (auto& [module, q] : mods.q)
        if (module.size() > 7 &&
            (module.substr(module.size() - 7) == ".q_proj" || module.substr(module.size() - 7) == ".k_proj"))
          q = std::make_shared<QuantizedMatrix>(rows_to_half_rope(*q, c.head_dim));
      cfg.erase("lowbit_rope_style");
      res.warnings.push_back(
          "q_proj/k_proj rows were reordered from llama2.c's interleaved RoPE pairing to the "
          "Hugging Face order the " +
          o.to + " loaders assume (exact: whole rows move)");
    }
  } else if (method != "compressed-tensors") {
    cfg["quantization_config"] = ct_config(mods);
  }
  // Tensors: non-matrix tensors straight from the source mapping, quantized matrices re-packed.
  std::deque<std::vector<uint8_t>> store;
  std::vector<io::TensorToWrite> list;
  for (auto& [name, v] : ck->tensors) {
    const auto dot = name.rfind('.');
    if (dot != std::string::npos && mods.q.count(name.substr(0, dot)) &&
        is_matrix_suffix(name.substr(dot + 1)))
      continue;
    list.push_back({name, v.dtype, v.shape, v.data, v.nbytes});
  }
  for (auto& [module, q] : mods.q) {
    if (o.to == "compressed-tensors" && checkpoint_layout(q->scheme, q->cols) == CkptLayout::PackQuantized)
      for (uint8_t z : q->zeros)
        if (z >= (1u << q->bits))
          refuse("module '" + module + "' has a zero point of " + std::to_string(z) + " = 2^" +
                 std::to_string(q->bits) +
                 " (a GPTQ v1 checkpoint's stored all-ones, which its GPU kernels read as 2^b), which "
                 "compressed-tensors' " +
                 std::to_string(q->bits) + "-bit zero points cannot hold; export with --to gptq (v1)");
    std::vector<PackedTensor> packed = o.to == "gptq"  ? pack_gptq(*q, o.gptq_v2, module)
                                       : o.to == "awq" ? pack_awq(*q, module)
                                                       : pack_quantized(*q);
    for (auto& p : packed) {
      store.push_back(std::move(p.bytes));
      list.push_back({module + "." + p.suffix, p.dtype, p.shape, store.back().data(), store.back().size()});
    }
  }
  res.modules = static_cast<int>(mods.q.size());
  if (!out.parent_path().empty()) fs::create_directories(out.parent_path(), ec);
  const std::string tmp = io::make_temp_dir_for(out.string());
  try {
    auto write_json = [&](const std::string& name, const json& j) {
      const std::string text = json_text(j, 2) + "\n";
      io::write_file_atomic((fs::path(tmp) / name).string(), text.data(), text.size());
      res.files.push_back(name);
    };
    write_json("config.json", cfg);
    if (o.to == "gptq") write_json("quantize_config.json", cfg["quantization_config"]);
    io::write_safetensors((fs::path(tmp) / "model.safetensors").string(), list,
                          {{"format", "pt"}, {"lowbit_version", version()}, {"lowbit_export", o.to}});
    res.files.push_back("model.safetensors");
    for (const char* f :
         {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
          "tokenizer.model", "tokenizer.bin", "lowbit_manifest.json"}) {
      const fs::path s = fs::path(ck->dir) / f;
      if (!fs::exists(s, ec)) continue;
      fs::copy_file(s, fs::path(tmp) / f, fs::copy_options::overwrite_existing, ec);
      if (ec) fail("export", "cannot copy " + s.string() + " to " + tmp + ": " + ec.message());
      res.files.push_back(f);
    }
    res.bytes = io::open_to_readers(tmp, res.files);
    io::publish_dir(tmp, out.string(), o.force);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  res.dir = out.string();
  return res;
}

}  // namespace lowbit::quant
