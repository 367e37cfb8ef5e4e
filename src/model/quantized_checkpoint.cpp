// Quantized checkpoint layouts (pack / unpack) and the loader (see quantized_checkpoint.h).
#include "model/quantized_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/error.h"
#include "model/hub_layouts.h"

namespace lowbit {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& msg) {
  fail("model", msg);
}

DType scale_dtype(const QuantScheme& s) {
  if (s.double_quant) return DType::I8;
  switch (s.format == FormatId::NVFP4 ? ScaleType::E4M3 : s.scale_type) {
    case ScaleType::F32:
      return DType::F32;
    case ScaleType::F16:
      return DType::F16;
    case ScaleType::BF16:
      return DType::BF16;
    case ScaleType::E4M3:
      return DType::F8_E4M3;
    case ScaleType::E8M0:
      return DType::U8;
    case ScaleType::None:
      break;
  }
  return DType::U8;
}

int pack_factor(int bits) {
  return 32 / bits;
}

template <class T>
std::vector<uint8_t> to_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<int64_t> scale_shape(const QuantizedMatrix& q) {
  if (q.scheme.gran == Granularity::Tensor) return {1};
  return {q.grid.rows, q.grid.cols};
}

const TensorView& need(const std::map<std::string, TensorView>& t, const std::string& name, DType dt,
                       int64_t numel, const std::string& source) {
  auto it = t.find(name);
  if (it == t.end())
    bad("tensor '" + name + "' is missing from " + source + "; the quantized checkpoint is incomplete");
  const TensorView& v = it->second;
  if (v.dtype != dt)
    bad("tensor '" + name + "' in " + source + " has dtype " + dtype_name(v.dtype) + ", expected " +
        dtype_name(dt) + " for its quantization scheme");
  if (v.numel() != numel || v.nbytes != static_cast<size_t>(numel) * dtype_size(dt))
    bad("tensor '" + name + "' in " + source + " has shape " + shape_str(v.shape) + ", expected " +
        std::to_string(numel) + " elements for its quantization scheme");
  return v;
}

}  // namespace

std::string hf_module_name(const std::string& n) {
  RoleRef r;
  if (parse_lowbit_tensor_name(n, &r) && role_row(r.role).kind == RoleKind::Matrix)
    return hf_module_name(r.role, r.layer);
  return n;
}

const char* layout_name(CkptLayout l) {
  switch (l) {
    case CkptLayout::PackQuantized:
      return "pack-quantized";
    case CkptLayout::FloatQuantized:
      return "float-quantized";
    case CkptLayout::Nvfp4Packed:
      return "nvfp4-pack-quantized";
    case CkptLayout::Mxfp4Packed:
      return "mxfp4-pack-quantized";
    case CkptLayout::LowbitPacked:
      return "lowbit-packed";
  }
  return "?";
}

CkptLayout checkpoint_layout(const QuantScheme& s, int64_t cols) {
  const FormatInfo& fi = s.info();
  const bool plain_scale =
      s.scale_type == ScaleType::F32 || s.scale_type == ScaleType::F16 || s.scale_type == ScaleType::BF16;
  if (fi.kind == FormatKind::Int && plain_scale && s.gran != Granularity::Native && fi.bits <= 8)
    return CkptLayout::PackQuantized;
  // compressed-tensors' float-quantized is E4M3FN: its args (type float, num_bits 8) have no E5M2, and vLLM
  // loads the weight into a float8_e4m3fn parameter. E5M2 weights go to lowbit-packed (older checkpoints
  // that hold them as float-quantized still load: unpack_quantized).
  if (fi.id == FormatId::E4M3FN && plain_scale) return CkptLayout::FloatQuantized;
  if (fi.id == FormatId::NVFP4 && cols % 2 == 0) return CkptLayout::Nvfp4Packed;
  if (fi.id == FormatId::MXFP4 && cols % 2 == 0) return CkptLayout::Mxfp4Packed;
  return CkptLayout::LowbitPacked;
}

