// The load-time QBlkPack of GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL / MXFP4 weights
// (kernels/kernel_plan.h): the packer against the GGUF row decoder (bit for bit, every code and the 5th bit
// of Q5_0, every E8M0 exponent, padding rows), the AVX-512 Q8 activation quantizer against the scalar one
// (bit for bit), and the byte accounting of a repacked weight. (Products on the pack are checked against
// matmul_reference in test_kernels.cpp, MatmulVsReference.)
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/half.h"
#include "formats/format.h"
#include "formats/ggml_types.h"
#include "kernels/dispatch.h"
#include "kernels/kernel_plan.h"
#include "kernels/matmul.h"
#include "kernels/weight.h"
#include "tests/kernels/random_ggml_blocks.h"

namespace lowbit {
namespace {

TEST(QBlkPack, RowsEqualTheGgufDecoderBitForBit) {
  for (const char* name : {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "iq4_nl", "ggml_mxfp4"}) {
    const FormatInfo& fi = format_by_name(name);
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 256}, {16, 32}, {5, 896}, {40, 2048}}) {
      auto buf = random_block32_rows(fi, rows, cols, static_cast<uint32_t>(rows * 7 + cols),
                                     /*every_exponent=*/true);
      const int64_t row_bytes = cols / 32 * fi.block_bytes;
      ASSERT_TRUE(qblk_supported(fi.ggml_type, cols));
      auto pk = build_qblk_pack(fi.ggml_type, buf->data(), row_bytes, rows, cols);
      ASSERT_NE(pk, nullptr);
      // Same bytes reordered; MXFP4's 8-bit exponent becomes a 16-bit scale (17 -> 18 bytes per block).
      const int64_t packed_row = cols / 32 * (fi.block_bytes == 17 ? 18 : fi.block_bytes);
      EXPECT_EQ(pk->bytes(), static_cast<size_t>((rows + 15) / 16 * 16 * packed_row)) << name;
      std::vector<float> want(static_cast<size_t>(cols)), got(want.size());
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_row_ggml(fi.ggml_type, buf->data() + r * row_bytes, want.data(), cols);
        qblk_row_f32(*pk, r, got.data());
        for (int64_t c = 0; c < cols; ++c)
          // MXFP4's code 8 is -0 (a signed zero the integer codes cannot carry), and e = 255 is NaN.
          ASSERT_TRUE(f32_bits(got[c]) == f32_bits(want[c]) || (got[c] == 0 && want[c] == 0) ||
                      (got[c] != got[c] && want[c] != want[c]))
              << name << " " << rows << "x" << cols << " row " << r << " col " << c;
      }
    }
  }
  EXPECT_FALSE(qblk_supported(format_by_name("q4_k").ggml_type, 256));
  EXPECT_FALSE(qblk_supported(format_by_name("q4_0").ggml_type, 200));
}

// The k-quant pack: random super-blocks (every code and high bit, every 4- / 6-bit scale / min, every Q6_K
// scale byte, every IQ4_XS grid index and 6-bit scale), sane f16 d (and dmin), against the GGUF row decoder
// bit for bit; padding rows; the byte count.
TEST(KPack, RowsEqualTheGgufDecoderBitForBit) {
  for (auto [name, f16s] : {std::pair<const char*, std::vector<int>>{"q2_k", {80, 82}},
                            {"q3_k", {108}},
                            {"q4_k", {0, 2}},
                            {"q5_k", {0, 2}},
                            {"q6_k", {208}},
                            {"iq4_xs", {0}}}) {
    const FormatInfo& fi = format_by_name(name);
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 256}, {16, 512}, {5, 2048}}) {
      const int64_t nsb = cols / 256, row_bytes = nsb * fi.block_bytes;
      auto buf = random_kquant_rows(fi, f16s, rows, cols, static_cast<uint32_t>(rows * 7 + cols));
      ASSERT_TRUE(kpack_supported(fi.ggml_type, cols));
      auto pk = build_kpack(fi.ggml_type, buf->data(), row_bytes, rows, cols);
      ASSERT_NE(pk, nullptr);
      const std::string n = name;
      const int64_t sb = n == "q2_k"   ? 1344
                         : n == "q3_k" ? 1824
                         : n == "q4_k" ? 2368
                         : n == "q5_k" ? 2880
                         : n == "q6_k" ? 3392
                                       : 2240;
      EXPECT_EQ(pk->bytes(), static_cast<size_t>((rows + 15) / 16 * nsb * sb)) << name;
      std::vector<float> want(static_cast<size_t>(cols)), got(want.size());
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_row_ggml(fi.ggml_type, buf->data() + r * row_bytes, want.data(), cols);
        kpack_row_f32(*pk, r, got.data());
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(f32_bits(got[c]), f32_bits(want[c]))
              << name << " " << rows << "x" << cols << " row " << r << " col " << c;
      }
    }
  }
  EXPECT_FALSE(kpack_supported(format_by_name("q4_k").ggml_type, 896));
  EXPECT_FALSE(kpack_supported(format_by_name("q2_k").ggml_type, 640));
  EXPECT_FALSE(kpack_supported(format_by_name("q8_0").ggml_type, 256));
}

TEST(QBlkPack, RepackedWeightCountsThePackNotTheStoredRowsTwice) {
  if (best_isa() < Isa::Avx2) GTEST_SKIP() << "the pack is only built for the AVX2 and AVX-512 kernels";
  const FormatInfo& fi = format_by_name("q4_0");
  const int64_t rows = 32, cols = 256;
  auto buf = random_block32_rows(fi, rows, cols, 3, /*every_exponent=*/true);
  WeightMatrix w = make_ggml_weight(buf, buf->data(), fi.ggml_type, rows, cols);
  WeightMatrix table = w;
  prepare_weight(w);
  prepare_weight(table, /*repack=*/false);
  EXPECT_TRUE(weight_is_repacked(w));
  EXPECT_FALSE(weight_is_repacked(table));
  EXPECT_EQ(w.nbytes(), buf->size());      // same bytes, reordered
  EXPECT_EQ(table.nbytes(), buf->size());  // the stored rows only
}

}  // namespace
}  // namespace lowbit
