// Load-time repacking of GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL / MXFP4 rows into the QBlkPack layout
// (kernel_plan.h) read by matmul_avx512_qblk.cpp. Plain C++: it runs once per weight at load, in parallel
// over row blocks.
#include <algorithm>
#include <cstring>

#include "core/half.h"
#include "core/memory.h"
#include "core/parallel.h"
#include "formats/format.h"
#include "formats/ggml_iq4_grid.h"
#include "formats/ggml_types.h"
#include "formats/minifloat.h"
#include "kernels/kernel_plan.h"
#include "kernels/row_blocks.h"

namespace lowbit {
namespace {

// The non-linear grids as unsigned bytes (value + 128), so that vpdpbusd can take them as its unsigned
// operand.
using formats_detail::kIq4Grid;  // IQ4_NL's (formats/ggml_iq4_grid.h)
constexpr int8_t kMxfp4Grid[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};  // 2 x E2M1

// Where the 16 code bytes start in a GGUF block.
int qs_offset(int t) {
  switch (t) {
    case ggml::Q4_1:
      return 4;
    case ggml::Q5_0:
      return 6;
    case ggml::Q5_1:
      return 8;
    case ggml::MXFP4:
      return 1;
    default:
      return 2;
  }
}
// Where the 32 fifth bits (little-endian uint32) start in a Q5_0 / Q5_1 block.
int qh_offset(int t) {
  return t == ggml::Q5_1 ? 4 : 2;
}

// MXFP4's block scale E8M0 e as the bf16 of 2^(e-127) / 2 (the grid holds 2 x E2M1): exact, denormals
// included (e = 0 is 2^-128, bf16 0x0020); e = 255 is NaN as in E8M0.
uint16_t mxfp4_scale_bf16(uint8_t e) {
  if (e == 255) return 0x7FC0;
  if (e >= 2) return static_cast<uint16_t>((e - 1) << 7);
  return static_cast<uint16_t>(e == 1 ? 0x0040 : 0x0020);
}

float pack_scale(const QBlkPack& p, uint16_t h) {
  return p.bf16_scales ? bf16_to_f32(h) : f16_to_f32(h);
}

}  // namespace

bool qblk_supported(int ggml_type, int64_t cols) {
  const int t = ggml_type;
  return (t == ggml::Q4_0 || t == ggml::Q4_1 || t == ggml::Q5_0 || t == ggml::Q5_1 || t == ggml::Q8_0 ||
          t == ggml::IQ4_NL || t == ggml::MXFP4) &&
         cols > 0 && cols % 32 == 0;
}

QBlkPack qblk_layout(int t, int64_t rows, int64_t cols) {
  QBlkPack p;
  p.ggml_type = t;
  p.rows = rows;
  p.cols = cols;
  p.code_bytes = t == ggml::Q8_0 ? 512 : 256;
  const bool five = t == ggml::Q5_0 || t == ggml::Q5_1;
  p.hbit_bytes = five ? 64 : 0;
  p.min_bytes = t == ggml::Q4_1 || t == ggml::Q5_1 ? 32 : 0;
  p.block_bytes = p.code_bytes + p.hbit_bytes + 32 + p.min_bytes;
  p.offset = t == ggml::Q5_0 ? 16 : t == ggml::Q4_0 ? 8 : p.min_bytes ? 0 : 128;
  p.bf16_scales = t == ggml::MXFP4;
  p.has_lut = t == ggml::IQ4_NL || t == ggml::MXFP4;
  if (p.has_lut)
    for (int c = 0; c < 16; ++c)
      p.lut[c] = static_cast<uint8_t>((t == ggml::IQ4_NL ? kIq4Grid[c] : kMxfp4Grid[c]) + 128);
  return p;
}

void pack_qblk_block(const QBlkPack& p, const uint8_t* const* rows, int nr, uint8_t* base) {
  const int t = p.ggml_type;
  const bool five = t == ggml::Q5_0 || t == ggml::Q5_1;
  const int64_t nb = p.cols / 32;
  const int64_t sb = format_by_ggml_type(t)->block_bytes;         // GGUF bytes per block of 32
  std::memset(base, 0, static_cast<size_t>(nb * p.block_bytes));  // padding rows: code 0, scale 0
  for (int lr = 0; lr < nr; ++lr) {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = rows[lr] + b * sb;
      uint8_t* codes = base + p.code_off(b);
      if (t == ggml::Q8_0) {
        for (int k = 0; k < 8; ++k)
          for (int j = 0; j < 4; ++j) codes[64 * k + 4 * lr + j] = blk[2 + 4 * k + j] ^ 0x80;  // q + 128
      } else {
        // Element e < 16 is the low nibble of qs[e], e + 16 the high one: chunk k pairs elements 8k + j
        // and 8k + 4 + j, i.e. (k = 0, 1) low nibbles of qs[8k + j] and qs[8k + 4 + j], (k = 2, 3) high
        // nibbles of qs[8(k-2) + j] and qs[8(k-2) + 4 + j].
        const uint8_t* qs = blk + qs_offset(t);
        for (int j = 0; j < 4; ++j) {
          codes[4 * lr + j] = static_cast<uint8_t>((qs[j] & 15) | (qs[4 + j] & 15) << 4);
          codes[64 + 4 * lr + j] = static_cast<uint8_t>((qs[8 + j] & 15) | (qs[12 + j] & 15) << 4);
          codes[128 + 4 * lr + j] = static_cast<uint8_t>(qs[j] >> 4 | (qs[4 + j] & 0xF0));
          codes[192 + 4 * lr + j] = static_cast<uint8_t>(qs[8 + j] >> 4 | (qs[12 + j] & 0xF0));
        }
        if (five) {
          uint32_t qh;
          std::memcpy(&qh, blk + qh_offset(t), 4);
          uint64_t* hb = reinterpret_cast<uint64_t*>(base + p.hbit_off(b, nb));
          for (int k = 0; k < 4; ++k)
            for (int j = 0; j < 4; ++j) {
              const int bit = 4 * lr + j;
              hb[2 * k] |= static_cast<uint64_t>((qh >> (8 * k + j)) & 1) << bit;
              hb[2 * k + 1] |= static_cast<uint64_t>((qh >> (8 * k + 4 + j)) & 1) << bit;
            }
        }
      }
      if (t == ggml::MXFP4) {
        const uint16_t h = mxfp4_scale_bf16(blk[0]);
        std::memcpy(base + p.scale_off(b, nb) + 2 * lr, &h, 2);
      } else {
        std::memcpy(base + p.scale_off(b, nb) + 2 * lr, blk, 2);
      }
      if (p.min_bytes) std::memcpy(base + p.min_off(b, nb) + 2 * lr, blk + 2, 2);
    }
  }
}

