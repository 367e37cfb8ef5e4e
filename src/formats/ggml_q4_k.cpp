// GGUF Q4_K (ggml type 12): 256 weights per 144-byte super-block, 4.5 bpw.
//
//   offset 0   2      4            16                          144
//          | d | dmin | scales[12] | qs[128]                    |
//   8 sub-blocks of 32, each with a 6-bit scale sc and 6-bit min m (packing: ggml_kquants.h k4_scale_min).
//   For chunk c = 0..3 (64 elements, qs[32c .. 32c+31]): element 64c + l = qs[32c+l] & 15 (sub-block 2c),
//   element 64c + 32 + l = qs[32c+l] >> 4 (sub-block 2c+1).   x = d * sc * q - dmin * m,  q in [0, 15].
//
// Quantization without importance follows llama.cpp's reference rule: per sub-block a weighted scale/min
// search (weights av|x| + |x_i|, 21 candidate step sizes around (max-min)/15, least-squares refit of scale
// and min for each, keep the lowest weighted squared error); then the 8 scales and 8 mins are quantized to 6
// bits against d = max_scale/63 and dmin = max_min/63 (fp16), and elements are re-quantized with the stored
// values (a sub-block whose stored scale is 0 gets codes 0 where llama.cpp keeps its fit's codes). With
// importance (imatrix / Hessian diagonal) the weights are imp_i sqrt(sigma^2 + x_i^2) and d, dmin are
// least-squares fits weighted by each sub-block's total weight (ggml_kquants.h).
#include <cmath>
#include <cstddef>
#include <cstring>

#include "core/half.h"
#include "formats/format_rows.h"
#include "formats/ggml_kquants.h"
#include "formats/ggml_types.h"

namespace lowbit::formats_detail {
namespace {
struct BlockQ4K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ4K) == 144, "Q4_K block is 144 bytes");

void deq(const void* src, float* y, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    BlockQ4K blk;
    std::memcpy(&blk, p + b * sizeof blk, sizeof blk);
    const float d = f16_to_f32(blk.d), dmin = f16_to_f32(blk.dmin);
    for (int c = 0; c < 4; ++c) {
      uint8_t sc, m;
      k4_scale_min(2 * c, blk.scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      k4_scale_min(2 * c + 1, blk.scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      const uint8_t* q = blk.qs + 32 * c;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

// Header: k4_choose_header (ggml_kquants.h) with codes 0..15; the codes are written by pack().
void choose(const float* x, const float* w, float unit, uint8_t* out) {
  std::memset(out, 0, sizeof(BlockQ4K));
  k4_choose_header(x, w, unit, 15, -1.0f, 0.1f, 20, out);
}

void reference(const float* x, const float* xs, float unit, float, int8_t* q, uint8_t* out) {
  k4_reference(x, xs, unit, 15, -1.0f, 0.1f, 20, q, out);
}

void grid(const uint8_t* p, float* scale, float* offset) {
  k4_header_grid(p, scale, offset);
}

void pack(uint8_t* p, const int8_t* q) {
  uint8_t* qs = p + offsetof(BlockQ4K, qs);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l)
      qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + l + 32] << 4));
}

constexpr KQuantOps kOps{sizeof(BlockQ4K), 0, 15, choose, grid, pack, reference};

}  // namespace

FormatInfo row_q4_k() {
  FormatInfo r = make_kquant_row<kOps>(FormatId::Q4_K, "q4_k", ggml::Q4_K, 4,
                                       "GGUF Q4_K: 256-superblock, 4-bit + 6-bit scales/mins (4.5 bpw)", deq);
  r.scale_at[0] = static_cast<int>(offsetof(BlockQ4K, d));
  r.scale_at[1] = static_cast<int>(offsetof(BlockQ4K, dmin));
  return r;
}
}  // namespace lowbit::formats_detail
