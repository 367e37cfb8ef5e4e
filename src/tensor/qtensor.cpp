// Scalar reference quantization / dequantization of weight matrices (see qtensor.h for the layout).
#include "tensor/qtensor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/error.h"
#include "core/half.h"
#include "core/parallel.h"
#include "formats/codebook.h"
#include "formats/ggml_types.h"
#include "formats/minifloat.h"
#include "tensor/clip_search.h"

namespace lowbit {

// Term for term Coder::encode + value of an INT cell with div > 0, the sum in a register (kept in memory, the
// generic form made the search ~2x slower).
void int_cells_error_scalar(const float* x, const float* w, int64_t n, const float* div, const float* scale,
                            const float* zero, int K, float umax, double* err) {
  for (int k = 0; k < K; ++k) {
    const int zi = static_cast<int>(zero[k]);
    double e = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float v = int_code(x[i], div[k], zero[k], umax);
      const float val = static_cast<float>(static_cast<int>(static_cast<uint32_t>(v)) - zi) * scale[k];
      const double d = static_cast<double>(val) - x[i];
      e += (w ? w[i] : 1.0) * d * d;
    }
    err[k] = e;
  }
}

namespace {
std::atomic<IntCellsErrorFn> g_int_cells_error{&int_cells_error_scalar};
}  // namespace

void int_cells_error(const float* x, const float* w, int64_t n, const float* div, const float* scale,
                     const float* zero, int K, float umax, double* err) {
  g_int_cells_error.load(std::memory_order_relaxed)(x, w, n, div, scale, zero, K, umax, err);
}

void set_int_cells_error(IntCellsErrorFn f) {
  g_int_cells_error.store(f ? f : &int_cells_error_scalar, std::memory_order_relaxed);
}

IntCellsErrorFn installed_int_cells_error() {
  return g_int_cells_error.load(std::memory_order_relaxed);
}

namespace {

bool is_plain_fmt(FormatId f) {
  return f == FormatId::F32 || f == FormatId::F16 || f == FormatId::BF16;
}

// NF4 double quantization: the one expression used both when quantizing and when decoding a scale, so the
// scale that quantized the elements is bit-identical to the one dequantization sees.
inline float dq_scale_value(float chunk_scale, int8_t q, float offset) {
  return chunk_scale * static_cast<float>(q) / 127.0f + offset;
}

// Parameters of one scale cell: elements are encoded from (x * pre) / div; the effective scale is div / pre.
struct CellParams {
  float div = 0.0f;  // 0 means "all elements encode to zero"
  float pre = 1.0f;  // NVFP4: the tensor global scale
  int zero = 0;      // INT: zero point (2^(b-1) when symmetric)
};

struct Coder {
  const FormatInfo* fmt;   // scheme format (mxfp4, int4, ...)
  const FormatInfo* elem;  // code format
  ScaleType st;
  bool is_int, sym, mx, nvfp4;
  int bits;
  int umax;  // 2^b - 1 for INT
  int emax;  // MX: floor(log2(max finite element))
  float global = 1.0f;

  uint32_t encode(float x, const CellParams& p) const {
    if (is_int) {
      if (!(p.div > 0)) return static_cast<uint32_t>(p.zero);
      return static_cast<uint32_t>(int_code(x, p.div, static_cast<float>(p.zero), static_cast<float>(umax)));
    }
    if (!(p.div > 0)) return elem->encode(0.0f, true);
    return elem->encode(x * p.pre / p.div, true);
  }
  float value(uint32_t u, const CellParams& p) const {
    const float s = p.div / p.pre;
    if (is_int) return static_cast<float>(static_cast<int>(u) - p.zero) * s;
    return elem->decode(u) * s;
  }

