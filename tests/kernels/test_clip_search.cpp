// The INT clip search's batched error sums (tensor/clip_search.h, kernels/clip_search.h): the AVX2 form
// against the scalar reference, and the hook through which quantize_matrix reaches it.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "formats/scheme.h"
#include "kernels/clip_search.h"
#include "kernels/dispatch.h"
#include "tensor/clip_search.h"
#include "tensor/qtensor.h"

using namespace lowbit;

namespace {
std::vector<float> heavy_tailed(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  for (size_t i = 0; i < v.size(); i += 97) v[i] *= 20.0f;  // ~1% outliers
  return v;
}
}  // namespace

// The AVX2 clip-search sums (8 candidates per vector) against the scalar reference, bit for bit: the search
// picks the first smallest error, so any rounding difference could change a chosen scale.
TEST(ClipSearch, Avx2SumsEqualTheScalarReferenceBitForBit) {
  if (!cpu_features_hw().avx2) GTEST_SKIP() << "this CPU has no AVX2; the scalar form is the only one used";
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0.5f, 2.0f);
  for (int64_t n : {0, 1, 33, 128}) {
    auto x = heavy_tailed(n, static_cast<uint32_t>(n) + 3);
    std::vector<float> w(static_cast<size_t>(n));
    for (auto& v : w) v = u(rng);
    for (int bits : {2, 3, 4, 8}) {
      const int umax = (1 << bits) - 1;
      for (int K : {1, 7, 8, 20, 21}) {
        std::vector<float> div(K), scale(K), zero(K);
        for (int k = 0; k < K; ++k) {
          // Clip ratios from 1 down to 0.3 of the range (the smaller ones clamp the outliers), half of the
          // candidates asymmetric with their own zero point, some with a pre-scale (scale != div).
          div[k] =
              8.0f * (1.0f - 0.7f * static_cast<float>(k) / static_cast<float>(K)) / static_cast<float>(umax);
          zero[k] = static_cast<float>(k % 2 ? (umax + 1) / 2 : k % (umax + 1));
          scale[k] = k % 3 ? div[k] : div[k] / 3.0f;
        }
        // Values at rounding ties of each candidate's grid ((j + 1/2) div), where x / div and x * (1 / div)
        // round to different codes.
        std::vector<float> xt = x, wt = w;
        for (int k = 0; k < K; ++k)
          for (int j = -6; j < 6; ++j) {
            xt.push_back((static_cast<float>(j) + 0.5f) * div[k] *
                         (1.0f + 1e-7f * static_cast<float>(j % 3)));
            wt.push_back(u(rng));
          }
        const int64_t nt = static_cast<int64_t>(xt.size());
        for (const float* wp : {static_cast<const float*>(nullptr), static_cast<const float*>(wt.data())}) {
          std::vector<double> ref(K, -1.0), vec(K, -2.0);
          int_cells_error_scalar(xt.data(), wp, nt, div.data(), scale.data(), zero.data(), K,
                                 static_cast<float>(umax), ref.data());
          int_cells_error_avx2(xt.data(), wp, nt, div.data(), scale.data(), zero.data(), K,
                               static_cast<float>(umax), vec.data());
          for (int k = 0; k < K; ++k)
            ASSERT_EQ(std::memcmp(&ref[k], &vec[k], sizeof(double)), 0)
                << "n " << n << " bits " << bits << " K " << K << " k " << k << (wp ? " weighted" : "")
                << ": " << ref[k] << " vs " << vec[k];
        }
      }
    }
  }
}

// Linking the kernels installs the tiered form; quantize_matrix's MSE search then gives the same bytes on
// every tier (the scalar reference on Generic).
TEST(ClipSearch, QuantizeMatrixGivesTheSameBytesOnEveryTier) {
  EXPECT_EQ(installed_int_cells_error(), &int_cells_error_tiered);
  const int64_t R = 24, C = 320;
  auto w = heavy_tailed(R * C, 11);
  std::vector<float> imp(static_cast<size_t>(C));
  for (int64_t j = 0; j < C; ++j) imp[static_cast<size_t>(j)] = 0.5f + static_cast<float>(j % 7);
  const Isa saved = kernel_isa();
  for (const char* name : {"int4:g128:sym:f16:mse", "int3:g64:asym:f16:mse", "int8:channel:sym:f32:mse",
                           "int2:g32:asym:bf16:mse"}) {
    const QuantScheme s = parse_scheme(name);
    for (const float* im : {static_cast<const float*>(nullptr), static_cast<const float*>(imp.data())}) {
      std::vector<QuantizedMatrix> got;
      for (Isa isa : available_isas()) {
        set_kernel_isa(isa);
        got.push_back(quantize_matrix(w.data(), R, C, s, im));
      }
      for (size_t i = 1; i < got.size(); ++i) {
        EXPECT_EQ(got[i].codes, got[0].codes) << name << " on " << isa_name(available_isas()[i]);
        EXPECT_EQ(got[i].scales, got[0].scales) << name << " on " << isa_name(available_isas()[i]);
        EXPECT_EQ(got[i].zeros, got[0].zeros) << name << " on " << isa_name(available_isas()[i]);
      }
    }
  }
  set_kernel_isa(saved);
}
