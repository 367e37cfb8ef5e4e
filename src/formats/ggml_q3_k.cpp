// GGUF Q3_K (ggml type 11): 256 weights per 110-byte super-block, 3.4375 bpw.
//
//   offset 0           32        96           108  110
//          | hmask[32] | qs[64]  | scales[12] | d  |
//   16 sub-blocks of 16 with signed 6-bit scales (stored +32) packed in 12 bytes as a = bytes 0..3, b = 4..7,
//   c = 8..11 (little-endian uint32 words): scale bytes 0..3 = (a & 0x0F0F0F0F) | ((c >> 0) & 0x03030303) <<
//   4, 4..7 = (b & 0x0F0F0F0F) | ((c >> 2) & 0x03030303) << 4, 8..11 = ((a >> 4) & 0x0F0F0F0F) | ((c >> 4) &
//   ..) << 4, 12..15 = ((b >> 4) & 0x0F0F0F0F) | ((c >> 6) & 0x03030303) << 4. Low 2 bits of each code come
//   from qs in the same order as Q2_K; the high bit from hmask: for element group (half h, shift step k) the
//   bit mask is 1 << (4h + k) over hmask[l] (l = 0..31 covering the two sub-blocks). q = low2 - (hmask bit
//   set ? 0 : 4) in [-4, 3];  x = d * (scale - 32) * q
//
// Quantization: per sub-block a weighted signed fit to codes -4..3 (fit_signed, ggml_kquants.h; weights
// x_i^2, or imp_i sqrt(sigma^2 + x_i^2) with an importance vector), then the 16 scales to signed 6 bits
// against the fp16 d, and every element rounded to its nearest code under the stored scale. Without
// importance it is llama.cpp's quantize_row_q3_K_ref bit for bit (`reference`).
#include <cmath>
#include <cstddef>
#include <cstring>

#include "core/half.h"
#include "formats/format_rows.h"
#include "formats/ggml_kquants.h"
#include "formats/ggml_types.h"

namespace lowbit::formats_detail {
namespace {
struct BlockQ3K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(BlockQ3K) == 110, "Q3_K block is 110 bytes");

void deq(const void* src, float* y, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    BlockQ3K blk;
    std::memcpy(&blk, p + b * sizeof blk, sizeof blk);
    const float d = f16_to_f32(blk.d);
    int8_t sc[16];
    k3_scales(blk.scales, sc);
    int is = 0;
    uint8_t m = 1;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* q = blk.qs + 32 * h;
      for (int s = 0; s < 8; s += 2, m = static_cast<uint8_t>(m << 1)) {
        for (int half = 0; half < 2; ++half) {
          const float dl = d * sc[is++];
          for (int l = 0; l < 16; ++l) {
            const int idx = 16 * half + l;
            const int v = ((q[idx] >> s) & 3) - ((blk.hmask[idx] & m) ? 0 : 4);
            *y++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
}

// Header: per sub-block of 16 a weighted signed fit to codes -4..3 (unweighted: weights x_i^2), then the 16
// signed scales to 6 bits under d (quantize_signed, weighted by each sub-block's total weight).
// Inverse of k3_scales: v = L + 32 in 0..63; low nibbles of scales 0..3 / 4..7 in bytes 0..3 / 4..7, of
// scales 8..11 / 12..15 in their high nibbles; the two high bits of scale 4g + i in bits 2g of byte 8 + i.
void put_scales(BlockQ3K& blk, const int* L) {
  std::memset(blk.scales, 0, sizeof blk.scales);
  for (int i = 0; i < 16; ++i) {
    const int v = L[i] + 32, g = i / 4, b = i % 4;
    uint8_t& lo = blk.scales[(g % 2) * 4 + b];
    lo = static_cast<uint8_t>(lo | (v & 0xF) << (g / 2 * 4));
    blk.scales[8 + b] = static_cast<uint8_t>(blk.scales[8 + b] | (v >> 4) << (2 * g));
  }
}

void choose(const float* x, const float* w, float unit, uint8_t* out) {
  int L[16];
  BlockQ3K blk{};
  blk.d = k16_fit_signed_scales(x, w, unit, 4, 32, L);
  put_scales(blk, L);
  std::memcpy(out, &blk, sizeof blk);
}

// llama.cpp's quantize_row_q3_K_ref: per sub-block make_q3_quants (ref_fit_q3), the 16 scales to 6 bits with
// d = max / -32 (max = the scale of largest magnitude), each element rounded under the stored scale; a
// sub-block whose stored scale is 0 keeps its fitted codes (all scale bytes 0, i.e. -32, when max is 0).
void reference(const float* x, const float* xs, float unit, float eps, int8_t* q, uint8_t* out) {
  float scales[16], max_scale = 0, amax = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = unit * ref_fit_q3(16, 4, xs + 16 * j, eps, q + 16 * j);
    if (std::fabs(scales[j]) > amax) {
      amax = std::fabs(scales[j]);
      max_scale = scales[j];
    }
  }
  BlockQ3K blk{};
  int L[16];
  if (max_scale != 0) {
    const float iscale = -32.f / max_scale;
    for (int j = 0; j < 16; ++j) L[j] = rne_clamp(iscale * scales[j], -32, 31);
    blk.d = f16_step(1 / iscale);
  } else {
    for (int j = 0; j < 16; ++j) L[j] = -32;
    blk.d = 0;
  }
  put_scales(blk, L);
  const float d = f16_to_f32(blk.d);
  for (int j = 0; j < 16; ++j) {
    const float dl = d * L[j];
    if (dl == 0) continue;
    for (int l = 0; l < 16; ++l) q[16 * j + l] = static_cast<int8_t>(rne_clamp(x[16 * j + l] / dl, -4, 3));
  }
  std::memcpy(out, &blk, sizeof blk);
}

void grid(const uint8_t* p, float* scale, float* offset) {
  BlockQ3K blk;
  std::memcpy(&blk, p, sizeof blk);
  int8_t sc[16];
  k3_scales(blk.scales, sc);
  k16_signed_grid(f16_to_f32(blk.d), sc, scale, offset);
}

// Code q in -4..3 is u = q + 4: element e = 128h + 32k + j keeps u & 3 in bits 2k of qs[32h + j] and u >> 2
// in bit 4h + k of hmask[j].
void pack(uint8_t* p, const int8_t* q) {
  uint8_t hmask[32] = {}, qs[64] = {};
  for (int e = 0; e < 256; ++e) {
    const int u = q[e] + 4, h = e / 128, k = e % 128 / 32, j = e % 32;
    qs[32 * h + j] = static_cast<uint8_t>(qs[32 * h + j] | (u & 3) << (2 * k));
    hmask[j] = static_cast<uint8_t>(hmask[j] | (u >> 2) << (4 * h + k));
  }
  std::memcpy(p + offsetof(BlockQ3K, hmask), hmask, sizeof hmask);
  std::memcpy(p + offsetof(BlockQ3K, qs), qs, sizeof qs);
}

constexpr KQuantOps kOps{sizeof(BlockQ3K), -4, 3, choose, grid, pack, reference};
}  // namespace

FormatInfo row_q3_k() {
  FormatInfo r = make_kquant_row<kOps>(FormatId::Q3_K, "q3_k", ggml::Q3_K, 3,
                                       "GGUF Q3_K: 256-superblock, 3-bit + 6-bit scales", deq);
  r.scale_at[0] = static_cast<int>(offsetof(BlockQ3K, d));
  return r;
}
}  // namespace lowbit::formats_detail