PackedBytes packed_checkpoint_bytes(const QuantScheme& s, int64_t rows, int64_t cols) {
  PackedBytes b;
  const CkptLayout layout = checkpoint_layout(s, cols);
  const StorageBits sb = storage_bits(s, rows, cols);
  const FormatInfo& fi = s.info();
  // Scales as stored: cells x scale bytes (NF4 dq: int8 codes + FP32 table + FP32 mean), NVFP4 + FP32 global.
  b.scales = (sb.scales + 7) / 8 + (sb.second_level + 7) / 8;
  if (fi.is_gguf() || rows * cols == 0) {
    b.codes = (sb.elements + 7) / 8;
  } else {
    const int64_t bits = sb.elements / (rows * cols);
    b.codes = rows * ((cols * bits + 7) / 8);  // each row starts on a byte
    if (layout == CkptLayout::PackQuantized) {
      const int64_t pf = pack_factor(static_cast<int>(bits));
      b.codes = rows * ((cols + pf - 1) / pf) * 4;
      if (!s.symmetric) {
        const ScaleGrid g = scale_grid(s, rows, cols);
        b.zeros = (g.rows + pf - 1) / pf * g.cols * 4;
      }
    } else if (!s.symmetric && sb.zeros > 0) {
      b.zeros = scale_grid(s, rows, cols).cells();  // one uint8 per cell
    }
  }
  if (layout == CkptLayout::PackQuantized || layout == CkptLayout::LowbitPacked)
    b.metadata = 2 * 8;  // weight_shape
  return b;
}

std::vector<PackedTensor> pack_quantized(const QuantizedMatrix& q) {
  std::vector<PackedTensor> out;
  const CkptLayout layout = checkpoint_layout(q.scheme, q.cols);
  const std::vector<int64_t> shape2 = {q.rows, q.cols};
  auto shape_tensor = [&] { out.push_back({"weight_shape", DType::I64, {2}, to_bytes(shape2)}); };
  const bool act_order = !q.input_perm.empty();
  if (act_order && (layout != CkptLayout::PackQuantized || q.scheme.gran != Granularity::Group ||
                    static_cast<int64_t>(q.input_perm.size()) != q.cols))
    throw UsageError("export", "a matrix with act-order input columns (" + to_string(q.scheme) +
                                   ") can only be stored as a pack-quantized INT group matrix with "
                                   "weight_g_idx; export it with --to gptq");
  if (layout == CkptLayout::PackQuantized) {
    const int b = q.bits, pf = pack_factor(b), half = 1 << (b - 1);
    const int64_t words = (q.cols + pf - 1) / pf;
    std::vector<int32_t> packed(static_cast<size_t>(q.rows * words), 0);
    // Act-order: stored column j is input column input_perm[j]; compressed-tensors keeps the input columns
    // in their own order in weight_packed and names each one's group in weight_g_idx.
    for (int64_t r = 0; r < q.rows; ++r)
      for (int64_t j = 0; j < q.cols; ++j) {
        const int64_t c = act_order ? q.input_perm[static_cast<size_t>(j)] : j;
        const uint32_t u = q.code(r, j);
        auto& w = packed[r * words + c / pf];
        w = static_cast<int32_t>(static_cast<uint32_t>(w) | (u << ((c % pf) * b)));
      }
    out.push_back({"weight_packed", DType::I32, {q.rows, words}, to_bytes(packed)});
    if (act_order) {
      std::vector<int32_t> g_idx(static_cast<size_t>(q.cols));
      for (int64_t j = 0; j < q.cols; ++j)
        g_idx[static_cast<size_t>(q.input_perm[static_cast<size_t>(j)])] =
            static_cast<int32_t>(j / q.scheme.group_size);
      out.push_back({"weight_g_idx", DType::I32, {q.cols}, to_bytes(g_idx)});
    }
    out.push_back({"weight_scale", scale_dtype(q.scheme), scale_shape(q), q.scales});
    if (!q.scheme.symmetric) {
      // Signed zero points packed along the row dimension (compressed-tensors pack_to_int32(packed_dim=0)).
      // b bits hold 0 .. 2^b - 1; a zero point of 2^b (GPTQ v1's stored all-ones) does not fit.
      for (uint8_t z : q.zeros)
        if (z >= (1u << b))
          throw UsageError("export", "a zero point of " + std::to_string(z) + " does not fit in " +
                                         std::to_string(b) + "-bit compressed-tensors zero points (" +
                                         to_string(q.scheme) + "); export it with --to gptq");
      const int64_t zr = (q.grid.rows + pf - 1) / pf;
      std::vector<int32_t> zp(static_cast<size_t>(zr * q.grid.cols), 0);
      for (int64_t i = 0; i < q.grid.rows; ++i)
        for (int64_t j = 0; j < q.grid.cols; ++j) {
          const uint32_t u = q.zeros[i * q.grid.cols + j];  // = signed zero + 2^(b-1)
          auto& w = zp[(i / pf) * q.grid.cols + j];
          w = static_cast<int32_t>(static_cast<uint32_t>(w) | (u << ((i % pf) * b)));
        }
      (void)half;
      out.push_back({"weight_zero_point", DType::I32, {zr, q.grid.cols}, to_bytes(zp)});
    }
    shape_tensor();
    return out;
  }
  if (layout == CkptLayout::FloatQuantized) {
    out.push_back({"weight", q.elem == FormatId::E5M2 ? DType::F8_E5M2 : DType::F8_E4M3, shape2, q.codes});
    out.push_back({"weight_scale", scale_dtype(q.scheme), scale_shape(q), q.scales});
    return out;
  }
  out.push_back({"weight_packed", DType::U8, {q.rows, q.row_bytes}, q.codes});
  if (!q.scales.empty()) out.push_back({"weight_scale", scale_dtype(q.scheme), scale_shape(q), q.scales});
  if (q.scheme.format == FormatId::NVFP4)
    out.push_back({"weight_global_scale", DType::F32, {1}, to_bytes(std::vector<float>{q.global_scale})});
  if (layout == CkptLayout::LowbitPacked) {
    if (!q.zeros.empty())
      out.push_back({"weight_zero_point", DType::U8, {q.grid.rows, q.grid.cols}, q.zeros});
    if (q.scheme.double_quant) {
      out.push_back(
          {"weight_dq_scale", DType::F32, {static_cast<int64_t>(q.dq_scales.size())}, to_bytes(q.dq_scales)});
      out.push_back({"weight_dq_offset", DType::F32, {1}, to_bytes(std::vector<float>{q.dq_offset})});
    }
    shape_tensor();
  }
  return out;
}

