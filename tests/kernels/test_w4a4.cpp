// W4A4: the per-token INT4 activation quantizer and the integer-activation kernels against their scalar
// definitions, on every ISA tier this machine has.
//
//  - quantize_activation_int4: the AVX-512 version equals the scalar definition bit for bit (codes and
//    scale), with clipping, zero rows, NaN, infinities, rounding ties and ragged lengths.
//  - Integer accumulation: with unit weight scales and activations whose absmax is 7 (scale 1), every product
//    the kernels form is an exact integer, so matmul equals the integer reference bit for bit.
//  - Random weights and activations: matmul equals matmul_int_reference within float-scaling noise
//    (|y - ref| <= 2e-5 * sum |w x| + 1e-6, as test_kernels) over ragged shapes, T = 1, 3, 17, 64 and groups.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "formats/scheme.h"
#include "kernels/dispatch.h"
#include "kernels/kernel_plan.h"
#include "kernels/matmul.h"
#include "kernels/weight.h"
#include "tensor/qtensor.h"

namespace lowbit {
namespace {

WeightMatrix quant_weight(const std::vector<float>& w, int64_t rows, int64_t cols, const std::string& scheme,
                          FormatId act, float clip = 1.0f) {
  const QuantScheme s = parse_scheme(scheme);
  validate(s, rows, cols);
  WeightMatrix m =
      make_quant_weight(std::make_shared<QuantizedMatrix>(quantize_matrix(w.data(), rows, cols, s)));
  m.act_format = act;
  m.act_clip = clip;
  return m;
}

TEST(ActivationInt4, ScalarDefinition) {
  // absmax 7: scale 1, codes are the rounded values (ties to even), clipped at +-7.
  const std::vector<float> x = {7.0f, -7.0f, 2.5f, -2.5f, 3.5f, 0.49f, -6.6f, 0.0f};
  std::vector<int8_t> q(x.size());
  float s = 0;
  quantize_activation_int4(x.data(), 8, 1.0f, q.data(), &s);
  EXPECT_EQ(s, 1.0f);
  EXPECT_EQ(std::vector<int8_t>(q.begin(), q.end()), (std::vector<int8_t>{7, -7, 2, -2, 4, 0, -7, 0}));
  // clip 0.5: scale 0.5, so |x| >= 3.5 saturates.
  quantize_activation_int4(x.data(), 8, 0.5f, q.data(), &s);
  EXPECT_EQ(s, 0.5f);
  EXPECT_EQ(std::vector<int8_t>(q.begin(), q.end()), (std::vector<int8_t>{7, -7, 5, -5, 7, 1, -7, 0}));
  // A zero row: scale 0, codes 0.
  std::vector<float> z(5, 0.0f);
  quantize_activation_int4(z.data(), 5, 1.0f, q.data(), &s);
  EXPECT_EQ(s, 0.0f);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(q[i], 0);
  // NaN: NaN scale, the NaN's code 0 (as the INT8 route); infinities saturate.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> sp = {nan, inf, -inf, 14.0f, -1.0f};
  quantize_activation_int4(sp.data(), 5, 1.0f, q.data(), &s);
  EXPECT_TRUE(std::isnan(s));
  EXPECT_EQ(std::vector<int8_t>(q.begin(), q.begin() + 5), (std::vector<int8_t>{0, 7, -7, 7, 0}));
}

TEST(ActivationInt4, VectorMatchesScalarBitForBit) {
  if (best_isa() < Isa::Avx2) GTEST_SKIP() << "no AVX2 here";
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<std::vector<float>> inputs;
  for (int64_t n : {1, 5, 16, 17, 100, 896, 4864}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = nd(rng);
    inputs.push_back(x);
    std::vector<float> ties(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ties[i] = static_cast<float>(i % 14) - 6.5f;  // k + 0.5 at scale 1
    ties[0] = 7.0f;
    inputs.push_back(ties);
    std::vector<float> special = x;
    const float spv[] = {nan, inf, -inf, 0.0f, -0.0f, 1e-30f, -1e30f};
    for (int64_t i = 0; i < n; i += 3) special[i] = spv[(i / 3) % 7];
    inputs.push_back(special);
    inputs.push_back(std::vector<float>(static_cast<size_t>(n), 0.0f));
    std::vector<float> no_finite(static_cast<size_t>(n), -inf);
    no_finite[0] = inf;
    inputs.push_back(no_finite);
  }
  // The AVX2 quantizer on every CPU with AVX2, the AVX-512 one where it has it.
  std::vector<std::pair<const char*, void (*)(const float*, int64_t, float, int8_t*, float*)>> tiers = {
      {"avx2", kern::quantize_activation_int4_avx2}};
  if (best_isa() >= Isa::Avx512) tiers.push_back({"avx512", kern::quantize_activation_int4_avx512});
  for (const auto& [tier, quantize] : tiers)
    for (const auto& x : inputs)
      for (float clip : {1.0f, 0.9f, 0.5f}) {
        const int64_t n = static_cast<int64_t>(x.size());
        std::vector<int8_t> a(x.size(), 99), b(x.size(), 98);
        float sa = 0, sb = 0;
        quantize_activation_int4(x.data(), n, clip, a.data(), &sa);
        quantize(x.data(), n, clip, b.data(), &sb);
        ASSERT_EQ(f32_bits(sa), f32_bits(sb)) << tier << " n " << n << " clip " << clip;
        ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0) << tier << " n " << n << " clip " << clip;
        for (int8_t c : a) ASSERT_TRUE(c >= -7 && c <= 7);
      }
}

const char* const kSchemes[] = {"int4:channel:sym",  "int4:g128:sym", "int4:g32:sym",     "int4:g64:asym",
                                "int4:channel:asym", "int4:g48:sym",  "int8:channel:sym", "int8:g32:sym"};
const std::pair<int64_t, int64_t> kShapes[] = {{37, 256}, {16, 200}, {24, 896},
                                               {7, 333},  {21, 133}, {9, 2200}};
const int64_t kTokens[] = {1, 3, 17, 64};

// Integer weights in [-7, 7] with a +-7 in every group (scale 1 exactly, in f16 too) and integer activations
// with absmax 7 (activation scale 1): every product and sum the kernels form is an exact integer in float,
// so the result is the integer dot product on every tier.
TEST(W4A4Kernel, IntegerAccumulationBitExact) {
  for (const char* scheme : {"int4:channel:sym", "int4:g32:sym", "int4:g128:sym", "int8:channel:sym"})
    for (auto [rows, cols] : kShapes) {
      const QuantScheme s = parse_scheme(scheme);
      const int64_t g = s.gran == Granularity::Group ? s.group_size : cols;
      if (g > cols) continue;
      const int qw = s.info().bits == 8 ? 127 : 7;  // the weight codes' symmetric range: scale 1
      std::mt19937 rng(static_cast<uint32_t>(rows * 7 + cols));
      std::uniform_int_distribution<int> wd(-qw, qw), xd(-7, 7);
      std::vector<float> w(static_cast<size_t>(rows * cols));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          w[r * cols + c] = c % g == 0 ? static_cast<float>((r + c) % 2 ? qw : -qw) : wd(rng);
      const WeightMatrix m = quant_weight(w, rows, cols, scheme, FormatId::INT4);
      for (int64_t T : kTokens) {
        std::vector<float> x(static_cast<size_t>(T * cols));
        for (int64_t t = 0; t < T; ++t)
          for (int64_t c = 0; c < cols; ++c) x[t * cols + c] = c == t % cols ? -7.0f : xd(rng);
        std::vector<float> exact(static_cast<size_t>(T * rows));
        for (int64_t t = 0; t < T; ++t)
          for (int64_t r = 0; r < rows; ++r) {
            int64_t acc = 0;
            for (int64_t c = 0; c < cols; ++c)
              acc += static_cast<int64_t>(w[r * cols + c]) * static_cast<int64_t>(x[t * cols + c]);
            exact[t * rows + r] = static_cast<float>(acc);
          }
        std::vector<float> ref(exact.size());
        matmul_int_reference(m, x.data(), T, ref.data());
        ASSERT_EQ(ref, exact) << scheme << " " << rows << "x" << cols << " T " << T;
        for (Isa isa : available_isas()) {
          set_kernel_isa(isa);
          std::vector<float> y(exact.size(), -1.0f);
          matmul(m, x.data(), T, y.data());
          EXPECT_EQ(y, exact) << matmul_kernel_name(m) << " " << rows << "x" << cols << " T " << T;
        }
        set_kernel_isa(best_isa());
      }
    }
}

// Random weights (with outliers) and activations (with an outlier channel), clip 1 and 0.9: every tier
// against the integer reference within float-scaling noise.
TEST(W4A4Kernel, MatchesIntegerReferenceOnEveryTier) {
  for (const char* scheme : kSchemes)
    for (auto [rows, cols] : kShapes) {
      const QuantScheme s = parse_scheme(scheme);
      if (s.gran == Granularity::Group && s.group_size > cols) continue;
      std::mt19937 rng(static_cast<uint32_t>(rows * 131 + cols));
      std::normal_distribution<float> nd(0.0f, 0.05f);
      std::vector<float> w(static_cast<size_t>(rows * cols));
      for (auto& v : w) v = nd(rng);
      for (int64_t r = 0; r < rows; ++r) w[static_cast<size_t>(r * cols + (r * 7) % cols)] += 0.4f;
      for (float clip : {1.0f, 0.9f}) {
        const WeightMatrix m = quant_weight(w, rows, cols, scheme, FormatId::INT4, clip);
        for (int64_t T : kTokens) {
          std::normal_distribution<float> xd(0.0f, 1.0f);
          std::vector<float> x(static_cast<size_t>(T * cols));
          for (auto& v : x) v = xd(rng);
          x[0] = 6.0f;
          std::vector<float> ref(static_cast<size_t>(T * rows));
          matmul_int_reference(m, x.data(), T, ref.data());
          // The magnitude bound of the dequantized operands.
          std::vector<float> xe(x.size()), wr(static_cast<size_t>(cols));
          quantize_activations(m, x.data(), T, xe.data());
          std::vector<double> mag(ref.size(), 0.0);
          for (int64_t r = 0; r < rows; ++r) {
            weight_row_f32(m, r, wr.data());
            for (int64_t t = 0; t < T; ++t)
              for (int64_t c = 0; c < cols; ++c)
                mag[t * rows + r] += std::fabs(double{wr[c]} * xe[t * cols + c]);
          }
          for (Isa isa : available_isas()) {
            set_kernel_isa(isa);
            // Groups the integer kernels cannot lay out (g48) take the weight-only kernels on x through the
            // activation route, which may round it to BF16: test_kernels covers them.
            if (matmul_rounds_to_bf16(m, T)) continue;
            std::vector<float> y(ref.size(), -1.0f);
            matmul(m, x.data(), T, y.data());
            int bad = 0;
            for (size_t i = 0; i < y.size(); ++i)
              if (!(std::fabs(double{y[i]} - ref[i]) <= 2e-5 * mag[i] + 1e-6) && bad++ < 3)
                ADD_FAILURE() << matmul_kernel_name(m) << " " << rows << "x" << cols << " T " << T << " clip "
                              << clip << " out " << i << ": " << y[i] << " vs " << ref[i];
          }
          set_kernel_isa(best_isa());
        }
      }
    }
}

}  // namespace
}  // namespace lowbit