  // Params for a clip range: amax (symmetric) or [mn, mx] (asymmetric), scaled by ratio. Writes the stored
  // scale code and zero point.
  CellParams params_for(float amax, float mn, float mx, uint32_t* code) const {
    CellParams p;
    if (mx_rule()) {
      int e = -127;
      if (amax > 0) {
        int e2 = 0;
        std::frexp(amax, &e2);
        e = std::clamp(e2 - 1 - emax, -127, 127);
      }
      *code = static_cast<uint32_t>(e + 127);
      p.div = e8m0_to_f32(static_cast<uint8_t>(*code));
      return p;
    }
    if (nvfp4) {
      *code = f32_to_fp8_e4m3fn(amax / 6.0f * global, true);
      p.div = fp8_e4m3fn_to_f32(static_cast<uint8_t>(*code));
      p.pre = global;
      return p;
    }
    float raw;
    if (is_int && !sym) {
      mn = std::fmin(mn, 0.0f);
      mx = std::fmax(mx, 0.0f);
      raw = (mx - mn) / static_cast<float>(umax);
    } else {
      raw = amax / static_cast<float>(elem->max_finite);
    }
    *code = scale_encode(st, raw);
    p.div = scale_decode(st, *code);
    if (!(p.div > 0) || !std::isfinite(p.div)) p.div = 0.0f;
    if (is_int) {
      if (sym) {
        p.zero = 1 << (bits - 1);
      } else {
        p.zero =
            p.div > 0
                ? static_cast<int>(std::clamp(std::nearbyint(-mn / p.div), 0.0f, static_cast<float>(umax)))
                : 0;
      }
    }
    return p;
  }
  bool mx_rule() const { return mx && !nvfp4; }
};

Coder make_coder(const QuantScheme& s) {
  Coder c{};
  c.fmt = &s.info();
  c.elem = &format_info(c.fmt->elem);
  c.st = s.scale_type;
  c.is_int = c.elem->kind == FormatKind::Int;
  c.sym = s.symmetric;
  c.nvfp4 = c.fmt->id == FormatId::NVFP4;
  c.mx = c.fmt->is_microscaled();
  c.bits = c.elem->bits;
  c.umax = (1 << c.bits) - 1;
  c.emax = static_cast<int>(std::floor(std::log2(c.elem->max_finite)));
  return c;
}

// Chooses the cell params for n values x (weights w or nullptr) under the scheme's search.
CellParams choose_cell(const Coder& c, const QuantScheme& s, const float* x, const float* w, int64_t n,
                       uint32_t* code) {
  float amax = 0.0f, mn = std::numeric_limits<float>::infinity(), mx = -mn;
  for (int64_t i = 0; i < n; ++i) {  // finite values (check_finite): comparisons equal fmin / fmax
    const float a = std::fabs(x[i]);
    amax = a > amax ? a : amax;
    mn = x[i] < mn ? x[i] : mn;
    mx = x[i] > mx ? x[i] : mx;
  }
  CellParams best = c.params_for(amax, mn, mx, code);
  if (s.search != ScaleSearch::Mse || amax == 0.0f) return best;
  const int steps = std::max(2, s.search_steps);
  auto ratio = [&](int k) {
    return 1.0f - (1.0f - s.search_min_ratio) * static_cast<float>(k) / static_cast<float>(steps - 1);
  };
  // INT cells: every candidate's error in one batched call (int_cells_error, vectorised over candidates),
  // then the same first-smallest pick as the loop below.
  constexpr int kBatch = 64;
  if (c.is_int && steps <= kBatch) {
    CellParams ps[kBatch];
    uint32_t codes[kBatch];
    float div[kBatch], scale[kBatch], zero[kBatch];
    double err[kBatch];
    bool ok = true;
    for (int k = 0; k < steps && ok; ++k) {
      codes[k] = *code;
      ps[k] = k == 0 ? best : c.params_for(amax * ratio(k), mn * ratio(k), mx * ratio(k), &codes[k]);
      ok = ps[k].div > 0;
      div[k] = ps[k].div;
      scale[k] = ps[k].div / ps[k].pre;
      zero[k] = static_cast<float>(ps[k].zero);
    }
    if (ok) {
      int_cells_error(x, w, n, div, scale, zero, steps, static_cast<float>(c.umax), err);
      int pick = 0;
      for (int k = 1; k < steps; ++k)
        if (err[k] < err[pick]) pick = k;
      *code = codes[pick];
      return ps[pick];
    }
  }
  auto err_of = [&](const CellParams& p) {
    if (c.is_int && p.div > 0) {
      const float div = p.div, scale = p.div / p.pre, zero = static_cast<float>(p.zero);
      double e = 0;
      int_cells_error_scalar(x, w, n, &div, &scale, &zero, 1, static_cast<float>(c.umax), &e);
      return e;
    }
    double e = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(c.value(c.encode(x[i], p), p)) - x[i];
      e += (w ? w[i] : 1.0) * d * d;
    }
    return e;
  };
  double best_err = err_of(best);
  for (int k = 1; k < steps; ++k) {
    uint32_t cand_code = 0;
    CellParams p = c.params_for(amax * ratio(k), mn * ratio(k), mx * ratio(k), &cand_code);
    const double e = err_of(p);
    if (e < best_err) {
      best_err = e;
      best = p;
      *code = cand_code;
    }
  }
  return best;
}