void check_scheme_fits(const std::string& m, const QuantScheme& s, int64_t rows, int64_t cols,
                       const std::string& source) {
  try {
    validate(s, rows, cols);
  } catch (const UsageError& e) {
    bad("module '" + m + "' in " + source + ": its scheme " + to_string(s) +
        " does not fit its shape: " + e.what());
  }
}

// The shape a packed module records in M.weight_shape (when it has one) against the config's.
void check_shape_tensor(const std::map<std::string, TensorView>& t, const std::string& m, int64_t rows,
                        int64_t cols, const std::string& source) {
  if (t.count(m + ".weight_shape")) {
    const TensorView& sh = need(t, m + ".weight_shape", DType::I64, 2, source);
    int64_t d[2];
    std::memcpy(d, sh.data, sizeof d);
    if (d[0] != rows || d[1] != cols)
      bad("tensor '" + m + ".weight_shape' in " + source + " says [" + std::to_string(d[0]) + ", " +
          std::to_string(d[1]) + "] but the model config expects [" + std::to_string(rows) + ", " +
          std::to_string(cols) + "]");
  }
}

// A GGUF-block module (q4_0 .. q6_k, iq4_nl, ...): its weight_packed tensor holds llama.cpp's block rows as a
// GGUF file does, checked like unpack_quantized checks them.
const TensorView& gguf_block_rows(const std::map<std::string, TensorView>& t, const std::string& m,
                                  const QuantScheme& s, int64_t rows, int64_t cols,
                                  const std::string& source) {
  check_scheme_fits(m, s, rows, cols, source);
  check_shape_tensor(t, m, rows, cols, source);
  const FormatInfo& fi = s.info();
  return need(t, m + ".weight_packed", DType::U8, rows * (cols / fi.block_elems * fi.block_bytes), source);
}

