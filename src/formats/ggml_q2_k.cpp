// GGUF Q2_K (ggml type 10): 256 weights per 84-byte super-block, 2.625 bpw.
//
//   offset 0            16                80   82     84
//          | scales[16] | qs[64]          | d  | dmin |
//   16 sub-blocks of 16. scales[i]: low nibble = 4-bit scale, high nibble = 4-bit min of sub-block i.
//   qs: 2-bit codes. For each half h (128 elements, qs[32h .. 32h+31]) and shift s = 0,2,4,6 (k = s/2):
//     elements 128h + 32k + l      (l < 16) = (qs[32h + l]      >> s) & 3, sub-block 8h + 2k
//     elements 128h + 32k + 16 + l (l < 16) = (qs[32h + 16 + l] >> s) & 3, sub-block 8h + 2k + 1
//   x = d * (sc & 15) * q - dmin * (sc >> 4)
//
// Quantization: per sub-block a weighted affine fit to codes 0..3 (fit_scale_min, ggml_kquants.h; weights
// |x_i|, or imp_i sqrt(sigma^2 + x_i^2) with an importance vector), then the 16 scales and 16 mins to 4 bits
// against the fp16 d and dmin, and every element rounded to its nearest code under the stored values.
// Without importance it is llama.cpp's quantize_row_q2_K_ref bit for bit (absolute-error fit, `reference`).
#include <cmath>
#include <cstddef>
#include <cstring>

#include "core/half.h"
#include "formats/format_rows.h"
#include "formats/ggml_kquants.h"
#include "formats/ggml_types.h"

namespace lowbit::formats_detail {
namespace {
struct BlockQ2K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d, dmin;
};
static_assert(sizeof(BlockQ2K) == 84, "Q2_K block is 84 bytes");

void deq(const void* src, float* y, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    BlockQ2K blk;
    std::memcpy(&blk, p + b * sizeof blk, sizeof blk);
    const float d = f16_to_f32(blk.d), dmin = f16_to_f32(blk.dmin);
    int is = 0;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* q = blk.qs + 32 * h;
      for (int s = 0; s < 8; s += 2) {
        for (int half = 0; half < 2; ++half) {
          const uint8_t sc = blk.scales[is++];
          const float dl = d * (sc & 0xF), ml = dmin * (sc >> 4);
          for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[16 * half + l] >> s) & 3) - ml;
        }
      }
    }
  }
}

// Header: per sub-block of 16 a weighted scale/min fit to codes 0..3 (unweighted: weights |x_i|), then the
// 16 scales and 16 mins to 4 bits under d and dmin (quantize_positive).
void choose(const float* x, const float* w, float unit, uint8_t* out) {
  float ws[16], scales[16], mins[16], sw[16];
  uint8_t L[16], ls[16], lm[16];
  for (int j = 0; j < 16; ++j) {
    const float* xj = x + 16 * j;
    for (int l = 0; l < 16; ++l) ws[l] = w ? w[16 * j + l] : std::fabs(xj[l]);
    sw[j] = 0;
    for (int l = 0; l < 16; ++l) sw[j] += ws[l];
    scales[j] = unit * fit_scale_min(16, 3, xj, ws, L, &mins[j], -0.5f, 0.1f, 15);
    mins[j] *= unit;
  }
  BlockQ2K blk{};
  blk.d = quantize_positive(16, 15, scales, w ? sw : nullptr, ls);
  blk.dmin = quantize_positive(16, 15, mins, w ? sw : nullptr, lm);
  for (int j = 0; j < 16; ++j) blk.scales[j] = static_cast<uint8_t>(ls[j] | (lm[j] << 4));
  std::memcpy(out, &blk, sizeof blk);
}

void grid(const uint8_t* p, float* scale, float* offset) {
  BlockQ2K blk;
  std::memcpy(&blk, p, sizeof blk);
  const float d = f16_to_f32(blk.d), dmin = f16_to_f32(blk.dmin);
  for (int j = 0; j < 16; ++j) {
    const float dl = d * (blk.scales[j] & 0xF), ml = dmin * (blk.scales[j] >> 4);
    for (int l = 0; l < 16; ++l) {
      scale[16 * j + l] = dl;
      offset[16 * j + l] = -ml;
    }
  }
}

// llama.cpp's quantize_row_q2_K_ref: per sub-block the affine fit to codes 0..3 that minimises the weighted
// absolute error (weights |x_i|), scales and mins to 4 bits as max / 15 steps, then each element rounded
// under the stored values; a sub-block whose stored scale is 0 keeps its fitted codes.
void reference(const float* x, const float* xs, float unit, float /*eps: Q2_K has no zero test*/, int8_t* q,
               uint8_t* out) {
  float ws[16], scales[16], mins[16];
  uint8_t L[256], ls[16], lm[16];
  for (int j = 0; j < 16; ++j) {
    const float* xj = xs + 16 * j;
    for (int l = 0; l < 16; ++l) ws[l] = std::fabs(xj[l]);
    scales[j] = unit * fit_scale_min(16, 3, xj, ws, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
    mins[j] *= unit;
  }
  BlockQ2K blk{};
  blk.d = quantize_positive(16, 15, scales, nullptr, ls);
  blk.dmin = quantize_positive(16, 15, mins, nullptr, lm);
  for (int j = 0; j < 16; ++j) blk.scales[j] = static_cast<uint8_t>(ls[j] | (lm[j] << 4));
  const float d = f16_to_f32(blk.d), dmin = f16_to_f32(blk.dmin);
  for (int j = 0; j < 16; ++j) {
    const float dl = d * (blk.scales[j] & 0xF), ml = dmin * (blk.scales[j] >> 4);
    for (int l = 0; l < 16; ++l)
      q[16 * j + l] =
          static_cast<int8_t>(dl != 0 ? rne_clamp((x[16 * j + l] + ml) / dl, 0, 3) : L[16 * j + l]);
  }
  std::memcpy(out, &blk, sizeof blk);
}

// Element e = 128h + 32k + j (j < 32) is bits 2k..2k+1 of qs[32h + j].
void pack(uint8_t* p, const int8_t* q) {
  uint8_t qs[64] = {};
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, k = e % 128 / 32, j = e % 32;
    qs[32 * h + j] = static_cast<uint8_t>(qs[32 * h + j] | (q[e] & 3) << (2 * k));
  }
  std::memcpy(p + offsetof(BlockQ2K, qs), qs, sizeof qs);
}

constexpr KQuantOps kOps{sizeof(BlockQ2K), 0, 3, choose, grid, pack, reference};
}  // namespace

FormatInfo row_q2_k() {
  FormatInfo r = make_kquant_row<kOps>(FormatId::Q2_K, "q2_k", ggml::Q2_K, 2,
                                       "GGUF Q2_K: 256-superblock, 2-bit + 4-bit scales/mins", deq);
  r.scale_at[0] = static_cast<int>(offsetof(BlockQ2K, d));
  r.scale_at[1] = static_cast<int>(offsetof(BlockQ2K, dmin));
  return r;
}
}  // namespace lowbit::formats_detail