void check_finite(const float* w, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows * cols; ++i)
    if (!std::isfinite(w[i]))
      fail("formats", "cannot quantize a non-finite weight (" +
                          std::string(std::isnan(w[i]) ? "NaN" : "Inf") + ") at row " +
                          std::to_string(i / cols) + ", col " + std::to_string(i % cols) +
                          "; fix the source tensor (NaN/Inf weights are a bug upstream)");
}

// LUT2/3/4: one k-means table per row (weighted by the per-column importance when given), then each code is
// the nearest entry of the row's f16 table, so the codes are decided by the values dequantization sees.
void quantize_codebook_rows(const float* w, const float* importance, QuantizedMatrix& q) {
  const int k = 1 << q.bits;
  q.scales.assign(static_cast<size_t>(q.rows * k * 2), 0);
  q.codes.assign(static_cast<size_t>(q.rows * q.row_bytes), 0);
  parallel_for(q.rows, 1, [&](int64_t b, int64_t e) {
    uint16_t h[16];
    float t[16];
    for (int64_t r = b; r < e; ++r) {
      const float* x = w + r * q.cols;
      fit_row_codebook(x, importance, q.cols, q.bits, h);
      std::memcpy(q.scales.data() + r * k * 2, h, static_cast<size_t>(k) * 2);
      for (int i = 0; i < k; ++i) t[i] = f16_to_f32(h[i]);
      uint8_t* row = q.codes.data() + r * q.row_bytes;
      for (int64_t c = 0; c < q.cols; ++c) pack_code(row, c, q.bits, codebook_encode(t, k, x[c]));
    }
  });
}

}  // namespace

bool QuantizedMatrix::is_plain() const {
  return is_plain_fmt(scheme.format);
}

float QuantizedMatrix::scale(int64_t i, int64_t j) const {
  const int64_t k = i * grid.cols + j;
  if (scheme.double_quant)
    return dq_scale_value(dq_scales[k / 256], static_cast<int8_t>(scales[k]), dq_offset);
  const int sb = scale_type_bits(scheme.scale_type) / 8;
  const float s = scale_decode(scheme.scale_type, scale_load(scheme.scale_type, scales.data() + k * sb));
  return scheme.format == FormatId::NVFP4 ? s / global_scale : s;
}

int QuantizedMatrix::zero_point(int64_t i, int64_t j) const {
  if (format_info(elem).kind != FormatKind::Int) return 0;
  if (scheme.symmetric) return 1 << (bits - 1);
  return zeros[i * grid.cols + j];
}

std::vector<float> QuantizedMatrix::decoded_scales() const {
  std::vector<float> out(static_cast<size_t>(grid.cells()));
  for (int64_t i = 0; i < grid.rows; ++i)
    for (int64_t j = 0; j < grid.cols; ++j) out[i * grid.cols + j] = scale(i, j);
  return out;
}

uint32_t QuantizedMatrix::code(int64_t r, int64_t c) const {
  return unpack_code(row_data(r), c, bits);
}

