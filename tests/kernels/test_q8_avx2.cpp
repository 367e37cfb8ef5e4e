// The AVX2 tier's GGUF row kernels (matmul_avx2_q8.cpp) and pack tile (matmul_avx2_qblk.cpp) against the GGUF
// row decoder, on blocks that hold the extreme codes the saturating vpmaddubsw must survive (Q8_0's -128
// against +-127 activations, Q5_1's 31), and their Q8 activation quantizer bit for bit against
// quantize_q8_blocks. The model-level products of these kernels run in MatmulVsReference and GgmlRandomBlocks
// (test_kernels.cpp) on the avx2 tier.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
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

namespace lowbit {
namespace {

// The vectorized Q8 activation quantizers of both tiers (AVX2 here, AVX-512 for the VNNI kernels) equal the
// scalar quantize_q8_blocks bit for bit.
TEST(Q8Activations, SimdEqualsScalarOnEveryTier) {
  if (best_isa() < Isa::Avx2) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t n = 32 * 64;
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = nd(rng);
  for (int i = 0; i < 32; ++i) x[32 + i] = 0.0f;                        // an all-zero block (scale 0)
  x[100] = 1e4f;                                                        // an outlier block
  for (int i = 0; i < 32; ++i) x[256 + i] = (i - 16) * 127.0f / 16.0f;  // exact halves after scaling
  for (int i = 0; i < 32; ++i) x[512 + i] = i % 2 ? -3.0f : 3.0f;       // +-127 exactly
  std::vector<int8_t> qa(static_cast<size_t>(n)), qb(qa.size());
  std::vector<float> da(static_cast<size_t>(n / 32)), db(da.size());
  quantize_q8_blocks(x.data(), n, qa.data(), da.data());
  std::vector<std::pair<const char*, void (*)(const float*, int64_t, int8_t*, float*)>> tiers = {
      {"avx2", kern::quantize_q8_blocks_avx2}};
  if (best_isa() >= Isa::Avx512) tiers.emplace_back("avx512", kern::quantize_q8_blocks_avx512);
  for (const auto& [tier, quantize] : tiers) {
    std::fill(qb.begin(), qb.end(), int8_t{0});
    quantize(x.data(), n, qb.data(), db.data());
    EXPECT_EQ(qa, qb) << tier;
    for (size_t b = 0; b < da.size(); ++b)
      EXPECT_EQ(f32_bits(da[b]), f32_bits(db[b])) << tier << " block " << b;
  }
}

struct TypeCase {
  const char* name;
  std::vector<int> f16_offsets;  // the block's f16 fields (d, and m where the type has one)
  int code_off, code_bytes;      // the code bytes set to their extreme in block 0
  uint8_t extreme;               // Q8_0: 0x80 (-128); 4-bit: 0xFF (both nibbles 15)
  int qh_off;                    // Q5_*: the fifth-bit word (all set in block 0), else -1
};

TEST(Q8Avx2, RowDotsMatchTheDecoderWithExtremeCodes) {
  if (best_isa() < Isa::Avx2) GTEST_SKIP() << "no AVX2 on this CPU";
  const std::vector<TypeCase> types = {{"q4_0", {0}, 2, 16, 0xFF, -1},
                                       {"q4_1", {0, 2}, 4, 16, 0xFF, -1},
                                       {"q5_0", {0}, 6, 16, 0xFF, 2},
                                       {"q5_1", {0, 2}, 8, 16, 0xFF, 4},
                                       {"q8_0", {0}, 2, 32, 0x80, -1}};
  const int64_t rows = 6, cols = 32 * 12;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> ud(0.001f, 0.02f);
  // Block 0 of every token: +-127 with the signs that make every product of the extreme codes the same sign
  // (the largest int16 pair sums); the rest random.
  std::vector<float> x(static_cast<size_t>(cols));
  for (auto& v : x) v = ud(rng) * 100 - 1.0f;
  for (int i = 0; i < 32; ++i) x[static_cast<size_t>(i)] = -2.0f;
  std::vector<int8_t> qx(static_cast<size_t>(cols));
  std::vector<float> dx(static_cast<size_t>(cols / 32));
  quantize_q8_blocks(x.data(), cols, qx.data(), dx.data());
  for (const auto& t : types) {
    SCOPED_TRACE(t.name);
    ASSERT_TRUE(kern::ggml_q8_avx2_supported(format_by_name(t.name).ggml_type));
    const FormatInfo& fi = format_by_name(t.name);
    const int64_t nblk = rows * cols / 32, bpr = cols / 32;
    auto buf = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(nblk * fi.block_bytes));
    for (auto& b : *buf) b = static_cast<uint8_t>(rng());
    for (int64_t k = 0; k < nblk; ++k) {
      uint8_t* blk = buf->data() + k * fi.block_bytes;
      for (int off : t.f16_offsets) {
        const uint16_t h = f32_to_f16(ud(rng));
        std::memcpy(blk + off, &h, 2);
      }
      if (k % bpr == 0) {  // block 0 of each row: extreme codes
        std::memset(blk + t.code_off, t.extreme, static_cast<size_t>(t.code_bytes));
        if (t.qh_off >= 0) std::memset(blk + t.qh_off, 0xFF, 4);
      }
    }
    const WeightMatrix w = make_ggml_weight(buf, buf->data(), fi.ggml_type, rows, cols);
    std::vector<float> row(static_cast<size_t>(cols)), ref(static_cast<size_t>(rows)), mag(ref.size());
    for (int64_t r = 0; r < rows; ++r) {
      weight_row_f32(w, r, row.data());
      double acc = 0, m = 0;
      for (int64_t i = 0; i < cols; ++i) {
        const double p = static_cast<double>(row[i]) * qx[i] * dx[i / 32];
        acc += p;
        m += std::fabs(p);
      }
      ref[r] = static_cast<float>(acc);
      mag[r] = static_cast<float>(m);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float got = kern::ggml_q8_dot_avx2(fi.ggml_type, buf->data() + r * bpr * fi.block_bytes, cols,
                                               qx.data(), dx.data());
      EXPECT_NEAR(got, ref[r], 2e-5 * mag[r] + 1e-6) << "row " << r;
    }
    if (fi.ggml_type == ggml::Q4_0 || fi.ggml_type == ggml::Q8_0) {
      const uint8_t* rp[4];
      for (int i = 0; i < 4; ++i) rp[i] = buf->data() + (i + 1) * bpr * fi.block_bytes;
      float out[4];
      kern::ggml_q8_dot4_avx2(fi.ggml_type, rp, cols, qx.data(), dx.data(), out);
      for (int i = 0; i < 4; ++i)
        EXPECT_NEAR(out[i], ref[i + 1], 2e-5 * mag[i + 1] + 1e-6) << "dot4 row " << i;
    }
  }
}

// T tokens of Q8 activations over cols columns: the first `low` columns of every token at -127 (x = -2 in
// blocks whose largest |x| is 2), the rest random; q [T, cols], d [T, cols / 32], sums of the codes per
// `width` columns [T, cols / width].
struct ExtremeActs {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> sums;
};
ExtremeActs extreme_acts(int64_t T, int64_t cols, int64_t low, int64_t width, std::mt19937& rng) {
  std::uniform_real_distribution<float> ud(0.001f, 0.02f);
  std::vector<float> x(static_cast<size_t>(T * cols));
  for (auto& v : x) v = ud(rng) * 100 - 1.0f;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < low; ++i) x[static_cast<size_t>(t * cols + i)] = -2.0f;
  ExtremeActs a{std::vector<int8_t>(x.size()), std::vector<float>(static_cast<size_t>(T * cols / 32)),
                std::vector<int32_t>(static_cast<size_t>(T * cols / width))};
  for (int64_t t = 0; t < T; ++t) {
    quantize_q8_blocks(x.data() + t * cols, cols, a.q.data() + t * cols, a.d.data() + t * cols / 32);
    for (int64_t b = 0; b < cols / width; ++b) {
      int32_t sum = 0;
      for (int64_t i = 0; i < width; ++i) sum += a.q[static_cast<size_t>(t * cols + width * b + i)];
      a.sums[static_cast<size_t>(t * (cols / width) + b)] = sum;
    }
  }
  return a;
}

