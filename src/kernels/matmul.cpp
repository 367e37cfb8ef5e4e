#include "kernels/matmul.h"
#include "kernels/kernel_select.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/parallel.h"
#include "formats/format.h"
#include "formats/ggml_types.h"
#include "formats/minifloat.h"
#include "kernels/dispatch.h"
#include "kernels/kernel_plan.h"
#include "kernels/matmul_avx512.h"
#include "kernels/matmul_internal.h"
#include "tensor/qtensor.h"

namespace lowbit {

std::vector<float> weight_to_f32(const WeightMatrix& w) {
  std::vector<float> out(static_cast<size_t>(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) weight_row_f32(w, r, out.data() + r * w.cols);
  return out;
}

void weight_row_f32(const WeightMatrix& w, int64_t r, float* out) {
  const uint8_t* row =
      w.kind == WeightKind::Quant ? nullptr : w.data + static_cast<size_t>(r) * w.row_bytes();
  switch (w.kind) {
    case WeightKind::F32:
      std::memcpy(out, row, w.cols * 4);
      return;
    case WeightKind::F16:
      for (int64_t i = 0; i < w.cols; ++i) {
        uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        out[i] = f16_to_f32(h);
      }
      return;
    case WeightKind::BF16:
      for (int64_t i = 0; i < w.cols; ++i) {
        uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        out[i] = bf16_to_f32(h);
      }
      return;
    case WeightKind::Ggml:
      dequantize_row_ggml(w.ggml_type, row, out, w.cols);
      return;
    case WeightKind::Quant:
      if (!w.q->input_perm.empty()) {  // stored column j is input column input_perm[j]: scatter back
        thread_local std::vector<float> stored;
        stored.resize(static_cast<size_t>(w.cols));
        dequantize_row(*w.q, r, stored.data());
        const int32_t* perm = w.q->input_perm.data();
        for (int64_t j = 0; j < w.cols; ++j) out[perm[j]] = stored[static_cast<size_t>(j)];
        return;
      }
      dequantize_row(*w.q, r, out);
      return;
  }
  fail("kernels", "no dequantizer for weight format " + w.format_name());
}

namespace {

// A weight with an input permutation (QuantizedMatrix::input_perm) multiplies x[T, cols] in its stored
// column order: returns x gathered into buf (xp[t, j] = x[t, perm[j]]), or x itself when there is none.
const float* gather_input(const WeightMatrix& w, const float* x, int64_t T, std::vector<float>& buf) {
  if (w.kind != WeightKind::Quant || !w.q || w.q->input_perm.empty()) return x;
  const int64_t n = w.cols;
  buf.resize(static_cast<size_t>(T * n));
  const int32_t* perm = w.q->input_perm.data();
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * n;
    float* bt = buf.data() + t * n;
    for (int64_t j = 0; j < n; ++j) bt[j] = xt[perm[j]];
  }
  return buf.data();
}

}  // namespace

// ---- activation routes ----

void quantize_activation_int8(const WeightMatrix& w, const float* x, int8_t* codes, float* scale) {
  const int64_t n = w.cols;
  const bool avx512 = kernel_isa() >= Isa::Avx512, avx2 = kernel_isa() == Isa::Avx2;
  if (w.act_static_scale > 0) {
    const float s = w.act_static_scale;
    *scale = s;
    if (avx512) return kern::int8_act_codes_avx512(x, n, s, codes);
    if (avx2) return kern::int8_act_codes_avx2(x, n, s, codes);
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i];
      float qv = std::isnan(v) ? 0.0f : std::clamp(std::nearbyint(v / s), -127.0f, 127.0f);
      codes[i] = static_cast<int8_t>(qv);
    }
    return;
  }
  if (avx512) return kern::quantize_activation_int8_avx512(x, n, codes, scale);
  if (avx2) return kern::quantize_activation_int8_avx2(x, n, codes, scale);
  quantize_activation_row(FormatId::INT8, x, n, 0, reinterpret_cast<uint8_t*>(codes), scale);
}

