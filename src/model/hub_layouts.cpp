// GPTQ / AWQ layouts (see hub_layouts.h).
#include "model/hub_layouts.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/half.h"

namespace lowbit {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& msg) {
  fail("model", msg);
}

constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // slot k of a word holds column j*8 + kAwqOrder[k]

int64_t group_count(int64_t cols, int group_size) {
  return group_size <= 0 ? 1 : (cols + group_size - 1) / group_size;
}

// The tensor `name` with exactly this dtype and 2-D (or 1-D) shape.
const TensorView& need_shape(const std::map<std::string, TensorView>& t, const std::string& name, DType dt,
                             const std::vector<int64_t>& shape, const std::string& source,
                             const std::string& why) {
  auto it = t.find(name);
  if (it == t.end())
    bad("tensor '" + name + "' is missing from " + source + "; the " + why + " checkpoint is incomplete");
  const TensorView& v = it->second;
  if (v.dtype != dt)
    bad("tensor '" + name + "' in " + source + " has dtype " + dtype_name(v.dtype) + ", expected " +
        dtype_name(dt) + " (" + why + " layout)");
  if (v.shape != shape || v.nbytes != static_cast<size_t>(shape_numel(shape)) * dtype_size(dt))
    bad("tensor '" + name + "' in " + source + " has shape " + shape_str(v.shape) + ", expected " +
        shape_str(shape) + " for this module's [out, in] and the config's bits/group_size (" + why +
        " layout)");
  return v;
}

uint32_t word_at(const TensorView& v, int64_t i) {
  uint32_t w;
  std::memcpy(&w, v.data + i * 4, 4);
  return w;
}

// GPTQ packs b-bit values as one LSB-first bit stream over consecutive int32 words: value k of a run starts
// at bit k*b of the words' little-endian concatenation (b = 2, 4, 8: pf = 32 / b values per word; b = 3:
// 32 values per 3 words, values 10 and 21 straddling words, as AutoGPTQ's pack). Word n of the run is
// element first + n*stride of v.
uint32_t stream_value(const TensorView& v, int64_t first, int64_t stride, int64_t k, int b) {
  const int64_t bit = k * b, n = bit / 32;
  const int off = static_cast<int>(bit % 32);
  uint64_t w = word_at(v, first + n * stride) >> off;
  if (off + b > 32) w |= static_cast<uint64_t>(word_at(v, first + (n + 1) * stride)) << (32 - off);
  return static_cast<uint32_t>(w) & ((1u << b) - 1);
}
void stream_put(std::vector<int32_t>& v, int64_t first, int64_t stride, int64_t k, int b, uint32_t value) {
  const int64_t bit = k * b, n = bit / 32;
  const int off = static_cast<int>(bit % 32);
  auto& w0 = v[static_cast<size_t>(first + n * stride)];
  w0 = static_cast<int32_t>(static_cast<uint32_t>(w0) | (value << off));
  if (off + b > 32) {
    auto& w1 = v[static_cast<size_t>(first + (n + 1) * stride)];
    w1 = static_cast<int32_t>(static_cast<uint32_t>(w1) | (value >> (32 - off)));
  }
}

uint32_t mask_of(int b) {
  return (1u << b) - 1;
}

// Values per packing unit along a GPTQ dimension: 32 / b for b = 2, 4, 8; 32 (in 3 words) for b = 3.
int gptq_unit(int b) {
  return b == 3 ? 32 : 32 / b;
}
std::string gptq_unit_text(int b) {
  return b == 3 ? "32 values per 3 int32s" : std::to_string(32 / b) + " values per int32";
}

// The lowbit scheme string for an INT matrix of `bits`, one group per `group_size` inputs (or per row).
QuantScheme int_scheme(int bits, int group_size, bool sym) {
  std::string s =
      "int" + std::to_string(bits) + (group_size <= 0 ? ":channel" : ":g" + std::to_string(group_size));
  return parse_scheme(s + (sym ? ":sym" : ":asym") + ":f16");
}

