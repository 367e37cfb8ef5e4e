// GGUF Q5_K (ggml type 13): 256 weights per 176-byte super-block, 5.5 bpw.
//
//   offset 0   2      4            16        48                 176
//          | d | dmin | scales[12] | qh[32]  | qs[128]           |
//   8 sub-blocks of 32; 6-bit scale/min per sub-block packed as in Q4_K. For chunk c = 0..3 (64 elements,
//   qs[32c .. 32c+31]): element 64c + l = (qs[32c+l] & 15) + 16 * bit(qh[l], 2c), element 64c + 32 + l =
//   (qs[32c+l] >> 4) + 16 * bit(qh[l], 2c+1);  x = d * scale * q - dmin * min.
//
// Quantization: as Q4_K's with codes 0..31 (fit_scale_min, ggml_kquants.h; weights av|x| + |x_i|, or
// imp_i sqrt(sigma^2 + x_i^2) with an importance vector), 6-bit scales and mins against the fp16 d and dmin,
// and every element rounded to its nearest code under the stored values.
#include <cmath>
#include <cstddef>
#include <cstring>

#include "core/half.h"
#include "formats/format_rows.h"
#include "formats/ggml_kquants.h"
#include "formats/ggml_types.h"

namespace lowbit::formats_detail {
namespace {
struct BlockQ5K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ5K) == 176, "Q5_K block is 176 bytes");

void deq(const void* src, float* y, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    BlockQ5K blk;
    std::memcpy(&blk, p + b * sizeof blk, sizeof blk);
    const float d = f16_to_f32(blk.d), dmin = f16_to_f32(blk.dmin);
    for (int c = 0; c < 4; ++c) {
      uint8_t sc, m;
      k4_scale_min(2 * c, blk.scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      k4_scale_min(2 * c + 1, blk.scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      const uint8_t* ql = blk.qs + 32 * c;
      for (int l = 0; l < 32; ++l)
        *y++ = d1 * static_cast<float>((ql[l] & 0xF) + (((blk.qh[l] >> (2 * c)) & 1) << 4)) - m1;
      for (int l = 0; l < 32; ++l)
        *y++ = d2 * static_cast<float>((ql[l] >> 4) + (((blk.qh[l] >> (2 * c + 1)) & 1) << 4)) - m2;
    }
  }
}

// Header: k4_choose_header (ggml_kquants.h) with codes 0..31; the codes are written by pack().
void choose(const float* x, const float* w, float unit, uint8_t* out) {
  std::memset(out, 0, sizeof(BlockQ5K));
  k4_choose_header(x, w, unit, 31, -0.5f, 0.1f, 15, out);
}

void reference(const float* x, const float* xs, float unit, float, int8_t* q, uint8_t* out) {
  k4_reference(x, xs, unit, 31, -0.5f, 0.1f, 15, q, out);
}

void grid(const uint8_t* p, float* scale, float* offset) {
  k4_header_grid(p, scale, offset);
}

// Element 64c + 32t + l: low nibble (t = 0) / high nibble (t = 1) of qs[32c + l], fifth bit in bit 2c + t of
// qh[l].
void pack(uint8_t* p, const int8_t* q) {
  uint8_t qh[32] = {}, qs[128] = {};
  for (int e = 0; e < 256; ++e) {
    const int c = e / 64, t = e % 64 / 32, l = e % 32;
    qs[32 * c + l] = static_cast<uint8_t>(qs[32 * c + l] | (q[e] & 0xF) << (4 * t));
    qh[l] = static_cast<uint8_t>(qh[l] | (q[e] >> 4) << (2 * c + t));
  }
  std::memcpy(p + offsetof(BlockQ5K, qh), qh, sizeof qh);
  std::memcpy(p + offsetof(BlockQ5K, qs), qs, sizeof qs);
}

constexpr KQuantOps kOps{sizeof(BlockQ5K), 0, 31, choose, grid, pack, reference};
}  // namespace

FormatInfo row_q5_k() {
  FormatInfo r = make_kquant_row<kOps>(FormatId::Q5_K, "q5_k", ggml::Q5_K, 5,
                                       "GGUF Q5_K: 256-superblock, 5-bit + 6-bit scales/mins", deq);
  r.scale_at[0] = static_cast<int>(offsetof(BlockQ5K, d));
  r.scale_at[1] = static_cast<int>(offsetof(BlockQ5K, dmin));
  return r;
}
}  // namespace lowbit::formats_detail
