// The NVFP4 activation route's block-scale rule (ActScale, recipe key act_scale): Amax is NVIDIA's
// e4m3(bmax / 6 / g); Mse picks, among the E4M3 codes c6 - 2 .. c4, the one with the least squared error.
//
//  - A hand-computed block: sixteen 5s get 0.8125 under Amax (5 / 0.8125 rounds to 6: every value 4.875)
//    and 1.25 under Mse (5 / 1.25 = 4, exact).
//  - On random blocks (Gaussian, heavy-tailed, ragged, clipped) the chosen code is a candidate and no
//    candidate has a smaller error, measured here in double by a loop of its own; Mse lowers the token's
//    squared error against Amax on average.
//  - The AVX2 quantizer equals the scalar definition bit for bit under Mse (NaN, infinities, zeros, ragged
//    lengths, clips), with its AVX2 and its AVX-512 search, and so do the searches' errors themselves.
//  - matmul with Mse equals the oracle (the route's x_hat, double sums) on every ISA tier for integer-kernel,
//    BF16-kernel and emulated weights, differs from Amax's output, and the kernel name says "_mse".
//  - The recipe: act_scale=mse and {"scale": "mse"} parse and round-trip; it is refused without act=nvfp4
//    and for an unknown rule, with a [quant] message.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "formats/minifloat.h"
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

using testing_util::usage_message;

// Squared error of block x[n] at step d, in double: the test's own E2M1 rounding (nearest grid value, ties
// to the even code) and sum.
double block_error(const float* x, int64_t n, double d) {
  static const double grid[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  double e2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) continue;
    const double a = std::fabs(x[i]) / d;
    int best = 0;
    for (int k = 1; k < 8; ++k) {
      const double dk = std::fabs(a - grid[k]), db = std::fabs(a - grid[best]);
      if (dk < db || (dk == db && k % 2 == 0)) best = k;
    }
    const double e = std::fabs(x[i]) - grid[best] * d;
    e2 += e * e;
  }
  return e2;
}

std::vector<float> token(std::mt19937& rng, int64_t n, int kind) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::student_t_distribution<float> td(3.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = kind == 0 ? nd(rng) : td(rng);
  return x;
}

// matmul(m, x) against the oracle: x through the route (quantize_activations), the rows as the kernel
// multiplies them, double sums; returns the products.
std::vector<float> matmul_against_oracle(const WeightMatrix& m, const std::vector<float>& x, int64_t T,
                                         const std::string& what) {
  const int64_t rows = m.rows, cols = m.cols;
  std::vector<float> xq(x.size()), row(static_cast<size_t>(cols)), y(static_cast<size_t>(T * rows));
  quantize_activations(m, x.data(), T, xq.data());
  matmul(m, x.data(), T, y.data());
  for (int64_t r = 0; r < rows; ++r) {
    matmul_weight_row(m, T, r, row.data());
    for (int64_t t = 0; t < T; ++t) {
      double ref = 0, mag = 0;
      for (int64_t c = 0; c < cols; ++c) {
        ref += double{row[c]} * xq[t * cols + c];
        mag += std::fabs(double{row[c]} * xq[t * cols + c]);
      }
      EXPECT_NEAR(y[t * rows + r], ref, 2e-5 * mag + 1e-6) << what << " row " << r << " token " << t;
    }
  }
  return y;
}

