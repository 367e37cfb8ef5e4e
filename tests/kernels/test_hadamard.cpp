// Hadamard transforms: every construction is a Hadamard matrix, the shared factor file's matrices are too,
// and the fast transform of the orders real models need equals the dense product on every ISA tier (and the
// tiers agree bit for bit).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "io/safetensors.h"
#include "kernels/dispatch.h"
#include "kernels/hadamard.h"

namespace lowbit {
namespace {

const std::string kFactors = std::string(LOWBIT_SHARED_DIR) + "/data/hadamard/hadamards.safetensors";

HadamardFactors shared_factors() {
  HadamardFactors f;
  if (!std::filesystem::exists(kFactors)) return f;
  auto st = io::SafetensorsFile::open(kFactors);
  for (auto& [name, v] : st.tensors) {
    std::vector<float> h(static_cast<size_t>(v.numel()));
    to_f32(v, h.data());
    f[std::stoll(name)] = std::move(h);
  }
  return f;
}

TEST(Hadamard, ConstructionsAreHadamard) {
  int built = 0;
  for (int64_t m = 1; m <= 260; ++m) {
    std::string how;
    auto h = construct_hadamard(m, &how);
    if (h.empty()) continue;
    ++built;
    EXPECT_TRUE(is_hadamard_matrix(h.data(), m)) << "order " << m << " (" << how << ")";
  }
  // Sylvester 1..256 (9), Paley I and II give many more.
  EXPECT_GT(built, 40);
  for (int64_t m : {12, 20, 24, 28, 44, 76, 148}) EXPECT_FALSE(construct_hadamard(m).empty()) << m;
  // 172 = 4 * 43: neither Paley construction reaches it (171 and 85 are not prime).
  EXPECT_TRUE(construct_hadamard(172).empty());
  std::vector<float> bad = construct_hadamard(12);
  bad[5] = -bad[5];
  EXPECT_FALSE(is_hadamard_matrix(bad.data(), 12));
}

TEST(Hadamard, SharedFileOrdersAreHadamardAndConstructionsCoverMany) {
  if (!std::filesystem::exists(kFactors)) GTEST_SKIP() << kFactors << " missing";
  auto f = shared_factors();
  ASSERT_GE(f.size(), 60u);
  int constructed = 0;
  for (auto& [m, h] : f) {
    ASSERT_EQ(h.size(), static_cast<size_t>(m * m));
    EXPECT_TRUE(is_hadamard_matrix(h.data(), m)) << "shared order " << m;
    auto c = construct_hadamard(m);
    if (c.empty()) continue;
    ++constructed;
    EXPECT_TRUE(is_hadamard_matrix(c.data(), m)) << "constructed order " << m;
  }
  EXPECT_GT(constructed, 30);
}

void check_order(int64_t n, const HadamardFactors& given, int64_t expect_m) {
  auto h = plan_hadamard(n, given);
  ASSERT_TRUE(h) << "no Hadamard of order " << n;
  EXPECT_EQ(h->m, expect_m) << n;
  EXPECT_EQ(h->m * h->pow2, n);
  std::mt19937_64 rng(n);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const int rows = n > 4096 ? 1 : 3;  // the dense oracle is O(n^2)
  std::vector<float> x(static_cast<size_t>(rows * n));
  for (auto& v : x) v = d(rng);
  x[5] = 40.0f;  // an outlier channel
  std::vector<double> ref(static_cast<size_t>(rows * n));
  for (int r = 0; r < rows; ++r) hadamard_reference(*h, x.data() + r * n, ref.data() + r * n);
  std::vector<float> first;
  for (Isa isa : available_isas()) {
    if (isa > Isa::Avx512) continue;  // the higher tiers run the AVX-512 path
    std::vector<float> y = x;
    hadamard_transform_isa(isa, *h, y.data(), rows);
    double err = 0, norm_x = 0, norm_y = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      err = std::max(err, std::fabs(y[i] - ref[i]));
      norm_x += double(x[i]) * x[i], norm_y += double(y[i]) * y[i];
    }
    EXPECT_LT(err, 1e-4 * std::sqrt(double(n))) << "order " << n << " tier " << isa_name(isa);
    EXPECT_NEAR(norm_y / norm_x, 1.0, 1e-5) << "orthonormal: order " << n;
    if (first.empty())
      first = y;
    else
      EXPECT_EQ(y, first) << "tier " << isa_name(isa) << " differs from generic at order " << n;
    // The transform is orthogonal: applying its transpose (here: the dense reference of H^T) brings x back.
  }
}

TEST(Hadamard, ModelOrdersEqualTheDenseProductOnEveryTier) {
  const HadamardFactors none;
  check_order(8, none, 1);
  check_order(64, none, 1);
  check_order(768, none, 12);     // kjv-brown-6M FFN = 12 * 64
  check_order(896, none, 28);     // Qwen2.5-0.5B hidden = 28 * 32 (Paley II, q = 13)
  check_order(4864, none, 76);    // Qwen2.5-0.5B FFN = 76 * 64 (Paley II, q = 37)
  check_order(14336, none, 28);   // Llama-3-8B FFN = 28 * 512
  check_order(18944, none, 148);  // Qwen2.5-7B FFN = 148 * 128 (Paley II, q = 73)
  EXPECT_FALSE(plan_hadamard(11008)) << "172 needs a factor file";
  EXPECT_FALSE(plan_hadamard(172));
  if (!std::filesystem::exists(kFactors)) GTEST_SKIP() << kFactors << " missing";
  auto f = shared_factors();
  check_order(11008, f, 172);  // Llama-2-7B FFN = 172 * 64, from the shared file
  check_order(172, f, 172);    // stories260K FFN
  EXPECT_EQ(plan_hadamard(11008, f)->construction, "given");
}

TEST(Hadamard, GivenFactorsAreChecked) {
  auto h12 = construct_hadamard(12);
  EXPECT_EQ(hadamard_with_factor(12 * 16, h12, "given").pow2, 16);
  EXPECT_THROW(hadamard_with_factor(12 * 3, h12, "given"), Error);  // 3 is not a power of two
  auto bad = h12;
  bad[0] = 0.5f;
  EXPECT_THROW(hadamard_with_factor(12, bad, "given"), Error);
}

TEST(Hadamard, FwhtIsItsOwnInverse) {
  std::vector<float> x(256), y;
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * i) + (i == 7 ? 9.0f : 0.0f);
  y = x;
  fwht_normalized(y.data(), 256);
  fwht_normalized(y.data(), 256);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-5);
}

}  // namespace
}  // namespace lowbit
