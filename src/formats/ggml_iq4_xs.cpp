// GGUF IQ4_XS (ggml type 23): 256 weights per 136-byte super-block, 4.25 bpw; the IQ4_NL non-linear grid with
// a 6-bit scale per sub-block of 32 instead of an fp16 scale per block of 32.
//
//   offset 0   2          4            8                                   136
//          | d | scales_h | scales_l[4] | qs[128]                            |
//   8 sub-blocks of 32. Sub-block s (0..7) has the 6-bit scale
//     ls = ((scales_l[s / 2] >> 4 * (s % 2)) & 15) | (((scales_h >> 2 * s) & 3) << 4)
//   (low 4 bits: nibble s % 2 of scales_l[s / 2]; high 2 bits: bits 2s, 2s+1 of the little-endian uint16
//   scales_h), and its codes in qs[16s .. 16s+15]: low nibble of qs[16s + j] -> element 32s + j, high nibble
//   -> element 32s + j + 16 (the IQ4_NL order within a sub-block).
//   x = d * (ls - 32) * kIq4Grid[nibble]      (ls - 32 in [-32, 31]; both products are exact in float32)
//
// Quantization (llama.cpp's quantize_iq4_xs, what llama-quantize runs; byte-compatible with and without an
// importance vector): sigma^2 = 2 mean x^2 over the super-block; per sub-block the weights and the step
// search of IQ4_NL (ggml_iq4_grid.h) give a float step s_b; with m the s_b of largest |s_b| (sign kept),
// d = -m / 32 (stored as fp16) and ls_b - 32 = nearest(s_b / d) clamped to [-32, 31], computed with the
// float d; every element is then re-mapped to the grid under d * (ls_b - 32). Sub-blocks with max |x| <
// 1e-15 get step 0 (ls = 32, codes 8); an all-zero super-block stores d = -0 as llama.cpp does. Where
// llama.cpp's sums overflow (|x| beyond ~1e12) or its fp16 d would be Inf, lowbit encodes in power-of-two
// scaled units (the same codes) and saturates d at +-65504 with the codes re-mapped under it.
#include <cmath>
#include <cstddef>
#include <cstring>

#include "core/half.h"
#include "formats/format_rows.h"
#include "formats/ggml_iq4_grid.h"
#include "formats/ggml_kquants.h"
#include "formats/ggml_types.h"

namespace lowbit::formats_detail {
namespace {
struct BlockIq4Xs {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};
static_assert(sizeof(BlockIq4Xs) == 136, "IQ4_XS block is 136 bytes");

int sub_scale(const BlockIq4Xs& blk, int s) {
  return ((blk.scales_l[s / 2] >> 4 * (s % 2)) & 0x0F) | (((blk.scales_h >> 2 * s) & 3) << 4);
}

void deq(const void* src, float* y, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    BlockIq4Xs blk;
    std::memcpy(&blk, p + b * sizeof blk, sizeof blk);
    const float d = f16_to_f32(blk.d);
    for (int s = 0; s < 8; ++s, y += 32) {
      const float dl = d * static_cast<float>(sub_scale(blk, s) - 32);
      const uint8_t* q = blk.qs + 16 * s;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * kIq4Grid[q[j] & 0x0F];
        y[j + 16] = dl * kIq4Grid[q[j] >> 4];
      }
    }
  }
}

// The sub-block steps s_b of one super-block (0 where the sums overflow: the caller checks finiteness).
void sub_block_steps(const float* x, const float* imp, float* steps) {
  float sigma2 = 0;
  for (int j = 0; j < kQK_K; ++j) sigma2 += x[j] * x[j];
  sigma2 *= 2.f / kQK_K;
  for (int b = 0; b < 8; ++b) {
    float w[32];
    iq4_block_weights(x + 32 * b, imp ? imp + 32 * b : nullptr, sigma2, w);
    steps[b] = iq4_block_step(x + 32 * b, w);
  }
}

