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

void deq(const void* src, float* y, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    BlockIq4Xs blk;
    std::memcpy(&blk, p + b * sizeof blk, sizeof blk);
    const float d = f16_to_f32(blk.d);
    for (int s = 0; s < 8; ++s, y += 32) {
      const int ls = ((blk.scales_l[s / 2] >> 4 * (s % 2)) & 0x0F) | (((blk.scales_h >> 2 * s) & 3) << 4);
      const float dl = d * static_cast<float>(ls - 32);
      const uint8_t* q = blk.qs + 16 * s;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * kIq4Grid[q[j] & 0x0F];
        y[j + 16] = dl * kIq4Grid[q[j] >> 4];
      }
    }
  }
}
}  // namespace

FormatInfo row_iq4_xs() {
  return make_gguf_row(
      FormatId::IQ4_XS, "iq4_xs", ggml::IQ4_XS, 4,
      "GGUF IQ4_XS: 256 = 8 x 32 x 4-bit non-linear grid, 6-bit sub-block scales + fp16 (4.25 bpw)", deq,
      nullptr);
}
}  // namespace lowbit::formats_detail
