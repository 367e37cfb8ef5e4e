// The formats table (one row per format, in FormatId order), name lookup, scale types, GGUF row dispatch.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/half.h"
#include "formats/format_rows.h"
#include "formats/ggml_types.h"

namespace lowbit {
namespace formats_detail {

FormatInfo make_minifloat_row(FormatId id, const char* name, const MinifloatSpec& s, int routes,
                              const char* description, float (*decode)(uint32_t),
                              uint32_t (*encode)(float, bool)) {
  FormatInfo r{};
  r.id = id;
  r.name = name;
  r.kind = FormatKind::Float;
  r.bits = 1 + s.exp_bits + s.man_bits;
  r.block_elems = 1;
  r.block_bytes = 0;
  r.native_scale = ScaleType::None;
  r.routes = routes;
  r.elem = id;
  r.max_finite = mf_max_finite(s);
  r.min_positive = mf_min_subnormal(s);
  r.has_inf = s.has_inf;
  r.has_nan = s.nan != MfNan::None;
  r.has_neg_zero = s.nan != MfNan::NegZero;
  r.ggml_type = -1;
  r.description = description;
  r.exp_bits = s.exp_bits;
  r.man_bits = s.man_bits;
  r.decode = decode;
  r.encode = encode;
  return r;
}

FormatInfo make_gguf_row(FormatId id, const char* name, int ggml_type, int bits, const char* description,
                         void (*deq)(const void*, float*, int64_t), void (*q)(const float*, void*, int64_t)) {
  const GgmlTypeInfo* t = ggml_type_info(ggml_type);
  FormatInfo r{};
  r.id = id;
  r.name = name;
  r.kind = FormatKind::GgmlBlock;
  r.bits = bits;
  r.block_elems = t ? t->block_elems : 0;
  r.block_bytes = t ? t->block_bytes : 0;
  r.native_scale = ScaleType::F16;
  r.routes = kRouteWeights;
  r.elem = id;
  r.max_finite = 0;
  r.min_positive = 0;
  r.has_inf = r.has_nan = r.has_neg_zero = false;
  r.ggml_type = ggml_type;
  r.description = description;
  r.dequantize_row = deq;
  r.quantize_row = q;
  return r;
}

FormatInfo format_info_elem_copy(FormatId elem) {
  switch (elem) {
    case FormatId::E4M3FN:
      return row_e4m3fn();
    case FormatId::E5M2:
      return row_e5m2();
    case FormatId::E2M3:
      return row_e2m3();
    case FormatId::E3M2:
      return row_e3m2();
    case FormatId::E2M1:
      return row_e2m1();
    default:
      fail("formats", "internal: format_info_elem_copy of a non-minifloat element format");
  }
}

}  // namespace formats_detail

namespace {
std::vector<FormatInfo> build_table() {
  using namespace formats_detail;
  std::vector<FormatInfo> t = {
#define LOWBIT_FORMAT_ROW(id, row) row(),
      LOWBIT_FORMAT_LIST(LOWBIT_FORMAT_ROW)
#undef LOWBIT_FORMAT_ROW
  };
  LB_CHECK(t.size() == static_cast<size_t>(kNumFormats), "formats", "internal: table size != FormatId count");
  for (size_t i = 0; i < t.size(); ++i)
    LB_CHECK(static_cast<size_t>(t[i].id) == i, "formats",
             std::string("internal: table row out of FormatId order: ") + t[i].name);
  return t;
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

struct Alias {
  const char* alias;
  const char* name;
};
constexpr Alias kAliases[] = {
    {"fp32", "f32"},
    {"float32", "f32"},
    {"fp16", "f16"},
    {"float16", "f16"},
    {"half", "f16"},
    {"bfloat16", "bf16"},
    {"e4m3", "e4m3fn"},
    {"fp8", "e4m3fn"},
    {"fp8_e4m3", "e4m3fn"},
    {"fp8_e5m2", "e5m2"},
    {"f8_e4m3", "e4m3fn"},
    {"f8_e5m2", "e5m2"},
    {"fp4", "e2m1"},
    {"fp6", "e2m3"},
    {"mxfp8", "mxfp8_e4m3"},
    {"mxfp6", "mxfp6_e2m3"},
    {"mxfp4_ggml", "ggml_mxfp4"},
};
}  // namespace

const std::vector<FormatInfo>& format_table() {
  static const std::vector<FormatInfo> t = build_table();
  return t;
}

const FormatInfo& format_info(FormatId id) {
  const auto& t = format_table();
  LB_CHECK(static_cast<size_t>(id) < t.size(), "formats", "internal: FormatId out of range");
  return t[static_cast<size_t>(id)];
}

const FormatInfo* find_format(std::string_view name) {
  std::string n = lower(name);
  for (auto& a : kAliases)
    if (n == a.alias) n = a.name;
  for (auto& r : format_table())
    if (n == r.name) return &r;
  return nullptr;
}

std::string closest_name(std::string_view name, const std::vector<std::string>& candidates) {
  std::string a = lower(name);
  double best = 1e9;
  std::string best_name;
  // Substituting one digit for another costs less the closer the digits are, so "int5" suggests "int4".
  auto sub_cost = [](char x, char y) {
    if (x == y) return 0.0;
    if (std::isdigit(static_cast<unsigned char>(x)) && std::isdigit(static_cast<unsigned char>(y)))
      return 0.5 + std::abs(x - y) / 20.0;
    return 1.0;
  };
  for (auto& c : candidates) {
    const std::string& b = c;
    std::vector<double> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<double>(j);
    for (size_t i = 1; i <= a.size(); ++i) {
      cur[0] = static_cast<double>(i);
      for (size_t j = 1; j <= b.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + sub_cost(a[i - 1], b[j - 1])});
      std::swap(prev, cur);
    }
    if (prev[b.size()] < best) {
      best = prev[b.size()];
      best_name = c;
    }
  }
  return best_name;
}

const FormatInfo& format_by_name(std::string_view name) {
  if (const FormatInfo* f = find_format(name)) return *f;
  std::vector<std::string> names;
  for (auto& r : format_table()) names.push_back(r.name);
  for (auto& a : kAliases) names.push_back(a.alias);
  throw UsageError("formats", "unknown format '" + std::string(name) + "'; did you mean '" +
                                  closest_name(name, names) + "'? (run lowbit formats for the list)");
}

const FormatInfo* format_by_ggml_type(int ggml_type) {
  for (auto& r : format_table())
    if (r.ggml_type == ggml_type) return &r;
  return nullptr;
}

// ---- scale types ----
const char* scale_type_name(ScaleType t) {
  switch (t) {
    case ScaleType::None:
      return "none";
    case ScaleType::F32:
      return "f32";
    case ScaleType::F16:
      return "f16";
    case ScaleType::BF16:
      return "bf16";
    case ScaleType::E4M3:
      return "e4m3";
    case ScaleType::E8M0:
      return "e8m0";
  }
  return "?";
}

bool scale_type_from_name(std::string_view s, ScaleType* out) {
  std::string n = lower(s);
  if (n == "fp32") n = "f32";
  if (n == "fp16") n = "f16";
  if (n == "ue4m3" || n == "e4m3fn") n = "e4m3";
  for (ScaleType t : {ScaleType::F32, ScaleType::F16, ScaleType::BF16, ScaleType::E4M3, ScaleType::E8M0})
    if (n == scale_type_name(t)) {
      *out = t;
      return true;
    }
  return false;
}

int scale_type_bits(ScaleType t) {
  switch (t) {
    case ScaleType::None:
      return 0;
    case ScaleType::F32:
      return 32;
    case ScaleType::F16:
    case ScaleType::BF16:
      return 16;
    case ScaleType::E4M3:
    case ScaleType::E8M0:
      return 8;
  }
  return 0;
}

uint32_t scale_encode(ScaleType t, float s) {
  switch (t) {
    case ScaleType::None:
      return 0;
    case ScaleType::F32:
      return f32_bits(s);
    case ScaleType::F16:
      if (!std::isnan(s)) s = std::fmin(s, 65504.0f);
      return f32_to_f16(s);
    case ScaleType::BF16:
      return f32_to_bf16(s);
    case ScaleType::E4M3:
      return f32_to_fp8_e4m3fn(s, true);
    case ScaleType::E8M0:
      return f32_to_e8m0(s, true);
  }
  return 0;
}

float scale_decode(ScaleType t, uint32_t code) {
  switch (t) {
    case ScaleType::None:
      return 1.0f;
    case ScaleType::F32:
      return f32_from_bits(code);
    case ScaleType::F16:
      return f16_to_f32(static_cast<uint16_t>(code));
    case ScaleType::BF16:
      return bf16_to_f32(static_cast<uint16_t>(code));
    case ScaleType::E4M3:
      return fp8_e4m3fn_to_f32(static_cast<uint8_t>(code));
    case ScaleType::E8M0:
      return e8m0_to_f32(static_cast<uint8_t>(code));
  }
  return 1.0f;
}

float scale_round(ScaleType t, float s) {
  return scale_decode(t, scale_encode(t, s));
}

void scale_store(ScaleType t, uint32_t code, uint8_t* p) {
  int n = scale_type_bits(t) / 8;
  for (int i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(code >> (8 * i));
}

uint32_t scale_load(ScaleType t, const uint8_t* p) {
  int n = scale_type_bits(t) / 8;
  uint32_t c = 0;
  for (int i = 0; i < n; ++i) c |= static_cast<uint32_t>(p[i]) << (8 * i);
  return c;
}

// ---- GGUF row dispatch ----
namespace {
const FormatInfo& gguf_row_or_throw(int ggml_type, int64_t n, bool quantize) {
  const FormatInfo* f = format_by_ggml_type(ggml_type);
  const GgmlTypeInfo* gi = ggml_type_info(ggml_type);
  std::string tname = gi ? gi->name : "id " + std::to_string(ggml_type);
  if (!f || (!f->is_gguf() && f->kind != FormatKind::Float))
    fail("formats", "no codec for ggml type " + tname +
                        "; supported: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 "
                        "Q2_K..Q6_K IQ4_NL IQ4_XS MXFP4");
  if (quantize && f->is_gguf() && !f->quantize_row)
    fail("formats",
         "quantizing to ggml type " + tname + " is not implemented; use one of " + gguf_quantizer_names());
  int64_t be = f->is_gguf() ? f->block_elems : 1;
  if (n < 0 || n % be != 0)
    fail("formats", "row of " + std::to_string(n) + " elements is not a multiple of the " + tname +
                        " block size " + std::to_string(be));
  return *f;
}
}  // namespace

void dequantize_row_ggml(int ggml_type, const void* src, float* dst, int64_t n) {
  const FormatInfo& f = gguf_row_or_throw(ggml_type, n, false);
  if (f.is_gguf()) return f.dequantize_row(src, dst, n);
  const auto* p = static_cast<const uint8_t*>(src);
  const int bytes = f.bits / 8;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t c = 0;
    std::memcpy(&c, p + i * bytes, bytes);  // little-endian host assumed (x86/arm64)
    dst[i] = f.decode(c);
  }
}

std::string gguf_quantizer_names() {
  std::string names;
  for (const FormatInfo& f : format_table())
    if (f.is_gguf() && (f.quantize_row || f.quantize_row_weighted))
      names += (names.empty() ? "" : ", ") + std::string(f.name);
  return names;
}

void quantize_row_ggml(int ggml_type, const float* src, void* dst, int64_t n, const float* importance,
                       float* values) {
  const FormatInfo& f = gguf_row_or_throw(ggml_type, n, true);
  if (f.quantize_row_weighted) return f.quantize_row_weighted(src, dst, n, importance, values);
  if (f.is_gguf()) {
    f.quantize_row(src, dst, n);
    if (values) f.dequantize_row(dst, values, n);
    return;
  }
  auto* p = static_cast<uint8_t*>(dst);
  const int bytes = f.bits / 8;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t c = f.encode(src[i], false);
    std::memcpy(p + i * bytes, &c, bytes);
    if (values) values[i] = f.decode(c);
  }
}

}  // namespace lowbit
