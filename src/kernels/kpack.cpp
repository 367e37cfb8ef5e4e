// Load-time repacking of GGUF Q4_K / Q6_K rows into the KPack layout (kernel_plan.h) read by
// matmul_avx512_kpack.cpp. Plain C++: it runs once per weight at load, in parallel over row blocks.
#include <algorithm>
#include <cstring>

#include "core/half.h"
#include "core/memory.h"
#include "core/parallel.h"
#include "formats/ggml_kquants.h"
#include "kernels/kernel_plan.h"

namespace lowbit {
namespace {

constexpr int kQ4K = 12, kQ6K = 14;
constexpr int64_t kQ4KBytes = 144, kQ6KBytes = 210;

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
constexpr int64_t kCodes = 2048;
constexpr int64_t kQ4KD = kCodes, kQ4KDmin = kCodes + 32, kQ4KSc = kCodes + 64, kQ4KM = kCodes + 192;
// Q6_K: group g = sub-blocks 4g..4g+3 at 832 g: codes (512), high bits (256), scales (64); d after the
// groups.
constexpr int64_t kQ6KGroup = 832, kQ6KD = 4 * kQ6KGroup;
inline int64_t q6k_chunk(int k) {
  return (k / 8) * kQ6KGroup + 64 * (k % 8);
}  // code chunk k (0..31)
inline int64_t q6k_hi(int i) {
  return (i / 4) * kQ6KGroup + 512 + 64 * (i % 4);
}  // sub-block i (0..15)
inline int64_t q6k_sc(int i) {
  return (i / 4) * kQ6KGroup + 768 + 16 * (i % 4);
}

}  // namespace

bool kpack_supported(int ggml_type, int64_t cols) {
  return (ggml_type == kQ4K || ggml_type == kQ6K) && cols > 0 && cols % 256 == 0;
}

std::shared_ptr<const KPack> build_kpack(int t, const uint8_t* data, int64_t row_bytes, int64_t rows,
                                         int64_t cols) {
  if (!kpack_supported(t, cols)) return nullptr;
  auto p = std::make_shared<KPack>();
  p->ggml_type = t;
  p->rows = rows;
  p->cols = cols;
  p->sb_bytes = t == kQ4K ? 2368 : 3392;
  const int64_t nsb = cols / 256, nrb = (rows + 15) / 16, bb = t == kQ4K ? kQ4KBytes : kQ6KBytes;
  auto buf = aligned_bytes(p->bytes());  // zeroed: padding rows get code 0 and scale 0
  uint8_t* out = buf.get();
  parallel_for(nrb, 8, [&](int64_t rb0, int64_t rb1) {
    uint8_t u[256], sc[8], m[8];
    for (int64_t rb = rb0; rb < rb1; ++rb)
      for (int64_t r = rb * 16; r < std::min(rows, rb * 16 + 16); ++r) {
        const int lr = static_cast<int>(r - rb * 16);
        for (int64_t s = 0; s < nsb; ++s) {
          const uint8_t* blk = data + r * row_bytes + s * bb;
          uint8_t* reg = out + (rb * nsb + s) * p->sb_bytes;
          if (t == kQ4K)
            q4k_unpack(blk, u, sc, m);
          else
            q6k_unpack(blk, u);
          for (int k = 0; k < 32; ++k)
            for (int j = 0; j < 4; ++j)
              reg[(t == kQ4K ? 64 * k : q6k_chunk(k)) + 4 * lr + j] =
                  static_cast<uint8_t>((u[8 * k + j] & 15) | (u[8 * k + 4 + j] & 15) << 4);
          if (t == kQ4K) {
            std::memcpy(reg + kQ4KD + 2 * lr, blk, 2);
            std::memcpy(reg + kQ4KDmin + 2 * lr, blk + 2, 2);
            for (int j = 0; j < 8; ++j) {
              reg[kQ4KSc + 16 * j + lr] = sc[j];
              reg[kQ4KM + 16 * j + lr] = m[j];
            }
          } else {
            for (int i = 0; i < 16; ++i)
              for (int j = 0; j < 4; ++j) {
                const int c = 16 * i + j;
                reg[q6k_hi(i) + 4 * lr + j] = static_cast<uint8_t>(
                    (u[c] >> 4) | (u[c + 4] >> 4) << 2 | (u[c + 8] >> 4) << 4 | (u[c + 12] >> 4) << 6);
              }
            for (int i = 0; i < 16; ++i) reg[q6k_sc(i) + lr] = blk[192 + i];
            std::memcpy(reg + kQ6KD + 2 * lr, blk + 208, 2);
          }
        }
      }
  });
  p->data = std::shared_ptr<uint8_t>(buf.release(), AlignedFree{});
  return p;
}

void kpack_row_f32(const KPack& p, int64_t r, float* out) {
  const int64_t nsb = p.cols / 256, lr = r % 16;
  for (int64_t s = 0; s < nsb; ++s) {
    const uint8_t* reg = p.data.get() + ((r / 16) * nsb + s) * p.sb_bytes;
    auto code = [&](int c) {
      const int k = c / 8, j = c % 8;
      if (p.ggml_type == kQ4K) return (reg[64 * k + 4 * lr + j % 4] >> (4 * (j / 4))) & 15;
      const int lo = (reg[q6k_chunk(k) + 4 * lr + j % 4] >> (4 * (j / 4))) & 15;
      const int i = c / 16, q = (c % 16) / 4;  // quarter of the sub-block: bits 2q..2q+1
      return lo | ((reg[q6k_hi(i) + 4 * lr + c % 4] >> (2 * q)) & 3) << 4;
    };
    uint16_t h;
    if (p.ggml_type == kQ4K) {
      std::memcpy(&h, reg + kQ4KD + 2 * lr, 2);
      const float d = f16_to_f32(h);
      std::memcpy(&h, reg + kQ4KDmin + 2 * lr, 2);
      const float dmin = f16_to_f32(h);
      for (int c = 0; c < 256; ++c) {
        const int j = c / 32;
        // As the GGUF decoder: (d * sc) * q - dmin * m.
        const float d1 = d * reg[kQ4KSc + 16 * j + lr], m1 = dmin * reg[kQ4KM + 16 * j + lr];
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