TEST(Nvfp4ActScale, HandComputedBlock) {
  // Block 0 holds 2688 = 6 * 448, so g = 1 and its scale is 448 under both rules; block 1 is sixteen 5s.
  std::vector<float> x(32, 5.0f);
  x[0] = 2688.0f;
  for (int i = 1; i < 16; ++i) x[static_cast<size_t>(i)] = 0.0f;
  std::vector<uint8_t> codes(32), sc(2);
  float g = 0;
  quantize_activation_nvfp4(x.data(), 32, 1.0f, ActScale::Amax, codes.data(), sc.data(), &g);
  EXPECT_EQ(g, 1.0f);
  EXPECT_EQ(sc[1], 0x35);  // 0.8125 = e4m3(5 / 6)
  std::vector<float> d(32);
  dequantize_activation_nvfp4(codes.data(), sc.data(), g, 32, d.data());
  EXPECT_EQ(d[16], 4.875f);
  quantize_activation_nvfp4(x.data(), 32, 1.0f, ActScale::Mse, codes.data(), sc.data(), &g);
  EXPECT_EQ(sc[0], 0x7E);
  EXPECT_EQ(sc[1], 0x3A);  // 1.25 = e4m3(5 / 4)
  dequantize_activation_nvfp4(codes.data(), sc.data(), g, 32, d.data());
  for (int i = 16; i < 32; ++i) EXPECT_EQ(d[static_cast<size_t>(i)], 5.0f) << i;
}

TEST(Nvfp4ActScale, ChosenScaleHasTheLeastErrorOfTheCandidates) {
  std::mt19937 rng(11);
  double err_amax = 0, err_mse = 0;
  int changed = 0, blocks = 0;
  for (int kind = 0; kind < 2; ++kind)
    for (int64_t n : {16, 40, 896})
      for (float clip : {1.0f, 0.8f})
        for (int rep = 0; rep < 20; ++rep) {
          const std::vector<float> x = token(rng, n, kind);
          const int64_t nb = (n + 15) / 16;
          std::vector<uint8_t> ca(static_cast<size_t>(n)), cm(ca), sa(static_cast<size_t>(nb)), sm(sa);
          float ga = 0, gm = 0;
          quantize_activation_nvfp4(x.data(), n, clip, ActScale::Amax, ca.data(), sa.data(), &ga);
          quantize_activation_nvfp4(x.data(), n, clip, ActScale::Mse, cm.data(), sm.data(), &gm);
          ASSERT_EQ(ga, gm);
          for (int64_t b = 0; b < nb; ++b) {
            const int64_t b0 = b * 16, len = std::min<int64_t>(16, n - b0);
            float bmax = 0;
            for (int64_t i = b0; i < b0 + len; ++i) bmax = std::fmax(bmax, std::fabs(x[i]));
            const int c6 = f32_to_fp8_e4m3fn(bmax / 6.0f / gm, true),
                      c4 = f32_to_fp8_e4m3fn(bmax / 4.0f / gm, true), got = sm[b];
            ASSERT_EQ(sa[b], c6);
            ASSERT_GE(got, std::max(1, c6 - 2)) << "block " << b;
            ASSERT_LE(got, std::min(0x7E, c4)) << "block " << b;
            const double e = block_error(x.data() + b0, len, double{fp8_e4m3fn_to_f32(got)} * gm);
            for (int c = std::max(1, c6 - 2); c <= std::min(0x7E, c4); ++c) {
              const double ec =
                  block_error(x.data() + b0, len, double{fp8_e4m3fn_to_f32(static_cast<uint8_t>(c))} * gm);
              EXPECT_LE(e, ec * (1 + 1e-5) + 1e-30) << "n " << n << " block " << b << " code " << c;
            }
            err_amax += block_error(x.data() + b0, len, double{fp8_e4m3fn_to_f32(sa[b])} * ga);
            err_mse += e;
            changed += got != c6;
            ++blocks;
          }
        }
  EXPECT_GT(changed, blocks / 4) << "the search must move many blocks";
  EXPECT_LT(err_mse, 0.9 * err_amax) << "Gaussian / t3 blocks: the search lowers the squared error by 10 %+";
}