float finite_absmax(const float* x, int64_t n, bool* has_nan) {
  float amax = 0.0f;
  *has_nan = false;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i]))
      *has_nan = true;
    else if (std::isfinite(x[i]))
      amax = std::fmax(amax, std::fabs(x[i]));
  }
  return amax;
}

void quantize_activation_int4(const float* x, int64_t n, float clip, int8_t* codes, float* scale) {
  bool has_nan = false;
  const float amax = finite_absmax(x, n, &has_nan);
  const float s = amax * clip / 7.0f;
  *scale = has_nan ? std::numeric_limits<float>::quiet_NaN() : s;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    float qv = 0.0f;
    if (std::isnan(v) || !(s > 0))
      qv = std::isinf(v) ? (v > 0 ? 7.0f : -7.0f) : 0.0f;
    else
      qv = std::clamp(std::nearbyint(v / s), -7.0f, 7.0f);  // +-Inf / s -> +-Inf -> clamped
    codes[i] = static_cast<int8_t>(qv);
  }
}

void quantize_activation_codes(const WeightMatrix& w, const float* x, int8_t* codes, float* scale) {
  if (w.act_format != FormatId::INT4) return quantize_activation_int8(w, x, codes, scale);
  if (kernel_isa() >= Isa::Avx512)
    return kern::quantize_activation_int4_avx512(x, w.cols, w.act_clip, codes, scale);
  if (kernel_isa() == Isa::Avx2)
    return kern::quantize_activation_int4_avx2(x, w.cols, w.act_clip, codes, scale);
  quantize_activation_int4(x, w.cols, w.act_clip, codes, scale);
}

void quantize_activations(const WeightMatrix& w, const float* x, int64_t T, float* xq) {
  const int64_t n = w.cols;
  if (w.act_format == FormatId::F32) {
    std::memcpy(xq, x, static_cast<size_t>(T * n) * sizeof(float));
    return;
  }
  if (w.act_format == FormatId::NVFP4) return quantize_activations_nvfp4(w, x, T, xq, nullptr);
  std::vector<uint8_t> codes(static_cast<size_t>(n));
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * n;
    float* ot = xq + t * n;
    if (w.act_format == FormatId::INT8 || w.act_format == FormatId::INT4) {
      float s = 0;
      quantize_activation_codes(w, xt, reinterpret_cast<int8_t*>(codes.data()), &s);
      for (int64_t i = 0; i < n; ++i) ot[i] = static_cast<float>(static_cast<int8_t>(codes[i])) * s;
    } else if (w.act_static_scale > 0) {
      const FormatInfo& fi = format_info(w.act_format);
      const float s = w.act_static_scale;
      for (int64_t i = 0; i < n; ++i) ot[i] = fi.decode(fi.encode(xt[i] / s, true)) * s;
    } else {
      float s = 0;
      quantize_activation_row(w.act_format, xt, n, 0, codes.data(), &s);
      dequantize_activation_row(w.act_format, codes.data(), &s, n, 0, ot);
    }
  }
}

void quantize_activations(FormatId act_format, float act_clip, ActScale act_scale, const float* x, int64_t T,
                          int64_t cols, float* xq) {
  WeightMatrix w;
  w.cols = cols;
  w.act_format = act_format;
  w.act_clip = act_clip;
  w.act_scale = act_scale;
  quantize_activations(w, x, T, xq);
}

void quantize_q8_blocks(const float* x, int64_t n, int8_t* q, float* d) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float db = amax / 127.0f;
    d[b] = db;
    const float id = db > 0 ? 1.0f / db : 0.0f;
    for (int i = 0; i < 32; ++i) q[b * 32 + i] = static_cast<int8_t>(std::nearbyint(xb[i] * id));
  }
}

// ---- reference ----