QuantizedMatrix unpack_quantized(const std::map<std::string, TensorView>& t, const std::string& m,
                                 const QuantScheme& s, int64_t rows, int64_t cols,
                                 const std::string& source) {
  check_scheme_fits(m, s, rows, cols, source);
  const FormatInfo& fi = s.info();
  if (fi.is_microscaled() == false && fi.kind != FormatKind::Int && fi.kind != FormatKind::Float &&
      fi.kind != FormatKind::Lut && fi.kind != FormatKind::Codebook && !fi.is_gguf())
    bad("module '" + m + "' in " + source + ": scheme " + to_string(s) + " is not a quantized weight scheme");
  QuantizedMatrix q;
  q.scheme = s;
  q.rows = rows;
  q.cols = cols;
  q.elem = fi.elem;
  if (fi.is_gguf()) {
    q.elem = fi.id;
    q.row_bytes = cols / fi.block_elems * fi.block_bytes;
  } else {
    q.bits = format_info(fi.elem).bits;
    q.row_bytes = (cols * q.bits + 7) / 8;
    q.grid = scale_grid(s, rows, cols);
  }
  CkptLayout layout = checkpoint_layout(s, cols);
  // E5M2 weights written before they moved to lowbit-packed: M.weight F8_E5M2, as float-quantized.
  if (fi.id == FormatId::E5M2 && !t.count(m + ".weight_packed") && t.count(m + ".weight"))
    layout = CkptLayout::FloatQuantized;
  const int64_t cells = q.grid.cells();
  auto copy = [](const TensorView& v) { return std::vector<uint8_t>(v.data, v.data + v.nbytes); };
  if (layout != CkptLayout::FloatQuantized) check_shape_tensor(t, m, rows, cols, source);
  if (cells > 0 && (layout != CkptLayout::LowbitPacked || !fi.is_gguf()))
    q.scales = copy(need(t, m + ".weight_scale", scale_dtype(s), cells, source));
  const bool has_gidx = t.count(m + ".weight_g_idx") > 0;
  if (has_gidx && (layout != CkptLayout::PackQuantized ||
                   (s.gran != Granularity::Group && s.gran != Granularity::Channel)))
    bad("tensor '" + m + ".weight_g_idx' in " + source + ": an activation-order group index needs a " +
        "pack-quantized INT group scheme, but the module is " + to_string(s) + " (" + layout_name(layout) +
        "); the checkpoint contradicts its config");
  if (layout == CkptLayout::PackQuantized) {
    const int b = q.bits, pf = pack_factor(b);
    const int64_t words = (cols + pf - 1) / pf;
    const TensorView& pv = need(t, m + ".weight_packed", DType::I32, rows * words, source);
    // Act-order (compressed-tensors actorder "group"): weight_packed keeps the input columns in their own
    // order and weight_g_idx names each one's group, whose scale / zero point column it uses. lowbit stores
    // the columns sorted by group (stable, so groups are consecutive in its grid) and keeps the permutation
    // (QuantizedMatrix::input_perm), as for a GPTQ g_idx. An index of all -1 is compressed-tensors'
    // "not yet set" value, which its dequantize reads as column order.
    std::vector<int32_t> perm;
    if (has_gidx) {
      const std::string gname = "tensor '" + m + ".weight_g_idx' in " + source;
      const TensorView& gv = t.at(m + ".weight_g_idx");
      if (gv.dtype != DType::I32 || gv.shape != std::vector<int64_t>{cols} ||
          gv.nbytes != static_cast<size_t>(cols) * 4)
        bad(gname + " has dtype " + dtype_name(gv.dtype) + " and shape " + shape_str(gv.shape) +
            ", expected I32 [" + std::to_string(cols) + "] (the group of each input column)");
      std::vector<int32_t> gidx(static_cast<size_t>(cols));
      std::memcpy(gidx.data(), gv.data, gv.nbytes);
      const bool unset = std::all_of(gidx.begin(), gidx.end(), [](int32_t g) { return g == -1; });
      if (!unset) {
        const int gs = s.gran == Granularity::Group ? s.group_size : -1;
        perm = act_order_permutation(gidx, gs, gs, gname);
      }
    }
    q.codes.assign(static_cast<size_t>(rows * q.row_bytes), 0);
    const uint32_t mask = (1u << b) - 1;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t c = perm.empty() ? j : perm[static_cast<size_t>(j)];  // stored column j = input c
        uint32_t w;
        std::memcpy(&w, pv.data + (r * words + c / pf) * 4, 4);
        pack_code(q.codes.data() + r * q.row_bytes, j, b, (w >> ((c % pf) * b)) & mask);
      }
    q.input_perm = std::move(perm);
    if (!s.symmetric) {
      const int64_t zr = (q.grid.rows + pf - 1) / pf;
      const TensorView& zv = need(t, m + ".weight_zero_point", DType::I32, zr * q.grid.cols, source);
      q.zeros.assign(static_cast<size_t>(cells), 0);
      for (int64_t i = 0; i < q.grid.rows; ++i)
        for (int64_t j = 0; j < q.grid.cols; ++j) {
          uint32_t w;
          std::memcpy(&w, zv.data + ((i / pf) * q.grid.cols + j) * 4, 4);
          q.zeros[i * q.grid.cols + j] = static_cast<uint8_t>((w >> ((i % pf) * b)) & mask);
        }
    }
    return q;
  }
  if (layout == CkptLayout::FloatQuantized) {
    q.codes = copy(need(t, m + ".weight", q.elem == FormatId::E5M2 ? DType::F8_E5M2 : DType::F8_E4M3,
                        rows * cols, source));
    return q;
  }
  q.codes = copy(need(t, m + ".weight_packed", DType::U8, rows * q.row_bytes, source));
  if (s.format == FormatId::NVFP4) {
    const TensorView& g = need(t, m + ".weight_global_scale", DType::F32, 1, source);
    std::memcpy(&q.global_scale, g.data, 4);
    if (!(q.global_scale > 0) || !std::isfinite(q.global_scale))
      bad("tensor '" + m + ".weight_global_scale' in " + source + " is not a positive finite number");
  }
  if (layout == CkptLayout::LowbitPacked) {
    if (fi.kind == FormatKind::Int && !s.symmetric) {
      q.zeros = copy(need(t, m + ".weight_zero_point", DType::U8, cells, source));
      for (uint8_t z : q.zeros)
        if (z >= (1u << q.bits))
          bad("tensor '" + m + ".weight_zero_point' in " + source + " has a zero point out of range");
    }
    if (s.double_quant) {
      const int64_t chunks = (cells + 255) / 256;
      const TensorView& d = need(t, m + ".weight_dq_scale", DType::F32, chunks, source);
      q.dq_scales.resize(static_cast<size_t>(chunks));
      std::memcpy(q.dq_scales.data(), d.data, d.nbytes);
      std::memcpy(&q.dq_offset, need(t, m + ".weight_dq_offset", DType::F32, 1, source).data, 4);
    }
  }
  return q;
}

