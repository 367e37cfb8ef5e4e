// GGUF Q5_K (ggml type 13): 256 weights per 176-byte super-block, 5.5 bpw.
//
//   offset 0   2      4            16        48                 176
//          | d | dmin | scales[12] | qh[32]  | qs[128]           |
//   8 sub-blocks of 32; 6-bit scale/min per sub-block packed as in Q4_K. For chunk c = 0..3 (64 elements,
//   qs[32c .. 32c+31]): element 64c + l = (qs[32c+l] & 15) + 16 * bit(qh[l], 2c), element 64c + 32 + l =
//   (qs[32c+l] >> 4) + 16 * bit(qh[l], 2c+1);  x = d * scale * q - dmin * min.
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
}  // namespace

FormatInfo row_q5_k() {
  return make_gguf_row(FormatId::Q5_K, "q5_k", ggml::Q5_K, 5,
                       "GGUF Q5_K: 256-superblock, 5-bit + 6-bit scales/mins", deq, nullptr);
}
}  // namespace lowbit::formats_detail
