// Load-time repacking of GGUF Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS rows into the KPack layout
// (kernel_plan.h) read by matmul_avx512_kpack.cpp. Plain C++: it runs once per weight at load, in parallel
// over row blocks.
#include <algorithm>
#include <cstring>

#include "core/half.h"
#include "core/memory.h"
#include "core/parallel.h"
#include "formats/ggml_iq4_grid.h"
#include "formats/ggml_kquants.h"
#include "formats/ggml_types.h"
#include "kernels/kernel_plan.h"
#include "kernels/row_blocks.h"

namespace lowbit {
namespace {

constexpr int64_t kQ2KBytes = 84, kQ3KBytes = 110, kQ4KBytes = 144, kQ5KBytes = 176, kQ6KBytes = 210,
                  kIq4XsBytes = 136;

// Q2_K (formats/ggml_q2_k.cpp): u[256] = the 2-bit codes in column order; the 16 scale bytes (4-bit scale |
// 4-bit min << 4) are copied as they are.
void q2k_unpack(const uint8_t* b, uint8_t* u) {
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 32; ++l) u[128 * h + 32 * k + l] = (b[16 + 32 * h + l] >> (2 * k)) & 3;
}

// Q3_K (formats/ggml_q3_k.cpp): u[256] = low 2 bits | high bit << 2 (0..7, the value u - 4) and the 16 scales
// minus 32.
void q3k_unpack(const uint8_t* b, uint8_t* u, int8_t* sc) {
  formats_detail::k3_scales(b + 96, sc);
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 32; ++l) {
        const int hb = (b[l] >> (4 * h + k)) & 1;
        u[128 * h + 32 * k + l] = static_cast<uint8_t>(((b[32 + 32 * h + l] >> (2 * k)) & 3) | hb << 2);
      }
}

// One GGUF super-block -> unsigned codes u[256] in column order and its scales.
void q4k_unpack(const uint8_t* b, uint8_t* u, uint8_t* sc, uint8_t* m) {
  for (int j = 0; j < 8; ++j) formats_detail::k4_scale_min(j, b + 4, &sc[j], &m[j]);
  const uint8_t* qs = b + 16;
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      u[64 * c + l] = qs[32 * c + l] & 15;
      u[64 * c + 32 + l] = qs[32 * c + l] >> 4;
    }
}

// Q5_K: d, dmin, scales[12] as Q4_K, qh[32] at 16 (bit 2c / 2c+1 of qh[l]: fifth bit of element 64c + l /
// 64c + 32 + l), qs[128] at 48 in Q4_K's nibble order.
void q5k_unpack(const uint8_t* b, uint8_t* u, uint8_t* sc, uint8_t* m) {
  for (int j = 0; j < 8; ++j) formats_detail::k4_scale_min(j, b + 4, &sc[j], &m[j]);
  const uint8_t *qh = b + 16, *qs = b + 48;
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      u[64 * c + l] = static_cast<uint8_t>((qs[32 * c + l] & 15) | ((qh[l] >> (2 * c)) & 1) << 4);
      u[64 * c + 32 + l] = static_cast<uint8_t>((qs[32 * c + l] >> 4) | ((qh[l] >> (2 * c + 1)) & 1) << 4);
    }
}

// IQ4_XS (formats/ggml_iq4_xs.cpp): u[256] = the 4-bit grid indices in column order, sc[8] = ls - 32.
void iq4xs_unpack(const uint8_t* b, uint8_t* u, int8_t* sc) {
  uint16_t sh;
  std::memcpy(&sh, b + 2, 2);
  for (int s = 0; s < 8; ++s) {
    const int ls = ((b[4 + s / 2] >> 4 * (s % 2)) & 15) | ((sh >> 2 * s) & 3) << 4;
    sc[s] = static_cast<int8_t>(ls - 32);
    for (int j = 0; j < 16; ++j) {
      u[32 * s + j] = b[8 + 16 * s + j] & 15;
      u[32 * s + j + 16] = b[8 + 16 * s + j] >> 4;
    }
  }
}

