#include "kernels/kernel_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>

#include "core/error.h"
#include "core/half.h"
#include "formats/format.h"
#include "kernels/dispatch.h"
#include "kernels/matmul.h"

namespace lowbit {
namespace {

constexpr int kGgmlQ4_0 = 2, kGgmlQ4_1 = 3, kGgmlQ5_0 = 6, kGgmlQ5_1 = 7, kGgmlQ8_0 = 8;
// GGUF types on the Q8 route: a row kernel, or (IQ4_XS) only the KPack, built per call where the weight has
// no load-time pack.
bool ggml_q8_route(int t) {
  return ggml_q8_row_kernel(t) || kpack_supported(t, 256);
}

std::shared_ptr<KernelPlan> plan_for_quant(const QuantizedMatrix& q) {
  auto p = std::make_shared<KernelPlan>();
  const FormatInfo& fi = q.scheme.info();
  if (fi.is_gguf()) {
    p->ggml_type = fi.ggml_type;
    p->route = ggml_q8_route(fi.ggml_type) ? Route::GgmlQ8 : Route::Deq;
    return p;
  }
  if (q.is_plain()) {
    return p;
  }
  if (fi.kind == FormatKind::Codebook) {  // no side tables: the kernels read the stored f16 tables
    p->route = Route::Codebook;
    p->bits = q.bits;
    p->group = q.cols;
    p->gcols = q.grid.cols;
    p->codebook_f16 = reinterpret_cast<const uint16_t*>(q.scales.data());
    return p;
  }
  const FormatInfo& ei = format_info(q.elem);
  const bool is_int = ei.kind == FormatKind::Int;
  p->bits = q.bits;
  p->group = q.grid.col_block;
  p->row_block = q.grid.row_block;
  p->gcols = q.grid.cols;
  p->scales = q.decoded_scales();
  p->asym = is_int && !q.scheme.symmetric;
  p->int_codes = is_int && (q.bits == 4 || q.bits == 8);
  if (p->asym) {
    p->zeros.resize(q.zeros.size());
    for (size_t i = 0; i < q.zeros.size(); ++i) p->zeros[i] = static_cast<float>(q.zeros[i]);
  }
  // True when cell(k), the value a kernel forms from stored cell k, is the decoded table's value (NaN as
  // NaN).
  auto cells_match_table = [&](auto cell) {
    for (size_t k = 0; k < p->scales.size(); ++k) {
      const float v = cell(k), t = p->scales[k];
      if (!(v == t || (v != v && t != t))) return false;
    }
    return true;
  };
  if (q.scheme.scale_type == ScaleType::F16 && !q.scheme.double_quant && q.scheme.format != FormatId::NVFP4 &&
      q.scales.size() == p->scales.size() * 2 && (!p->asym || q.zeros.size() == p->scales.size()) &&
      cells_match_table([&](size_t k) {
        uint16_t h;
        std::memcpy(&h, q.scales.data() + 2 * k, 2);
        return f16_to_f32(h);
      })) {
    p->scales_f16 = reinterpret_cast<const uint16_t*>(q.scales.data());
    if (p->asym) p->zeros_u8 = q.zeros.data();
  }
  // 2^(e-127) as the kernels form it (lane_avx512.h, cells16: FP32 bits e << 23). A matrix with a cell 0 (the
  // subnormal 2^-127, read as 0) or 255 (NaN, read as inf) does not match its table and keeps it: the
  // kernels' two-operation decode covers e in 1..254.
  if (q.scheme.scale_type == ScaleType::E8M0 && q.scales.size() == p->scales.size() && !p->asym &&
      cells_match_table([&](size_t k) {
        const uint32_t bits = uint32_t{q.scales[k]} << 23;
        float v;
        std::memcpy(&v, &bits, 4);
        return v;
      }))
    p->scales_e8m0 = reinterpret_cast<const kern::E8m0Cell*>(q.scales.data());
  if (q.scheme.scale_type == ScaleType::E4M3 && q.scheme.format == FormatId::NVFP4 &&
      q.scales.size() == p->scales.size() && !p->asym && q.global_scale > 0 &&
      std::isfinite(q.global_scale)) {
    // The kernels read cell c as the binary16 c << 7: only for cells with the sign clear and not NaN (0x7F),
    // which is every cell the NVFP4 quantizer writes (scales are magnitudes); other matrices keep the tables.
    if (std::all_of(q.scales.begin(), q.scales.end(), [](uint8_t c) { return c < 0x7F; })) {
      p->scales_e4m3 = reinterpret_cast<const kern::E4m3Cell*>(q.scales.data());
      p->e4m3_post = 256.0f / q.global_scale;
    }
  }
  if (q.bits <= 8) {
    p->lut.resize(size_t{1} << q.bits);
    for (uint32_t u = 0; u < p->lut.size(); ++u) {
      if (is_int)
        p->lut[u] = static_cast<float>(static_cast<int>(u) - (p->asym ? 0 : 1 << (q.bits - 1)));
      else
        p->lut[u] = ei.decode(u);
    }
  }
  const int64_t G = p->group, cols = q.cols;
  const bool one_group = G >= cols;
  p->route = Route::Deq;
  if (q.bits == 4 && (one_group || G % 16 == 0)) {
    p->route = Route::Nib;
  } else if (q.bits == 8 && (one_group || G % 16 == 0)) {
    const FormatId e = q.elem;
    bool ok = true;
    if (is_int)
      p->byte_dec = p->asym ? ByteDec::Int8Asym : ByteDec::Int8Sym;
    else if (e == FormatId::E4M3FN)
      p->byte_dec = ByteDec::E4M3;
    else if (e == FormatId::E5M2)
      p->byte_dec = ByteDec::E5M2;
    else
      ok = false;
    if (ok) {
      p->route = Route::Byte;
      if (best_isa() >= Isa::Avx512Bf16 && kern::byte16_lanes_ok(G, cols)) {
        auto t = std::make_shared<kern::Byte16Lut>();
        if (kern::byte16_make_lut(p->lut.data(), *t)) p->byte16 = std::move(t);
      }
    }
  }
  // FP6 (E2M3 / E3M2, MX or grouped): a 6-bit bit stream, widened to one code per byte per block of rows and
  // then multiplied by the byte16 kernels (matmul_codes.cpp, fp6_byte16_ok); every value is exact in BF16.
  if (q.bits == 6 && !is_int && best_isa() >= Isa::Avx512Bf16 && kern::byte16_lanes_ok(G, cols)) {
    std::vector<float> t256(256, 0.0f);
    std::copy(p->lut.begin(), p->lut.end(), t256.begin());
    auto t = std::make_shared<kern::Byte16Lut>();
    if (kern::byte16_make_lut(t256.data(), *t)) p->byte16 = std::move(t);
  }
  // VNNI lane mapping: a chunk is 128 (INT4) or 64 (INT8) elements; lane l covers 8 (INT4) or 4 (INT8)
  // consecutive elements, so each lane must lie inside one scale cell.
  if (p->int_codes) {
    const int64_t ch = q.bits == 4 ? 128 : 64, le = q.bits == 4 ? 8 : 4;
    p->vnni_ok = one_group || G % ch == 0 || (ch % G == 0 && G % le == 0);
  }
  return p;
}

const KernelPlan& static_plan(Route r, int ggml_type = -1) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, std::unique_ptr<KernelPlan>> plans;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = plans[{static_cast<int>(r), ggml_type}];
  if (!slot) {
    slot = std::make_unique<KernelPlan>();
    slot->route = r;
    slot->ggml_type = ggml_type;
  }
  return *slot;
}

}  // namespace

