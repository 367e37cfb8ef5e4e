// The NVFP4 activation route (act=nvfp4): per token, blocks of 16 E2M1 codes with E4M3 block scales under a
// dynamic FP32 global scale (matmul.h).
//
//  - quantize_activation_nvfp4 against hand-computed codes, block scales and global scales: rounding ties
//    (to even), a ragged last block, a block scale that rounds down (its largest element saturates), the clip
//    saturating the block scale at 448, E4M3's smallest step and the half step that rounds a block to zero,
//    an all-zero block and token, NaN and infinities.
//  - matmul with act=nvfp4 equals the scalar oracle (quantize_activations, matmul_weight_row, double sums)
//    within float-scaling noise for every weight format family, on every ISA tier this machine has, decode
//    and prefill, with an input-permuted weight too (the blocks are in the model's input order).
//  - The recipe: act=nvfp4 and {"format": "nvfp4"} parse, plan and round-trip; bad values are refused with a
//    [quant] message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/scheme.h"
#include "kernels/dispatch.h"
#include "kernels/kernel_plan.h"
#include "kernels/matmul.h"
#include "kernels/weight.h"
#include "quant/recipe.h"
#include "tensor/qtensor.h"
#include "tests/common/usage_message.h"

namespace lowbit {
namespace {

const float kNan = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

struct Quantized {
  std::vector<uint8_t> codes, scales;
  float g = -1.0f;
  std::vector<float> deq;
};

Quantized run(const std::vector<float>& x, float clip = 1.0f) {
  const int64_t n = static_cast<int64_t>(x.size());
  Quantized q;
  q.codes.assign(x.size(), 0xEE);
  q.scales.assign(static_cast<size_t>((n + 15) / 16), 0xEE);
  quantize_activation_nvfp4(x.data(), n, clip, ActScale::Amax, q.codes.data(), q.scales.data(), &q.g);
  q.deq.assign(x.size(), -1.0f);
  dequantize_activation_nvfp4(q.codes.data(), q.scales.data(), q.g, n, q.deq.data());
  return q;
}

using Bytes = std::vector<uint8_t>;

TEST(ActivationNvfp4, RoundingTiesAndRaggedBlock) {
  // amax 2688 = 6 * 448: g = 1, block 0's scale 448 (E4M3 0x7E); x = 448 * {6, -6, 0.25, 0.75, ...}.
  std::vector<float> x;
  for (float m : {6.0f, -6.0f, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, -0.75f, 0.3f, -2.9f, 0.0f, 0.1f,
                  -0.1f, 4.4f})
    x.push_back(448.0f * m);
  // Ragged block 1 (5 elements): bmax 12 -> scale e4m3(12 / 6) = 2 (0x40).
  for (float v : {12.0f, -3.0f, 1.0f, 0.5f, 5.0f}) x.push_back(v);
  const Quantized q = run(x);
  EXPECT_EQ(q.g, 1.0f);
  EXPECT_EQ(q.scales, (Bytes{0x7E, 0x40}));
  // E2M1 codes: 0 0.5 1 1.5 2 3 4 6 = 0..7, sign 0x8. Ties to the even code: 0.25 -> 0, 0.75 -> 1, 1.25 -> 1,
  // 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4; -0.1 -> -0 (0x8).
  EXPECT_EQ(q.codes, (Bytes{0x7, 0xF, 0x0, 0x2, 0x2, 0x4, 0x4, 0x6, 0x6, 0xA, 0x1,
                            0xD, 0x0, 0x0, 0x8, 0x6, 0x7, 0xB, 0x1, 0x0, 0x4}));
  const std::vector<float> want = {2688,  -2688, 0, 448, 448,  896, 896, 1792, 1792, -448, 224,
                                   -1344, 0,     0, -0,  1792, 12,  -3,  1,    0,    4};
  EXPECT_EQ(q.deq, want);
  EXPECT_TRUE(std::signbit(q.deq[14]));
}

TEST(ActivationNvfp4, BlockScaleRoundingSaturationAndSmallBlocks) {
  std::vector<float> x(64, 0.0f);
  x[0] = 2688.0f;  // g = 1
  // Block 1: bmax 7 -> 7 / 6 = 1.1667 rounds to E4M3 1.125 (0x39), so 7 / 1.125 = 6.2 saturates at 6.
  x[16] = 7.0f;
  x[17] = -7.0f;
  x[18] = 3.5f;  // 3.11 -> 3
  // Block 2: bmax 6 * 2^-9: E4M3's smallest step 2^-9 (0x01) exactly.
  x[32] = 6.0f * 0x1p-9f;
  x[33] = -3.0f * 0x1p-9f;
  // Block 3: bmax 6 * 2^-10: half the smallest step, a tie that rounds to the even scale 0: the block is
  // zero.
  x[48] = 6.0f * 0x1p-10f;
  x[49] = -6.0f * 0x1p-10f;
  const Quantized q = run(x);
  EXPECT_EQ(q.g, 1.0f);
  EXPECT_EQ(q.scales, (Bytes{0x7E, 0x39, 0x01, 0x00}));
  EXPECT_EQ(q.codes[0], 0x7);
  EXPECT_EQ((Bytes{q.codes[16], q.codes[17], q.codes[18]}), (Bytes{0x7, 0xF, 0x5}));
  EXPECT_EQ((Bytes{q.codes[32], q.codes[33]}), (Bytes{0x7, 0xD}));
  EXPECT_EQ((Bytes{q.codes[48], q.codes[49]}), (Bytes{0x0, 0x0}));
  EXPECT_EQ(q.deq[16], 6.75f);
  EXPECT_EQ(q.deq[17], -6.75f);
  EXPECT_EQ(q.deq[18], 3.375f);
  EXPECT_EQ(q.deq[32], 6.0f * 0x1p-9f);
  EXPECT_EQ(q.deq[48], 0.0f);
}

TEST(ActivationNvfp4, ClipScalesTheGlobalScale) {
  // clip 0.5: g = 0.5, block scale 2688 / 6 / 0.5 = 896 saturates at 448: the step is 224, 2688 -> 6 * 224.
  const Quantized q = run({2688.0f, 100.0f, -50.0f}, 0.5f);
  EXPECT_EQ(q.g, 0.5f);
  EXPECT_EQ(q.scales, (Bytes{0x7E}));
  EXPECT_EQ(q.codes, (Bytes{0x7, 0x1, 0x8}));  // 100 / 224 = 0.45 -> 0.5; -50 / 224 = -0.22 -> -0
  EXPECT_EQ(q.deq, (std::vector<float>{1344.0f, 112.0f, -0.0f}));
}

TEST(ActivationNvfp4, ZerosNanAndInfinities) {
  // An all-zero token: g = 0, every scale and code 0.
  Quantized z = run(std::vector<float>(20, 0.0f));
  EXPECT_EQ(z.g, 0.0f);
  EXPECT_EQ(z.scales, (Bytes{0, 0}));
  EXPECT_EQ(z.codes, Bytes(20, 0));
  EXPECT_EQ(z.deq, std::vector<float>(20, 0.0f));
  // No finite non-zero value: g = 0, infinities code +-6 and dequantize to zero.
  Quantized inf = run({kInf, -kInf, kInf});
  EXPECT_EQ(inf.g, 0.0f);
  EXPECT_EQ(inf.codes, (Bytes{0x7, 0xF, 0x7}));
  for (float v : inf.deq) EXPECT_EQ(v, 0.0f);
  // Blocks of 16, 16 and 8: block 1 all zero, block 2 only infinities (scale 0, codes +-6).
  std::vector<float> x(40, 0.0f);
  x[0] = 2688.0f;
  x[2] = kInf;
  x[3] = -kInf;
  x[5] = 448.0f;
  x[32] = kInf;
  x[33] = -kInf;
  Bytes codes(40, 0);
  codes[0] = 0x7;
  codes[2] = 0x7;
  codes[3] = 0xF;
  codes[5] = 0x2;
  codes[32] = 0x7;
  codes[33] = 0xF;
  Quantized f = run(x);
  EXPECT_EQ(f.g, 1.0f);
  EXPECT_EQ(f.scales, (Bytes{0x7E, 0x00, 0x00}));
  EXPECT_EQ(f.codes, codes);
  EXPECT_EQ(f.deq[2], 2688.0f);
  EXPECT_EQ(f.deq[3], -2688.0f);
  EXPECT_EQ(f.deq[5], 448.0f);
  EXPECT_EQ(f.deq[32], 0.0f);
  // A NaN: the scales and the other codes as without it, its code 0, g NaN: the token dequantizes to NaN.
  x[1] = kNan;
  Quantized n = run(x);
  EXPECT_TRUE(std::isnan(n.g));
  EXPECT_EQ(n.scales, f.scales);
  EXPECT_EQ(n.codes, codes);
  for (float v : n.deq) EXPECT_TRUE(std::isnan(v));
}

// The route over tokens (quantize_activations) is the one-token definition, token by token.
TEST(ActivationNvfp4, QuantizeActivationsIsTheDefinitionPerToken) {
  const int64_t cols = 37, T = 3;
  std::vector<float> w(static_cast<size_t>(4 * cols), 0.5f);
  WeightMatrix m = make_f32_weight(w.data(), 4, cols);
  m.act_format = FormatId::NVFP4;
  m.act_clip = 0.9f;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(T * cols));
  for (auto& v : x) v = nd(rng);
  std::vector<float> xq(x.size());
  quantize_activations(m, x.data(), T, xq.data());
  for (int64_t t = 0; t < T; ++t) {
    const Quantized q = run(std::vector<float>(x.begin() + t * cols, x.begin() + (t + 1) * cols), 0.9f);
    EXPECT_EQ(std::vector<float>(xq.begin() + t * cols, xq.begin() + (t + 1) * cols), q.deq) << t;
  }
}

// ---- matmul ----

WeightMatrix make_weight(const std::vector<float>& w, int64_t rows, int64_t cols, const std::string& scheme,
                         bool permute = false) {
  WeightMatrix m;
  if (scheme == "f32") {
    m = make_f32_weight(w.data(), rows, cols);
  } else if (scheme == "bf16w") {
    m = make_half_weight(w.data(), rows, cols, WeightKind::BF16);
  } else {
    const QuantScheme s = parse_scheme(scheme);
    validate(s, rows, cols);
    auto q = std::make_shared<QuantizedMatrix>(quantize_matrix(w.data(), rows, cols, s));
    if (permute) {  // a GPTQ act-order-like permutation: stored column j is input column perm[j]
      q->input_perm.resize(static_cast<size_t>(cols));
      for (int64_t j = 0; j < cols; ++j) q->input_perm[j] = static_cast<int32_t>((j * 7 + 3) % cols);
    }
    m = make_quant_weight(q);
  }
  m.act_format = FormatId::NVFP4;
  return m;
}

// The oracle: x through the route (x_hat), the rows as the kernel multiplies them, double accumulation; and
// sum |w x_hat| for the tolerance.
void oracle(const WeightMatrix& m, const std::vector<float>& x, int64_t T, std::vector<double>& ref,
            std::vector<double>& mag) {
  const int64_t rows = m.rows, cols = m.cols;
  std::vector<float> xq(x.size()), row(static_cast<size_t>(cols));
  quantize_activations(m, x.data(), T, xq.data());
  ref.assign(static_cast<size_t>(T * rows), 0.0);
  mag.assign(ref.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    matmul_weight_row(m, T, r, row.data());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < cols; ++c) {
        const double p = double{row[c]} * xq[t * cols + c];
        ref[t * rows + r] += p;
        mag[t * rows + r] += std::fabs(p);
      }
  }
}