// Scales (ls - 32) and codes of one super-block under the super-block step d (float, before fp16).
void assign(const float* x, const float* steps, float d, BlockIq4Xs* blk) {
  const float id = d != 0 ? 1 / d : 0.f;
  blk->scales_h = 0;
  std::memset(blk->scales_l, 0, sizeof blk->scales_l);
  for (int b = 0; b < 8; ++b) {
    const int l = rne_clamp(id * steps[b], -32, 31);  // a saturated d leaves id * steps[b] beyond int's range
    const float dl = d * static_cast<float>(l);
    const float idl = dl != 0 ? 1 / dl : 0.f;
    const float* xb = x + 32 * b;
    uint8_t* qs = blk->qs + 16 * b;
    for (int j = 0; j < 16; ++j)
      qs[j] = static_cast<uint8_t>(iq4_nearest_index(idl * xb[j]) | iq4_nearest_index(idl * xb[j + 16]) << 4);
    const int ls = l + 32;
    blk->scales_l[b / 2] = static_cast<uint8_t>(blk->scales_l[b / 2] | (ls & 15) << 4 * (b % 2));
    blk->scales_h = static_cast<uint16_t>(blk->scales_h | (ls >> 4) << 2 * b);
  }
}

void encode_super_block(const float* x, const float* imp, BlockIq4Xs* blk) {
  float steps[8];
  sub_block_steps(x, imp, steps);
  bool finite = true;
  for (float s : steps) finite = finite && std::isfinite(s);
  if (!finite) {  // the plain sums overflow: steps in units of 2^(e - 1), the same codes
    int e = 0;
    float amax = 0, xs[kQK_K];
    for (int j = 0; j < kQK_K; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    std::frexp(amax, &e);
    for (int j = 0; j < kQK_K; ++j) xs[j] = std::ldexp(x[j], 1 - e);
    sub_block_steps(xs, imp, steps);
    for (float& s : steps) s = std::ldexp(s, e - 1);
  }
  float m = 0, am = 0;
  for (float s : steps)
    if (std::fabs(s) > am) {
      am = std::fabs(s);
      m = s;
    }
  float d = -m / 32;
  if (std::fabs(d) > 65504.0f) d = d < 0 ? -65504.0f : 65504.0f;  // llama.cpp would store Inf
  assign(x, steps, d, blk);
  blk->d = f32_to_f16(d);
}

void weighted(const float* x, void* dst, int64_t n, const float* importance, float* values) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    BlockIq4Xs blk;
    encode_super_block(x + b * kQK_K, importance ? importance + b * kQK_K : nullptr, &blk);
    std::memcpy(p + b * sizeof blk, &blk, sizeof blk);
  }
  if (values) deq(dst, values, n);
}

void quant(const float* x, void* dst, int64_t n) {
  weighted(x, dst, n, nullptr, nullptr);
}

// GPTQ's view (FormatInfo::row_grid / set_row_codes): element i = scale_i * kIq4Grid[code], offset 0.
void grid(const void* row, float* scale, float* offset, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(row);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    BlockIq4Xs blk;
    std::memcpy(&blk, p + b * sizeof blk, sizeof blk);
    const float d = f16_to_f32(blk.d);
    for (int s = 0; s < 8; ++s)
      for (int j = 0; j < 32; ++j) {
        scale[b * kQK_K + 32 * s + j] = d * static_cast<float>(sub_scale(blk, s) - 32);
        offset[b * kQK_K + 32 * s + j] = 0;
      }
  }
}

void set_codes(void* row, const int8_t* q, int64_t n) {
  auto* p = static_cast<uint8_t*>(row);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    uint8_t* qs = p + b * sizeof(BlockIq4Xs) + offsetof(BlockIq4Xs, qs);
    const int8_t* c = q + b * kQK_K;
    for (int s = 0; s < 8; ++s)
      for (int j = 0; j < 16; ++j)
        qs[16 * s + j] = static_cast<uint8_t>((c[32 * s + j] & 15) | (c[32 * s + j + 16] & 15) << 4);
  }
}
}  // namespace

FormatInfo row_iq4_xs() {
  FormatInfo r = make_gguf_row(
      FormatId::IQ4_XS, "iq4_xs", ggml::IQ4_XS, 4,
      "GGUF IQ4_XS: 256 = 8 x 32 x 4-bit non-linear grid, 6-bit sub-block scales + fp16 (4.25 bpw)", deq,
      quant);
  r.quantize_row_weighted = weighted;
  r.row_grid = grid;
  r.set_row_codes = set_codes;
  r.code_min = 0;
  r.code_max = 15;
  r.code_values = kIq4Grid;
  r.scale_at[0] = static_cast<int>(offsetof(BlockIq4Xs, d));
  return r;
}
}  // namespace lowbit::formats_detail