TEST(Nvfp4ActScale, Avx2QuantizerIsTheDefinition) {
  if (best_isa() < Isa::Avx2) GTEST_SKIP() << "no AVX2 here";
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::mt19937 rng(5);
  std::vector<std::vector<float>> inputs;
  for (int64_t n : {1, 15, 16, 17, 40, 896, 4864}) {
    for (int kind = 0; kind < 2; ++kind) inputs.push_back(token(rng, n, kind));
    std::vector<float> special = token(rng, n, 0);
    const float sp[] = {nan, inf, -inf, 0.0f, -0.0f, 1e-30f, -1e30f};
    for (int64_t i = 0; i < n; i += 5) special[static_cast<size_t>(i)] = sp[(i / 5) % 7];
    inputs.push_back(special);
    inputs.push_back(std::vector<float>(static_cast<size_t>(n), 5.0f));  // ties between candidate errors
  }
  // The AVX2 quantizer takes the AVX-512 search on the AVX-512 tiers: both.
  std::vector<Isa> tiers{Isa::Avx2};
  if (best_isa() >= Isa::Avx512) tiers.push_back(Isa::Avx512);
  for (Isa tier : tiers)
    for (const auto& x : inputs)
      for (float clip : {1.0f, 0.9f}) {
        set_kernel_isa(tier);
        const int64_t n = static_cast<int64_t>(x.size()), nb = (n + 15) / 16;
        std::vector<uint8_t> ca(x.size(), 99), cb(x.size(), 98), sa(static_cast<size_t>(nb), 97),
            sb(static_cast<size_t>(nb), 96);
        float ga = -1.0f, gb = -2.0f;
        quantize_activation_nvfp4(x.data(), n, clip, ActScale::Mse, ca.data(), sa.data(), &ga);
        kern::quantize_activation_nvfp4_avx2(x.data(), n, clip, ActScale::Mse, cb.data(), sb.data(), &gb);
        ASSERT_EQ(std::isnan(ga), std::isnan(gb));
        if (!std::isnan(ga)) {
          ASSERT_EQ(ga, gb);
        }
        ASSERT_EQ(sa, sb) << "n " << n << " clip " << clip;
        ASSERT_EQ(ca, cb) << "n " << n << " clip " << clip;
        set_kernel_isa(best_isa());
      }
  // The vectorized block error itself, bit for bit (so a different summation order cannot hide behind
  // the rare near-ties where it would flip a choice).
  const float steps[9] = {0.05f, 0.3f, 1.0f, 0.17f, 0.4f, 0.21f, 0.6f, 0.25f, 2.0f};
  for (int rep = 0; rep < 218; ++rep) {
    std::vector<float> x = token(rng, 16, rep % 2);
    if (rep >= 200)  // every E2M1 rounding tie at one of the steps (x * (1 / d) and x / d round them apart)
      for (int i = 0; i < 16; ++i)
        x[static_cast<size_t>(i)] =
            (i % 2 ? -1.0f : 1.0f) * steps[(rep - 200) % 9] *
            std::array<float, 8>{0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f}[i % 8];
    for (int nd : {1, 5, 8, 9}) {
      float a[9], b[9], c[9];
      nvfp4_block_errors(x.data(), 16, steps, nd, a);
      kern::nvfp4_block_errors_avx2(x.data(), 16, steps, nd, b);
      ASSERT_EQ(std::memcmp(a, b, sizeof(float) * static_cast<size_t>(nd)), 0) << "nd " << nd;
      if (best_isa() < Isa::Avx512) continue;
      kern::nvfp4_block_errors_avx512(x.data(), 16, steps, nd, c);
      ASSERT_EQ(std::memcmp(a, c, sizeof(float) * static_cast<size_t>(nd)), 0) << "nd " << nd << " avx512";
    }
  }
}