const char* const kWeights[] = {"f32",
                                "bf16w",
                                "int4:g128:sym",
                                "int4:g32:asym",
                                "int4:g64:asym",
                                "int4:channel:asym",
                                "int8:channel:sym",
                                "nf4:g64",
                                "nvfp4",
                                "mxfp4",
                                "e4m3:channel",
                                "e2m3",
                                "int3:g32:sym",
                                "lut3",
                                "q4_0",
                                "q4_k",
                                "q8_0",
                                "q6_k"};
const std::pair<int64_t, int64_t> kShapes[] = {{37, 256}, {9, 512}, {16, 200}, {7, 333}};
const int64_t kTokens[] = {1, 3, 17, 64};

void check_every_tier(const WeightMatrix& m, const std::string& what, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> xd(0.0f, 1.0f);
  for (int64_t T : kTokens) {
    std::vector<float> x(static_cast<size_t>(T * m.cols));
    for (auto& v : x) v = xd(rng);
    for (int64_t t = 0; t < T; ++t) x[static_cast<size_t>(t * m.cols + (t * 5) % m.cols)] = 20.0f;  // outlier
    for (Isa isa : available_isas()) {
      set_kernel_isa(isa);
      const std::string name = matmul_kernel_name(m);
      EXPECT_NE(name.find("+a_nvfp4"), std::string::npos) << name;
      EXPECT_FALSE(matmul_rounds_to_q8(m, T)) << name;
      std::vector<double> ref, mag;
      oracle(m, x, T, ref, mag);
      std::vector<float> y(ref.size(), -1.0f);
      matmul(m, x.data(), T, y.data());
      int bad = 0;
      for (size_t i = 0; i < y.size(); ++i)
        if (!(std::fabs(double{y[i]} - ref[i]) <= 2e-5 * mag[i] + 1e-6) && bad++ < 3)
          ADD_FAILURE() << what << " " << name << " " << m.rows << "x" << m.cols << " T " << T << " out " << i
                        << ": " << y[i] << " vs " << ref[i];
    }
    set_kernel_isa(best_isa());
  }
}