nlohmann::json ct_args_from_scheme(const QuantScheme& s) {
  const FormatInfo& fi = s.info();
  const FormatInfo& ei = s.elem_info();
  json w;
  w["num_bits"] = fi.is_gguf() ? fi.bits : ei.bits;
  w["type"] = ei.kind == FormatKind::Int ? "int" : "float";
  w["symmetric"] = s.symmetric;
  w["dynamic"] = false;
  w["observer"] = s.search == ScaleSearch::Mse ? "mse" : "minmax";
  switch (s.gran) {
    case Granularity::Tensor:
      w["strategy"] = "tensor";
      break;
    case Granularity::Channel:
    case Granularity::Token:
      w["strategy"] = "channel";
      break;
    case Granularity::Group:
      w["strategy"] = fi.id == FormatId::NVFP4 ? "tensor_group" : "group";
      w["group_size"] = s.group_size;
      break;
    case Granularity::Block2D:
      w["strategy"] = "block";
      w["block_structure"] = {s.block_rows, s.block_cols};
      break;
    case Granularity::Native:
      w["strategy"] = "native";
      break;
  }
  // No "scale_dtype": compressed-tensors 0.12's QuantizationArgs has no such field and forbids extra keys;
  // 0.18's takes a torch dtype name. The scale dtype is the stored tensor's; lowbit's exact scheme is in
  // quantization_config.lowbit_groups.
  return w;
}

QuantScheme scheme_from_ct_args(const json& w, const std::string& format, const std::string& where) {
  try {
    const int bits = w.at("num_bits").get<int>();
    const std::string type = w.value("type", std::string("int"));
    const std::string strategy = w.value("strategy", std::string("channel"));
    std::string fmt;
    if (format == "nvfp4-pack-quantized")
      fmt = "nvfp4";
    else if (format == "mxfp4-pack-quantized")
      fmt = "mxfp4";
    else if (type == "int")
      fmt = "int" + std::to_string(bits);
    else if (type == "float" && bits == 8)
      fmt = "e4m3";
    else if (type == "float" && bits == 4)
      fmt = "e2m1";
    else
      bad(where + ": weights type '" + type + "' with " + std::to_string(bits) + " bits is not supported");
    if (fmt == "nvfp4" || fmt == "mxfp4") return parse_scheme(fmt);
    std::string sch = fmt;
    if (strategy == "group" || strategy == "tensor_group")
      sch += ":g" + std::to_string(w.at("group_size").get<int>());
    else if (strategy == "channel")
      sch += ":channel";
    else if (strategy == "tensor")
      sch += ":tensor";
    else if (strategy == "block") {
      auto bs = w.at("block_structure");
      sch += ":block" + std::to_string(bs.at(0).get<int>()) + "x" + std::to_string(bs.at(1).get<int>());
    } else
      bad(where + ": weight strategy '" + strategy + "' is not supported");
    if (type == "int") sch += w.value("symmetric", true) ? ":sym" : ":asym";
    sch += ":" + w.value("scale_dtype", std::string(type == "int" ? "f16" : "f32"));
    return parse_scheme(sch);
  } catch (const json::exception& e) {
    bad(where + ": malformed weights args (" + std::string(e.what()) + ")");
  } catch (const UsageError& e) {
    bad(where + ": " + e.what());
  }
}

bool is_quantized_config(const json& config) {
  return config.is_object() && config.contains("quantization_config") &&
         config["quantization_config"].is_object();
}

void apply_lowbit_config_keys(const json& config, ModelConfig* c) {
  if (!config.is_object() || !config.contains("lowbit_rope_style")) return;
  const auto& v = config["lowbit_rope_style"];
  if (!v.is_string() || (v != "interleaved" && v != "half"))
    bad("config.json: lowbit_rope_style must be \"interleaved\" or \"half\"");
  c->rope_style = v == "interleaved" ? RopeStyle::Interleaved : RopeStyle::Half;
}