bool ggml_q8_row_kernel(int t) {
  return t == kGgmlQ4_0 || t == kGgmlQ4_1 || t == kGgmlQ5_0 || t == kGgmlQ5_1 || t == kGgmlQ8_0 ||
         kern::ggml_k_supported(t);
}

std::shared_ptr<const KernelPlan> build_kernel_plan(const WeightMatrix& w, bool repack) {
  if (w.kind == WeightKind::Quant) return plan_for_quant(*w.q);
  auto p = std::make_shared<KernelPlan>(kernel_plan(w));
  // The packs are read by the AVX-512 and the AVX2 kernels: not built on CPUs (or LOWBIT_ISA masks) without
  // AVX2.
  if (!repack || w.kind != WeightKind::Ggml || best_isa() < Isa::Avx2) return p;
  const int64_t rb = static_cast<int64_t>(w.row_bytes());
  if (qblk_supported(w.ggml_type, w.cols)) p->qblk = build_qblk_pack(w.ggml_type, w.data, rb, w.rows, w.cols);
  if (kpack_supported(w.ggml_type, w.cols)) p->kpack = build_kpack(w.ggml_type, w.data, rb, w.rows, w.cols);
  if (p->load_pack())
    p->route = Route::GgmlQ8;  // IQ4_NL / MXFP4: no row-at-a-time VNNI kernel, only the pack
  return p;
}

const KernelPlan& kernel_plan(const WeightMatrix& w) {
  if (w.plan) return *w.plan;
  switch (w.kind) {
    case WeightKind::F32:
    case WeightKind::F16:
    case WeightKind::BF16:
      return static_plan(Route::Dense);
    case WeightKind::Ggml:
      return static_plan(ggml_q8_route(w.ggml_type) ? Route::GgmlQ8 : Route::Deq, w.ggml_type);
    case WeightKind::Quant:
      break;
  }
  // A Quant weight built without make_quant_weight: cache its plan keyed by the QuantizedMatrix, checking
  // (weak_ptr) that the matrix at that address is still the one the plan was built for.
  struct Entry {
    std::weak_ptr<const QuantizedMatrix> q;
    std::shared_ptr<const KernelPlan> plan;
  };
  static std::mutex mu;
  static std::map<const QuantizedMatrix*, Entry> cache;
  std::lock_guard<std::mutex> lock(mu);
  Entry& e = cache[w.q.get()];
  auto live = e.q.lock();
  if (!e.plan || live != w.q) {
    e.q = w.q;
    e.plan = plan_for_quant(*w.q);
  }
  return *e.plan;
}