// The AVX2 quantizer equals the scalar definition bit for bit (codes, block scales, global scale): random
// tokens, every rounding tie of E2M1 at every block scale, ragged lengths, zeros, NaN, infinities, signed
// zeros, clips.
TEST(ActivationNvfp4, Avx2QuantizerIsTheDefinition) {
  if (best_isa() < Isa::Avx2) GTEST_SKIP() << "no AVX2 here";
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<std::vector<float>> inputs;
  const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f,
                        0.5f,  1.0f,  1.5f,  3.0f,  4.0f, 0.0f, 2.0f};
  for (int64_t n : {1, 15, 16, 17, 40, 896, 4864}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = nd(rng);
    inputs.push_back(x);
    // Every block's largest value is 6, and the token's 2688 (n > 20) makes g = 1: block scales 1 (448 for
    // the 2688's block), so x / (s_b g) meets every E2M1 tie exactly, both signs.
    std::vector<float> t(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) t[i] = (i % 16 == 0 ? 6.0f : ties[i % 15]) * (i % 3 ? 1.0f : -1.0f);
    if (n > 20) t[20] = 2688.0f;
    inputs.push_back(t);
    std::vector<float> special = x;
    const float sp[] = {nan, inf, -inf, 0.0f, -0.0f, 1e-30f, -1e30f};
    for (int64_t i = 0; i < n; i += 3) special[i] = sp[(i / 3) % 7];
    inputs.push_back(special);
    std::vector<float> inf_only = x;
    for (auto& v : inf_only) v = v > 0 ? inf : -0.0f;
    inputs.push_back(inf_only);
    inputs.push_back(std::vector<float>(static_cast<size_t>(n), -0.0f));
  }
  for (const auto& x : inputs)
    for (float clip : {1.0f, 0.9f}) {
      const int64_t n = static_cast<int64_t>(x.size()), nb = (n + 15) / 16;
      Bytes ca(x.size(), 99), cb(x.size(), 98), sa(static_cast<size_t>(nb), 97),
          sb(static_cast<size_t>(nb), 96);
      float ga = -1.0f, gb = -2.0f;
      quantize_activation_nvfp4(x.data(), n, clip, ActScale::Amax, ca.data(), sa.data(), &ga);
      kern::quantize_activation_nvfp4_avx2(x.data(), n, clip, ActScale::Amax, cb.data(), sb.data(), &gb);
      ASSERT_EQ(std::memcmp(&ga, &gb, 4), 0) << "n " << n << " g " << ga << " vs " << gb;
      ASSERT_EQ(sa, sb) << "n " << n;
      ASSERT_EQ(ca, cb) << "n " << n << " clip " << clip;
    }
}