void matmul_reference(const WeightMatrix& w, const float* x, int64_t T, float* y) {
  std::vector<float> xq;
  if (w.act_format != FormatId::F32) {
    xq.resize(static_cast<size_t>(T * w.cols));
    quantize_activations(w, x, T, xq.data());
    x = xq.data();
  }
  parallel_for(w.rows, 8, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(w.cols);
    for (int64_t r = r0; r < r1; ++r) {
      weight_row_f32(w, r, row.data());
      for (int64_t t = 0; t < T; ++t) {
        const float* xt = x + t * w.cols;
        double acc = 0;
        for (int64_t i = 0; i < w.cols; ++i) acc += static_cast<double>(row[i]) * xt[i];
        y[t * w.rows + r] = static_cast<float>(acc);
      }
    }
  });
}

void matmul_int_reference(const WeightMatrix& w, const float* x, int64_t T, float* y) {
  const KernelPlan& p = kernel_plan(w);
  if (w.kind != WeightKind::Quant || !p.int_codes || p.lut.empty() ||
      (w.act_format != FormatId::INT8 && w.act_format != FormatId::INT4))
    fail("kernels", "matmul_int_reference needs INT4 / INT8 weight codes with INT8 / INT4 activations, not " +
                        matmul_kernel_name(w));
  const int64_t cols = w.cols, ng = p.gcols;
  std::vector<float> xp;
  x = gather_input(w, x, T, xp);  // codes below are in stored column order
  std::vector<int8_t> xq(static_cast<size_t>(T * cols));
  std::vector<float> sx(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) quantize_activation_codes(w, x + t * cols, xq.data() + t * cols, &sx[t]);
  std::vector<int64_t> acc(static_cast<size_t>(ng));
  std::vector<int32_t> wv(static_cast<size_t>(cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    const float* s = p.scale_row(r);
    const float* z = p.zero_row(r);
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t g = std::min(c / p.group, ng - 1);
      wv[c] = static_cast<int32_t>(p.lut[w.q->code(r, c)] - (z ? z[g] : 0.0f));
    }
    for (int64_t t = 0; t < T; ++t) {
      std::fill(acc.begin(), acc.end(), 0);
      const int8_t* xt = xq.data() + t * cols;
      for (int64_t c = 0; c < cols; ++c) acc[std::min(c / p.group, ng - 1)] += int64_t{wv[c]} * xt[c];
      double out = 0;
      for (int64_t g = 0; g < ng; ++g) out += static_cast<double>(acc[g]) * s[g] * sx[t];
      y[t * w.rows + r] = static_cast<float>(out);
    }
  }
}

// ---- dispatch ----