std::shared_ptr<const QBlkPack> build_qblk_pack(int t, const uint8_t* data, int64_t row_bytes, int64_t rows,
                                                int64_t cols) {
  if (!qblk_supported(t, cols)) return nullptr;
  const QBlkPack layout = qblk_layout(t, rows, cols);
  return kern::build_row_pack(layout, data, row_bytes, rows, cols / 32 * layout.block_bytes, 16,
                              pack_qblk_block);
}

void qblk_row_f32(const QBlkPack& p, int64_t r, float* out) {
  const int t = p.ggml_type;
  const int64_t nb = p.cols / 32, lr = r % 16;
  const uint8_t* base = p.data.get() + (r / 16) * nb * p.block_bytes;
  for (int64_t b = 0; b < nb; ++b) {
    uint16_t h;
    std::memcpy(&h, base + p.scale_off(b, nb) + 2 * lr, 2);
    const float d = pack_scale(p, h);
    float m = 0;
    if (p.min_bytes) {
      std::memcpy(&h, base + p.min_off(b, nb) + 2 * lr, 2);
      m = f16_to_f32(h);
    }
    const uint8_t* codes = base + p.code_off(b);
    for (int j = 0; j < 32; ++j) {
      int c;
      if (t == ggml::Q8_0) {
        c = codes[(j / 4) * 64 + 4 * lr + j % 4];
      } else {
        const int k = j / 8, jj = j % 8, half = jj / 4;
        c = (codes[64 * k + 4 * lr + jj % 4] >> (4 * half)) & 15;
        if (p.hbit_bytes) {
          uint64_t hb;
          std::memcpy(&hb, base + p.hbit_off(b, nb) + 16 * k + 8 * half, 8);
          c |= static_cast<int>((hb >> (4 * lr + jj % 4)) & 1) << 4;
        }
      }
      const int u = p.has_lut ? p.lut[c] : c;
      // As the GGUF decoders compute it: d * q (+ m for the types with a min).
      out[b * 32 + j] = p.min_bytes ? static_cast<float>(u) * d + m : d * static_cast<float>(u - p.offset);
    }
  }
}

}  // namespace lowbit
