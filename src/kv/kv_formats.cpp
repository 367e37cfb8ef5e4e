#include "kv/kv_formats.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "formats/format.h"
#include "tensor/qtensor.h"

namespace lowbit {

const char* kv_format_name(KvFormat f) {
  switch (f) {
    case KvFormat::F32:
      return "f32";
    case KvFormat::F16:
      return "f16";
    case KvFormat::BF16:
      return "bf16";
    case KvFormat::E4M3:
      return "e4m3";
    case KvFormat::E5M2:
      return "e5m2";
    case KvFormat::INT8:
      return "int8";
    case KvFormat::INT4:
      return "int4";
    case KvFormat::INT2:
      return "int2";
    case KvFormat::FP4:
      return "fp4";
  }
  return "?";
}

bool kv_format_is_plain(KvFormat f) {
  return f == KvFormat::F32 || f == KvFormat::F16 || f == KvFormat::BF16;
}

bool KvCacheSpec::is_plain() const {
  return kv_format_is_plain(k.format) && k.format == v.format && window == 0 && !rotate && !pre_rope &&
         keep_layers.empty() && budget_tokens == 0 && budget_bytes == 0 && !force_paged &&
         evict.policy == KvEvictPolicy::None;
}

namespace {

std::string side_text(const KvSideSpec& s, bool is_key) {
  std::string t = kv_format_name(s.format);
  if (s.format == KvFormat::E4M3 || s.format == KvFormat::E5M2) {
    t += s.fp8_scale == KvScaleMode::Head    ? "/head"
         : s.fp8_scale == KvScaleMode::Token ? "/token"
                                             : "/tensor";
    if (s.fp8_scale != KvScaleMode::Token)
      t += s.fixed_scale > 0 ? "/scale=" + std::to_string(s.fixed_scale) : "/dyn";
  }
  if (s.format == KvFormat::INT4 || s.format == KvFormat::INT2) {
    if (is_key && s.per_channel)
      t += s.asym_keys ? "/channel-asym" : "/channel";
    else
      t += "/group" + std::to_string(s.group);
  }
  if (s.format == KvFormat::FP4) t += s.fixed_scale > 0 ? "/scale=" + std::to_string(s.fixed_scale) : "/dyn";
  return t;
}

bool parse_int(const std::string& s, int64_t* out) {
  if (s.empty() || s.size() > 15) return false;
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size()) return false;
  for (size_t j = i; j < s.size(); ++j)
    if (!std::isdigit(static_cast<unsigned char>(s[j]))) return false;
  *out = std::strtoll(s.c_str(), nullptr, 10);
  return true;
}

// Value of "name=V" or "nameV" options; empty when `tok` is not this option.
bool option_value(const std::string& tok, const std::string& name, std::string* v) {
  if (tok.rfind(name, 0) != 0 || tok.size() == name.size()) return false;
  *v = tok.substr(name.size());
  if ((*v)[0] == '=') *v = v->substr(1);
  return true;
}

KvFormat format_from(const std::string& flag, const std::string& name) {
  static const std::pair<const char*, KvFormat> names[] = {
      {"f32", KvFormat::F32},   {"f16", KvFormat::F16},     {"bf16", KvFormat::BF16},
      {"e4m3", KvFormat::E4M3}, {"e4m3fn", KvFormat::E4M3}, {"fp8", KvFormat::E4M3},
      {"e5m2", KvFormat::E5M2}, {"int8", KvFormat::INT8},   {"int4", KvFormat::INT4},
      {"int2", KvFormat::INT2}, {"fp4", KvFormat::FP4},     {"nvfp4", KvFormat::FP4},
      {"e2m1", KvFormat::FP4}};
  for (const auto& [n, f] : names)
    if (name == n) return f;
  throw UsageError("model",
                   flag + ": unknown KV format '" + name +
                       "'; use f32, f16, bf16, e4m3, e5m2, int8, int4, int2 or fp4 (options after ':')");
}

// Applies one flag's text: "FORMAT[:opt|+opt]...". sides: the sides the format and side options apply to.
void apply_flag(const std::string& flag, const std::string& text, KvCacheSpec& spec,
                std::vector<KvSideSpec*> sides) {
  std::vector<std::string> toks;
  std::string cur;
  for (char ch : text) {
    if (ch == ':' || ch == '+') {
      toks.push_back(cur);
      cur.clear();
    } else {
      cur += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    }
  }
  toks.push_back(cur);
  const KvFormat f = format_from(flag, toks[0]);
  for (auto* s : sides) s->format = f;
  auto bad = [&](const std::string& t, const std::string& why) {
    return UsageError("model", flag + " '" + text + "': option '" + t + "' " + why +
                                   " (options: window=N, rot, prerope, keep=0,-1, block=N, budget=N|64MiB, "
                                   "head, tensor, token, scale=X, dyn, group=N, asym, pertoken, paged)");
  };
  for (size_t i = 1; i < toks.size(); ++i) {
    const std::string& t = toks[i];
    std::string v;
    int64_t n = 0;
    if (t.empty()) throw bad(t, "is empty");
    if (t == "rot") {
      spec.rotate = true;
    } else if (t == "prerope") {
      spec.pre_rope = true;
    } else if (t == "paged") {
      spec.force_paged = true;
    } else if (t == "head" || t == "tensor" || t == "token") {
      for (auto* s : sides)
        s->fp8_scale = t == "head"    ? KvScaleMode::Head
                       : t == "token" ? KvScaleMode::Token
                                      : KvScaleMode::Tensor;
    } else if (t == "dyn") {
      for (auto* s : sides) s->fixed_scale = 0, s->dynamic_global = true;
    } else if (t == "asym") {
      for (auto* s : sides) s->asym_keys = true;
    } else if (t == "sym") {
      for (auto* s : sides) s->asym_keys = false;
    } else if (t == "pertoken") {
      for (auto* s : sides) s->per_channel = false;
    } else if (t == "channel") {
      for (auto* s : sides) s->per_channel = true;
    } else if (t == "keep" || option_value(t, "keep", &v)) {
      if (t == "keep") {
        if (i + 1 >= toks.size()) throw bad(t, "needs a list of layers, e.g. keep:0,-1");
        v = toks[++i];
      }
      size_t p = 0;
      while (p <= v.size()) {
        size_t q = v.find(',', p);
        if (q == std::string::npos) q = v.size();
        if (!parse_int(v.substr(p, q - p), &n) || n < -100000 || n > 100000)
          throw bad(t, "has a bad layer index '" + v.substr(p, q - p) + "'");
        spec.keep_layers.push_back(static_cast<int>(n));
        p = q + 1;
      }
    } else if (option_value(t, "window", &v)) {
      if (!parse_int(v, &n) || n < 0 || n > (int64_t(1) << 30)) throw bad(t, "needs a token count");
      spec.window = n;
    } else if (option_value(t, "block", &v)) {
      if (!parse_int(v, &n) || n < 1 || n > 256) throw bad(t, "needs a block size in [1, 256] tokens");
      spec.block_tokens = static_cast<int>(n);
    } else if (option_value(t, "group", &v)) {
      if (!parse_int(v, &n) || n < 1 || n > 4096) throw bad(t, "needs a group size in [1, 4096]");
      for (auto* s : sides) s->group = static_cast<int>(n);
    } else if (option_value(t, "scale", &v)) {
      char* end = nullptr;
      const float x = std::strtof(v.c_str(), &end);
      if (*end != 0 || !(x > 0) || !std::isfinite(x)) throw bad(t, "needs a positive finite scale");
      for (auto* s : sides) s->fixed_scale = x;
    } else if (option_value(t, "budget", &v)) {
      static const std::pair<const char*, int64_t> units[] = {
          {"kib", 1024}, {"mib", 1 << 20}, {"gib", 1 << 30}};
      int64_t mult = 0;
      for (const auto& [u, m] : units)
        if (v.size() > 3 && v.compare(v.size() - 3, 3, u) == 0) mult = m, v = v.substr(0, v.size() - 3);
      if (!parse_int(v, &n) || n <= 0 || n > (int64_t(1) << 40))
        throw bad(t, "needs tokens or bytes (64MiB)");
      if (mult)
        spec.budget_bytes = n * mult, spec.budget_tokens = 0;
      else
        spec.budget_tokens = n, spec.budget_bytes = 0;
    } else {
      throw bad(t, "is unknown");
    }
  }
}

}  // namespace