TEST(Nvfp4ActScale, MatmulEqualsTheOracleOnEveryTier) {
  const int64_t rows = 24, cols = 320;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (auto& v : w) v = nd(rng);
  for (const char* scheme : {"int4:g64:sym", "nf4:g64", "q4_0"}) {
    const QuantScheme s = parse_scheme(scheme);
    WeightMatrix m =
        make_quant_weight(std::make_shared<QuantizedMatrix>(quantize_matrix(w.data(), rows, cols, s)));
    m.act_format = FormatId::NVFP4;
    for (int64_t T : {1, 5, 17}) {
      std::vector<float> x;
      for (int64_t t = 0; t < T; ++t) {
        const std::vector<float> xt = token(rng, cols, static_cast<int>(t % 2));
        x.insert(x.end(), xt.begin(), xt.end());
      }
      for (Isa isa : available_isas()) {
        set_kernel_isa(isa);
        std::vector<float> y[2];
        for (ActScale rule : {ActScale::Amax, ActScale::Mse}) {
          m.act_scale = rule;
          const std::string name = matmul_kernel_name(m);
          EXPECT_EQ(name.find("+a_nvfp4_mse") != std::string::npos, rule == ActScale::Mse) << name;
          y[static_cast<int>(rule)] = matmul_against_oracle(m, x, T, name + " T " + std::to_string(T));
        }
        EXPECT_NE(y[0], y[1]) << scheme << " T " << T << ": the rule must change the products";
      }
      set_kernel_isa(best_isa());
    }
  }
}

// The integer kernels keep the last input's codes per thread (q / k / v share an input): a second weight on
// the same input, the same input changed in place, and another rule each give the oracle's products.
TEST(Nvfp4ActScale, KeptCodesFollowTheInput) {
  const int64_t cols = 256, T = 3;
  std::mt19937 rng(8);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<WeightMatrix> ws;
  for (int64_t rows : {16, 40}) {
    std::vector<float> w(static_cast<size_t>(rows * cols));
    for (auto& v : w) v = nd(rng);
    ws.push_back(make_quant_weight(std::make_shared<QuantizedMatrix>(
        quantize_matrix(w.data(), rows, cols, parse_scheme("int4:g64:sym")))));
    ws.back().act_format = FormatId::NVFP4;
  }
  std::vector<float> x;
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<float> xt = token(rng, cols, 1);
    x.insert(x.end(), xt.begin(), xt.end());
  }
  for (Isa isa : available_isas()) {
    set_kernel_isa(isa);
    for (int step = 0; step < 6; ++step) {
      WeightMatrix& m = ws[static_cast<size_t>(step % 2)];
      m.act_scale = step >= 4 ? ActScale::Mse : ActScale::Amax;
      if (step == 2) x[5] *= -3.0f;  // the same buffer, new content
      matmul_against_oracle(m, x, T, matmul_kernel_name(m) + " step " + std::to_string(step));
    }
  }
  set_kernel_isa(best_isa());
}

TEST(Nvfp4ActScale, RecipeKeyJsonAndRefusals) {
  using quant::parse_recipe_arg;
  ModelConfig c;
  c.dim = 64, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 4, c.head_dim = 16, c.ffn_dim = 172;
  c.vocab_size = 100;
  quant::Recipe r = parse_recipe_arg("W4A16,group=32,act=nvfp4,act_scale=mse");
  EXPECT_EQ(r.act.scale, ActScale::Mse);
  std::vector<std::string> warn;
  for (const auto& p : quant::plan_recipe(r, c, &warn))
    if (p.quantize && p.name != "tok_embed") {
      EXPECT_EQ(p.act.scale, ActScale::Mse) << p.name;
    }
  const nlohmann::json j = r.to_json();
  EXPECT_EQ(j["activations"]["scale"], "mse");
  EXPECT_EQ(quant::recipe_from_json(j).to_json(), j);
  EXPECT_EQ(parse_recipe_arg("W4A16,group=32,act=nvfp4").to_json()["activations"].contains("scale"), false);
  std::string msg =
      usage_message([&] { quant::plan_recipe(parse_recipe_arg("W4A8,act_scale=mse"), c, &warn); });
  EXPECT_EQ(msg.rfind("[quant] ", 0), 0u) << msg;
  EXPECT_NE(msg.find("act=nvfp4"), std::string::npos) << msg;
  msg = usage_message([] { parse_recipe_arg("W4A16,act=nvfp4,act_scale=best"); });
  EXPECT_EQ(msg.rfind("[quant] ", 0), 0u) << msg;
  EXPECT_NE(msg.find("'best'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mse"), std::string::npos) << msg;
}

}  // namespace
}  // namespace lowbit
