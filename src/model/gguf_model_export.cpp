#include "model/gguf_model_export.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "arch/arch_table.h"
#include "core/error.h"
#include "core/half.h"
#include "formats/format.h"
#include "formats/ggml_types.h"
#include "kernels/matmul.h"
#include "model/gguf_export_common.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace lowbit {
namespace {

using namespace gguf_detail;

// One tensor as written: `rows` rows of `row_bytes` bytes in GGUF type `type`.
struct Blob {
  bool vector = false;        // a norm / bias / rope table: rows elements of one f32 each, written 1-D
  bool layer_matrix = false;  // a decoder linear (what general.file_type describes)
  int type = 0;
  int64_t rows = 0, cols = 0, row_bytes = 0;
  std::vector<uint8_t> bytes;
  GgufTensorExport rep;
};

int64_t gguf_row_bytes(int type, int64_t cols) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  return info ? ggml_row_bytes(*info, cols) : -1;
}

Blob empty_blob(int type, int64_t rows, int64_t cols, const std::string& name) {
  Blob b;
  b.type = type;
  b.rows = rows;
  b.cols = cols;
  b.row_bytes = gguf_row_bytes(type, cols);
  if (b.row_bytes < 0)
    throw UsageError("export", "matrix '" + name + "' has rows of " + std::to_string(cols) +
                                   " elements, not a multiple of the " + type_name(type) +
                                   " block; pick another GGUF type for it");
  b.bytes.assign(static_cast<size_t>(b.row_bytes * rows), 0);
  b.rep.type = type_name(type);
  return b;
}

// Compares every written row, decoded as llama.cpp decodes it, with the source model's row (lowbit's
// dequantized values): the counts behind "exact" and the error of everything else.
void measure(const WeightMatrix& w, Blob& b) {
  std::vector<float> src(static_cast<size_t>(b.cols)), got(src.size());
  double err2 = 0, ref2 = 0, max_err = 0;
  int64_t changed = 0;
  for (int64_t r = 0; r < b.rows; ++r) {
    weight_row_f32(w, r, src.data());
    dequantize_row_ggml(b.type, b.bytes.data() + r * b.row_bytes, got.data(), b.cols);
    for (int64_t c = 0; c < b.cols; ++c) {
      const double d = static_cast<double>(got[c]) - src[c];
      ref2 += static_cast<double>(src[c]) * src[c];
      if (got[c] == src[c]) continue;
      ++changed;
      err2 += d * d;
      max_err = std::max(max_err, std::isnan(d) ? INFINITY : std::fabs(d));
    }
  }
  b.rep.changed = changed;
  b.rep.max_abs_err = max_err;
  b.rep.rel_rms_err = ref2 > 0 ? std::sqrt(err2 / ref2) : (err2 > 0 ? INFINITY : 0.0);
}

// lowbit INT / MXFP4 codes re-packed into a GGUF block type that holds the same values. Only the layouts
// whose 32-element blocks lie inside one scale cell are candidates; measure() then decides "exact".
int repack_target(const QuantScheme& s, int64_t col_block, int64_t cols) {
  if (col_block % 32 != 0 || cols % 32 != 0) return -1;
  if (s.format == FormatId::INT4) return s.symmetric ? 2 /*Q4_0*/ : 3 /*Q4_1*/;
  if (s.format == FormatId::INT8 && s.symmetric) return 8;        // Q8_0
  if (s.format == FormatId::MXFP4 && col_block == 32) return 39;  // ggml MXFP4
  return -1;
}

int exact_target(const QuantizedMatrix& q) {
  return repack_target(q.scheme, q.grid.col_block, q.cols);
}

void put_f16(uint8_t* p, float x) {
  const uint16_t h = f32_to_f16(x);
  std::memcpy(p, &h, 2);
}