// y [T, rows] (and y1, the first token alone) against the GGUF row decoder's values times the Q8 activations
// qx [T, cols] with block scales dx [T, cols / 32], in double.
void expect_decoder_products(const WeightMatrix& w, const std::vector<int8_t>& qx,
                             const std::vector<float>& dx, int64_t T, const std::vector<float>& y,
                             const std::vector<float>& y1) {
  const int64_t rows = w.rows, cols = w.cols, nb = cols / 32;
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    weight_row_f32(w, r, row.data());
    for (int64_t tk = 0; tk < T; ++tk) {
      double acc = 0, m = 0;
      for (int64_t i = 0; i < cols; ++i) {
        const double p = static_cast<double>(row[i]) * qx[tk * cols + i] * dx[tk * nb + i / 32];
        acc += p;
        m += std::fabs(p);
      }
      EXPECT_NEAR(y[tk * rows + r], acc, 2e-5 * m + 1e-6) << "row " << r << " token " << tk;
      if (tk == 0) {
        EXPECT_NEAR(y1[r], acc, 2e-5 * m + 1e-6) << "row " << r << " alone";
      }
    }
  }
}

// The AVX2 QBlkPack tile (matmul_avx2_qblk.cpp) on the same extreme blocks: 21 rows (a full 16-row block and
// a partial one) x 6 tokens (a 4-token tile and a 2-token tile), every token's first block at -127 so that
// the int16 sums of a whole block reach their largest magnitude (4-bit: 8 x 3810, 5-bit: 4 x 7874 per flush,
// Q8_0 / IQ4_NL: 128 x 127 or 127 x 127 per byte product).
TEST(Q8Avx2, PackTileMatchesTheDecoderWithExtremeCodes) {
  if (best_isa() < Isa::Avx2) GTEST_SKIP() << "no AVX2 on this CPU";
  const std::vector<TypeCase> types = {{"q4_0", {0}, 2, 16, 0xFF, -1}, {"q4_1", {0, 2}, 4, 16, 0xFF, -1},
                                       {"q5_0", {0}, 6, 16, 0xFF, 2},  {"q5_1", {0, 2}, 8, 16, 0xFF, 4},
                                       {"q8_0", {0}, 2, 32, 0x80, -1}, {"iq4_nl", {0}, 2, 16, 0x00, -1}};
  const int64_t rows = 21, cols = 32 * 10, T = 11, nb = cols / 32;
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> ud(0.001f, 0.02f);
  const ExtremeActs a = extreme_acts(T, cols, 32, 32, rng);
  const std::vector<int8_t>& qx = a.q;
  const std::vector<float>& dx = a.d;
  const std::vector<int32_t>& sums = a.sums;
  for (const auto& t : types) {
    SCOPED_TRACE(t.name);
    const FormatInfo& fi = format_by_name(t.name);
    const int64_t nblk = rows * nb;
    auto buf = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(nblk * fi.block_bytes));
    for (auto& b : *buf) b = static_cast<uint8_t>(rng());
    for (int64_t k = 0; k < nblk; ++k) {
      uint8_t* blk = buf->data() + k * fi.block_bytes;
      for (int off : t.f16_offsets) {
        const uint16_t h = f32_to_f16(ud(rng));
        std::memcpy(blk + off, &h, 2);
      }
      if (k % nb == 0) {
        std::memset(blk + t.code_off, t.extreme, static_cast<size_t>(t.code_bytes));
        if (t.qh_off >= 0) std::memset(blk + t.qh_off, 0xFF, 4);
      }
    }
    const auto pk = build_qblk_pack(fi.ggml_type, buf->data(), nb * fi.block_bytes, rows, cols);
    std::vector<int32_t> xo(sums);
    if (!pk->min_bytes)
      for (auto& v : xo) v *= -pk->offset;
    std::vector<float> y(static_cast<size_t>(T * rows), -1.0f), y1(static_cast<size_t>(rows), -1.0f);
    kern::qblk_gemm_avx2(*pk, 0, rows, qx.data(), dx.data(), xo.data(), T, y.data());
    kern::qblk_gemm_avx2(*pk, 0, rows, qx.data(), dx.data(), xo.data(), 1, y1.data());  // one token: one pass
    expect_decoder_products(make_ggml_weight(buf, buf->data(), fi.ggml_type, rows, cols), qx, dx, T, y, y1);
  }
}

