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
}  // namespace

FormatInfo row_q3_k() {
  return make_gguf_row(FormatId::Q3_K, "q3_k", ggml::Q3_K, 3,
                       "GGUF Q3_K: 256-superblock, 3-bit + 6-bit scales", deq, nullptr);
}
}  // namespace lowbit::formats_detail