size_t QuantizedMatrix::storage_bytes() const {
  size_t b = codes.size() + scales.size() + zeros.size() + dq_scales.size() * sizeof(float) +
             input_perm.size() * sizeof(int32_t);
  if (scheme.double_quant) b += sizeof(float);
  if (scheme.format == FormatId::NVFP4) b += sizeof(float);
  return b;
}

QuantizedMatrix quantize_matrix(const float* w, int64_t rows, int64_t cols, const QuantScheme& s,
                                const float* importance, float nvfp4_amax) {
  validate(s, rows, cols);
  check_finite(w, rows, cols);
  const FormatInfo& fi = s.info();
  QuantizedMatrix q;
  q.scheme = s;
  q.rows = rows;
  q.cols = cols;
  q.elem = fi.elem;

  if (fi.is_gguf()) {
    if (!fi.quantize_row)
      throw UsageError("formats", std::string("quantizing to ") + fi.name +
                                      " is not implemented (GGUF quantizers: " + gguf_quantizer_names() +
                                      "); it can only be read");
    q.row_bytes = cols / fi.block_elems * fi.block_bytes;
    q.codes.assign(static_cast<size_t>(rows * q.row_bytes), 0);
    // k-quants take the per-column importance into their scale/min search; the other blocks have none.
    const bool weighted = importance && fi.quantize_row_weighted;
    parallel_for(rows, 1, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        uint8_t* dst = q.codes.data() + r * q.row_bytes;
        if (weighted)
          fi.quantize_row_weighted(w + r * cols, dst, cols, importance, nullptr);
        else
          fi.quantize_row(w + r * cols, dst, cols);
      }
    });
    return q;
  }

  if (is_plain_fmt(fi.id)) {
    q.bits = fi.bits;
    q.row_bytes = cols * fi.bits / 8;
    q.codes.assign(static_cast<size_t>(rows * q.row_bytes), 0);
    const int nb = fi.bits / 8;
    parallel_for(rows, 16, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const uint32_t code = fi.encode(w[r * cols + c], false);
          std::memcpy(q.codes.data() + r * q.row_bytes + c * nb, &code, static_cast<size_t>(nb));
        }
    });
    return q;
  }

  if (fi.kind == FormatKind::Codebook) {
    q.bits = fi.bits;
    q.row_bytes = (cols * q.bits + 7) / 8;
    q.grid = scale_grid(s, rows, cols);
    quantize_codebook_rows(w, importance, q);
    return q;
  }

  Coder coder = make_coder(s);
  q.bits = coder.bits;
  q.row_bytes = (cols * q.bits + 7) / 8;
  q.grid = scale_grid(s, rows, cols);
  const ScaleGrid g = q.grid;
  if (coder.nvfp4) {
    float amax = 0.0f;
    for (int64_t i = 0; i < rows * cols; ++i) amax = std::fmax(amax, std::fabs(w[i]));
    if (nvfp4_amax > 0) {
      if (nvfp4_amax < amax)
        fail("tensor", "NVFP4 group amax " + std::to_string(nvfp4_amax) + " is below the matrix's own " +
                           std::to_string(amax) + "; pass the largest |w| of the fused group");
      amax = nvfp4_amax;
    }
    q.global_scale = amax > 0 ? 448.0f * 6.0f / amax : 1.0f;
    coder.global = q.global_scale;
  }
  const int sb = s.double_quant ? 1 : scale_type_bits(s.scale_type) / 8;
  q.scales.assign(static_cast<size_t>(g.cells() * sb), 0);
  const bool asym = coder.is_int && !s.symmetric;
  if (asym) q.zeros.assign(static_cast<size_t>(g.cells()), 0);
  std::vector<CellParams> params(static_cast<size_t>(g.cells()));
  std::vector<float> raw_scale(s.double_quant ? static_cast<size_t>(g.cells()) : 0);

  // Pass 1: one scale (and zero) per cell, parallel over grid rows.
  parallel_for(g.rows, 1, [&](int64_t b, int64_t e) {
    std::vector<float> xs, ws;
    for (int64_t i = b; i < e; ++i) {
      const int64_t r0 = i * g.row_block, r1 = std::min(rows, r0 + g.row_block);
      for (int64_t j = 0; j < g.cols; ++j) {
        const int64_t c0 = j * g.col_block, c1 = std::min(cols, c0 + g.col_block);
        xs.clear();
        ws.clear();
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = c0; c < c1; ++c) {
            xs.push_back(w[r * cols + c]);
            if (importance) ws.push_back(importance[c]);
          }
        uint32_t code = 0;
        const int64_t k = i * g.cols + j;
        params[k] = choose_cell(coder, s, xs.data(), importance ? ws.data() : nullptr,
                                static_cast<int64_t>(xs.size()), &code);
        if (s.double_quant) {
          raw_scale[k] = params[k].div;
        } else {
          scale_store(coder.mx_rule() ? ScaleType::E8M0
                      : coder.nvfp4   ? ScaleType::E4M3
                                      : s.scale_type,
                      code, q.scales.data() + k * sb);
        }
        if (asym) q.zeros[k] = static_cast<uint8_t>(params[k].zero);
      }
    }
  });

  // NF4 double quantization: scales - mean, int8 per chunk of 256 with an FP32 absmax per chunk.
  if (s.double_quant) {
    const int64_t n = g.cells();
    double sum = 0;
    for (float v : raw_scale) sum += v;
    q.dq_offset = static_cast<float>(sum / static_cast<double>(n));
    q.dq_scales.assign(static_cast<size_t>((n + 255) / 256), 0.0f);
    for (int64_t k0 = 0; k0 < n; k0 += 256) {
      const int64_t k1 = std::min(n, k0 + 256);
      float cmax = 0.0f;
      for (int64_t k = k0; k < k1; ++k) cmax = std::fmax(cmax, std::fabs(raw_scale[k] - q.dq_offset));
      q.dq_scales[k0 / 256] = cmax;
      for (int64_t k = k0; k < k1; ++k) {
        const float v = cmax > 0 ? std::nearbyint((raw_scale[k] - q.dq_offset) / cmax * 127.0f) : 0.0f;
        const auto c8 = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
        q.scales[k] = static_cast<uint8_t>(c8);
        const float sv = dq_scale_value(cmax, c8, q.dq_offset);
        params[k].div = sv > 0 && std::isfinite(sv) ? sv : 0.0f;
      }
    }
  }

  // Pass 2: codes, parallel over rows.
  q.codes.assign(static_cast<size_t>(rows * q.row_bytes), 0);
  parallel_for(rows, 4, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      uint8_t* row = q.codes.data() + r * q.row_bytes;
      const int64_t i = r / g.row_block;
      for (int64_t j = 0; j < g.cols; ++j) {
        const CellParams& p = params[i * g.cols + j];
        const int64_t c0 = j * g.col_block, c1 = std::min(cols, c0 + g.col_block);
        for (int64_t c = c0; c < c1; ++c) pack_code(row, c, q.bits, coder.encode(w[r * cols + c], p));
      }
    }
  });
  return q;
}

