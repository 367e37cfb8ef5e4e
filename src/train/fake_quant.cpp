// Fake quantization through lowbit's own quantizers (see fake_quant.h).
#include "train/fake_quant.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "formats/minifloat.h"
#include "kernels/matmul.h"
#include "kv/kv_rotation.h"

namespace lowbit::train {

namespace {
// Every row of x [T, n] replaced by what matmul's activation route `format` multiplies.
void fake_quant_route(FormatId format, float* x, int64_t T, int64_t n, float clip, ActScale scale) {
  std::vector<float> out(static_cast<size_t>(T * n));
  quantize_activations(format, clip, scale, x, T, n, out.data());
  std::copy(out.begin(), out.end(), x);
}
}  // namespace

void fake_quant_act_int4(float* x, int64_t T, int64_t n, float clip) {
  fake_quant_route(FormatId::INT4, x, T, n, clip, ActScale::Amax);
}

void fake_quant_act_nvfp4(float* x, int64_t T, int64_t n, float clip, ActScale scale) {
  fake_quant_route(FormatId::NVFP4, x, T, n, clip, scale);
}

void fake_quant_act_nvfp4_grad(const float* x, const float* g, int64_t n, float clip, ActScale scale,
                               float* gx) {
  const int64_t B = kNvfp4ActBlock, nb = (n + B - 1) / B;
  std::vector<uint8_t> codes(static_cast<size_t>(n)), bs(static_cast<size_t>(nb));
  float gs = 0;
  quantize_activation_nvfp4(x, n, clip, scale, codes.data(), bs.data(), &gs);
  int64_t M = 0;
  for (int64_t i = 1; i < n; ++i)
    if (std::fabs(x[i]) > std::fabs(x[M])) M = i;
  const float amax = std::fabs(x[M]);
  for (int64_t i = 0; i < n; ++i) gx[i] = 0;
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t b0 = b * B, b1 = std::min(n, b0 + B);
    const float S = fp8_e4m3fn_to_f32(bs[static_cast<size_t>(b)]) * gs;
    if (!(S > 0) || !std::isfinite(S)) {  // a block of zeros (or a poisoned token): straight through
      for (int64_t i = b0; i < b1; ++i) gx[i] += g[i];
      continue;
    }
    int64_t m = b0;
    for (int64_t i = b0 + 1; i < b1; ++i)
      if (std::fabs(x[i]) > std::fabs(x[m])) m = i;
    double ds = 0;
    for (int64_t i = b0; i < b1; ++i) {
      const bool inside = std::fabs(x[i]) <= 6.0f * S;
      if (inside) gx[i] += g[i];
      ds += static_cast<double>(g[i]) *
            (fp4_e2m1_to_f32(codes[static_cast<size_t>(i)]) - (inside ? static_cast<double>(x[i]) / S : 0.0));
    }
    int64_t at;
    double d;
    if (scale == ActScale::Amax) {
      const bool saturated = std::fabs(x[m]) > clip * amax;
      at = saturated ? M : m;
      d = saturated ? clip / 6.0 : 1.0 / 6.0;
    } else {  // the top E4M3 code follows the token's scale, every other one the block's largest |x|
      at = bs[static_cast<size_t>(b)] == 0x7E ? M : m;
      d = std::fabs(x[at]) > 0 ? S / std::fabs(x[at]) : 0.0;
    }
    gx[at] += static_cast<float>((x[at] < 0 ? -d : d) * ds);
  }
}

KvFakeQuant make_kv_fake_quant(const std::string& kv_cache, const ModelConfig& c) {
  KvFakeQuant q;
  q.spec = parse_kv_spec(kv_cache);
  q.n_kv_heads = c.n_kv_heads;
  q.head_dim = c.head_dim;
  if (!q.enabled()) return q;
  auto refuse = [&](const std::string& why) {
    throw UsageError("train", "KV cache '" + kv_cache + "' cannot be fake-quantized for training: " + why +
                                  "; train with a plain int4/int8/int2 cache spec (e.g. int4+rot)");
  };
  if (q.spec.window > 0 || q.spec.evict.policy != KvEvictPolicy::None || !q.spec.keep_layers.empty() ||
      q.spec.pre_rope)
    refuse("windows, eviction, kept layers and pre-RoPE keys are not modelled");
  for (const KvSideSpec* s : {&q.spec.k, &q.spec.v})
    if (s->format != KvFormat::INT4 && s->format != KvFormat::INT8 && s->format != KvFormat::INT2 &&
        !kv_format_is_plain(s->format))
      refuse(std::string("format ") + kv_format_name(s->format) + " takes its scales from calibration");
  if (q.spec.rotate && !kv_rotation_supported(c.head_dim))
    refuse("head_dim " + std::to_string(c.head_dim) + " is not a power of two (rot)");
  q.k = kv_side_layout(q.spec.k, true, c);
  q.v = kv_side_layout(q.spec.v, false, c);
  return q;
}

void fake_quant_kv(const KvFakeQuant& q, bool key, float* x, int64_t S) {
  if (!q.enabled()) return;
  const int64_t D = q.n_kv_heads * q.head_dim;
  const KvSideLayout& L = key ? q.k : q.v;
  if (q.spec.rotate) rotate_heads(x, S * q.n_kv_heads, q.head_dim);
  KvLayerScales ls;
  ls.ready = true;  // int formats keep their scales in the rows
  // Per-channel keys stage every row (K and V) in F16 until a block is full; other formats encode the float
  // row directly (PagedKvCache::store_one / seal).
  const bool staged = q.k.per_channel;
  const int64_t B = q.spec.block_tokens, sealed = staged ? S / B * B : S;
  if (staged)
    for (int64_t i = 0; i < S * D; ++i) x[i] = f16_to_f32(f32_to_f16(x[i]));
  std::vector<uint8_t> rows(static_cast<size_t>(std::max<int64_t>(B, 1) * L.row_bytes)),
      extra(static_cast<size_t>(std::max<int64_t>(L.block_extra, 1)));
  if (L.per_channel) {
    for (int64_t b = 0; b < sealed; b += B) {
      kv_encode_block(L, x + b * D, B, rows.data(), L.row_bytes, extra.data());
      for (int64_t i = 0; i < B; ++i)
        kv_decode_range(L, rows.data() + i * L.row_bytes, extra.data(), ls, 0, D, x + (b + i) * D);
    }
  } else if (!kv_format_is_plain(L.format)) {
    for (int64_t t = 0; t < sealed; ++t) {
      kv_encode_row(L, x + t * D, rows.data(), ls);
      kv_decode_range(L, rows.data(), extra.data(), ls, 0, D, x + t * D);
    }
  } else if (L.format != KvFormat::F32) {  // a plain side of a mixed spec: f16 / bf16 rows
    std::vector<uint8_t> row(static_cast<size_t>(L.row_bytes));
    for (int64_t t = 0; t < sealed; ++t) {
      kv_encode_row(L, x + t * D, row.data(), ls);
      kv_decode_range(L, row.data(), extra.data(), ls, 0, D, x + t * D);
    }
  }
  if (q.spec.rotate) rotate_heads(x, S * q.n_kv_heads, q.head_dim);
}

}  // namespace lowbit::train
