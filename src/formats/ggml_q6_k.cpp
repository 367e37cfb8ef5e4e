// GGUF Q6_K (ggml type 14): 256 weights per 210-byte super-block, 6.5625 bpw.
//
//   offset 0         128       192          208  210
//          | ql[128] | qh[64]  | scales[16] | d  |
//   16 sub-blocks of 16 with int8 scales. For half h (128 elements; ql[64h..], qh[32h..], scales[8h..]) and
//   l = 0..31 (is = l / 16):
//     element 128h + l      = (ql[64h+l]    & 15) | ((qh[32h+l] >> 0) & 3) << 4   scale[8h + is + 0]
//     element 128h + l + 32 = (ql[64h+l+32] & 15) | ((qh[32h+l] >> 2) & 3) << 4   scale[8h + is + 2]
//     element 128h + l + 64 = (ql[64h+l]    >> 4) | ((qh[32h+l] >> 4) & 3) << 4   scale[8h + is + 4]
//     element 128h + l + 96 = (ql[64h+l+32] >> 4) | ((qh[32h+l] >> 6) & 3) << 4   scale[8h + is + 6]
//   x = d * scale * (q - 32)
//
// Quantization: per sub-block a weighted signed fit to codes -32..31 (fit_signed, ggml_kquants.h; weights
// x_i^2, or imp_i sqrt(sigma^2 + x_i^2) with an importance vector), then the 16 scales to int8 against the
// fp16 d, and every element rounded to its nearest code under the stored scale. Without importance it is
// llama.cpp's quantize_row_q6_K_ref bit for bit (`reference`).
#include <cmath>
#include <cstddef>
#include <cstring>

#include "core/half.h"
#include "formats/format_rows.h"
#include "formats/ggml_kquants.h"
#include "formats/ggml_types.h"

namespace lowbit::formats_detail {
namespace {
struct BlockQ6K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6K) == 210, "Q6_K block is 210 bytes");

void deq(const void* src, float* y, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    BlockQ6K blk;
    std::memcpy(&blk, p + b * sizeof blk, sizeof blk);
    const float d = f16_to_f32(blk.d);
    for (int h = 0; h < 2; ++h, y += 128) {
      const uint8_t* ql = blk.ql + 64 * h;
      const uint8_t* qh = blk.qh + 32 * h;
      const int8_t* sc = blk.scales + 8 * h;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
        const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
        const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
        y[l] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

// Header: per sub-block of 16 a weighted signed fit to codes -32..31 (unweighted: weights x_i^2), then the
// 16 scales to int8 under d (quantize_signed, weighted by each sub-block's total weight).
void choose(const float* x, const float* w, float unit, uint8_t* out) {
  int L[16];
  BlockQ6K blk{};
  blk.d = k16_fit_signed_scales(x, w, unit, 32, 128, L);
  for (int j = 0; j < 16; ++j) blk.scales[j] = static_cast<int8_t>(L[j]);
  std::memcpy(out, &blk, sizeof blk);
}

// llama.cpp's quantize_row_q6_K_ref: per sub-block make_qx_quants with x^2 weights (ref_fit_signed_x2), the
// 16 scales to int8 with d = max / -128 (max = the scale of largest magnitude), each element rounded under
// the stored scale; a sub-block whose stored scale is 0 keeps its fitted codes; a super-block whose scales
// are all below eps is all zero bytes.
void reference(const float* x, const float* xs, float unit, float eps, int8_t* q, uint8_t* out) {
  float scales[16], max_scale = 0, max_abs = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = ref_fit_signed_x2(16, 32, xs + 16 * j, eps, q + 16 * j);
    if (std::fabs(scales[j]) > max_abs) {
      max_abs = std::fabs(scales[j]);
      max_scale = scales[j];
    }
  }
  BlockQ6K blk{};
  if (max_abs < eps) {
    for (int i = 0; i < 256; ++i) q[i] = -32;
    std::memcpy(out, &blk, sizeof blk);
    return;
  }
  const float iscale = -128.f / max_scale;
  blk.d = f16_step(unit * (1 / iscale));
  for (int j = 0; j < 16; ++j) blk.scales[j] = static_cast<int8_t>(rne_clamp(iscale * scales[j], -128, 127));
  const float d = f16_to_f32(blk.d);
  for (int j = 0; j < 16; ++j) {
    const float dl = d * blk.scales[j];
    if (dl == 0) continue;
    for (int l = 0; l < 16; ++l) q[16 * j + l] = static_cast<int8_t>(rne_clamp(x[16 * j + l] / dl, -32, 31));
  }
  std::memcpy(out, &blk, sizeof blk);
}

void grid(const uint8_t* p, float* scale, float* offset) {
  BlockQ6K blk;
  std::memcpy(&blk, p, sizeof blk);
  k16_signed_grid(f16_to_f32(blk.d), blk.scales, scale, offset);
}

// Code q in -32..31 is u = q + 32: element e = 128h + 32g + l keeps u & 15 in the low (g < 2) or high nibble
// of ql[64h + 32 (g & 1) + l] and u >> 4 in bits 2g of qh[32h + l].
void pack(uint8_t* p, const int8_t* q) {
  uint8_t ql[128] = {}, qh[64] = {};
  for (int e = 0; e < 256; ++e) {
    const int u = q[e] + 32, h = e / 128, g = e % 128 / 32, l = e % 32;
    uint8_t& lo = ql[64 * h + 32 * (g & 1) + l];
    lo = static_cast<uint8_t>(lo | (u & 0xF) << (4 * (g >> 1)));
    qh[32 * h + l] = static_cast<uint8_t>(qh[32 * h + l] | (u >> 4) << (2 * g));
  }
  std::memcpy(p + offsetof(BlockQ6K, ql), ql, sizeof ql);
  std::memcpy(p + offsetof(BlockQ6K, qh), qh, sizeof qh);
}

constexpr KQuantOps kOps{sizeof(BlockQ6K), -32, 31, choose, grid, pack, reference};
}  // namespace

FormatInfo row_q6_k() {
  FormatInfo r = make_kquant_row<kOps>(FormatId::Q6_K, "q6_k", ggml::Q6_K, 6,
                                       "GGUF Q6_K: 256-superblock, 6-bit + int8 scales", deq);
  r.scale_at[0] = static_cast<int>(offsetof(BlockQ6K, d));
  return r;
}
}  // namespace lowbit::formats_detail