QuantizedMatrix quantized_from_gguf(int ggml_type, int64_t rows, int64_t cols, const uint8_t* data,
                                    size_t nbytes) {
  const FormatInfo* fi = format_by_ggml_type(ggml_type);
  if (!fi || !fi->is_gguf())
    fail("formats", "ggml type " + std::to_string(ggml_type) + " is not a block format");
  QuantizedMatrix q;
  q.scheme = default_scheme(fi->id);
  validate(q.scheme, rows, cols);
  q.rows = rows;
  q.cols = cols;
  q.elem = fi->id;
  q.row_bytes = cols / fi->block_elems * fi->block_bytes;
  const size_t need = static_cast<size_t>(rows * q.row_bytes);
  if (nbytes < need)
    fail("formats", std::string(fi->name) + " matrix [" + std::to_string(rows) + ", " + std::to_string(cols) +
                        "] needs " + std::to_string(need) + " bytes but only " + std::to_string(nbytes) +
                        " were given; the tensor data is truncated");
  q.codes.assign(data, data + need);
  return q;
}

ScaleGrid rescale_grid(const QuantizedMatrix& q) {
  const FormatInfo& fi = q.scheme.info();
  if (!q.input_perm.empty() || q.rows <= 0 || q.cols <= 0) return {};
  if (fi.is_gguf()) {
    if (fi.scale_at[0] < 0 || fi.block_elems <= 0) return {};
    return ScaleGrid{q.rows, q.cols / fi.block_elems, 1, fi.block_elems};
  }
  if (is_plain_fmt(fi.id) || q.scheme.double_quant || q.grid.cells() == 0) return {};
  const ScaleType st = q.scheme.scale_type;
  if (st != ScaleType::F32 && st != ScaleType::F16 && st != ScaleType::BF16) return {};
  if (format_info(q.elem).kind == FormatKind::Codebook) return ScaleGrid{q.rows, 1, 1, q.cols};
  return q.grid;
}