Blob repack(const QuantizedMatrix& q, int type, const std::string& name) {
  Blob b = empty_blob(type, q.rows, q.cols, name);
  const int64_t nb = q.cols / 32;
  for (int64_t r = 0; r < q.rows; ++r) {
    uint8_t* row = b.bytes.data() + r * b.row_bytes;
    const int64_t i = r / q.grid.row_block;
    for (int64_t k = 0; k < nb; ++k) {
      const int64_t j = k * 32 / q.grid.col_block;
      const float s = q.scale(i, j);
      const int z = q.zero_point(i, j);
      uint32_t u[32];
      for (int e = 0; e < 32; ++e) u[e] = q.code(r, k * 32 + e);
      if (type == 2 || type == 3) {  // Q4_0 {d, qs[16]} / Q4_1 {d, m, qs[16]}: element e low, e+16 high
        uint8_t* blk = row + k * (type == 2 ? 18 : 20);
        put_f16(blk, s);
        if (type == 3) put_f16(blk + 2, -static_cast<float>(z) * s);
        uint8_t* qs = blk + (type == 2 ? 2 : 4);
        for (int e = 0; e < 16; ++e) qs[e] = static_cast<uint8_t>(u[e] | (u[e + 16] << 4));
      } else if (type == 8) {  // Q8_0 {d, int8 qs[32]}
        uint8_t* blk = row + k * 34;
        put_f16(blk, s);
        for (int e = 0; e < 32; ++e)
          blk[2 + e] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp<int>(int(u[e]) - z, -128, 127)));
      } else {  // ggml MXFP4 {E8M0 e, qs[16]}: the stored exponent byte, E2M1 codes e low / e+16 high
        uint8_t* blk = row + k * 17;
        blk[0] = q.scales[static_cast<size_t>(i * q.grid.cols + j)];
        for (int e = 0; e < 16; ++e) blk[1 + e] = static_cast<uint8_t>(u[e] | (u[e + 16] << 4));
      }
    }
  }
  return b;
}

// Decoded rows of w re-encoded as `type` (dense conversion or re-quantization).
Blob reencode(const WeightMatrix& w, int type, const std::string& name) {
  Blob b = empty_blob(type, w.rows, w.cols, name);
  std::vector<float> f(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    weight_row_f32(w, r, f.data());
    quantize_row_ggml(type, f.data(), b.bytes.data() + r * b.row_bytes, w.cols);
  }
  return b;
}

// The GGUF type --requant auto picks: the k-quant (or 32-block type) of the source's bits.
int auto_requant_type(const QuantizedMatrix& q) {
  const int bits = q.scheme.info().bits;
  if (q.cols % 256 == 0)
    return bits >= 8 ? 8 : bits >= 6 ? 14 : bits == 5 ? 13 : bits == 4 ? 12 : bits == 3 ? 11 : 10;
  return bits >= 6 ? 8 : bits == 5 ? 7 : 3;
}

std::string source_name(const WeightMatrix& w) {
  return w.kind == WeightKind::Quant ? to_string(w.q->scheme) : w.format_name();
}

Blob convert_matrix(const WeightMatrix& w, const GgufModelExportOptions& o, const std::string& name) {
  Blob b;
  if (w.kind == WeightKind::Ggml || (w.kind == WeightKind::Quant && w.q->is_gguf())) {
    b.type = w.kind == WeightKind::Ggml ? w.ggml_type : w.q->scheme.info().ggml_type;
    b.rows = w.rows;
    b.cols = w.cols;
    b.row_bytes = gguf_row_bytes(b.type, w.cols);
    const uint8_t* src = w.kind == WeightKind::Ggml ? w.data : w.q->codes.data();
    b.bytes.assign(src, src + b.row_bytes * w.rows);
    b.rep.type = type_name(b.type);
    b.rep.mapping = "copied";
    return b;
  }
  if (w.kind != WeightKind::Quant) {
    const int dense = w.kind == WeightKind::F32 ? 0 : w.kind == WeightKind::F16 ? 1 : 30;
    const int type = o.dense == "keep" ? dense : type_id(o.dense);
    b = reencode(w, type, name);
    b.rep.mapping = (type == 0 || type == 1 || type == 30) ? "dense" : "quantized";
    if (type != dense) measure(w, b);  // the stored dtype itself is copied exactly
    return b;
  }
  const QuantizedMatrix& q = *w.q;
  if (q.cols % 32 != 0) {
    // Rows no GGUF block divides (llama-quantize falls back the same way): the values themselves, as f32.
    b = reencode(w, 0, name);
    b.rep.mapping = "widened";
    measure(w, b);
    return b;
  }
  const int target = exact_target(q);
  if (target >= 0) {
    b = repack(q, target, name);
    measure(w, b);
    if (b.rep.changed == 0) {
      b.rep.mapping = "exact";
      return b;
    }
    // Q4_1 holds -zero * scale as an f16: a re-rounded min changes values by at most half an f16 ulp of it.
    if (target == 3) {
      b.rep.mapping = "min re-rounded";
      return b;
    }
  }
  if (o.requant.empty())
    throw UsageError("export",
                     "matrix '" + name + "' is " + to_string(q.scheme) +
                         ", which no GGUF block type holds exactly (q4_0/q8_0 take int4/int8 sym "
                         "groups of 32k, q4_1 int4 asym, mxfp4 OCP MXFP4); pass --requant auto (or a "
                         "GGUF type) to re-quantize such matrices from their values, the error is "
                         "reported");
  const int type = o.requant == "auto" ? auto_requant_type(q) : type_id(o.requant);
  b = reencode(w, type, name);
  b.rep.mapping = "re-quantized";
  measure(w, b);
  return b;
}