namespace {

struct ModuleQuant {
  QuantScheme scheme;
  FormatId act = FormatId::F32;
  bool act_static = false;
  float act_clip = 1.0f;                // INT4 activations: lowbit_clip
  ActScale act_scale = ActScale::Amax;  // NVFP4 activations: lowbit_groups act_scale
};

// qc.value(key, "") for a string field, naming a value of another type instead of leaking json's type_error.
std::string string_field(const json& qc, const char* key, const std::string& src) {
  if (!qc.contains(key) || qc[key].is_null()) return "";
  if (!qc[key].is_string())
    bad(src + ": quantization_config." + key + " must be a string, got " + qc[key].type_name());
  return qc[key].get<std::string>();
}

bool target_matches(const std::string& target, const std::string& module) {
  if (target == "Linear") return module != "model.embed_tokens";
  if (target.rfind("re:", 0) == 0) {
    try {
      return std::regex_match(module, std::regex(target.substr(3)));
    } catch (const std::regex_error&) {
      bad("quantization_config: target '" + target + "' is not a valid regular expression");
    }
  }
  return target == module;
}

FormatId act_format_from_args(const json& a, const std::string& where) {
  if (a.is_null()) return FormatId::F32;
  const int bits = a.value("num_bits", 8);
  const std::string type = a.value("type", std::string("int"));
  if (bits == 8 && type == "int") return FormatId::INT8;
  if (bits == 8 && type == "float") return FormatId::E4M3FN;
  if (bits == 4 && type == "int") {
    if (!a.value("dynamic", true))
      bad(where +
          ": static 4-bit input activations are not supported (lowbit's int4 activations take "
          "per-token dynamic scales)");
    return FormatId::INT4;
  }
  // NVFP4: dynamic groups of 16 (lowbit_groups' "act" names the format; without it these args mean NVFP4).
  if (bits == 4 && type == "float" && a.value("strategy", std::string()) == "group" &&
      a.value("group_size", 0) == 16) {
    if (!(a.contains("dynamic") && a["dynamic"] == true))
      bad(where +
          ": static 4-bit float input activations are not supported (lowbit's nvfp4 activations take "
          "per-token dynamic scales)");
    return FormatId::NVFP4;
  }
  bad(where + ": input activations of " + std::to_string(bits) + "-bit " + type +
      " are not supported (lowbit serves int8, int4, nvfp4 (float, groups of 16) and fp8 activations)");
}

}  // namespace

namespace {

// The online R4 of a rotated checkpoint, from config.json's lowbit_rotation.r4 and its stored factor.
void load_down_rotation(const io::HfCheckpoint& ck, const ModelConfig& c, ModelWeights* w) {
  if (!ck.config.contains("lowbit_rotation")) return;
  const json& rot = ck.config["lowbit_rotation"];
  const std::string src = ck.dir + "/config.json";
  if (!rot.is_object() || !rot.contains("r4") || rot["r4"].is_null()) return;
  const json& r4 = rot["r4"];
  int64_t n = 0, m = 0;
  std::string how;
  try {
    n = r4.at("order").get<int64_t>(), m = r4.at("factor").get<int64_t>();
    how = r4.value("construction", std::string("given"));
  } catch (const json::exception& e) {
    bad(src + ": lowbit_rotation.r4 is malformed (" + e.what() + "); quantize the model again");
  }
  if (n != c.ffn_dim || m < 1 || n % m != 0)
    bad(src + ": lowbit_rotation.r4 has order " + std::to_string(n) + " and factor " + std::to_string(m) +
        ", which do not fit the FFN width " + std::to_string(c.ffn_dim));
  std::vector<float> hm{1.0f};
  if (m > 1) {
    const TensorView& t = need(ck.tensors, kDownRotationTensor, DType::F32, m * m, ck.dir);
    hm.resize(static_cast<size_t>(m * m));
    std::memcpy(hm.data(), t.data, t.nbytes);
  }
  try {
    w->down_rotation = hadamard_with_factor(n, std::move(hm), how);
  } catch (const Error& e) {
    bad(src + ": the stored R4 factor is unusable: " + e.what());
  }
}

}  // namespace