std::string KvCacheSpec::describe() const {
  std::string s = "k=" + side_text(k, true) + " v=" + side_text(v, false);
  if (window) s += " window=" + std::to_string(window);
  if (rotate) s += " rot";
  if (pre_rope) s += " prerope";
  if (!keep_layers.empty()) {
    s += " keep=";
    for (size_t i = 0; i < keep_layers.size(); ++i) s += (i ? "," : "") + std::to_string(keep_layers[i]);
  }
  if (block_tokens != 16) s += " block=" + std::to_string(block_tokens);
  if (evict.policy != KvEvictPolicy::None) s += " evict=" + evict.describe();
  return s;
}

KvCacheSpec parse_kv_spec(const std::string& cache, const std::string& k, const std::string& v,
                          const std::string& evict) {
  KvCacheSpec s;
  if (!cache.empty()) apply_flag("--kv-cache", cache, s, {&s.k, &s.v});
  if (!k.empty()) apply_flag("--kv-cache-k", k, s, {&s.k});
  if (!v.empty()) apply_flag("--kv-cache-v", v, s, {&s.v});
  s.evict = parse_kv_evict(evict);
  s.text = cache;
  if (!k.empty()) s.text += (s.text.empty() ? "" : " ") + std::string("k=") + k;
  if (!v.empty()) s.text += (s.text.empty() ? "" : " ") + std::string("v=") + v;
  if (!evict.empty()) s.text += (s.text.empty() ? "" : " ") + std::string("evict=") + evict;
  if (s.text.empty()) s.text = "f32";
  return s;
}