// Rows of a q/k matrix (or bias) from the Hugging Face half-split order into llama.cpp's interleaved pairs.
void interleave_rows(Blob& b, int64_t n_heads, int64_t head_dim) {
  std::vector<uint8_t> out(b.bytes.size());
  const int64_t half = head_dim / 2, rb = b.row_bytes;
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int s = 0; s < 2; ++s)
        std::memcpy(out.data() + (h * head_dim + 2 * i + s) * rb,
                    b.bytes.data() + (h * head_dim + i + s * half) * rb, static_cast<size_t>(rb));
  b.bytes = std::move(out);
}

Blob vector_blob(const std::vector<float>& v) {
  Blob b;
  b.vector = true;
  b.type = 0;
  b.rows = static_cast<int64_t>(v.size());
  b.cols = 1;
  b.row_bytes = 4;
  b.bytes.resize(v.size() * 4);
  std::memcpy(b.bytes.data(), v.data(), b.bytes.size());
  b.rep.type = "f32";
  b.rep.source = "f32";
  b.rep.mapping = "dense";
  return b;
}

nlohmann::json read_tokenizer_json(const Model& m) {
  namespace fs = std::filesystem;
  fs::path dir = fs::is_directory(m.path) ? fs::path(m.path) : fs::path(m.path).parent_path();
  std::ifstream f(dir / "tokenizer.json");
  if (!f) return nullptr;
  try {
    return nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    fail("export", (dir / "tokenizer.json").string() + " is not valid JSON (" + e.what() + ")");
  }
}

// What export_gguf_model and gguf_export_sizes share: the refusals, the hyper-parameters and tokenizer
// written into `w`, and the tensors in file order.
struct ExportEntry {
  TensorRole role;
  int64_t layer;  // -1: not per layer
  std::string name;
  bool matrix;
};
struct ExportSetup {
  VocabExtension ext;
  bool to_interleaved = false;
  std::vector<ExportEntry> entries;
};

