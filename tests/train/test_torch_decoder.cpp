// The torch decoder of the train rung (train/torch_decoder.h): its forward equals lowbit's Decoder, its
// gradients with respect to R1 / R2 equal central finite differences (double precision), and the
// straight-through fake quantizers compute exactly lowbit's quantizers forward and pass gradients backward.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "kernels/matmul.h"
#include "kv/kv_cache.h"
#include "kv/kv_paged.h"
#include "model/model.h"
#include "tests/quant/quant_test_util.h"
#include "train/torch_decoder.h"

namespace fs = std::filesystem;

namespace lowbit::train {
namespace {

const std::string kShared = LOWBIT_SHARED_DIR;
const std::string kStories = kShared + "/models/stories260K/stories260K.bin";
const std::string kKjv = kShared + "/models/kjv-brown-6M/model.bin";

torch::Tensor token_tensor(const std::vector<int32_t>& t, int64_t B) {
  std::vector<int64_t> ids(t.begin(), t.end());
  return torch::from_blob(ids.data(), {B, static_cast<int64_t>(t.size()) / B}, torch::kLong).clone();
}

// A Haar-random orthogonal matrix of order n (QR of a Gaussian) in dtype dt.
torch::Tensor random_orthogonal(int64_t n, uint64_t seed, torch::ScalarType dt) {
  torch::manual_seed(seed);
  const auto qr = torch::linalg_qr(torch::randn({n, n}, torch::kDouble));
  return std::get<0>(qr).to(dt);
}

void expect_matches_decoder(const std::string& path) {
  if (!fs::exists(path)) GTEST_SKIP() << path << " missing";
  auto m = load_model(path, {DenseMode::F32, {}});
  const auto toks = quant::testing::test_tokens(m->config.vocab_size, 48, 5);
  const auto ref = quant::testing::logits_of(*m, toks);
  const TorchModel tm = torch_model(*m, torch::kFloat);
  const torch::Tensor got = forward_logits(tm, token_tensor(toks, 1), {}, {}).contiguous();
  ASSERT_EQ(got.numel(), static_cast<int64_t>(ref.size()));
  double mx = 0, diff = 0;
  const float* g = got.data_ptr<float>();
  for (size_t i = 0; i < ref.size(); ++i) {
    mx = std::max(mx, static_cast<double>(std::fabs(ref[i])));
    diff = std::max(diff, static_cast<double>(std::fabs(ref[i] - g[i])));
  }
  EXPECT_LT(diff, 1e-4 * mx) << path << ": torch forward vs lowbit Decoder, max logit " << mx;
  // The gammas as tensors of their own (scale tuning trains them) compute the same function.
  const TorchModel unfolded = torch_model(*m, torch::kFloat, nullptr, /*fold_norms=*/false);
  ASSERT_TRUE(unfolded.final_gamma.defined() && unfolded.layers[0].attn_gamma.defined());
  const torch::Tensor u = forward_logits(unfolded, token_tensor(toks, 1), {}, {}).contiguous();
  EXPECT_LT((u - got).abs().max().item<double>(), 1e-4 * mx) << path << ": unfolded gammas";
  // And the same model under random R1 / R2 (x <- R x): the rotation is fused into the weights, not applied
  // to the output, so the logits must not move beyond float rounding.
  const torch::Tensor r1 = random_orthogonal(m->config.dim, 1, torch::kFloat);
  const torch::Tensor r2 = random_orthogonal(m->config.head_dim, 2, torch::kFloat);
  const torch::Tensor rot = forward_logits(tm, token_tensor(toks, 1), r1, r2).contiguous();
  EXPECT_LT((rot - got).abs().max().item<double>(), 2e-4 * mx) << path << ": rotated torch forward";
}

TEST(TorchDecoder, EqualsLowbitDecoderOnStories260K) {
  expect_matches_decoder(kStories);
}
TEST(TorchDecoder, EqualsLowbitDecoderOnKjvBrown6M) {
  expect_matches_decoder(kKjv);
}

// dLoss/dR1 and dLoss/dR2 (autograd, double precision, fake quantization off) against central differences
// along random directions E: (L(R + hE) - L(R - hE)) / 2h = <G, E> + O(h^2).
TEST(TorchDecoder, RotationGradientsEqualCentralDifferences) {
  if (!fs::exists(kStories)) GTEST_SKIP() << kStories << " missing";
  auto m = load_model(kStories, {DenseMode::F32, {}});
  // Norm gammas are folded into the torch weights, so R1 really interacts with them.
  const TorchModel tm = torch_model(*m, torch::kDouble);
  const torch::Tensor toks = token_tensor(quant::testing::test_tokens(m->config.vocab_size, 2 * 24, 9), 2);
  torch::Tensor r1 = random_orthogonal(m->config.dim, 3, torch::kDouble).requires_grad_(true);
  torch::Tensor r2 = random_orthogonal(m->config.head_dim, 4, torch::kDouble).requires_grad_(true);
  next_token_loss(forward_logits(tm, toks, r1, r2), toks).backward();
  auto loss_at = [&](const torch::Tensor& a, const torch::Tensor& b) {
    torch::NoGradGuard ng;
    return next_token_loss(forward_logits(tm, toks, a, b), toks).item<double>();
  };
  const double h = 1e-5;
  for (int which = 0; which < 2; ++which) {
    const torch::Tensor& r = which == 0 ? r1 : r2;
    const torch::Tensor g = r.grad();
    ASSERT_GT(g.abs().max().item<double>(), 1e-6) << "a vanishing gradient checks nothing";
    for (int dir = 0; dir < 3; ++dir) {
      torch::manual_seed(100 + dir);
      torch::Tensor e = torch::randn_like(r.detach());
      e = e / e.norm();
      const torch::Tensor rp = r.detach() + h * e, rm = r.detach() - h * e;
      const double fd = which == 0 ? (loss_at(rp, r2.detach()) - loss_at(rm, r2.detach())) / (2 * h)
                                   : (loss_at(r1.detach(), rp) - loss_at(r1.detach(), rm)) / (2 * h);
      const double an = (g * e).sum().item<double>();
      EXPECT_NEAR(an, fd, 1e-6 * std::max(1.0, std::fabs(fd)))
          << (which ? "R2" : "R1") << " direction " << dir;
    }
  }
}

// Token rows with an outlier channel, so clipping matters.
torch::Tensor outlier_rows(int64_t T, int64_t n, uint64_t seed) {
  torch::manual_seed(seed);
  torch::Tensor x = torch::randn({T, n}, torch::kFloat);
  x.select(1, 3).mul_(20.0f);
  return x;
}

TEST(FakeQuantSte, ActivationsAreLowbitsInt4CodesAndGradientsPassInsideTheClipRange) {
  const int64_t T = 9, n = 96;
  for (float clip : {1.0f, 0.9f, 0.6f}) {
    const torch::Tensor x = outlier_rows(T, n, 7).requires_grad_(true);
    const torch::Tensor y = fake_quant_act(x, FormatId::INT4, clip);
    const torch::Tensor up = torch::randn({T, n});
    y.backward(up);
    const torch::Tensor xc = x.detach().contiguous();
    std::vector<int8_t> codes(static_cast<size_t>(n));
    int64_t outside = 0;
    for (int64_t t = 0; t < T; ++t) {
      const float* xt = xc.data_ptr<float>() + t * n;
      float s = 0;
      // Forward: the INT4 route's definition (kernels/matmul.h), codes times the per-token scale.
      quantize_activation_int4(xt, n, clip, codes.data(), &s);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(y[t][i].item<float>(), static_cast<float>(codes[static_cast<size_t>(i)]) * s)
            << "clip " << clip << " token " << t << " channel " << i;
      // Backward: straight through where |x| <= clip * absmax(row), zero where the value saturated, plus the
      // scale's path at the row's largest value: (clip / 7) sign(x_m) sum_i g_i (c_i - [i inside] x_i / s).
      int64_t m = 0;
      for (int64_t i = 1; i < n; ++i)
        if (std::fabs(xt[i]) > std::fabs(xt[m])) m = i;
      const float amax = std::fabs(xt[m]);
      double ds = 0;
      for (int64_t i = 0; i < n; ++i) {
        const bool in = std::fabs(xt[i]) <= amax * clip;
        outside += !in;
        ds += up[t][i].item<double>() * (codes[static_cast<size_t>(i)] - (in ? xt[i] / s : 0.0));
      }
      for (int64_t i = 0; i < n; ++i) {
        const bool in = std::fabs(xt[i]) <= amax * clip;
        double expect = in ? up[t][i].item<double>() : 0.0;
        if (i == m) expect += clip / 7.0 * (xt[m] > 0 ? 1 : -1) * ds;
        EXPECT_NEAR(x.grad()[t][i].item<double>(), expect, 1e-4 * (1 + std::fabs(expect)))
            << "clip " << clip << " token " << t << " channel " << i << (i == m ? " (the largest)" : "");
      }
    }
    if (clip < 1.0f) {
      EXPECT_GT(outside, 0) << "the clip range must cut the outlier channel";
    }
  }
}

// NVFP4 activations: the forward is the route's definition bit for bit (a partial last block included); the
// gradient is that of a surrogate built from torch operations, each block's values passed straight through
// where E2M1 does not saturate plus the block scale S = bmax / 6 (or clip * absmax / 6 where the E4M3 scale
// saturates, clip < 1) times the fixed c - [inside] x / S: torch's max sends the scale's gradient to the
// largest value, independently of fake_quant_act_nvfp4_grad's loop. Under act_scale=mse the same with the
// chosen S as a fixed multiple of the value it follows (the token's largest at E4M3's top code 0x7E, else
// the block's).
TEST(FakeQuantSte, Nvfp4ActivationsAreLowbitsCodesAndGradientsFollowTheBlockScales) {
  const int64_t T = 7, n = 104, nb = (n + 15) / 16;  // six blocks of 16 and one of 8
  for (ActScale rule : {ActScale::Amax, ActScale::Mse})
    for (float clip : {1.0f, 0.7f}) {
      const torch::Tensor x = outlier_rows(T, n, 9).requires_grad_(true);
      const torch::Tensor y = fake_quant_act(x, FormatId::NVFP4, clip, rule);
      const torch::Tensor up = torch::randn({T, n});
      y.backward(up);
      const torch::Tensor xd = x.detach().contiguous();
      std::vector<uint8_t> codes(static_cast<size_t>(n)), bs(static_cast<size_t>(nb));
      std::vector<float> ref(static_cast<size_t>(n));
      int64_t saturated = 0, moved = 0;
      for (int64_t t = 0; t < T; ++t) {
        const float* xt = xd.data_ptr<float>() + t * n;
        float g = 0;
        quantize_activation_nvfp4(xt, n, clip, rule, codes.data(), bs.data(), &g);
        dequantize_activation_nvfp4(codes.data(), bs.data(), g, n, ref.data());
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(y[t][i].item<float>(), ref[static_cast<size_t>(i)])
              << "clip " << clip << " at " << t << ", " << i;
        const torch::Tensor xr = xd[t].clone().requires_grad_(true);
        const torch::Tensor amax = xr.abs().max();
        std::vector<torch::Tensor> parts;
        for (int64_t b = 0; b < nb; ++b) {
          const int64_t b0 = b * 16, len = std::min<int64_t>(16, n - b0);
          const torch::Tensor seg = xr.narrow(0, b0, len);
          float Sb = 0;
          {
            std::vector<float> one(static_cast<size_t>(len));
            // S_b = e4m3(block scale) * g: the dequantized value of an E2M1 code of 1.0 (0x2) in this block.
            std::vector<uint8_t> unit(static_cast<size_t>(len), 0x2);
            dequantize_activation_nvfp4(unit.data(), bs.data() + b, g, len, one.data());
            Sb = one[0];
          }
          ASSERT_GT(Sb, 0.0f);
          std::vector<float> cv(static_cast<size_t>(len));
          for (int64_t i = 0; i < len; ++i)
            cv[static_cast<size_t>(i)] = ref[static_cast<size_t>(b0 + i)] / Sb;
          const torch::Tensor c = torch::from_blob(cv.data(), {len}, torch::kFloat).clone();
          const torch::Tensor inside = (seg.detach().abs() <= 6.0f * Sb).to(torch::kFloat);
          const torch::Tensor bmax = seg.abs().max();
          torch::Tensor St;
          if (rule == ActScale::Amax) {
            const bool sat = bmax.item<float>() > clip * amax.item<float>();
            saturated += sat;
            St = sat ? amax * (clip / 6.0f) : bmax / 6.0f;
          } else {
            const bool top = bs[static_cast<size_t>(b)] == 0x7E;
            const torch::Tensor follows = top ? amax : bmax;
            St = follows * (Sb / follows.item<float>());
            moved += std::fabs(Sb * 6.0f - bmax.item<float>()) > 0.1f * bmax.item<float>();
          }
          parts.push_back(inside * seg + St * (c - inside * seg.detach() / Sb));
        }
        (up[t] * torch::cat(parts)).sum().backward();
        for (int64_t i = 0; i < n; ++i)
          EXPECT_NEAR(x.grad()[t][i].item<double>(), xr.grad()[i].item<double>(),
                      1e-4 * (1 + std::fabs(xr.grad()[i].item<double>())))
              << "clip " << clip << " token " << t << " channel " << i;
      }
      if (rule == ActScale::Mse) {
        EXPECT_GT(moved, 0) << "the search must move some block scales away from bmax / 6";
      } else if (clip < 1.0f) {
        EXPECT_GT(saturated, 0) << "some block scales must saturate";
      } else {
        EXPECT_EQ(saturated, 0);
      }
    }
}

// K and V rows of one sequence through fake_quant_kv equal what the paged cache returns after storing them
// (int4 per-channel keys in blocks of 16 with the F16-staged partial block, int4 per-token values, R3's
// Hadamard with +rot), bit for bit; the gradient passes unchanged.
TEST(FakeQuantSte, KvRowsAreWhatThePagedCacheStoresAndGradientsPassThrough) {
  if (!fs::exists(kKjv)) GTEST_SKIP() << kKjv << " missing";
  auto m = load_model(kKjv, {DenseMode::F32, {}});
  const ModelConfig& c = m->config;
  const int64_t S = 40, D = c.kv_dim();  // two sealed blocks and 8 staged tokens
  for (const char* spec : {"int4+rot", "int4", "int8+rot", "int4:pertoken"}) {
    const KvFakeQuant q = make_kv_fake_quant(spec, c);
    ASSERT_TRUE(q.enabled());
    const torch::Tensor k = outlier_rows(S, D, 11), v = outlier_rows(S, D, 12);
    KvCache cache(c, 1, S, parse_kv_spec(spec));
    std::vector<int32_t> seqs(S, 0);
    std::vector<int64_t> pos(S);
    for (int64_t i = 0; i < S; ++i) pos[i] = i;
    cache.store_rows(0, S, seqs.data(), pos.data(), k.data_ptr<float>(), v.data_ptr<float>());
    std::vector<float> ck, cv;
    ASSERT_NE(cache.paged_cache(), nullptr);
    cache.paged_cache()->read_rows(0, 0, &ck, &cv);
    const torch::Tensor kin = k.view({1, S, D}).clone().requires_grad_(true);
    const torch::Tensor fk = fake_quant_kv(kin, q, true).contiguous(),
                        fv = fake_quant_kv(v.view({1, S, D}), q, false).contiguous();
    for (int64_t i = 0; i < S * D; ++i) {
      ASSERT_EQ(fk.data_ptr<float>()[i], ck[static_cast<size_t>(i)]) << spec << " K element " << i;
      ASSERT_EQ(fv.data_ptr<float>()[i], cv[static_cast<size_t>(i)]) << spec << " V element " << i;
    }
    EXPECT_GT((fk - k.view({1, S, D})).abs().max().item<double>(), 1e-3) << spec << ": nothing was quantized";
    const torch::Tensor up = torch::randn({1, S, D});
    fk.backward(up);
    EXPECT_TRUE(torch::equal(kin.grad(), up)) << spec;
  }
}

}  // namespace
}  // namespace lowbit::train
