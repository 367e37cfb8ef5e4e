// GPTQ's float target (gptq.target = float): the least-squares fit of fit_float_target, the calibration
// stream's float reference and activation route (SiteStats::cross), the recipe key and the quantizer end to
// end.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "model/decoder.h"
#include "quant/calibration.h"
#include "quant/gptq.h"
#include "quant/quantizer.h"
#include "quant/recipe.h"
#include "tests/quant/quant_test_util.h"

namespace lowbit::quant {
namespace {

using testing::make_random_model;
using testing::randn;
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// sum over tokens of ||W x_t - V x~_t||^2 for row-major W, V [rows, cols] and X, X~ [T, cols].
double float_target_error(const std::vector<float>& w, const std::vector<float>& v, int64_t rows,
                          int64_t cols, const Eigen::MatrixXf& X, const Eigen::MatrixXf& Xq) {
  Eigen::Map<const RowMat> W(w.data(), rows, cols), V(v.data(), rows, cols);
  const Eigen::MatrixXd d =
      X.cast<double>() * W.transpose().cast<double>() - Xq.cast<double>() * V.transpose().cast<double>();
  return d.squaredNorm();
}

// Float inputs X (correlated, a few loud channels) and the inputs a quantized model would give instead:
// X~ = X (I + E) + noise, a systematic error the fit can undo plus one it cannot.
struct Pair {
  Eigen::MatrixXf X, Xq;  // [T, cols]
  Eigen::MatrixXf gram, cross;
};
Pair make_pair_inputs(int64_t T, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Pair p;
  Eigen::MatrixXf Z = Eigen::Map<Eigen::MatrixXf>(randn(T * cols, rng, 1.0f).data(), T, cols);
  Eigen::MatrixXf A = Eigen::Map<Eigen::MatrixXf>(randn(cols * cols, rng, 0.3f).data(), cols, cols);
  A += Eigen::MatrixXf::Identity(cols, cols);
  p.X = Z * A;
  for (int64_t j = 0; j < cols; j += 7) p.X.col(j) *= 5.0f;
  Eigen::MatrixXf E = Eigen::Map<Eigen::MatrixXf>(randn(cols * cols, rng, 0.05f).data(), cols, cols);
  Eigen::MatrixXf N = Eigen::Map<Eigen::MatrixXf>(randn(T * cols, rng, 0.05f).data(), T, cols);
  p.Xq = p.X * (Eigen::MatrixXf::Identity(cols, cols) + E) + N;
  p.gram = p.Xq.transpose() * p.Xq;
  p.cross = p.X.transpose() * p.Xq;
  return p;
}

TEST(FloatTarget, FitIsTheWeightItselfWhenTheInputsAreExact) {
  std::mt19937_64 rng(3);
  const int64_t rows = 16, cols = 40;
  auto w = randn(rows * cols, rng, 0.1f);
  Pair p = make_pair_inputs(512, cols, 4);
  for (double damp : {1e-4, 0.01, 1.0}) {
    const std::vector<float> fit = fit_float_target(w.data(), rows, cols, p.gram, p.gram, damp);
    for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(fit[i], w[i], 2e-4) << "damp " << damp << " at " << i;
  }
}

// With a negligible ridge the fit is the least-squares solution W cross H^-1 (normal equations in double);
// it lowers the float-target error of W itself, and GPTQ of the fit beats GPTQ of W on that objective.
TEST(FloatTarget, FitSolvesTheLeastSquaresProblemAndGptqKeepsTheGain) {
  std::mt19937_64 rng(5);
  const int64_t rows = 24, cols = 64, T = 1024;
  auto w = randn(rows * cols, rng, 0.1f);
  Pair p = make_pair_inputs(T, cols, 6);
  const std::vector<float> fit = fit_float_target(w.data(), rows, cols, p.gram, p.cross, 1e-9);
  Eigen::Map<const RowMat> W(w.data(), rows, cols);
  const Eigen::MatrixXd ls =
      W.cast<double>() * p.cross.cast<double>() * p.gram.cast<double>().inverse();  // [rows, cols]
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_NEAR(fit[static_cast<size_t>(r * cols + c)], ls(r, c), 1e-3 * (1 + std::fabs(ls(r, c))))
          << r << ", " << c;
  const double e_w = float_target_error(w, w, rows, cols, p.X, p.Xq);
  const double e_fit = float_target_error(w, fit, rows, cols, p.X, p.Xq);
  EXPECT_LT(e_fit, 0.5 * e_w) << "the fit must undo the systematic part of the input error";
  for (const char* sch : {"int4:g32:sym", "int3:channel"}) {
    const QuantScheme s = parse_scheme(sch);
    std::vector<float> a(w.size()), b(w.size());
    dequantize_matrix(gptq_quantize(w.data(), rows, cols, p.gram, s, {32, 0.01f, true}), a.data());
    dequantize_matrix(gptq_quantize(fit.data(), rows, cols, p.gram, s, {32, 0.01f, true}), b.data());
    const double ea = float_target_error(w, a, rows, cols, p.X, p.Xq);
    const double eb = float_target_error(w, b, rows, cols, p.X, p.Xq);
    EXPECT_LT(eb, 0.8 * ea) << sch << ": float target " << eb << ", layer target " << ea;
  }
}

TEST(FloatTarget, FitRejectsMismatchedStatistics) {
  std::vector<float> w(8 * 16, 0.1f);
  Eigen::MatrixXf h = Eigen::MatrixXf::Identity(16, 16), c12 = Eigen::MatrixXf::Identity(12, 12);
  EXPECT_THROW(fit_float_target(w.data(), 8, 16, h, c12, 0.01), Error);
  EXPECT_THROW(fit_float_target(w.data(), 8, 16, c12, h, 0.01), Error);
}

// The four linear inputs of layer l for every calibration token (one batch), through the model's layers 0..l.
std::array<std::vector<float>, 4> layer_inputs(const Model& m, const CalibData& d, int l) {
  struct Cap : ActivationObserver {
    int layer;
    std::array<std::vector<float>, 4> x;
    void observe(int ly, ActSite s, const float* v, int64_t T, int64_t c) override {
      const int i = site_index(s);
      if (ly == layer && i >= 0 && i < 4)
        x[static_cast<size_t>(i)].insert(x[static_cast<size_t>(i)].end(), v, v + T * c);
    }
  } cap;
  cap.layer = l;
  Decoder dec(m.config, m.weights);
  dec.set_observer(&cap);
  for (const auto& seq : d.seqs) {
    const int64_t T = static_cast<int64_t>(seq.size());
    KvCache kv(m.config, 1, T, KvDtype::F32);
    std::vector<BatchEntry> b;
    for (int64_t p = 0; p < T; ++p) b.push_back({seq[static_cast<size_t>(p)], 0, p, false});
    std::vector<float> x(static_cast<size_t>(T * m.config.dim));
    dec.embed(b, x.data());
    dec.forward_layers(b, kv, x.data(), 0, l);
  }
  return cap.x;
}

void quantize_layer_in_place(Model& m, int l) {
  LayerWeights& L = m.weights.layers[static_cast<size_t>(l)];
  for (WeightMatrix* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) {
    std::vector<float> f(static_cast<size_t>(w->rows * w->cols));
    std::memcpy(f.data(), w->data, f.size() * 4);
    QuantizedMatrix q = quantize_matrix(f.data(), w->rows, w->cols, parse_scheme("int3:g32"));
    dequantize_matrix(q, f.data());
    *w = make_f32_weight(f.data(), w->rows, w->cols);
  }
}

// The stream's float reference follows the float model while the stream itself runs the quantized layers:
// cross = X_float^T X_stream and gram = X_stream^T X_stream at every layer, with the activation route applied
// to the stream's side only.
TEST(CalibStream, FloatReferencePairsTheFloatModelsInputsWithTheStreams) {
  auto m = make_random_model(8);
  auto ref = make_random_model(8);  // the same weights, never quantized
  auto calib = testing::random_calib(*m, 3, 20, 5);
  // A visible stand-in for an activation route: every input rounded to a multiple of 1/8.
  ActRoute round8 = [](ActSite, const float* x, int64_t T, int64_t c, float* xq) {
    for (int64_t i = 0; i < T * c; ++i) xq[i] = std::nearbyint(x[i] * 8.0f) / 8.0f;
  };
  CalibStream stream(*m, calib, 8, true);
  ASSERT_TRUE(stream.float_reference());
  const int L = static_cast<int>(m->config.n_layers);
  for (int l = 0; l < L; ++l) {
    const bool act = l % 2 == 1;
    const LayerStats st = stream.stats(true, false, false, act ? round8 : ActRoute{});
    const auto xf = layer_inputs(*ref, calib, l);
    const auto xs = layer_inputs(*m, calib, l);
    for (int s = 0; s < 4; ++s) {
      const SiteStats& ss = st.sites[static_cast<size_t>(s)];
      const int64_t c = ss.cols, T = static_cast<int64_t>(xf[static_cast<size_t>(s)].size()) / c;
      ASSERT_EQ(T, ss.n) << "layer " << l << " site " << s;
      Eigen::MatrixXf Xf = Eigen::Map<const RowMat>(xf[static_cast<size_t>(s)].data(), T, c);
      Eigen::MatrixXf Xs = Eigen::Map<const RowMat>(xs[static_cast<size_t>(s)].data(), T, c);
      if (act) Xs = Xs.unaryExpr([](float v) { return std::nearbyint(v * 8.0f) / 8.0f; });
      const Eigen::MatrixXf cross = Xf.transpose() * Xs, gram = Xs.transpose() * Xs;
      const float tol = 1e-4f * (1.0f + cross.cwiseAbs().maxCoeff());
      EXPECT_LT((ss.cross - cross).cwiseAbs().maxCoeff(), tol) << "layer " << l << " site " << s;
      EXPECT_LT((ss.gram - gram).cwiseAbs().maxCoeff(), tol) << "layer " << l << " site " << s;
      if (l > 0 && !act)  // the layers before were quantized: the stream is no longer the float model
        EXPECT_GT((ss.cross - ss.gram).cwiseAbs().maxCoeff(), 10 * tol) << "layer " << l << " site " << s;
    }
    quantize_layer_in_place(*m, l);
    stream.advance();
  }
  const SiteStats h = stream.head_stats(true);
  EXPECT_EQ(h.cross.rows(), m->config.dim);
  EXPECT_GT((h.cross - h.gram).cwiseAbs().maxCoeff(), 0.0f);
  EXPECT_EQ(stream.head_stats(true, false).cross.size(), 0) << "cross statistics not asked for";
  CalibStream plain(*m, calib, 8);
  EXPECT_THROW(stream.stats(true), Error) << "every layer is streamed";
  EXPECT_EQ(plain.stats(true).sites[0].cross.size(), 0) << "no float reference, no cross";
  CalibStream with_ref(*m, calib, 8, true);
  EXPECT_THROW(with_ref.stats(true, true), Error) << "a float reference cannot move with the float layer";
}

TEST(Recipe, GptqTargetKey) {
  EXPECT_EQ(parse_recipe_arg("W4A16,algo=gptq").gptq_target, "layer");
  const Recipe r = parse_recipe_arg("W4A16,algo=gptq,target=float");
  EXPECT_EQ(r.gptq_target, "float");
  EXPECT_EQ(r.to_json()["gptq"]["target"], "float");
  EXPECT_EQ(recipe_from_json(r.to_json(), "test").gptq_target, "float");
  EXPECT_EQ(r.gptq_target_damp, 1.0f);
  EXPECT_EQ(parse_recipe_arg("W4A16,algo=gptq,target=float,target_damp=0.3").gptq_target_damp, 0.3f);
  EXPECT_THROW(parse_recipe_arg("W4A16,algo=gptq,target_damp=0.3"), UsageError) << "no float target to damp";
  EXPECT_THROW(parse_recipe_arg("W4A16,algo=gptq,target=float,target_damp=0"), UsageError);
  EXPECT_THROW(parse_recipe_arg("W4A16,algo=gptq,target=model"), UsageError);
  EXPECT_THROW(parse_recipe_arg("W4A16,target=float"), UsageError) << "RTN has no target to fit";
  EXPECT_THROW(parse_recipe_arg("W4A16,algo=awq,target=float"), UsageError);
  EXPECT_THROW(parse_recipe_arg("W8A8,algo=smoothquant+gptq,target=float"), UsageError);
}

// End to end on a random model: with the float target, GPTQ's model is closer to the float model on the
// calibration windows (the objective the fit minimises layer by layer), with and without 4-bit activations.
TEST(Quantizer, GptqFloatTargetLowersTheCalibrationLogitError) {
  auto base = make_random_model(4);
  auto calib = testing::random_calib(*base, 8, 48, 2);
  auto run = [&](const std::string& recipe) {
    return testing::mean_sq_logit_error(*base, *testing::quantized_random_model(4, recipe, calib),
                                        calib.seqs);
  };
  for (const std::string r : {"int3:g32:sym,algo=gptq", "int4:g32:sym,act=int4,algo=gptq"}) {
    const double layer = run(r), flt = run(r + ",target=float");
    EXPECT_LT(flt, layer) << r << ": float target " << flt << ", layer target " << layer;
  }
}

}  // namespace
}  // namespace lowbit::quant