// The matrix's scale of cell (r, g) as f16 bits; UsageError when the stored scale is not exactly an f16.
uint16_t f16_scale(const QuantizedMatrix& q, int64_t r, int64_t g, const std::string& module) {
  const int sb = scale_type_bits(q.scheme.scale_type) / 8;
  const uint8_t* p = q.scales.data() + (r * q.grid.cols + g) * sb;
  if (q.scheme.scale_type == ScaleType::F16) return ld16(p);
  const float s = q.scale(r, g);
  const uint16_t h = f32_to_f16(s);
  if (f16_to_f32(h) != s)
    throw UsageError("export", "module '" + module + "': scale " + std::to_string(s) + " (" +
                                   scale_type_name(q.scheme.scale_type) +
                                   ") is not exactly representable in f16, which GPTQ/AWQ store; quantize "
                                   "with f16 scales (e.g. int4:g128:f16)");
  return h;
}

// The checks both exporters share: an INT group/channel scheme of the given bits, weight-only.
void check_exportable(const QuantizedMatrix& q, const std::string& module, const char* layout,
                      const std::vector<int>& bits) {
  const auto& s = q.scheme;
  const bool int_fmt = s.info().kind == FormatKind::Int && !s.info().is_gguf();
  const bool grid_ok = s.gran == Granularity::Channel || s.gran == Granularity::Token ||
                       (s.gran == Granularity::Group && q.grid.row_block == 1);
  if (!int_fmt || !grid_ok || std::find(bits.begin(), bits.end(), q.bits) == bits.end() || s.double_quant ||
      s.format == FormatId::NVFP4)
    throw UsageError("export", "module '" + module + "' is " + to_string(s) + "; the " + layout +
                                   " layout holds INT" + (bits.size() > 1 ? "2/3/4/8" : "4") +
                                   " weights with one scale per group of inputs (e.g. int4:g128:sym or "
                                   "int4:g128:asym); quantize with such a scheme, or export to "
                                   "compressed-tensors");
}

}  // namespace

bool is_hub_quant_method(const std::string& m) {
  return m == "gptq" || m == "awq";
}

HubQuantConfig hub_quant_config(const json& qc, const std::string& src) {
  HubQuantConfig h;
  try {
    h.method = qc.at("quant_method").get<std::string>();
    h.bits = qc.at("bits").get<int>();
    h.group_size = qc.value("group_size", 128);
    if (h.method == "gptq") {
      h.sym = qc.value("sym", true);
      h.desc_act = qc.value("desc_act", false);
      const std::string fmt = qc.value("checkpoint_format", std::string("gptq"));
      if (fmt != "gptq" && fmt != "gptq_v2")
        bad(src + ": GPTQ checkpoint_format '" + fmt +
            "' is not supported; lowbit reads \"gptq\" (AutoGPTQ) and \"gptq_v2\" (GPTQModel)");
      h.gptq_v2 = fmt == "gptq_v2";
      if (h.bits != 2 && h.bits != 3 && h.bits != 4 && h.bits != 8)
        bad(src + ": GPTQ with " + std::to_string(h.bits) +
            " bits is not supported; lowbit reads 2-, 3-, 4- and 8-bit GPTQ");
    } else if (h.method == "awq") {
      h.sym = false;
      std::string v = qc.value("version", std::string("gemm"));
      std::transform(v.begin(), v.end(), v.begin(), [](unsigned char ch) { return std::tolower(ch); });
      h.awq_version = v;
      if (v != "gemm")
        bad(src + ": AWQ version '" + v +
            "' is not supported; lowbit reads AutoAWQ's GEMM layout (re-save the model with "
            "version=\"gemm\")");
      if (h.bits != 4) bad(src + ": AWQ with " + std::to_string(h.bits) + " bits is not supported (4 only)");
    } else {
      bad(src + ": quant_method '" + h.method + "' is not GPTQ or AWQ");
    }
  } catch (const json::exception& e) {
    bad(src + ": quantization_config is malformed (" + e.what() +
        "); expected quant_method, bits, group_size");
  }
  if (h.group_size == 0 || h.group_size < -1 || h.group_size > (1 << 20))
    bad(src + ": group_size " + std::to_string(h.group_size) + " is invalid (a positive size, or -1)");
  return h;
}