namespace {
using namespace matmul_detail;

float dot_isa(Isa isa, const float* a, const float* b, int64_t n) {
  switch (isa) {
    case Isa::Avx512:
    case Isa::Avx512Bf16:
    case Isa::Amx:
      return kern::dot_f32_avx512(a, b, n);
    case Isa::Avx2:
      return kern::dot_f32_avx2(a, b, n);
    case Isa::Generic:
      break;
  }
  return kern::dot_f32_generic(a, b, n);
}

std::vector<float>& tls_floats(size_t n) {
  thread_local std::vector<float> v;
  if (v.size() < n) v.resize(n);
  return v;
}

void run_deq(const WeightMatrix& w, const KernelPlan& p, Isa isa, const float* x, int64_t T, float* y) {
  const int64_t rows = w.rows, cols = w.cols;
  const double work = static_cast<double>(w.nbytes()) * static_cast<double>(T);
  const bool direct = w.kind == WeightKind::F32;
  if (isa >= Isa::Avx512 && T >= kPrefillTokens) {
    for_row_blocks(
        rows,
        [&](int64_t r0, int64_t r1) {
          float* buf = tls_floats(static_cast<size_t>(kRowBlock * cols)).data();
          for (int64_t r = r0; r < r1; ++r) {
            float* out = buf + (r - r0) * cols;
            const uint8_t* row = row_ptr(w, r);
            if (p.route == Route::Nib)
              kern::nib_deq_avx512(row, cols, p.group, p.scale_row(r), p.zero_row(r), p.lut.data(), out);
            else if (p.route == Route::Byte)
              kern::byte_deq_avx512(row, cols, p.group, p.scale_row(r), p.zero_row(r), p.byte_dec, out);
            else if (p.route == Route::Codebook && w.kind == WeightKind::Quant)
              (kernel_isa() >= Isa::Avx512Bf16 ? kern::lut_deq_vbmi : kern::lut_deq_avx512)(
                  row, cols, p.bits, p.codebook_f16 + r * p.gcols, out);
            else
              deq_row_plan(w, p, r, out);
          }
          kern::gemm_rows_f32_avx512(buf, r1 - r0, cols, x, T, y + r0, rows);
        },
        work);
    return;
  }
  for_row_blocks(
      rows,
      [&](int64_t r0, int64_t r1) {
        float* buf = tls_floats(static_cast<size_t>(cols)).data();
        for (int64_t r = r0; r < r1; ++r) {
          const float* wr = buf;
          if (direct)
            wr = reinterpret_cast<const float*>(row_ptr(w, r));
          else
            deq_row_plan(w, p, r, buf);
          for (int64_t t = 0; t < T; ++t) y[t * rows + r] = dot_isa(isa, wr, x + t * cols, cols);
        }
      },
      work);
}

// The AVX2 tier's row kernels (DenseAvx2, NibAvx2, ByteAvx2): decode (T < kPrefillTokens) one fused dot per
// row and token; prefill each row decoded once with the tier's decoder (F32 rows read as they are), then a
// block's 16 rows against every token on register tiles (kern::rows_gemm_f32_avx2).
void run_rows_avx2(const WeightMatrix& w, const KernelPlan& p, Kernel k, const float* x, int64_t T,
                   float* y) {
  const int64_t rows = w.rows, cols = w.cols;
  const bool bf16 = w.kind == WeightKind::BF16;
  auto dot = [&](const uint8_t* row, int64_t r, const float* xt) {
    if (k == Kernel::NibAvx2)
      return kern::nib_dot_avx2(row, cols, p.group, p.scale_row(r), p.zero_row(r), p.lut.data(), xt);
    if (k == Kernel::ByteAvx2)
      return kern::byte_dot_avx2(row, cols, p.group, p.scale_row(r), p.zero_row(r), p.byte_dec, xt);
    if (w.kind == WeightKind::F32) return kern::dot_f32_avx2(reinterpret_cast<const float*>(row), xt, cols);
    return kern::dot_half_avx2(reinterpret_cast<const uint16_t*>(row), bf16, xt, cols);
  };
  auto decode = [&](const uint8_t* row, int64_t r, float* out) -> const float* {
    const auto* h = reinterpret_cast<const uint16_t*>(row);
    if (k == Kernel::NibAvx2)
      kern::nib_deq_avx2(row, cols, p.group, p.scale_row(r), p.zero_row(r), p.lut.data(), out);
    else if (k == Kernel::ByteAvx2)
      kern::byte_deq_avx2(row, cols, p.group, p.scale_row(r), p.zero_row(r), p.byte_dec, out);
    else if (w.kind == WeightKind::F32)
      return reinterpret_cast<const float*>(row);
    else if (bf16)
      kern::widen_bf16_generic(h, out, cols);
    else
      kern::widen_f16_avx2(h, out, cols);
    return out;
  };
  // INT4 decode: each token laid out once for nib_dot_linear_avx2 (the pool's workers read the caller's
  // buffers through plain pointers).
  const bool linear =
      k == Kernel::NibAvx2 && T < kPrefillTokens && kern::nib_linear_ok(p.lut.data(), p.group, cols);
  const int64_t gw = std::max<int64_t>(1, std::min(p.group, cols)), ng = (cols + gw - 1) / gw;
  float* xl = nullptr;
  float* xsum = nullptr;
  if (linear) {
    thread_local std::vector<float> lay;
    lay.resize(static_cast<size_t>(T * (cols + ng)));
    xl = lay.data();
    xsum = xl + T * cols;
    for (int64_t t = 0; t < T; ++t)
      kern::nib_linear_layout_avx2(x + t * cols, cols, p.group, xl + t * cols, xsum + t * ng);
  }
  for_row_blocks(
      rows,
      [&](int64_t r0, int64_t r1) {
        if (linear) {
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t t = 0; t < T; ++t)
              y[t * rows + r] =
                  kern::nib_dot_linear_avx2(row_ptr(w, r), cols, p.group, p.scale_row(r), p.zero_row(r),
                                            p.lut[0], xl + t * cols, xsum + t * ng);
          return;
        }
        if (T < kPrefillTokens) {
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t t = 0; t < T; ++t) y[t * rows + r] = dot(row_ptr(w, r), r, x + t * cols);
          return;
        }
        // The block's rows (at most kRowBlock = 16) decoded once, then one pass over the tokens.
        float* buf = tls_floats(static_cast<size_t>(kRowBlock * cols)).data();
        const float* wr[kRowBlock];
        for (int64_t r = r0; r < r1; ++r) wr[r - r0] = decode(row_ptr(w, r), r, buf + (r - r0) * cols);
        kern::rows_gemm_f32_avx2(wr, static_cast<int>(r1 - r0), x, T, cols, y + r0, rows);
      },
      static_cast<double>(w.nbytes()) * static_cast<double>(T));
}