bool w8a8_per_channel(const WeightMatrix& w, const KernelPlan& p) {
  return w.kind == WeightKind::Quant && p.bits == 8 && p.int_codes && !p.asym && p.gcols == 1 &&
         p.row_block == 1;
}

const AmxInt8Pack* amx_int8_pack(const WeightMatrix& w, const KernelPlan& p) {
  static std::mutex mu;
  if (!w8a8_per_channel(w, p)) return nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (!p.amx) {
    auto t = std::make_shared<AmxInt8Pack>();
    const QuantizedMatrix& q = *w.q;
    kern::pack_amx_int8(q.codes.data(), q.row_bytes, q.rows, q.cols, *t);
    p.amx = std::move(t);
  }
  return p.amx.get();
}

const Int8Tile* int8_tile(const WeightMatrix& w, const KernelPlan& p) {
  static std::mutex mu;
  if (!w8a8_per_channel(w, p)) return nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (!p.tile) {
    auto t = std::make_shared<Int8Tile>();
    const QuantizedMatrix& q = *w.q;
    t->packed.resize(static_cast<size_t>((q.rows + 15) / 16 * ((q.cols + 3) / 4) * 64));
    t->rowsum.resize(static_cast<size_t>((q.rows + 15) / 16 * 16));
    kern::pack_int8_rows16(q.codes.data(), q.row_bytes, q.rows, q.cols, t->packed.data(), t->rowsum.data());
    p.tile = std::move(t);
  }
  return p.tile.get();
}

bool kern::byte16_make_lut(const float* lut256, Byte16Lut& out) {
  for (int i = 0; i < 256; ++i) {
    const float v = lut256[i];
    const uint16_t h = f32_to_bf16(v);
    const float back = bf16_to_f32(h);
    if (!(back == v) && !(v != v && back != back)) return false;  // not exact (NaN stays NaN)
    out.lo[i] = static_cast<uint8_t>(h & 0xFF);
    out.hi[i] = static_cast<uint8_t>(h >> 8);
  }
  // Sign-magnitude (FP8): code 128 + i is -(code i) bit for bit, so the upper half of the table is not
  // needed.
  out.sign_magnitude = true;
  for (int i = 0; i < 128; ++i)
    if (out.lo[128 + i] != out.lo[i] || out.hi[128 + i] != (out.hi[i] | 0x80) || (out.hi[i] & 0x80))
      out.sign_magnitude = false;
  return true;
}

void kern::nib16_make_lut(const float* lut, size_t n, Nib16Lut& out) {
  for (int i = 0; i < 32; ++i) out.v[i] = static_cast<size_t>(i & 15) < n ? f32_to_bf16(lut[i & 15]) : 0;
}

bool kern::nib16_table_exact(const float* lut16) {
  for (int i = 0; i < 16; ++i)
    if (bf16_to_f32(f32_to_bf16(lut16[i])) != lut16[i]) return false;
  return true;
}

void kern::group_sums(const float* x, int64_t cols, int64_t group, bool bf16, float* gsum) {
  for (int64_t c0 = 0, j = 0; c0 < cols; c0 += group, ++j) {
    double acc = 0;
    for (int64_t i = c0; i < std::min(cols, c0 + group); ++i)
      acc += bf16 ? bf16_to_f32(f32_to_bf16(x[i])) : x[i];
    gsum[j] = static_cast<float>(acc);
  }
}

void deq_row_plan(const WeightMatrix& w, const KernelPlan& p, int64_t r, float* out,
                  const float* lut_override) {
  if (w.kind != WeightKind::Quant || p.lut.empty()) {
    weight_row_f32(w, r, out);
    return;
  }
  const QuantizedMatrix& q = *w.q;
  const uint8_t* row = q.row_data(r);
  const float* s = p.scale_row(r);
  const float* z = p.zero_row(r);
  const float* lut = lut_override ? lut_override : p.lut.data();
  const int bits = p.bits;
  for (int64_t j = 0; j < p.gcols; ++j) {
    const int64_t c0 = j * p.group, c1 = std::min(q.cols, c0 + p.group);
    const float sj = s[j];
    if (z) {
      const float zj = z[j];
      for (int64_t c = c0; c < c1; ++c) out[c] = (lut[unpack_code(row, c, bits)] - zj) * sj;
    } else if (bits == 8) {
      for (int64_t c = c0; c < c1; ++c) out[c] = lut[row[c]] * sj;
    } else if (bits == 4) {
      for (int64_t c = c0; c < c1; ++c) out[c] = lut[(row[c >> 1] >> ((c & 1) * 4)) & 15] * sj;
    } else {
      for (int64_t c = c0; c < c1; ++c) out[c] = lut[unpack_code(row, c, bits)] * sj;
    }
  }
}

}  // namespace lowbit