std::vector<int32_t> act_order_permutation(const std::vector<int32_t>& gidx, int group_size,
                                           int declared_group_size, const std::string& what) {
  const int64_t cols = static_cast<int64_t>(gidx.size());
  const int gs = group_size > 0 && group_size <= cols ? group_size : -1;
  const int64_t groups = group_count(cols, gs);
  std::vector<int64_t> used(static_cast<size_t>(groups), 0);
  bool trivial = true;
  for (int64_t c = 0; c < cols; ++c) {
    const int32_t g = gidx[static_cast<size_t>(c)];
    if (g < 0 || g >= groups)
      bad(what + ": g_idx[" + std::to_string(c) + "] = " + std::to_string(g) + " is not a group of " +
          std::to_string(cols) + " inputs in groups of " + std::to_string(declared_group_size) + " (0.." +
          std::to_string(groups - 1) + "); the g_idx does not match the config's group_size");
    ++used[static_cast<size_t>(g)];
    trivial = trivial && g == (gs > 0 ? c / gs : 0);
  }
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t size = gs > 0 ? std::min<int64_t>(gs, cols - g * gs) : cols;
    if (used[static_cast<size_t>(g)] != size)
      bad(what + ": group " + std::to_string(g) + " holds " + std::to_string(used[static_cast<size_t>(g)]) +
          " input columns, but a group of " + std::to_string(declared_group_size) + " over " +
          std::to_string(cols) + " inputs holds " + std::to_string(size) +
          " (every group full, the last one the rest); the g_idx does not match the config's group_size");
  }
  std::vector<int32_t> perm;
  if (trivial) return perm;
  perm.resize(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) perm[static_cast<size_t>(c)] = static_cast<int32_t>(c);
  std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t c) {
    return gidx[static_cast<size_t>(a)] < gidx[static_cast<size_t>(c)];
  });
  return perm;
}