TEST(ActivationNvfp4Matmul, EqualsTheReferenceOnEveryTier) {
  int tested = 0;
  for (const char* scheme : kWeights)
    for (auto [rows, cols] : kShapes) {
      std::mt19937 rng(static_cast<uint32_t>(rows * 131 + cols));
      std::normal_distribution<float> nd(0.0f, 0.05f);
      std::vector<float> w(static_cast<size_t>(rows * cols));
      for (auto& v : w) v = nd(rng);
      WeightMatrix m;
      try {
        m = make_weight(w, rows, cols, scheme);
      } catch (const UsageError&) {
        continue;  // a shape the format does not take (GGUF blocks of 32 / 256)
      }
      check_every_tier(m, scheme, static_cast<uint32_t>(cols));
      ++tested;
    }
  EXPECT_GE(tested, 50);
}

// Weight and activation scales that are exact: the float kernels give the exact sum, and so does the
// oracle (int4 codes in [-7, 7] at scale 1 against x_hat on a power-of-two grid).
// int4:g64 and per-channel weights run the integer kernels of the AVX2 tier (f4dot / f4dot16), int4:g32 the
// float kernels.
TEST(ActivationNvfp4Matmul, ExactOperandsAreExact) {
  const int64_t rows = 16, cols = 200;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> wd(-7, 7), xd(-6, 6);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) w[r * cols + c] = c % 32 == 0 ? 7.0f : static_cast<float>(wd(rng));
  for (const char* scheme : {"int4:g32:sym", "int4:g64:sym", "int4:channel:sym"}) {
    const WeightMatrix m = make_weight(w, rows, cols, scheme);
    if (best_isa() >= Isa::Avx2 && std::string(scheme) != "int4:g32:sym") {
      set_kernel_isa(Isa::Avx2);
      EXPECT_NE(matmul_kernel_name(m).find(".f4dot+f4dot16.avx2"), std::string::npos)
          << matmul_kernel_name(m);
      set_kernel_isa(best_isa());
    }
    for (int64_t T : kTokens) {
      // |x| <= 6 with a 2688 in every token: g = 1, block scales 448 (block 0) and 1 (every block has a 6).
      std::vector<float> x(static_cast<size_t>(T * cols));
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < cols; ++c) {
          const int v = xd(rng);
          x[t * cols + c] = c == 0 ? 2688.0f : c % 16 == 1 ? 6.0f : static_cast<float>(v == 5 ? 4 : v);
        }
      std::vector<double> ref, mag;
      oracle(m, x, T, ref, mag);
      for (Isa isa : available_isas()) {
        set_kernel_isa(isa);
        std::vector<float> y(ref.size());
        matmul(m, x.data(), T, y.data());
        for (size_t i = 0; i < y.size(); ++i)
          ASSERT_EQ(double{y[i]}, ref[i]) << matmul_kernel_name(m) << " T " << T << " out " << i;
      }
      set_kernel_isa(best_isa());
    }
  }
}