// matmul after its activation route's entry: route_done means x has been through the route already.
void run_matmul(const WeightMatrix& w, const float* x, int64_t T, float* y, bool route_done) {
  // An input-permuted weight (GPTQ act-order): every kernel multiplies the stored columns by x[perm].
  thread_local std::vector<float> x_perm;
  x = gather_input(w, x, T, x_perm);
  const Isa isa = kernel_isa();
  const KernelPlan& p = kernel_plan(w);
  const KernelChoice choice = select_kernel(w, p, isa, T);
  const Kernel k = choice.kernel;
  // Kernels that take x as it is (their own INT8 / BF16 handling, or weight-only).
  switch (k) {
    case Kernel::AmxTile:
    case Kernel::AmxTileEmulated:
      return run_amx_w8a8(w, p, *amx_int8_pack(w, p), x, T, y, k == Kernel::AmxTile);
    case Kernel::VnniTile:
      return run_vnni_tile512(w, p, *int8_tile(w, p), x, T, y);
    case Kernel::VnniBlock:
    case Kernel::I8BlockAvx2:
    case Kernel::AmxBlock:
    case Kernel::AmxBlockEmulated:
      return run_int_block(w, p, x, T, y, k);
    case Kernel::I8RowAvx2:
      return run_i8dot_rows_avx2(w, p, x, T, y);
    case Kernel::VnniGemv:
      return run_vnni512(w, p, x, T, y);
    case Kernel::Fp6Byte16:
      return run_fp6_gemv(w, p, x, T, y);
    case Kernel::LutBf16:
    case Kernel::LutAvx512:
    case Kernel::LutAvx2:
    case Kernel::LutGeneric:
      return run_lut(w, p, kernel_tier(k), x, T, y);
    default:
      break;
  }
  std::vector<float> xq_storage;
  if (w.act_format != FormatId::F32 && !route_done) {
    xq_storage.resize(static_cast<size_t>(T * w.cols));
    quantize_activations(w, x, T, xq_storage.data());
    x = xq_storage.data();
  }
  switch (k) {
    case Kernel::Dense:
      return matmul_dense_avx512(w, x, T, y);
    // x has been through the activation route; these kernels add the Q8 block rounding (or, with the residual
    // pass, the rounding of x and of its residual).
    case Kernel::Q8Pack:
    case Kernel::Q8PackAvx2:
    case Kernel::Q8PackPerCall:
    case Kernel::AmxQ8Pack:
    case Kernel::AmxQ8PackEmulated:
    case Kernel::AmxQ8PackPerCall:
    case Kernel::AmxQ8PackPerCallEmulated:
    case Kernel::Q8Row:
    case Kernel::Q8RowAvx2:
      return choice.rounding == ActRounding::Q8x2 ? run_q8_residual(w, p, k, x, T, y)
                                                  : run_q8_kernel(w, p, k, x, T, y);
    case Kernel::Bf16Tile:
    case Kernel::AmxBf16:
    case Kernel::AmxBf16Emulated:
      return run_bf16_tile(w, p, k, x, T, y);
    case Kernel::Nib16:
    case Kernel::NibLane:
      return run_nib_gemv512(w, p, x, T, y, k == Kernel::Nib16);
    case Kernel::Byte16:
      return run_byte16_gemv(w, p, x, T, y);
    case Kernel::NibDot:
    case Kernel::ByteDot:
      return run_code_dots512(w, p, x, T, y);
    case Kernel::NibAvx2:
    case Kernel::ByteAvx2:
    case Kernel::DenseAvx2:
      return run_rows_avx2(w, p, k, x, T, y);
    case Kernel::F32Tile:
      return run_deq(w, p, Isa::Avx512, x, T, y);
    default:
      return run_deq(w, p, isa, x, T, y);
  }
}