QuantizedMatrix unpack_hub_matrix(const std::map<std::string, TensorView>& t, const std::string& m,
                                  const HubQuantConfig& hc, int64_t rows, int64_t cols,
                                  const std::string& src) {
  const bool gptq = hc.method == "gptq";
  const char* why = gptq ? "GPTQ" : "AWQ";
  const int b = hc.bits, pf = gptq ? gptq_unit(b) : 32 / b;  // pf: values per packing unit
  const uint32_t mask = (1u << b) - 1;
  // A group as wide as the row (or wider, or -1) is one scale per row.
  const int gs = hc.group_size > 0 && hc.group_size <= cols ? hc.group_size : -1;
  const int64_t groups = group_count(cols, gs);
  const std::string shape = "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
  if (rows % pf != 0 || (gptq && cols % pf != 0))
    bad("module '" + m + "' in " + src + " has shape " + shape + "; the " + why + " layout packs " +
        (gptq ? gptq_unit_text(b) : std::to_string(pf) + " values per int32") + " and needs out" +
        (gptq ? " and in" : "") + " features divisible by " + std::to_string(pf));
  if (!gptq && gs > 0 && cols % gs != 0)
    bad("module '" + m + "' in " + src + " has " + std::to_string(cols) +
        " inputs, not a multiple of AWQ's " + "group_size " + std::to_string(gs));
  const int64_t zwords = rows * b / 32;  // qzeros words per group (both layouts)
  const TensorView& qw = gptq ? need_shape(t, m + ".qweight", DType::I32, {cols * b / 32, rows}, src, why)
                              : need_shape(t, m + ".qweight", DType::I32, {cols, rows / pf}, src, why);
  const TensorView& qz = need_shape(t, m + ".qzeros", DType::I32, {groups, zwords}, src, why);
  const TensorView& sc = need_shape(t, m + ".scales", DType::F16, {groups, rows}, src, why);
  // g_idx: input column c belongs to group g_idx[c]. The trivial one (c / group_size) is lowbit's grid; an
  // act-order one (desc_act without static groups) is a permutation of it: each group holds group_size
  // columns (the last one the rest), anywhere in the row. Its columns are then stored sorted by g_idx
  // (stable), so that groups are consecutive, and input_perm records where each came from.
  std::vector<int32_t> perm;
  if (gptq && t.count(m + ".g_idx")) {
    const TensorView& gi = need_shape(t, m + ".g_idx", DType::I32, {cols}, src, why);
    std::vector<int32_t> gidx(static_cast<size_t>(cols));
    std::memcpy(gidx.data(), gi.data, gidx.size() * 4);
    perm = act_order_permutation(gidx, gs, hc.group_size, "tensor '" + m + ".g_idx' in " + src);
  }
  // Zero points, [rows, groups] in lowbit's grid order.
  std::vector<int> zeros(static_cast<size_t>(rows * groups));
  bool all_mid = true;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t r0 = 0; r0 < rows; ++r0) {
      int z;
      int64_t r = r0;
      if (gptq) {
        z = static_cast<int>(stream_value(qz, g * zwords, 1, r0, b));  // packed along the output dimension
        if (!hc.gptq_v2) z += 1;  // AutoGPTQ v1 stores zero - 1; its readers add the 1 back
      } else {
        const int64_t j = r0 / pf, k = r0 % pf;
        z = static_cast<int>((word_at(qz, g * zwords + j) >> (k * b)) & mask);
        r = j * pf + kAwqOrder[k];
      }
      zeros[static_cast<size_t>(r * groups + g)] = z;
      all_mid = all_mid && z == (1 << (b - 1));
    }
  if (gptq && hc.sym && !all_mid)
    bad("module '" + m + "' in " + src + ": quantization_config says sym=true but qzeros hold zero points " +
        "other than " + std::to_string(1 << (b - 1)) +
        "; the checkpoint contradicts its config (set sym to " + "false if it is asymmetric)");
  for (int z : zeros)
    if (z > 255)
      bad("module '" + m + "' in " + src + ": a stored 8-bit GPTQ v1 zero of 255 reads as zero point 256, " +
          "which lowbit's 8-bit zero points cannot hold; re-save the model in gptq_v2 format");
  QuantizedMatrix q;
  q.scheme = int_scheme(b, gs, all_mid);
  try {
    validate(q.scheme, rows, cols);
  } catch (const UsageError& e) {
    bad("module '" + m + "' in " + src + ": " + to_string(q.scheme) + " does not fit " + shape + ": " +
        e.what());
  }
  q.rows = rows;
  q.cols = cols;
  q.elem = q.scheme.info().elem;
  q.bits = b;
  q.row_bytes = (cols * b + 7) / 8;
  q.grid = scale_grid(q.scheme, rows, cols);
  if (q.grid.rows != rows || q.grid.cols != groups)
    bad("module '" + m + "': internal grid mismatch for " + to_string(q.scheme));
  q.codes.assign(static_cast<size_t>(rows * q.row_bytes), 0);
  if (gptq) {
    // Stored column j is input column perm[j] (itself without act-order); qweight's words (i, r) run along
    // the input dimension of output r.
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t c = perm.empty() ? j : perm[static_cast<size_t>(j)];
        pack_code(q.codes.data() + r * q.row_bytes, j, b, stream_value(qw, r, rows, c, b));
      }
  } else {
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t j = 0; j < rows / pf; ++j) {
        const uint32_t w = word_at(qw, c * (rows / pf) + j);
        for (int k = 0; k < pf; ++k)
          pack_code(q.codes.data() + (j * pf + kAwqOrder[k]) * q.row_bytes, c, b, (w >> (k * b)) & mask);
      }
  }
  q.scales.resize(static_cast<size_t>(rows * groups * 2));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g)
      std::memcpy(&q.scales[(r * groups + g) * 2], sc.data + (g * rows + r) * 2, 2);
  if (!all_mid) {
    q.zeros.resize(zeros.size());
    for (size_t i = 0; i < zeros.size(); ++i) q.zeros[i] = static_cast<uint8_t>(zeros[i]);
  }
  q.input_perm = std::move(perm);
  return q;
}