void q6k_unpack(const uint8_t* b, uint8_t* u) {
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b + 64 * h;
    const uint8_t* qh = b + 128 + 32 * h;
    for (int l = 0; l < 32; ++l) {
      u[128 * h + l] = static_cast<uint8_t>((ql[l] & 15) | (qh[l] & 3) << 4);
      u[128 * h + l + 32] = static_cast<uint8_t>((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4);
      u[128 * h + l + 64] = static_cast<uint8_t>((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4);
      u[128 * h + l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4);
    }
  }
}

// Offsets inside a region (kernel_plan.h).
// Q2_K: d[16] f16, dmin[16] f16, scale bytes [16 sub-blocks][16 rows], then the 16 code vectors (sub-block i
// at 320 + 64 i: byte 4r + j, bits 2q..2q+1 = u of column 16i + 4q + j).
constexpr int64_t kQ2KCodes = 320;
// Q3_K: d[16] f16, sc[16 sub-blocks][16 rows] int8, then per sub-block i at 288 + 96 i: its low-bit vector
// (as Q2_K's codes) and four uint64 masks (mask q, bit 4r + j: the high bit of column 16i + 4q + j).
constexpr int64_t kQ3KSub = 288, kQ3KSubBytes = 96;
// Q4_K / Q5_K: the scale block d[16], dmin[16], sc[8][16], m[8][16] leads the region (320 bytes).
constexpr int64_t kD = 0, kDmin = 32, kSc = 64, kM = 192, kScaleBlock = 320;
// Q5_K: sub-block j at 320 + 320 j: 4 code chunks (256), per chunk two uint64 fifth-bit masks (64).
inline int64_t q5k_chunk(int k) {
  return kScaleBlock + 320 * (k / 4) + 64 * (k % 4);
}
inline int64_t q5k_hbit(int k) {
  return kScaleBlock + 320 * (k / 4) + 256 + 16 * (k % 4);
}
// Q6_K: d[16] and 32 bytes of padding lead the region; group g = sub-blocks 4g..4g+3 at 64 + 832 g: codes
// (512), high bits (256), scales (64). Code chunk k (0..31), high-bit plane and scales of sub-block i
// (0..15):
constexpr int64_t kQ6KGroup = 832, kQ6KD = 0;
inline int64_t q6k_chunk(int k) {
  return 64 + (k / 8) * kQ6KGroup + 64 * (k % 8);
}
inline int64_t q6k_hi(int i) {
  return 64 + (i / 4) * kQ6KGroup + 512 + 64 * (i % 4);
}
inline int64_t q6k_sc(int i) {
  return 64 + (i / 4) * kQ6KGroup + 768 + 16 * (i % 4);
}
// IQ4_XS: d[16] f16, sc[8 sub-blocks][16 rows] int8 and 32 bytes of padding (192), then the 32 code chunks.
constexpr int64_t kXsSc = 32, kXsCodes = 192;
inline int64_t chunk_off(int t, int k) {
  return t == ggml::Q4_K     ? kScaleBlock + 64 * k
         : t == ggml::IQ4_XS ? kXsCodes + 64 * k
         : t == ggml::Q5_K   ? q5k_chunk(k)
                             : q6k_chunk(k);
}

}  // namespace

bool kpack_supported(int ggml_type, int64_t cols) {
  return ((ggml_type >= ggml::Q2_K && ggml_type <= ggml::Q6_K) || ggml_type == ggml::IQ4_XS) && cols > 0 &&
         cols % 256 == 0;
}

KPack kpack_layout(int t, int64_t rows, int64_t cols) {
  KPack p;
  p.ggml_type = t;
  p.rows = rows;
  p.cols = cols;
  p.sb_bytes = t == ggml::Q2_K   ? 1344
               : t == ggml::Q3_K ? 1824
               : t == ggml::Q4_K ? 2368
               : t == ggml::Q5_K ? 2880
               : t == ggml::Q6_K ? 3392
                                 : 2240;  // IQ4_XS
  return p;
}