QuantizedMatrix rescale_cells(const QuantizedMatrix& q, const float* mult) {
  const ScaleGrid g = rescale_grid(q);
  if (g.cells() == 0)
    throw UsageError("tensor", "a " + to_string(q.scheme) +
                                   " matrix stores no scales that a factor can move; leave it out of scale "
                                   "tuning");
  for (int64_t k = 0; k < g.cells(); ++k)
    if (!(mult[k] > 0.0f) || !std::isfinite(mult[k]))
      throw UsageError("tensor", "scale factor " + std::to_string(mult[k]) + " of cell " + std::to_string(k) +
                                     " is not finite and positive");
  QuantizedMatrix out = q;
  const FormatInfo& fi = q.scheme.info();
  if (fi.is_gguf()) {
    const int64_t nb = q.cols / fi.block_elems;
    for (int64_t r = 0; r < q.rows; ++r)
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* blk = out.codes.data() + r * q.row_bytes + b * fi.block_bytes;
        for (int at : fi.scale_at) {
          if (at < 0) continue;
          uint16_t h = 0;
          std::memcpy(&h, blk + at, 2);
          const float v = std::clamp(f16_to_f32(h) * mult[r * nb + b], -65504.0f, 65504.0f);
          h = f32_to_f16(v);
          std::memcpy(blk + at, &h, 2);
        }
      }
    return out;
  }
  const ScaleType st = q.scheme.scale_type;
  const int sb = scale_type_bits(st) / 8;
  const float big = st == ScaleType::F16 ? 65504.0f : std::numeric_limits<float>::max();
  const bool codebook = format_info(q.elem).kind == FormatKind::Codebook;
  for (int64_t k = 0; k < q.grid.cells(); ++k) {
    uint8_t* p = out.scales.data() + k * sb;
    const float v = scale_decode(st, scale_load(st, p)) * mult[codebook ? k / q.grid.cols : k];
    scale_store(st, scale_encode(st, std::clamp(v, -big, big)), p);
  }
  return out;
}

void dequantize_row(const QuantizedMatrix& q, int64_t r, float* out) {
  const FormatInfo& fi = q.scheme.info();
  const uint8_t* row = q.row_data(r);
  if (fi.is_gguf()) return fi.dequantize_row(row, out, q.cols);
  if (is_plain_fmt(fi.id)) {
    const int nb = fi.bits / 8;
    for (int64_t c = 0; c < q.cols; ++c) {
      uint32_t code = 0;
      std::memcpy(&code, row + c * nb, static_cast<size_t>(nb));
      out[c] = fi.decode(code);
    }
    return;
  }
  const FormatInfo& ei = format_info(q.elem);
  if (ei.kind == FormatKind::Codebook) {  // row r's table: grid cells (r, 0 .. 2^b - 1)
    float t[16];
    for (int64_t u = 0; u < q.grid.cols; ++u) t[u] = q.scale(r, u);
    for (int64_t c = 0; c < q.cols; ++c) out[c] = t[unpack_code(row, c, q.bits)];
    return;
  }
  const bool is_int = ei.kind == FormatKind::Int;
  const int64_t i = r / q.grid.row_block;
  for (int64_t j = 0; j < q.grid.cols; ++j) {
    const float s = q.scale(i, j);
    const int z = q.zero_point(i, j);
    const int64_t c0 = j * q.grid.col_block, c1 = std::min(q.cols, c0 + q.grid.col_block);
    for (int64_t c = c0; c < c1; ++c) {
      const uint32_t u = unpack_code(row, c, q.bits);
      out[c] = is_int ? static_cast<float>(static_cast<int>(u) - z) * s : ei.decode(u) * s;
    }
  }
}