// The NVFP4 route's codes of the last input run_f4_kernel quantized on this thread. q / k / v read the same
// normalised input, and so do gate / up: the later products reuse the codes instead of quantizing (and,
// under act_scale=mse, searching every block's scale) again. Keyed by the input's bytes, its shape and the
// route's parameters, so a reuse is exactly what quantizing again would give.
struct F4Acts {
  std::vector<float> x;
  int64_t T = 0, cols = 0;
  float clip = 0;
  ActScale rule = ActScale::Amax;
  std::vector<uint8_t> codes, scales;  // [T, cols], [T, ceil(cols / 16)]
  std::vector<float> g;                // [T]
  bool holds(const WeightMatrix& w, const float* in, int64_t t) const {
    return t == T && w.cols == cols && w.act_clip == clip && w.act_scale == rule &&
           std::memcmp(in, x.data(), static_cast<size_t>(t * cols) * sizeof(float)) == 0;
  }
  void take(const WeightMatrix& w, const float* in, int64_t t) {
    T = t, cols = w.cols, clip = w.act_clip, rule = w.act_scale;
    x.assign(in, in + t * cols);
    codes.resize(static_cast<size_t>(t * cols));
    scales.resize(static_cast<size_t>(t * ((cols + kNvfp4ActBlock - 1) / kNvfp4ActBlock)));
    g.resize(static_cast<size_t>(t));
  }
};