void pack_kpack_block(const KPack& p, const uint8_t* const* rows, int nr, uint8_t* base) {
  const int t = p.ggml_type;
  const int64_t nsb = p.cols / 256;
  const int64_t bb = t == ggml::Q2_K   ? kQ2KBytes
                     : t == ggml::Q3_K ? kQ3KBytes
                     : t == ggml::Q4_K ? kQ4KBytes
                     : t == ggml::Q5_K ? kQ5KBytes
                     : t == ggml::Q6_K ? kQ6KBytes
                                       : kIq4XsBytes;
  std::memset(base, 0, static_cast<size_t>(nsb * p.sb_bytes));  // padding rows: code 0, scale 0
  uint8_t u[256], sc[8] = {}, m[8] = {};                        // sc, m: Q4_K / Q5_K only
  for (int lr = 0; lr < nr; ++lr) {
    for (int64_t s = 0; s < nsb; ++s) {
      const uint8_t* blk = rows[lr] + s * bb;
      uint8_t* reg = base + s * p.sb_bytes;
      if (t == ggml::Q2_K ||
          t == ggml::Q3_K) {  // 2-bit code vectors per sub-block of 16 columns (kernel_plan.h)
        int8_t sc3[16];
        if (t == ggml::Q2_K)
          q2k_unpack(blk, u);
        else
          q3k_unpack(blk, u, sc3);
        std::memcpy(reg + 2 * lr, t == ggml::Q2_K ? blk + 80 : blk + 108, 2);  // d
        if (t == ggml::Q2_K) std::memcpy(reg + 32 + 2 * lr, blk + 82, 2);      // dmin
        for (int i = 0; i < 16; ++i) {
          uint8_t* v = reg + (t == ggml::Q2_K ? kQ2KCodes + 64 * i : kQ3KSub + kQ3KSubBytes * i);
          if (t == ggml::Q2_K)
            reg[64 + 16 * i + lr] = blk[i];
          else
            reg[32 + 16 * i + lr] = static_cast<uint8_t>(sc3[i]);
          // This row's 4 code bytes and its 16 third bits (bit 4q + j), then one update per mask.
          uint8_t b[4] = {0, 0, 0, 0};
          uint32_t hb = 0;
          for (int q = 0; q < 4; ++q)
            for (int j = 0; j < 4; ++j) {
              const uint8_t uc = u[16 * i + 4 * q + j];
              b[j] = static_cast<uint8_t>(b[j] | (uc & 3) << (2 * q));
              hb |= static_cast<uint32_t>(uc >> 2) << (4 * q + j);
            }
          std::memcpy(v + 4 * lr, b, 4);
          if (t == ggml::Q3_K)
            for (int q = 0; q < 4; ++q) {
              uint64_t mq;
              std::memcpy(&mq, v + 64 + 8 * q, 8);
              mq |= static_cast<uint64_t>((hb >> (4 * q)) & 15) << (4 * lr);
              std::memcpy(v + 64 + 8 * q, &mq, 8);
            }
        }
        continue;
      }
      if (t == ggml::IQ4_XS) {
        int8_t sx[8];
        iq4xs_unpack(blk, u, sx);
        std::memcpy(reg + 2 * lr, blk, 2);  // d
        for (int j = 0; j < 8; ++j) reg[kXsSc + 16 * j + lr] = static_cast<uint8_t>(sx[j]);
        for (int k = 0; k < 32; ++k)
          for (int j = 0; j < 4; ++j)
            reg[chunk_off(t, k) + 4 * lr + j] = static_cast<uint8_t>(u[8 * k + j] | u[8 * k + 4 + j] << 4);
        continue;
      }
      if (t == ggml::Q4_K)
        q4k_unpack(blk, u, sc, m);
      else if (t == ggml::Q5_K)
        q5k_unpack(blk, u, sc, m);
      else
        q6k_unpack(blk, u);
      for (int k = 0; k < 32; ++k)
        for (int j = 0; j < 4; ++j)
          reg[chunk_off(t, k) + 4 * lr + j] =
              static_cast<uint8_t>((u[8 * k + j] & 15) | (u[8 * k + 4 + j] & 15) << 4);
      if (t != ggml::Q6_K) {
        uint8_t* sb = reg;  // the scale block
        std::memcpy(sb + kD + 2 * lr, blk, 2);
        std::memcpy(sb + kDmin + 2 * lr, blk + 2, 2);
        for (int j = 0; j < 8; ++j) {
          sb[kSc + 16 * j + lr] = sc[j];
          sb[kM + 16 * j + lr] = m[j];
        }
        if (t == ggml::Q5_K)
          for (int k = 0; k < 32; ++k) {
            uint64_t* hb = reinterpret_cast<uint64_t*>(reg + q5k_hbit(k));
            for (int j = 0; j < 4; ++j) {
              hb[0] |= static_cast<uint64_t>(u[8 * k + j] >> 4) << (4 * lr + j);
              hb[1] |= static_cast<uint64_t>(u[8 * k + 4 + j] >> 4) << (4 * lr + j);
            }
          }
      } else {
        for (int i = 0; i < 16; ++i)
          for (int j = 0; j < 4; ++j) {
            const int c = 16 * i + j;
            reg[q6k_hi(i) + 4 * lr + j] = static_cast<uint8_t>((u[c] >> 4) | (u[c + 4] >> 4) << 2 |
                                                               (u[c + 8] >> 4) << 4 | (u[c + 12] >> 4) << 6);
          }
        for (int i = 0; i < 16; ++i) reg[q6k_sc(i) + lr] = blk[192 + i];
        std::memcpy(reg + kQ6KD + 2 * lr, blk + 208, 2);
      }
    }
  }
}