std::vector<PackedTensor> pack_gptq(const QuantizedMatrix& q, bool v2, const std::string& module) {
  check_exportable(q, module, "GPTQ", {2, 3, 4, 8});
  const int b = q.bits, pf = gptq_unit(b);
  const int64_t rows = q.rows, cols = q.cols, groups = q.grid.cols;
  if (rows % pf != 0 || cols % pf != 0)
    throw UsageError("export", "module '" + module + "' is [" + std::to_string(rows) + ", " +
                                   std::to_string(cols) + "]; GPTQ packs " + gptq_unit_text(b) +
                                   " along both dimensions, so both must be multiples of " +
                                   std::to_string(pf));
  if (!q.input_perm.empty() && static_cast<int64_t>(q.input_perm.size()) != cols)
    throw UsageError("export", "module '" + module + "' has an input permutation of the wrong length");
  // Stored column j is input column perm[j] (act-order); GPTQ stores input columns in their own order with
  // g_idx naming each one's group.
  auto input_col = [&](int64_t j) { return q.input_perm.empty() ? j : int64_t{q.input_perm[j]}; };
  const int64_t zwords = rows * b / 32;
  std::vector<int32_t> qweight(static_cast<size_t>(cols * b / 32 * rows), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) stream_put(qweight, r, rows, input_col(j), b, q.code(r, j));
  std::vector<int32_t> qzeros(static_cast<size_t>(groups * zwords), 0);
  std::vector<uint16_t> scales(static_cast<size_t>(groups * rows));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      int z = q.zero_point(r, g);
      if (!v2) {
        if (z == 0)
          throw UsageError("export", "module '" + module + "' row " + std::to_string(r) +
                                         " has zero point 0, which AutoGPTQ's v1 format (stored as zero - 1) "
                                         "reads back as " +
                                         std::to_string(1 << b) +
                                         "; export with --gptq-format v2 (GPTQModel) or quantize symmetric");
        z -= 1;
      } else if (z > static_cast<int>(mask_of(b))) {
        throw UsageError("export", "module '" + module + "' row " + std::to_string(r) + " has zero point " +
                                       std::to_string(z) + ", which GPTQModel's v2 format (" +
                                       std::to_string(b) + "-bit zeros stored as they are) cannot hold; " +
                                       "export with --gptq-format v1 (AutoGPTQ, stores zero - 1)");
      }
      stream_put(qzeros, g * zwords, 1, r, b, static_cast<uint32_t>(z));
      scales[static_cast<size_t>(g * rows + r)] = f16_scale(q, r, g, module);
    }
  std::vector<int32_t> g_idx(static_cast<size_t>(cols));
  const int64_t gs = q.scheme.gran == Granularity::Group ? q.grid.col_block : cols;
  for (int64_t j = 0; j < cols; ++j) g_idx[static_cast<size_t>(input_col(j))] = static_cast<int32_t>(j / gs);
  auto bytes = [](const auto& v) {
    std::vector<uint8_t> o(v.size() * sizeof(v[0]));
    std::memcpy(o.data(), v.data(), o.size());
    return o;
  };
  return {{"qweight", DType::I32, {cols * b / 32, rows}, bytes(qweight)},
          {"qzeros", DType::I32, {groups, zwords}, bytes(qzeros)},
          {"scales", DType::F16, {groups, rows}, bytes(scales)},
          {"g_idx", DType::I32, {cols}, bytes(g_idx)}};
}