// The AVX2 KPack tile (matmul_avx2_kpack.cpp) against the GGUF decoder with every code at its largest (Q4_K
// 15, Q5_K 31, Q6_K 63) and the activations of the first super-block at -127: the int16 sums between two
// flushes reach 8 x 3810, 4 x 7874 and 2 x 16002. 21 rows x 11 tokens (8 + 3) and the first token alone.
TEST(Q8Avx2, KPackTileMatchesTheDecoderWithExtremeCodes) {
  if (best_isa() < Isa::Avx2) GTEST_SKIP() << "no AVX2 on this CPU";
  struct K {
    const char* name;
    std::vector<int> f16_offsets;
    int code_off, code_bytes;  // the bytes set to 0xFF: Q4_K qs; Q5_K qh and qs; Q6_K ql and qh
  };
  const std::vector<K> types = {
      {"q4_k", {0, 2}, 16, 128}, {"q5_k", {0, 2}, 16, 160}, {"q6_k", {208}, 0, 192}};
  const int64_t rows = 21, cols = 512, T = 11;
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> ud(0.001f, 0.02f);
  const ExtremeActs a = extreme_acts(T, cols, 256, 16, rng);
  const std::vector<int8_t>& qx = a.q;
  const std::vector<float>& dx = a.d;
  const std::vector<int32_t>& s16 = a.sums;
  for (const auto& t : types) {
    SCOPED_TRACE(t.name);
    const FormatInfo& fi = format_by_name(t.name);
    const int64_t nblk = rows * cols / 256;
    auto buf = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(nblk * fi.block_bytes));
    for (auto& b : *buf) b = static_cast<uint8_t>(rng());
    for (int64_t k = 0; k < nblk; ++k) {
      uint8_t* blk = buf->data() + k * fi.block_bytes;
      for (int off : t.f16_offsets) {
        const uint16_t h = f32_to_f16(ud(rng));
        std::memcpy(blk + off, &h, 2);
      }
      std::memset(blk + t.code_off, 0xFF, static_cast<size_t>(t.code_bytes));
    }
    const auto pk = build_kpack(fi.ggml_type, buf->data(), cols / 256 * fi.block_bytes, rows, cols);
    std::vector<float> y(static_cast<size_t>(T * rows), -1.0f), y1(static_cast<size_t>(rows), -1.0f);
    kern::kpack_gemm_avx2(*pk, 0, rows, qx.data(), dx.data(), s16.data(), T, y.data());
    kern::kpack_gemm_avx2(*pk, 0, rows, qx.data(), dx.data(), s16.data(), 1, y1.data());
    expect_decoder_products(make_ggml_weight(buf, buf->data(), fi.ggml_type, rows, cols), qx, dx, T, y, y1);
  }
}