std::shared_ptr<const KPack> build_kpack(int t, const uint8_t* data, int64_t row_bytes, int64_t rows,
                                         int64_t cols) {
  if (!kpack_supported(t, cols)) return nullptr;
  const KPack layout = kpack_layout(t, rows, cols);
  return kern::build_row_pack(layout, data, row_bytes, rows, cols / 256 * layout.sb_bytes, 8,
                              pack_kpack_block);
}

void kpack_row_f32(const KPack& p, int64_t r, float* out) {
  const int64_t nsb = p.cols / 256, lr = r % 16;
  for (int64_t s = 0; s < nsb; ++s) {
    const uint8_t* reg = p.data.get() + ((r / 16) * nsb + s) * p.sb_bytes;
    auto code = [&](int c) {
      const int k = c / 8, j = c % 8;
      const int lo = (reg[chunk_off(p.ggml_type, k) + 4 * lr + j % 4] >> (4 * (j / 4))) & 15;
      if (p.ggml_type == ggml::Q4_K || p.ggml_type == ggml::IQ4_XS) return lo;
      if (p.ggml_type == ggml::Q5_K) {
        uint64_t hb;
        std::memcpy(&hb, reg + q5k_hbit(k) + 8 * (j / 4), 8);
        return lo | static_cast<int>((hb >> (4 * lr + j % 4)) & 1) << 4;
      }
      const int i = c / 16, q = (c % 16) / 4;  // quarter of the sub-block: bits 2q..2q+1
      return lo | ((reg[q6k_hi(i) + 4 * lr + c % 4] >> (2 * q)) & 3) << 4;
    };
    uint16_t h;
    if (p.ggml_type == ggml::Q2_K || p.ggml_type == ggml::Q3_K) {
      const bool q2 = p.ggml_type == ggml::Q2_K;
      std::memcpy(&h, reg + 2 * lr, 2);
      const float d = f16_to_f32(h);
      std::memcpy(&h, reg + 32 + 2 * lr, 2);
      const float dmin = q2 ? f16_to_f32(h) : 0.0f;
      for (int c = 0; c < 256; ++c) {
        const int i = c / 16, q = (c % 16) / 4, j = c % 4;
        const uint8_t* v = reg + (q2 ? kQ2KCodes + 64 * i : kQ3KSub + kQ3KSubBytes * i);
        int u = (v[4 * lr + j] >> (2 * q)) & 3;
        if (q2) {  // as the GGUF decoder: (d * sc) * q - dmin * m
          const uint8_t scm = reg[64 + 16 * i + lr];
          const float dl = d * static_cast<float>(scm & 15), ml = dmin * static_cast<float>(scm >> 4);
          out[256 * s + c] = dl * static_cast<float>(u) - ml;
        } else {  // (d * sc) * (u - 4)
          uint64_t mq;
          std::memcpy(&mq, v + 64 + 8 * q, 8);
          u |= static_cast<int>((mq >> (4 * lr + j)) & 1) << 2;
          const float dl = d * static_cast<float>(static_cast<int8_t>(reg[32 + 16 * i + lr]));
          out[256 * s + c] = dl * static_cast<float>(u - 4);
        }
      }
    } else if (p.ggml_type == ggml::IQ4_XS) {
      std::memcpy(&h, reg + 2 * lr, 2);
      const float d = f16_to_f32(h);
      for (int c = 0; c < 256; ++c) {  // as the GGUF decoder: (d * (ls - 32)) * grid value
        const float dl = d * static_cast<float>(static_cast<int8_t>(reg[kXsSc + 16 * (c / 32) + lr]));
        out[256 * s + c] = dl * static_cast<float>(formats_detail::kIq4Grid[code(c)]);
      }
    } else if (p.ggml_type != ggml::Q6_K) {
      const uint8_t* sb = reg;  // the scale block
      std::memcpy(&h, sb + kD + 2 * lr, 2);
      const float d = f16_to_f32(h);
      std::memcpy(&h, sb + kDmin + 2 * lr, 2);
      const float dmin = f16_to_f32(h);
      for (int c = 0; c < 256; ++c) {
        const int j = c / 32;
        // As the GGUF decoders: (d * sc) * q - dmin * m.
        const float d1 = d * sb[kSc + 16 * j + lr], m1 = dmin * sb[kM + 16 * j + lr];
        out[256 * s + c] = d1 * static_cast<float>(code(c)) - m1;
      }
    } else {
      std::memcpy(&h, reg + kQ6KD + 2 * lr, 2);
      const float d = f16_to_f32(h);
      for (int c = 0; c < 256; ++c) {
        const int8_t sc = static_cast<int8_t>(reg[q6k_sc(c / 16) + lr]);
        out[256 * s + c] = d * sc * (code(c) - 32);
      }
    }
  }
}

}  // namespace lowbit