// INT4 weights with NVFP4 activations run integer kernels on the AVX2 (f4dot / f4dot16) and AVX-512 (f4vnni /
// f4vnni16) tiers; a decode kernel and its prefill tile must give a token the same bits, or a sequence's
// output would depend on what else is in the engine's batch. Shapes with a ragged last block, groups of 32,
// 64, 128 and per channel, symmetric and asymmetric, on every tier that fuses them.
TEST(ActivationNvfp4Matmul, TokenBitsDoNotDependOnTheBatch) {
  int fused = 0;
  for (const char* scheme : {"int4:g32:sym", "int4:g64:asym", "int4:g128:sym", "int4:channel:asym"})
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 256}, {21, 392}, {16, 200}}) {
      if (std::string(scheme) == "int4:g128:sym" && cols % 128 != 0) continue;
      std::mt19937 rng(static_cast<uint32_t>(rows + cols));
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<float> w(static_cast<size_t>(rows * cols));
      for (auto& v : w) v = 0.05f * nd(rng);
      const WeightMatrix m = make_weight(w, rows, cols, scheme);
      const int64_t T = 19;
      std::vector<float> x(static_cast<size_t>(T * cols));
      for (auto& v : x) v = nd(rng) * (nd(rng) > 1.5f ? 30.0f : 1.0f);
      for (Isa isa : available_isas()) {
        set_kernel_isa(isa);
        const std::string name = matmul_kernel_name(m);
        if (isa >= Isa::Avx512) {
          EXPECT_NE(name.find(".f4vnni+f4vnni16.avx512"), std::string::npos) << name;
          ++fused;
        }
        if (name.find(".f4") == std::string::npos) continue;  // the emulation (AVX2 g32, generic tier)
        std::vector<float> all(static_cast<size_t>(T * rows)), one(static_cast<size_t>(rows));
        matmul(m, x.data(), T, all.data());
        for (int64_t t = 0; t < T; ++t) {
          matmul(m, x.data() + t * cols, 1, one.data());
          ASSERT_EQ(std::memcmp(one.data(), all.data() + t * rows, one.size() * sizeof(float)), 0)
              << name << " " << rows << "x" << cols << " token " << t;
        }
        // A decode step of three sequences (the decode kernel) against the same tokens in the tile.
        std::vector<float> three(static_cast<size_t>(3 * rows));
        matmul(m, x.data() + 5 * cols, 3, three.data());
        ASSERT_EQ(std::memcmp(three.data(), all.data() + 5 * rows, three.size() * sizeof(float)), 0) << name;
      }
      set_kernel_isa(best_isa());
    }
  if (best_isa() >= Isa::Avx512) EXPECT_GT(fused, 0);
}