std::vector<PackedTensor> pack_awq(const QuantizedMatrix& q, const std::string& module) {
  check_exportable(q, module, "AWQ", {4});
  if (!q.input_perm.empty())
    throw UsageError("export", "module '" + module +
                                   "' has act-order input columns (a GPTQ g_idx that is not c / group_size), "
                                   "which AWQ's consecutive groups cannot hold; export with --to gptq "
                                   "(writes the g_idx, desc_act=true)");
  const int64_t rows = q.rows, cols = q.cols, groups = q.grid.cols;
  if (q.scheme.gran != Granularity::Group || cols % q.scheme.group_size != 0 || rows % 8 != 0)
    throw UsageError("export", "module '" + module + "' is [" + std::to_string(rows) + ", " +
                                   std::to_string(cols) + "] with " + to_string(q.scheme) +
                                   "; AWQ needs groups that divide the inputs and outputs in multiples of 8");
  std::vector<int32_t> qweight(static_cast<size_t>(cols * rows / 8), 0);
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t j = 0; j < rows / 8; ++j) {
      uint32_t w = 0;
      for (int k = 0; k < 8; ++k) w |= q.code(j * 8 + kAwqOrder[k], c) << (k * 4);
      qweight[static_cast<size_t>(c * (rows / 8) + j)] = static_cast<int32_t>(w);
    }
  std::vector<int32_t> qzeros(static_cast<size_t>(groups * rows / 8), 0);
  std::vector<uint16_t> scales(static_cast<size_t>(groups * rows));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t j = 0; j < rows / 8; ++j) {
      uint32_t w = 0;
      for (int k = 0; k < 8; ++k)
        w |= static_cast<uint32_t>(q.zero_point(j * 8 + kAwqOrder[k], g)) << (k * 4);
      qzeros[static_cast<size_t>(g * (rows / 8) + j)] = static_cast<int32_t>(w);
    }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g)
      scales[static_cast<size_t>(g * rows + r)] = f16_scale(q, r, g, module);
  auto bytes = [](const auto& v) {
    std::vector<uint8_t> o(v.size() * sizeof(v[0]));
    std::memcpy(o.data(), v.data(), o.size());
    return o;
  };
  return {{"qweight", DType::I32, {cols, rows / 8}, bytes(qweight)},
          {"qzeros", DType::I32, {groups, rows / 8}, bytes(qzeros)},
          {"scales", DType::F16, {groups, rows}, bytes(scales)}};
}

std::map<std::string, std::pair<int64_t, int64_t>> hf_matrix_shapes(const ModelConfig& c) {
  const int64_t D = c.dim, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn_dim;
  std::map<std::string, std::pair<int64_t, int64_t>> shapes;
  shapes["lm_head"] = {c.vocab_size, D};
  shapes["model.embed_tokens"] = {c.vocab_size, D};
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    shapes[p + "self_attn.q_proj"] = {Q, D};
    shapes[p + "self_attn.k_proj"] = {KV, D};
    shapes[p + "self_attn.v_proj"] = {KV, D};
    shapes[p + "self_attn.o_proj"] = {D, Q};
    shapes[p + "mlp.gate_proj"] = {F, D};
    shapes[p + "mlp.up_proj"] = {F, D};
    shapes[p + "mlp.down_proj"] = {D, F};
  }
  return shapes;
}

ModelWeights load_hub_quantized_weights(const io::HfCheckpoint& ck, const ModelConfig& c,
                                        std::shared_ptr<const void> owner, DenseMode mode) {
  const HubQuantConfig hc = hub_quant_config(ck.config["quantization_config"], ck.dir + "/config.json");
  // Quantized modules have no "M.weight": placeholders let map_weights find every role; the hook unpacks.
  std::map<std::string, TensorView> tensors = ck.tensors;
  const auto shapes = hf_matrix_shapes(c);
  for (auto& [module, shape] : shapes) {
    if (!tensors.count(module + ".qweight")) continue;
    if (tensors.count(module + ".weight"))
      bad("module '" + module + "' in " + ck.dir + " has both a plain weight and " + hc.method +
          " tensors; the checkpoint is inconsistent");
    TensorView v;
    v.dtype = DType::U8;
    v.shape = {shape.first, shape.second};
    tensors[module + ".weight"] = v;
  }
  WeightHook hook = [&](const std::string& name, const TensorView&, WeightMatrix* out) {
    const std::string module = name.size() > 7 ? name.substr(0, name.size() - 7) : name;  // strip ".weight"
    auto it = shapes.find(module);
    if (it == shapes.end() || !tensors.count(module + ".qweight")) return false;
    *out = make_quant_weight(std::make_shared<QuantizedMatrix>(
        unpack_hub_matrix(tensors, module, hc, it->second.first, it->second.second, ck.dir)));
    return true;
  };
  return map_weights(c, tensors, false, std::move(owner), mode, ck.dir, hook);
}

}  // namespace lowbit