ModelWeights load_quantized_weights(const io::HfCheckpoint& ck, const ModelConfig& c,
                                    std::shared_ptr<const void> owner, DenseMode mode) {
  const json& qc = ck.config["quantization_config"];
  const std::string src = ck.dir + "/config.json";
  const std::string method = string_field(qc, "quant_method", src);
  if (is_hub_quant_method(method)) return load_hub_quantized_weights(ck, c, std::move(owner), mode);
  if (method != "compressed-tensors")
    bad(src + ": quant_method '" + method +
        "' is not supported; lowbit loads compressed-tensors, GPTQ (AutoGPTQ/GPTQModel) and AWQ (AutoAWQ "
        "GEMM) checkpoints (convert others with llm-compressor, or quantize the 16-bit model with lowbit "
        "quantize)");
  const std::string global_format = string_field(qc, "format", src);
  std::vector<std::string> ignore;
  if (qc.contains("ignore") && qc["ignore"].is_array())
    for (auto& x : qc["ignore"])
      if (x.is_string()) ignore.push_back(x.get<std::string>());
  struct Group {
    std::vector<std::string> targets;
    ModuleQuant mq;
  };
  std::vector<Group> groups;
  if (!qc.contains("config_groups") || !qc["config_groups"].is_object())
    bad(src + ": quantization_config has no config_groups object");
  for (auto it = qc["config_groups"].begin(); it != qc["config_groups"].end(); ++it) {
    const json& g = it.value();
    const std::string where = src + " config_groups." + it.key();
    Group gr;
    try {
      for (auto& t : g.at("targets")) gr.targets.push_back(t.get<std::string>());
      const std::string fmt = g.value("format", global_format);
      // lowbit's exact scheme: quantization_config.lowbit_groups.<group> (compressed-tensors' own group and
      // args models forbid extra keys), or the group's "lowbit_scheme" in checkpoints written before that.
      const json* lg = nullptr;
      if (qc.contains("lowbit_groups") && qc["lowbit_groups"].is_object() &&
          qc["lowbit_groups"].contains(it.key()))
        lg = &qc["lowbit_groups"][it.key()];
      if (lg && lg->contains("scheme"))
        gr.mq.scheme = parse_scheme(lg->at("scheme").get<std::string>());
      else if (g.contains("lowbit_scheme"))
        gr.mq.scheme = parse_scheme(g["lowbit_scheme"].get<std::string>());
      else
        gr.mq.scheme = scheme_from_ct_args(g.at("weights"), fmt, where);
      if (g.contains("input_activations") && !g["input_activations"].is_null()) {
        gr.mq.act = act_format_from_args(g["input_activations"], where);
        // compressed-tensors' args say "float, 8 bits" for E4M3 and E5M2 alike; lowbit_groups names which.
        // (Checkpoints written before lowbit_groups: input_activations.lowbit_format.)
        const json* an = lg && lg->contains("act") ? &lg->at("act")
                         : g["input_activations"].contains("lowbit_format")
                             ? &g["input_activations"]["lowbit_format"]
                             : nullptr;
        if (an) {
          const FormatInfo* fa = an->is_string() ? find_format(an->get<std::string>()) : nullptr;
          if (!fa || fa->bits != g["input_activations"].value("num_bits", 8))
            bad(where + ": lowbit activation format " + an->dump() +
                " is not a format of the group's input_activations num_bits");
          gr.mq.act = fa->id;
        }
        gr.mq.act_static = !g["input_activations"].value("dynamic", true);
        gr.mq.act_clip = lg && lg->contains("act_clip") ? lg->at("act_clip").get<float>()
                                                        : g["input_activations"].value("lowbit_clip", 1.0f);
        if (!(gr.mq.act_clip > 0.0f && gr.mq.act_clip <= 1.0f))
          bad(where + ": input_activations.lowbit_clip " + std::to_string(gr.mq.act_clip) +
              " is outside (0, 1]");
        if (lg && lg->contains("act_scale")) {
          const json& v = lg->at("act_scale");
          if (v == "mse")
            gr.mq.act_scale = ActScale::Mse;
          else if (v != "amax")
            bad(where + ": lowbit_groups act_scale " + v.dump() + " is not \"amax\" or \"mse\"");
          if (gr.mq.act != FormatId::NVFP4)
            bad(where + ": lowbit_groups act_scale applies to nvfp4 activations, not " +
                format_info(gr.mq.act).name);
        }
      }
    } catch (const json::exception& e) {
      bad(where + " is malformed: " + e.what());
    } catch (const UsageError& e) {
      bad(where + ": " + e.what());
    }
    groups.push_back(gr);
  }
  // Resolve a module: ignore first, then exact names, then regexes, then "Linear".
  auto resolve = [&](const std::string& module) -> const ModuleQuant* {
    for (auto& i : ignore)
      if (target_matches(i, module) && i != "Linear") return nullptr;
    for (int pass = 0; pass < 3; ++pass)
      for (auto& g : groups)
        for (auto& t : g.targets) {
          const bool exact = t == module, re = t.rfind("re:", 0) == 0, lin = t == "Linear";
          if ((pass == 0 && exact) || (pass == 1 && re && target_matches(t, module)) ||
              (pass == 2 && lin && target_matches(t, module)))
            return &g.mq;
        }
    return nullptr;
  };
  // Quantized modules have no "M.weight" of the plain shape: add placeholder views so map_weights finds every
  // role, and let the hook build the QuantizedMatrix.
  std::map<std::string, TensorView> tensors = ck.tensors;
  const int64_t D = c.dim, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn_dim;
  std::map<std::string, std::pair<int64_t, int64_t>> shapes;
  shapes["lm_head"] = {c.vocab_size, D};
  shapes["model.embed_tokens"] = {c.vocab_size, D};
  for (int64_t i = 0; i < c.n_layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    shapes[p + "self_attn.q_proj"] = {Q, D};
    shapes[p + "self_attn.k_proj"] = {KV, D};
    shapes[p + "self_attn.v_proj"] = {KV, D};
    shapes[p + "self_attn.o_proj"] = {D, Q};
    shapes[p + "mlp.gate_proj"] = {F, D};
    shapes[p + "mlp.up_proj"] = {F, D};
    shapes[p + "mlp.down_proj"] = {D, F};
  }
  std::map<std::string, const ModuleQuant*> quantized;
  for (auto& [module, shape] : shapes) {
    const bool has_q = tensors.count(module + ".weight_packed") || tensors.count(module + ".weight_scale");
    if (!has_q) continue;
    const ModuleQuant* mq = resolve(module);
    if (!mq)
      bad("module '" + module + "' in " + ck.dir +
          " has quantized tensors but no config group targets it; "
          "config.json's quantization_config does not describe this checkpoint");
    quantized[module] = mq;
    if (!tensors.count(module + ".weight")) {
      TensorView v;
      v.dtype = DType::U8;
      v.shape = {shape.first, shape.second};
      tensors[module + ".weight"] = v;
    }
  }
  const std::shared_ptr<const void> mapping = owner;
  WeightHook hook = [&](const std::string& name, const TensorView&, WeightMatrix* out) {
    const std::string module = name.size() > 7 ? name.substr(0, name.size() - 7) : name;  // strip ".weight"
    auto it = quantized.find(module);
    if (it == quantized.end()) return false;
    const auto& shape = shapes.at(module);
    const QuantScheme& scheme = it->second->scheme;
    // Weight-only GGUF blocks are read where they lie in the mapping, as from a GGUF file: the loader repacks
    // them for the Q8 kernels (kernels/kernel_plan.h) and releases the stored pages, so a lowbit checkpoint
    // runs the same kernels as a GGUF file of the same types, without a second copy of its rows.
    if (scheme.info().is_gguf() && it->second->act == FormatId::F32) {
      const TensorView& v = gguf_block_rows(tensors, module, scheme, shape.first, shape.second, ck.dir);
      *out = make_ggml_weight(mapping, v.data, scheme.info().ggml_type, shape.first, shape.second);
      return true;
    }
    auto q = std::make_shared<QuantizedMatrix>(
        unpack_quantized(tensors, module, scheme, shape.first, shape.second, ck.dir));
    *out = make_quant_weight(q);
    out->act_format = it->second->act;
    out->act_clip = it->second->act_clip;
    out->act_scale = it->second->act_scale;
    if (it->second->act != FormatId::F32 && it->second->act_static) {
      const TensorView& s = need(tensors, module + ".input_scale", DType::F32, 1, ck.dir);
      std::memcpy(&out->act_static_scale, s.data, 4);
      if (!(out->act_static_scale > 0) || !std::isfinite(out->act_static_scale))
        bad("tensor '" + module + ".input_scale' in " + ck.dir + " is not a positive finite scale");
    }
    return true;
  };
  ModelWeights w = map_weights(c, tensors, false, std::move(owner), mode, ck.dir, hook);
  load_down_rotation(ck, c, &w);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".self_attn.";
    for (int kv = 0; kv < 2; ++kv) {
      auto it = tensors.find(p + (kv ? "v_scale" : "k_scale"));
      if (it == tensors.end()) continue;
      const TensorView& v = it->second;
      const int64_t n = v.numel();
      if (v.dtype != DType::F32 || (n != 1 && n != c.n_kv_heads))
        bad("tensor '" + it->first + "' in " + ck.dir +
            " must be F32 [1] or [n_kv_heads=" + std::to_string(c.n_kv_heads) + "]");
      std::vector<float> s(static_cast<size_t>(n));
      std::memcpy(s.data(), v.data, v.nbytes);
      (kv ? w.layers[i].v_scale : w.layers[i].k_scale) = s;
    }
  }
  return w;
}

}  // namespace lowbit