// -----------------------------------------------------------------------------------------------------------
// Layouts and codecs

KvSideLayout kv_side_layout(const KvSideSpec& s, bool is_key, const ModelConfig& c) {
  KvSideLayout L;
  L.format = s.format;
  L.fp8_scale = s.fp8_scale;
  L.kv_dim = c.kv_dim();
  L.head_dim = c.head_dim;
  const int64_t D = L.kv_dim, H = c.n_kv_heads;
  switch (s.format) {
    case KvFormat::F32:
      L.bits = 32;
      L.code_bytes = L.row_bytes = 4 * D;
      break;
    case KvFormat::F16:
    case KvFormat::BF16:
      L.bits = 16;
      L.code_bytes = L.row_bytes = 2 * D;
      break;
    case KvFormat::E4M3:
    case KvFormat::E5M2:
      L.bits = 8;
      L.code_bytes = D;
      L.row_bytes = D + (s.fp8_scale == KvScaleMode::Token ? 2 * H : 0);
      break;
    case KvFormat::INT8:
      L.bits = 8;
      L.code_bytes = D;
      L.row_bytes = D + 2 * H;
      break;
    case KvFormat::INT4:
    case KvFormat::INT2:
      L.bits = s.format == KvFormat::INT4 ? 4 : 2;
      L.code_bytes = (D * L.bits + 7) / 8;
      if (is_key && s.per_channel) {
        L.per_channel = true;
        L.asym = s.asym_keys;
        L.row_bytes = L.code_bytes;
        L.block_extra = D * 2 * (L.asym ? 2 : 1);
      } else {
        L.group = static_cast<int>(std::min<int64_t>(s.group, D));
        if (D % L.group != 0)
          throw UsageError("model", "KV format " + std::string(kv_format_name(s.format)) + ": the row of " +
                                        std::to_string(D) + " channels is not a multiple of the group " +
                                        std::to_string(L.group) + "; choose group=N dividing it");
        L.row_bytes = L.code_bytes + (D / L.group) * 4;
      }
      break;
    case KvFormat::FP4:
      if (D % 16 != 0)
        throw UsageError("model", "KV format fp4 needs kv_dim (" + std::to_string(D) +
                                      ") to be a multiple of 16 (its block); use int4 instead");
      L.bits = 4;
      L.group = 16;
      L.code_bytes = D / 2;
      L.row_bytes = D / 2 + D / 16;
      break;
  }
  return L;
}