// INT4 codes x NVFP4 activations on the integer kernels (f4vnni / f4vnni16 on AVX-512, f4dot / f4dot16 on
// AVX2): each token quantized by the route (quantize_activation_nvfp4_avx2, bit-identical to the definition),
// its codes as c = 2 * E2M1 value, the block scales halved (beta), the per-group sums xz = sum beta_b * C_b,
// then the kernels; the outputs times the token's global scale. The prefill tiles take the codes in natural
// order, the decode kernels in their own layouts (f4_rows_layout; i8x_layout_avx2 with the betas per lane).
void run_f4_kernel(const WeightMatrix& w, const KernelPlan& p, Kernel k, const float* x, int64_t T,
                   float* y) {
  static constexpr int8_t kC2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  const bool rows_layout = k == Kernel::F4RowAvx2 || k == Kernel::F4Row;
  const int64_t cols = w.cols, xs = (cols + 127) / 128 * 128,
                nb = (cols + kNvfp4ActBlock - 1) / kNvfp4ActBlock;
  const int64_t ng = p.gcols, grp = ng == 1 ? cols : p.group, bs = xs / 16;  // bs: blocks per token, padded
  thread_local std::vector<int8_t> c2, xl;
  thread_local std::vector<float> beta, bv, xz;
  thread_local F4Acts acts;
  c2.assign(static_cast<size_t>(T * xs), 0);
  xl.resize(static_cast<size_t>(T * xs));
  beta.assign(static_cast<size_t>(T * bs), 0.0f);
  bv.resize(static_cast<size_t>(T * bs * 2));
  xz.assign(static_cast<size_t>(T * ng), 0.0f);
  const bool reuse = acts.holds(w, x, T);
  if (!reuse) acts.take(w, x, T);
  int8_t *c2p = c2.data(), *xlp = xl.data();
  float *betap0 = beta.data(), *bvp = bv.data(), *xzp0 = xz.data(), *gp = acts.g.data();
  uint8_t *codes_all = acts.codes.data(), *scales_all = acts.scales.data();
  // Tokens are independent: prefill spreads them over the pool (as the emulation does).
  parallel_for(T, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const uint8_t* codes = codes_all + t * cols;
      const uint8_t* scales = scales_all + t * nb;
      if (!reuse)
        kern::quantize_activation_nvfp4_avx2(x + t * cols, cols, w.act_clip, w.act_scale,
                                             codes_all + t * cols, scales_all + t * nb, &gp[t]);
      int8_t* ct = c2p + t * xs;
      float* bt = betap0 + t * bs;
      for (int64_t c = 0; c < cols; ++c) ct[c] = kC2[codes[c] & 15];
      for (int64_t b = 0; b < nb; ++b) {
        bt[b] = fp8_e4m3fn_to_f32(scales[b]) * 0.5f;
        int32_t cb = 0;
        for (int64_t c = b * kNvfp4ActBlock; c < std::min(cols, (b + 1) * kNvfp4ActBlock); ++c) cb += ct[c];
        xzp0[t * ng + b * kNvfp4ActBlock / grp] += bt[b] * static_cast<float>(cb);
      }
      if (k == Kernel::F4Row) {
        kern::f4_rows_layout(ct, xs, xlp + t * xs);
      } else if (rows_layout) {
        kern::i8x_layout_avx2(4, p.group, ng, ct, cols, xlp + t * xs);
        // Per 64-column chunk k: the betas of its blocks 4k, 4k, 4k+1, 4k+1, ... (int32 lane n = block n /
        // 2).
        float* v = bvp + t * bs * 2;
        for (int64_t i = 0; i < bs * 2; ++i) v[i] = bt[(i / 8) * 4 + (i % 8) / 2];
      }
    }
  });
  const int zoff = p.asym ? 0 : static_cast<int>(-p.lut[0]);
  const int8_t* cp = rows_layout ? xlp : c2p;  // the pool's workers see their own thread_locals
  const float* betap = k == Kernel::F4RowAvx2 ? bvp : betap0;
  const int64_t bstride = k == Kernel::F4RowAvx2 ? 2 * bs : bs;
  const float* xzp = xzp0;
  const auto kernel = k == Kernel::F4Block       ? kern::f4_block_avx512
                      : k == Kernel::F4Row       ? kern::f4_rows_avx512
                      : k == Kernel::F4BlockAvx2 ? kern::f4dot_block_avx2
                                                 : kern::f4dot_rows_avx2;
  for_code_row_blocks(
      w, p, static_cast<double>(w.nbytes()) * static_cast<double>(T),
      [&](int nr, const uint8_t* const* rp, const float* const* sp, const float* const* zp, int64_t r0) {
        kernel(nr, rp, sp, zp, zoff, cols, p.group, ng, cp, xs, betap, bstride, xzp, static_cast<int>(T),
               y + r0, w.rows);
      });
  for (int64_t t = 0; t < T; ++t)
    for (int64_t r = 0; r < w.rows; ++r) y[t * w.rows + r] *= gp[t];
}

}  // namespace

