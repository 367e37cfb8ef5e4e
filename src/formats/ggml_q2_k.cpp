// GGUF Q2_K (ggml type 10): 256 weights per 84-byte super-block, 2.625 bpw.
//
//   offset 0            16                80   82     84
//          | scales[16] | qs[64]          | d  | dmin |
//   16 sub-blocks of 16. scales[i]: low nibble = 4-bit scale, high nibble = 4-bit min of sub-block i.
//   qs: 2-bit codes. For each half h (128 elements, qs[32h .. 32h+31]) and shift s = 0,2,4,6 (k = s/2):
//     elements 128h + 32k + l      (l < 16) = (qs[32h + l]      >> s) & 3, sub-block 8h + 2k
//     elements 128h + 32k + 16 + l (l < 16) = (qs[32h + 16 + l] >> s) & 3, sub-block 8h + 2k + 1
//   x = d * (sc & 15) * q - dmin * (sc >> 4)
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
}  // namespace

FormatInfo row_q2_k() {
  return make_gguf_row(FormatId::Q2_K, "q2_k", ggml::Q2_K, 2,
                       "GGUF Q2_K: 256-superblock, 2-bit + 4-bit scales/mins", deq, nullptr);
}
}  // namespace lowbit::formats_detail