namespace {

struct Luts {
  std::array<float, 256> e4m3{}, e5m2{};
  std::array<float, 16> e2m1{};
  Luts() {
    const auto& a = format_info(FormatId::E4M3FN);
    const auto& b = format_info(FormatId::E5M2);
    const auto& c = format_info(FormatId::E2M1);
    for (uint32_t i = 0; i < 256; ++i) e4m3[i] = a.decode(i), e5m2[i] = b.decode(i);
    for (uint32_t i = 0; i < 16; ++i) e2m1[i] = c.decode(i);
  }
};
const Luts& luts() {
  static const Luts l;
  return l;
}

inline float f16r(float x) {
  return f16_to_f32(f32_to_f16(std::min(x, 65504.0f)));
}
inline void st16(uint8_t* p, uint16_t v) {
  std::memcpy(p, &v, 2);
}
inline float amax_of(const float* x, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i)
    if (std::isfinite(x[i])) m = std::max(m, std::fabs(x[i]));
  return m;
}

}  // namespace

const float* kv_fp8_lut(bool e4m3) {
  return e4m3 ? luts().e4m3.data() : luts().e5m2.data();
}
const float* kv_fp4_lut() {
  return luts().e2m1.data();
}

// Dynamic FP8 scales come from the first batch only, so later tokens may be larger: leave 16x (4 binades) of
// headroom. FP8 is floating point, so this costs no relative precision until values fall 2^11 (E4M3) below
// the calibration maximum (with 2x headroom, per-tensor E4M3 lost 0.18 PPL on stories260K vs 0.04 per token).
constexpr double kFp8Headroom = 16.0;

void kv_calibrate(const KvSideLayout& L, const KvSideSpec& s, const float* x, int64_t n, KvLayerScales& ls) {
  if (ls.ready) return;
  const int64_t D = L.kv_dim, hd = L.head_dim, H = D / hd;
  if (L.format == KvFormat::E4M3 || L.format == KvFormat::E5M2) {
    const double mx = L.format == KvFormat::E4M3 ? 448.0 : 57344.0;
    ls.s.assign(static_cast<size_t>(H), 1.0f);
    if (L.fp8_scale != KvScaleMode::Token) {
      std::vector<float> am(static_cast<size_t>(H), 0.0f);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t h = 0; h < H; ++h) am[h] = std::max(am[h], amax_of(x + r * D + h * hd, hd));
      float all = *std::max_element(am.begin(), am.end());
      for (int64_t h = 0; h < H; ++h) {
        float a = L.fp8_scale == KvScaleMode::Head ? am[h] : all;
        ls.s[h] =
            s.fixed_scale > 0 ? s.fixed_scale : (a > 0 ? static_cast<float>(kFp8Headroom * a / mx) : 1.0f);
      }
    }
  } else if (L.format == KvFormat::FP4) {
    float g = 1.0f;
    if (s.fixed_scale > 0)
      g = s.fixed_scale;
    else if (s.dynamic_global) {
      float a = n > 0 ? amax_of(x, n * D) : 0.0f;
      if (a > 0) g = static_cast<float>(448.0 * 6.0 / (2.0 * a));
    }
    ls.s.assign(1, g);
  }
  ls.ready = true;
}