void matmul(const WeightMatrix& w, const float* x, int64_t T, float* y) {
  if (T <= 0 || w.rows <= 0) return;
  if (w.act_format != FormatId::NVFP4) return run_matmul(w, x, T, y, false);
  const KernelChoice kc = select_kernel(w, T);
  if (kc.kernel == Kernel::F4Row || kc.kernel == Kernel::F4Block || kc.kernel == Kernel::F4RowAvx2 ||
      kc.kernel == Kernel::F4BlockAvx2)
    return run_f4_kernel(w, kernel_plan(w), kc.kernel, x, T, y);
  // NVFP4 activations: the route runs before the input permutation (its blocks are 16 consecutive inputs in
  // the model's order), and the kernels multiply e2m1 * s_b, exact in BF16, with each token's global scale
  // applied to its outputs afterwards (one float rounding, as the reference's x_hat = e2m1 * s_b * g).
  thread_local std::vector<float> xs, g;
  xs.resize(static_cast<size_t>(T * w.cols));
  g.resize(static_cast<size_t>(T));
  quantize_activations_nvfp4(w, x, T, xs.data(), g.data());
  run_matmul(w, xs.data(), T, y, true);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t r = 0; r < w.rows; ++r) y[t * w.rows + r] *= g[static_cast<size_t>(t)];
}

float dot_f32(const float* a, const float* b, int64_t n) {
  return dot_isa(kernel_isa(), a, b, n);
}

namespace {
// The F16 widening of the current tier (widen_f16 per row, widen_f16_rows per tile).
auto widen_f16_kernel() {
  const Isa isa = kernel_isa();
  return isa >= Isa::Avx512 ? kern::widen_f16_avx512
         : isa >= Isa::Avx2 ? kern::widen_f16_avx2
                            : kern::widen_f16_generic;
}
}  // namespace

void widen_f16(const uint16_t* h, float* out, int64_t n) {
  widen_f16_kernel()(h, out, n);
}

void widen_f16_rows(const uint16_t* const* rows, int64_t n_rows, int64_t n, float* out) {
  const auto widen = widen_f16_kernel();
  for (int64_t i = 0; i < n_rows; ++i) widen(rows[i], out + i * n, n);
}

void widen_bf16(const uint16_t* h, float* out, int64_t n) {
  if (kernel_isa() >= Isa::Avx512) return kern::widen_bf16_avx512(h, out, n);
  kern::widen_bf16_generic(h, out, n);
}

void widen_fp8(const uint8_t* codes, bool e4m3, float scale, float* out, int64_t n) {
  if (kernel_isa() >= Isa::Avx512) return kern::widen_fp8_avx512(codes, e4m3, scale, out, n);
  const FormatInfo& f = format_info(e4m3 ? FormatId::E4M3FN : FormatId::E5M2);
  for (int64_t i = 0; i < n; ++i) out[i] = f.decode(codes[i]) * scale;
}

void axpy_f32(float a, const float* x, float* y, int64_t n) {
  switch (kernel_isa()) {
    case Isa::Avx512:
    case Isa::Avx512Bf16:
    case Isa::Amx:
      return kern::axpy_f32_avx512(a, x, y, n);
    case Isa::Avx2:
      return kern::axpy_f32_avx2(a, x, y, n);
    case Isa::Generic:
      break;
  }
  kern::axpy_f32_generic(a, x, y, n);
}

void silu_mul_f32(float* g, const float* u, int64_t n) {
  if (kernel_isa() >= Isa::Avx512) return kern::silu_mul_f32_avx512(g, u, n);
  for (int64_t i = 0; i < n; ++i) {
    const float a = g[i];
    g[i] = a / (1.0f + std::exp(-a)) * u[i];
  }
}

namespace kern {
float dot_f32_generic(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  float s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  return s + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}
void widen_f16_generic(const uint16_t* h, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(h[i]);
}
void widen_bf16_generic(const uint16_t* h, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(h[i]);
}
void axpy_f32_generic(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
}  // namespace kern

}  // namespace lowbit
