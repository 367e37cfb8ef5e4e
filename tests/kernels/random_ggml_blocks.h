// Random GGUF blocks for the pack tests (test_qblk_pack.cpp, test_amx.cpp): every code and high bit from the
// generator, sane f16 scales where a type has them.
#pragma once
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/half.h"
#include "formats/format.h"
#include "formats/ggml_types.h"

namespace lowbit {

// Q4_0 .. Q8_0, IQ4_NL, MXFP4 (blocks of 32): f16 d (and Q4_1 / Q5_1's min) in [-0.02, 0.02]. MXFP4's E8M0
// exponent: block k's is k (every exponent, NaN = 255 too) with every_exponent, else 2^-7 .. 2^4 (finite
// products, for bit-for-bit comparisons of kernels).
inline std::shared_ptr<std::vector<uint8_t>> random_block32_rows(const FormatInfo& fi, int64_t rows,
                                                                 int64_t cols, uint32_t seed,
                                                                 bool every_exponent) {
  std::mt19937 rng(seed);
  const int64_t nblk = rows * cols / 32;
  auto buf = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(nblk * fi.block_bytes));
  for (auto& b : *buf) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> ud(-0.02f, 0.02f);
  for (int64_t k = 0; k < nblk; ++k) {
    uint8_t* blk = buf->data() + k * fi.block_bytes;
    if (fi.native_scale == ScaleType::E8M0) {
      blk[0] = static_cast<uint8_t>(every_exponent ? k : 120 + rng() % 12);
      continue;
    }
    const uint16_t h = f32_to_f16(ud(rng)), m = f32_to_f16(ud(rng));
    std::memcpy(blk, &h, 2);
    if (fi.ggml_type == ggml::Q4_1 || fi.ggml_type == ggml::Q5_1) std::memcpy(blk + 2, &m, 2);
  }
  return buf;
}

// Q2_K .. Q6_K, IQ4_XS (super-blocks of 256): random bytes, the f16 d / dmin fields at byte offsets f16s of
// each super-block in [-0.02, 0.02].
inline std::shared_ptr<std::vector<uint8_t>> random_kquant_rows(const FormatInfo& fi,
                                                                const std::vector<int>& f16s, int64_t rows,
                                                                int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t nsb = cols / 256;
  auto buf = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(rows * nsb * fi.block_bytes));
  for (auto& b : *buf) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> ud(-0.02f, 0.02f);
  for (int64_t k = 0; k < rows * nsb; ++k)
    for (int off : f16s) {
      const uint16_t h = f32_to_f16(ud(rng));
      std::memcpy(buf->data() + k * fi.block_bytes + off, &h, 2);
    }
  return buf;
}

}  // namespace lowbit