void kv_encode_row(const KvSideLayout& L, const float* x, uint8_t* row, const KvLayerScales& ls) {
  const int64_t D = L.kv_dim, hd = L.head_dim, H = D / hd;
  switch (L.format) {
    case KvFormat::F32:
      std::memcpy(row, x, D * 4);
      return;
    case KvFormat::F16:
      for (int64_t i = 0; i < D; ++i) st16(row + 2 * i, f32_to_f16(x[i]));
      return;
    case KvFormat::BF16:
      for (int64_t i = 0; i < D; ++i) st16(row + 2 * i, f32_to_bf16(x[i]));
      return;
    case KvFormat::E4M3:
    case KvFormat::E5M2: {
      const auto& fi = format_info(L.format == KvFormat::E4M3 ? FormatId::E4M3FN : FormatId::E5M2);
      for (int64_t h = 0; h < H; ++h) {
        float s;
        if (L.fp8_scale == KvScaleMode::Token) {
          s = f16r(static_cast<float>(amax_of(x + h * hd, hd) / fi.max_finite));
          st16(row + D + 2 * h, f32_to_f16(s));
        } else {
          s = ls.s[h];
        }
        const float inv = s > 0 ? 1.0f / s : 0.0f;
        for (int64_t i = 0; i < hd; ++i)
          row[h * hd + i] = static_cast<uint8_t>(fi.encode(x[h * hd + i] * inv, true));
      }
      return;
    }
    case KvFormat::INT8:
      for (int64_t h = 0; h < H; ++h) {
        const float s = f16r(amax_of(x + h * hd, hd) / 127.0f);
        st16(row + D + 2 * h, f32_to_f16(s));
        const float inv = s > 0 ? 1.0f / s : 0.0f;
        for (int64_t i = 0; i < hd; ++i) {
          float q = std::nearbyint(x[h * hd + i] * inv);
          q = std::isfinite(q) ? std::clamp(q, -127.0f, 127.0f) : 0.0f;
          row[h * hd + i] = static_cast<uint8_t>(static_cast<int8_t>(q));
        }
      }
      return;
    case KvFormat::INT4:
    case KvFormat::INT2: {
      // Per-token, asymmetric groups along the row (per-channel keys go through kv_encode_block).
      std::memset(row, 0, L.code_bytes);
      const int64_t G = L.group, ng = D / G;
      const float qmax = static_cast<float>((1 << L.bits) - 1);
      uint8_t* sc = row + L.code_bytes;
      for (int64_t g = 0; g < ng; ++g) {
        float mn = INFINITY, mx = -INFINITY;
        for (int64_t i = g * G; i < (g + 1) * G; ++i)
          if (std::isfinite(x[i])) mn = std::min(mn, x[i]), mx = std::max(mx, x[i]);
        if (!(mn <= mx)) mn = mx = 0;
        const float s = f16r((mx - mn) / qmax), m = f16r(mn);
        st16(sc + 2 * g, f32_to_f16(s));
        st16(sc + 2 * (ng + g), f32_to_f16(m));
        const float inv = s > 0 ? 1.0f / s : 0.0f;
        for (int64_t i = g * G; i < (g + 1) * G; ++i) {
          float q = std::nearbyint((x[i] - m) * inv);
          q = std::isfinite(q) ? std::clamp(q, 0.0f, qmax) : 0.0f;
          pack_code(row, i, L.bits, static_cast<uint32_t>(q));
        }
      }
      return;
    }
    case KvFormat::FP4: {
      std::memset(row, 0, L.code_bytes);
      const auto& e2 = format_info(FormatId::E2M1);
      const float g = ls.s.empty() ? 1.0f : ls.s[0];
      for (int64_t b = 0; b < D / 16; ++b) {
        const float a = amax_of(x + b * 16, 16);
        const uint32_t sc = scale_encode(ScaleType::E4M3, std::min(448.0f, a / 6.0f * g));
        row[L.code_bytes + b] = static_cast<uint8_t>(sc);
        const float s = scale_decode(ScaleType::E4M3, sc) / g;
        const float inv = s > 0 ? 1.0f / s : 0.0f;
        for (int64_t i = b * 16; i < (b + 1) * 16; ++i) pack_code(row, i, 4, e2.encode(x[i] * inv, true));
      }
      return;
    }
  }
}

