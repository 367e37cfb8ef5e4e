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
}  // namespace

FormatInfo row_q6_k() {
  return make_gguf_row(FormatId::Q6_K, "q6_k", ggml::Q6_K, 6,
                       "GGUF Q6_K: 256-superblock, 6-bit + int8 scales", deq, nullptr);
}
}  // namespace lowbit::formats_detail