// An input-permuted weight: the route quantizes x in the model's input order (its blocks of 16), not the
// stored column order.
TEST(ActivationNvfp4Matmul, InputPermutedWeights) {
  for (const char* scheme : {"int4:g32:sym", "nvfp4", "nf4:g64"}) {
    const int64_t rows = 24, cols = 200;
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 0.05f);
    std::vector<float> w(static_cast<size_t>(rows * cols));
    for (auto& v : w) v = nd(rng);
    check_every_tier(make_weight(w, rows, cols, scheme, true), std::string(scheme) + " permuted", 9);
  }
}

// ---- recipe ----

using testing_util::usage_message;

ModelConfig small_config() {
  ModelConfig c;
  c.dim = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 4;
  c.head_dim = 16;
  c.ffn_dim = 172;
  c.vocab_size = 100;
  return c;
}

TEST(ActivationNvfp4Recipe, ShorthandJsonPlanAndRefusals) {
  using quant::parse_recipe_arg;
  using quant::recipe_from_json;
  quant::Recipe r = parse_recipe_arg("W4A16,group=32,act=nvfp4");
  EXPECT_EQ(r.act.format, FormatId::NVFP4);
  EXPECT_TRUE(r.act.dynamic);
  std::vector<std::string> warn;
  int routed = 0;
  for (const auto& p : quant::plan_recipe(r, small_config(), &warn)) {
    if (p.quantize && p.name != "tok_embed") {
      EXPECT_EQ(p.act.format, FormatId::NVFP4) << p.name;
      ++routed;
    }
  }
  EXPECT_GT(routed, 0);
  // The clip applies, and both travel through JSON.
  r = parse_recipe_arg("W4A16,group=32,act=nvfp4,act_clip=0.9");
  EXPECT_EQ(r.act.clip, 0.9f);
  EXPECT_NO_THROW(quant::plan_recipe(r, small_config(), &warn));
  const nlohmann::json j = r.to_json();
  EXPECT_EQ(j["activations"]["format"], "nvfp4");
  EXPECT_NEAR(j["activations"]["clip"].get<double>(), 0.9, 1e-7);
  EXPECT_EQ(recipe_from_json(j).to_json(), j);
  const quant::Recipe o = recipe_from_json(nlohmann::json::parse(
      R"({"scheme": "int4:g32:sym", "activations": {"format": "nvfp4", "dynamic": true, "clip": 0.8}})"));
  EXPECT_EQ(o.act.format, FormatId::NVFP4);
  EXPECT_EQ(o.act.clip, 0.8f);
  // Refusals, each a [quant] message that says what to use.
  std::string msg = usage_message([] { parse_recipe_arg("W4A16,act=nvfp5"); });
  EXPECT_EQ(msg.rfind("[quant] ", 0), 0u) << msg;
  EXPECT_NE(msg.find("nvfp5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nvfp4"), std::string::npos) << msg;
  msg = usage_message([] {
    std::vector<std::string> w;
    quant::plan_recipe(parse_recipe_arg("W4A16,group=32,act=mxfp4"), small_config(), &w);
  });
  EXPECT_EQ(msg.rfind("[quant] ", 0), 0u) << msg;
  EXPECT_NE(msg.find("act=nvfp4"), std::string::npos) << msg;
  msg = usage_message([] {
    std::vector<std::string> w;
    quant::plan_recipe(parse_recipe_arg("W4A16,group=32,act=nvfp4,act_static=1"), small_config(), &w);
  });
  EXPECT_NE(msg.find("nvfp4 activations are dynamic only"), std::string::npos) << msg;
  msg = usage_message([] {
    recipe_from_json(
        nlohmann::json::parse(R"({"scheme": "int4:g32:sym", "activations": {"format": "fp4x"}})"));
  });
  EXPECT_EQ(msg.rfind("[quant] ", 0), 0u) << msg;
  EXPECT_NE(msg.find("fp4x"), std::string::npos) << msg;
}

}  // namespace
}  // namespace lowbit