void kv_encode_block(const KvSideLayout& L, const float* x, int64_t n, uint8_t* rows, int64_t row_stride,
                     uint8_t* extra) {
  const int64_t D = L.kv_dim;
  for (int64_t r = 0; r < n; ++r) std::memset(rows + r * row_stride, 0, L.code_bytes);
  const int half = 1 << (L.bits - 1);
  for (int64_t c = 0; c < D; ++c) {
    float mn = INFINITY, mx = -INFINITY;
    for (int64_t r = 0; r < n; ++r) {
      const float v = x[r * D + c];
      if (std::isfinite(v)) mn = std::min(mn, v), mx = std::max(mx, v);
    }
    if (!(mn <= mx)) mn = mx = 0;
    if (L.asym) {
      const float qmax = static_cast<float>((1 << L.bits) - 1);
      const float s = f16r((mx - mn) / qmax), m = f16r(mn);
      st16(extra + 2 * c, f32_to_f16(s));
      st16(extra + 2 * (D + c), f32_to_f16(m));
      const float inv = s > 0 ? 1.0f / s : 0.0f;
      for (int64_t r = 0; r < n; ++r) {
        float q = std::nearbyint((x[r * D + c] - m) * inv);
        q = std::isfinite(q) ? std::clamp(q, 0.0f, qmax) : 0.0f;
        pack_code(rows + r * row_stride, c, L.bits, static_cast<uint32_t>(q));
      }
    } else {
      const float qh = static_cast<float>(half - 1);
      const float s = f16r(std::max(std::fabs(mn), std::fabs(mx)) / qh);
      st16(extra + 2 * c, f32_to_f16(s));
      const float inv = s > 0 ? 1.0f / s : 0.0f;
      for (int64_t r = 0; r < n; ++r) {
        float q = std::nearbyint(x[r * D + c] * inv);
        q = std::isfinite(q) ? std::clamp(q, -qh, qh) : 0.0f;
        pack_code(rows + r * row_stride, c, L.bits, static_cast<uint32_t>(static_cast<int>(q) + half));
      }
    }
  }
}

void kv_decode_range(const KvSideLayout& L, const uint8_t* row, const uint8_t* extra, const KvLayerScales& ls,
                     int64_t off, int64_t n, float* out) {
  const int64_t D = L.kv_dim, hd = L.head_dim;
  switch (L.format) {
    case KvFormat::F32:
      std::memcpy(out, row + off * 4, n * 4);
      return;
    case KvFormat::F16:
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(ld16(row + 2 * (off + i)));
      return;
    case KvFormat::BF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(ld16(row + 2 * (off + i)));
      return;
    case KvFormat::E4M3:
    case KvFormat::E5M2: {
      const auto& lut = L.format == KvFormat::E4M3 ? luts().e4m3 : luts().e5m2;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t h = (off + i) / hd;
        const float s = L.fp8_scale == KvScaleMode::Token ? f16_to_f32(ld16(row + D + 2 * h)) : ls.s[h];
        out[i] = lut[row[off + i]] * s;
      }
      return;
    }
    case KvFormat::INT8:
      for (int64_t i = 0; i < n; ++i) {
        const int64_t h = (off + i) / hd;
        out[i] = static_cast<float>(static_cast<int8_t>(row[off + i])) * f16_to_f32(ld16(row + D + 2 * h));
      }
      return;
    case KvFormat::INT4:
    case KvFormat::INT2:
      if (L.per_channel) {
        const int half = 1 << (L.bits - 1);
        for (int64_t i = 0; i < n; ++i) {
          const int64_t c = off + i;
          const float s = f16_to_f32(ld16(extra + 2 * c));
          const int u = static_cast<int>(unpack_code(row, c, L.bits));
          out[i] = L.asym ? f16_to_f32(ld16(extra + 2 * (D + c))) + u * s : (u - half) * s;
        }
      } else {
        const int64_t ng = D / L.group;
        const uint8_t* sc = row + L.code_bytes;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t c = off + i, g = c / L.group;
          out[i] = f16_to_f32(ld16(sc + 2 * (ng + g))) +
                   static_cast<float>(unpack_code(row, c, L.bits)) * f16_to_f32(ld16(sc + 2 * g));
        }
      }
      return;
    case KvFormat::FP4: {
      const float g = ls.s.empty() ? 1.0f : ls.s[0];
      for (int64_t i = 0; i < n; ++i) {
        const int64_t c = off + i;
        const float s = scale_decode(ScaleType::E4M3, row[L.code_bytes + c / 16]) / g;
        out[i] = luts().e2m1[unpack_code(row, c, 4)] * s;
      }
      return;
    }
  }
}

}  // namespace lowbit