void dequantize_matrix(const QuantizedMatrix& q, float* out) {
  parallel_for(q.rows, 4, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) dequantize_row(q, r, out + r * q.cols);
  });
}

Matrix dequantize_matrix(const QuantizedMatrix& q) {
  Matrix m(q.rows, q.cols);
  dequantize_matrix(q, m.data());
  return m;
}

// ---- activations ----
namespace {
const FormatInfo& act_format(FormatId fmt) {
  const FormatInfo& fi = format_info(fmt);
  const bool ok = fmt == FormatId::INT8 || fmt == FormatId::E4M3FN || fmt == FormatId::E5M2 ||
                  fmt == FormatId::E4M3FNUZ || fmt == FormatId::E5M2FNUZ;
  if (!ok)
    throw UsageError("formats", std::string("per-token activation quantization supports int8 and fp8 "
                                            "(e4m3fn, e5m2, e4m3fnuz, e5m2fnuz), not '") +
                                    fi.name + "'");
  return fi;
}
}  // namespace

void quantize_activation_row(FormatId fmt, const float* x, int64_t n, int group_size, uint8_t* codes,
                             float* scales) {
  const FormatInfo& fi = act_format(fmt);
  const int64_t g = group_size > 0 ? group_size : std::max<int64_t>(n, 1);
  const bool is_int = fmt == FormatId::INT8;
  for (int64_t c0 = 0, k = 0; c0 < n; c0 += g, ++k) {
    const int64_t c1 = std::min(n, c0 + g);
    float amax = 0.0f;
    bool has_nan = false;
    for (int64_t c = c0; c < c1; ++c) {
      if (std::isnan(x[c]))
        has_nan = true;
      else if (std::isfinite(x[c]))
        amax = std::fmax(amax, std::fabs(x[c]));
    }
    const float s = amax / static_cast<float>(fi.max_finite);
    scales[k] = is_int && has_nan ? std::numeric_limits<float>::quiet_NaN() : s;
    for (int64_t c = c0; c < c1; ++c) {
      const float v = x[c];
      if (is_int) {
        float qv = 0.0f;
        if (std::isnan(v) || !(s > 0))
          qv = std::isinf(v) ? (v > 0 ? 127.0f : -127.0f) : 0.0f;
        else
          qv = std::clamp(std::nearbyint(v / s), -127.0f, 127.0f);  // +-Inf / s -> +-Inf -> clamped
        codes[c] = static_cast<uint8_t>(static_cast<int8_t>(qv));
      } else {
        const float sv = s > 0 ? v / s : (std::isfinite(v) ? 0.0f : v);  // Inf saturates, NaN -> NaN code
        codes[c] = static_cast<uint8_t>(fi.encode(sv, true));
      }
    }
  }
}

void dequantize_activation_row(FormatId fmt, const uint8_t* codes, const float* scales, int64_t n,
                               int group_size, float* out) {
  const FormatInfo& fi = act_format(fmt);
  const int64_t g = group_size > 0 ? group_size : std::max<int64_t>(n, 1);
  for (int64_t c = 0; c < n; ++c) {
    const float s = scales[c / g];
    out[c] = fmt == FormatId::INT8 ? static_cast<float>(static_cast<int8_t>(codes[c])) * s
                                   : fi.decode(codes[c]) * s;
  }
}

}  // namespace lowbit