// The avx2 tier names the fused kernel for the legacy GGUF types, Q4_K and Q6_K (by row without a pack, the
// 16-row tile with one), and the unfused one where it has none.
TEST(Q8Avx2, KernelNames) {
  if (best_isa() < Isa::Avx2) GTEST_SKIP() << "no AVX2 on this CPU";
  auto name = [](const char* type) {
    const FormatInfo& fi = format_by_name(type);
    const int64_t rows = 4, cols = 256;
    auto buf = std::make_shared<std::vector<uint8_t>>(
        static_cast<size_t>(rows * cols / fi.block_elems * fi.block_bytes), uint8_t{0});
    const WeightMatrix w = make_ggml_weight(buf, buf->data(), fi.ggml_type, rows, cols);
    return matmul_kernel_name(w);
  };
  set_kernel_isa(Isa::Avx2);
  EXPECT_EQ(name("q4_0"), "q4_0.q8dot.avx2");
  EXPECT_EQ(name("q8_0"), "q8_0.q8dot.avx2");
  EXPECT_EQ(name("q5_1"), "q5_1.q8dot.avx2");
  EXPECT_EQ(name("q4_k"), "q4_k.q8dot.avx2");
  EXPECT_EQ(name("q6_k"), "q6_k.q8dot.avx2");
  EXPECT_EQ(name("q5_k"), "q5_k.deq.avx2");  // held as rows: no AVX2 row kernel for the other k-quants
  // With the load-time pack (prepare_weight, as load_model does): the 16-row tile, IQ4_NL / MXFP4 and every
  // k-quant included.
  for (const char* type : {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "iq4_nl", "ggml_mxfp4", "q2_k", "q3_k",
                           "q4_k", "q5_k", "q6_k"}) {
    const FormatInfo& fi = format_by_name(type);
    auto buf = std::make_shared<std::vector<uint8_t>>(
        static_cast<size_t>(16 * 256 / fi.block_elems * fi.block_bytes), 1);
    WeightMatrix w = make_ggml_weight(buf, buf->data(), fi.ggml_type, 16, 256);
    prepare_weight(w);
    EXPECT_EQ(matmul_kernel_name(w),
              std::string(fi.ggml_type == ggml::MXFP4 ? "mxfp4" : type) + ".q8dot16.avx2");
  }
  set_kernel_isa(best_isa());
}

}  // namespace
}  // namespace lowbit