ExportSetup begin_export(const Model& m, const GgufModelExportOptions& o, io::GgufWriter& w,
                         GgufModelExportReport& rep) {
  const ModelConfig& c = m.config;
  const ModelWeights& W = m.weights;
  if (m.format == "gguf")
    throw UsageError("export",
                     "'" + m.path +
                         "' is already GGUF; re-quantize it with llama.cpp's llama-quantize, or export "
                         "the Hugging Face / llama2.c source or a lowbit checkpoint");
  if (W.down_rotation.valid())
    throw UsageError("export", "'" + m.path +
                                   "' is a rotated checkpoint whose down_proj expects an online Hadamard "
                                   "transform, which llama.cpp does not run; export the unrotated model");
  if (o.dense != "keep") type_id(o.dense);
  if (!o.requant.empty() && o.requant != "auto") type_id(o.requant);
  const ArchRow& arow = arch_row(c.arch);
  ExportSetup st;
  st.to_interleaved = arow.gguf_rope == RopeStyle::Interleaved && c.rope_style == RopeStyle::Half;
  if (arow.gguf_rope != RopeStyle::Interleaved && c.rope_style == RopeStyle::Interleaved)
    throw UsageError("export", "'" + m.path + "' has interleaved RoPE rows but llama.cpp's " +
                                   arow.gguf_arch +
                                   " uses the half-split order; this combination is not exported");
  // general.file_type is set again by the caller, in place, once the matrices' types are known.
  write_hparams(w, c, o.name, 0);
  // The tokenizer before the tensors: appended byte tokens add embedding rows.
  st.ext.n_tokens = c.vocab_size;
  const nlohmann::json tj = m.format == "hf" ? read_tokenizer_json(m) : nlohmann::json();
  if (!tj.is_null())
    st.ext = write_tokenizer_json(w, tj, c);
  else if (m.tokenizer)
    st.ext = write_tokenizer_spm(w, *m.tokenizer, c);
  else
    rep.notes.push_back("no tokenizer found: the GGUF file has none (llama.cpp needs one to run)");
  rep.appended_tokens = st.ext.appended;
  w.set_u32(arow.gguf_arch + std::string(".vocab_size"), static_cast<uint32_t>(st.ext.n_tokens));
  for (const TensorRoleRow& row : tensor_roles()) {
    if (row.when == Presence::QkvBias && !c.qkv_bias) continue;
    if (row.when == Presence::QkNorm && !c.qk_norm) continue;
    if (row.role == TensorRole::LmHead && W.tied()) continue;  // llama.cpp reads token_embd for the output
    const int64_t layers = row.per_layer ? c.n_layers : 1;
    for (int64_t l = 0; l < layers; ++l) {
      const int64_t layer = row.per_layer ? l : -1;
      st.entries.push_back(
          {row.role, layer, gguf_tensor_name(row.role, layer), row.kind == RoleKind::Matrix});
    }
  }
  return st;
}

// general.file_type and general.quantization_version, from the matrices' types.
void set_file_type(io::GgufWriter& w, const std::vector<std::pair<std::string, Blob>>& out,
                   GgufModelExportReport& rep) {
  // The type holding most bytes of the decoder linears (as llama-quantize names files).
  std::map<int, int64_t> by_type;
  bool quantized = false;
  for (auto& [n, b] : out) {
    if (b.layer_matrix) by_type[b.type] += b.rep.bytes;
    quantized |= !b.vector && b.type != 0 && b.type != 1 && b.type != 30;
  }
  int file_type = 0;
  for (auto& [t, bytes] : by_type)
    if (bytes > by_type[file_type]) file_type = t;
  rep.file_type = type_name(file_type);
  w.set_u32("general.file_type", llama_file_type(file_type));
  if (quantized) w.set_u32("general.quantization_version", 2);
}

}  // namespace

int gguf_exact_type(const QuantScheme& s, int64_t rows, int64_t cols) {
  const FormatInfo& info = s.info();
  if (info.is_gguf()) {
    const GgmlTypeInfo* t = ggml_type_info(info.ggml_type);
    return t && cols % t->block_elems == 0 ? info.ggml_type : -1;
  }
  const int t = repack_target(s, scale_grid(s, rows, cols).col_block, cols);
  if (t == 3) return -1;  // Q4_1's min is -zero * scale re-rounded to f16
  if ((t == 2 || t == 8) && s.scale_type != ScaleType::F16) return -1;  // Q4_0 / Q8_0 store d as f16
  return t;
}

int64_t GgufExportSizes::matrix_bytes(const std::string& name, int ggml_type) const {
  const auto it = matrices.find(name);
  if (it == matrices.end()) return -1;
  const int64_t rb = gguf_row_bytes(ggml_type, it->second.cols);
  if (rb < 0) return -1;
  return (it->second.rows * rb + alignment - 1) / alignment * alignment;
}

GgufExportSizes gguf_export_sizes(const Model& m, const GgufModelExportOptions& o) {
  GgufModelExportReport rep;
  io::GgufWriter w;
  const ExportSetup st = begin_export(m, o, w, rep);
  GgufExportSizes z;
  auto& M = const_cast<ModelWeights&>(m.weights);  // the accessors are non-const; nothing is modified
  uint64_t data = 0;
  auto align = [&](uint64_t n) { return (n + z.alignment - 1) / z.alignment * z.alignment; };
  for (const ExportEntry& e : st.entries) {
    if (e.matrix) {
      const WeightMatrix* wm = M.matrix(e.role, e.layer);
      int64_t rows = wm->rows;
      if (e.role == TensorRole::TokEmbed || e.role == TensorRole::LmHead) rows += st.ext.appended;
      z.matrices[lowbit_tensor_name(e.role, e.layer)] = {rows, wm->cols};
      w.add_tensor(e.name, 0, {rows, wm->cols}, nullptr, static_cast<size_t>(4 * rows * wm->cols));
      data += align(static_cast<uint64_t>(4 * rows * wm->cols));
    } else {
      const size_t n = M.vector(e.role, e.layer)->size();
      w.add_tensor(e.name, 0, {static_cast<int64_t>(n)}, nullptr, 4 * n);
    }
  }
  if (!m.weights.rope_freq_factors.empty()) {
    const size_t n = m.weights.rope_freq_factors.size();
    w.add_tensor("rope_freqs.weight", 0, {static_cast<int64_t>(n)}, nullptr, 4 * n);
  }
  w.set_u32("general.file_type", 0);
  w.set_u32("general.quantization_version", 2);  // written when anything is quantized: counted always
  // The header and the vectors: the file's bytes less the matrices' padded data.
  z.fixed_bytes = static_cast<int64_t>(w.file_bytes(static_cast<uint32_t>(z.alignment)) - data);
  return z;
}

GgufModelExportReport export_gguf_model(const Model& m, const GgufModelExportOptions& o,
                                        const std::string& path) {
  const ModelConfig& c = m.config;
  GgufModelExportReport rep;
  io::GgufWriter w;
  const ExportSetup st = begin_export(m, o, w, rep);
  const VocabExtension& ext = st.ext;
  using enum TensorRole;
  bool act_note = false;
  std::vector<std::pair<std::string, Blob>> out;
  auto& M = const_cast<ModelWeights&>(m.weights);  // the accessors are non-const; nothing is modified
  for (const ExportEntry& e : st.entries) {
    Blob b;
    if (e.matrix) {
      const WeightMatrix* wm = M.matrix(e.role, e.layer);
      b = convert_matrix(*wm, o, e.name);
      b.rep.source = source_name(*wm);
      b.layer_matrix = e.layer >= 0;
      if (wm->act_format != FormatId::F32 && !act_note && (act_note = true))
        rep.notes.push_back("activation quantization (" + std::string(format_info(wm->act_format).name) +
                            ") is not part of GGUF: llama.cpp quantizes activations its own way");
    } else {
      b = vector_blob(*M.vector(e.role, e.layer));
    }
    if (st.to_interleaved && (e.role == Q || e.role == BiasQ)) interleave_rows(b, c.n_heads, c.head_dim);
    if (st.to_interleaved && (e.role == K || e.role == BiasK)) interleave_rows(b, c.n_kv_heads, c.head_dim);
    if (ext.appended > 0 && (e.role == TokEmbed || e.role == LmHead)) {
      // Rows of the appended byte tokens: copies of <unk>'s (the source model reads an unknown character
      // as <unk>), zeros (every type decodes zero bytes to 0) without one.
      const int64_t rows = b.rows;
      b.bytes.resize(static_cast<size_t>((rows + ext.appended) * b.row_bytes), 0);
      if (ext.row_source >= 0 && ext.row_source < rows)
        for (int64_t r = rows; r < rows + ext.appended; ++r)
          std::memcpy(b.bytes.data() + r * b.row_bytes, b.bytes.data() + ext.row_source * b.row_bytes,
                      static_cast<size_t>(b.row_bytes));
      b.rows += ext.appended;
    }
    b.rep.name = e.name;
    b.rep.bytes = static_cast<int64_t>(b.bytes.size());
    out.emplace_back(e.name, std::move(b));
  }
  if (!m.weights.rope_freq_factors.empty())
    out.emplace_back("rope_freqs.weight", vector_blob(m.weights.rope_freq_factors));
  set_file_type(w, out, rep);
  for (auto& [n, b] : out) {
    const std::vector<int64_t> shape =
        b.vector ? std::vector<int64_t>{b.rows} : std::vector<int64_t>{b.rows, b.cols};
    w.add_tensor(n, b.type, shape, b.bytes.data(), b.bytes.size());
    rep.tensors.push_back(b.rep);
  }
  w.write(path);
  rep.file_bytes = static_cast<int64_t>(std::filesystem::file_size(path));
  return rep;
}

}  // namespace lowbit
