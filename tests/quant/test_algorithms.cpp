// RTN / GPTQ / AWQ / SmoothQuant on synthetic layers and a tiny random model.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "model/decoder.h"
#include "ops/norm.h"
#include "quant/awq.h"
#include "quant/calibration.h"
#include "quant/gptq.h"
#include "quant/quantizer.h"
#include "tests/quant/quant_test_util.h"

namespace lowbit::quant {
namespace {

using testing::make_random_model;
using testing::max_abs_diff;
using testing::randn;

// Correlated inputs X = Z A (T x cols) with a few loud channels, and a random W (rows x cols).
struct Layer {
  int64_t rows, cols;
  std::vector<float> w;
  Eigen::MatrixXf gram;
  std::vector<float> x;  // [1024, cols] row-major: the inputs whose Gram matrix gram is
};
Layer synthetic_layer(int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t T = 1024;
  Eigen::MatrixXf Z = Eigen::Map<Eigen::MatrixXf>(randn(T * cols, rng, 1.0f).data(), T, cols);
  Eigen::MatrixXf A = Eigen::Map<Eigen::MatrixXf>(randn(cols * cols, rng, 1.0f).data(), cols, cols);
  A += 2.0f * Eigen::MatrixXf::Identity(cols, cols);
  Eigen::MatrixXf X = Z * A;
  for (int64_t j = 0; j < cols; j += 11) X.col(j) *= 8.0f;
  const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> xr = X;
  return {rows, cols, randn(rows * cols, rng, 0.05f), X.transpose() * X,
          std::vector<float>(xr.data(), xr.data() + xr.size())};
}

double out_err(const Layer& l, const QuantizedMatrix& q) {
  std::vector<float> wq(l.w.size());
  dequantize_matrix(q, wq.data());
  return output_error(l.w.data(), wq.data(), l.rows, l.cols, l.gram);
}

TEST(Gptq, IdentityHessianReproducesRtnExactly) {
  // With H = I no error is propagated, so every code must equal quantize_matrix's.
  std::mt19937_64 rng(1);
  const int64_t rows = 24, cols = 96;
  auto w = randn(rows * cols, rng, 1.0f);
  Eigen::MatrixXf I = Eigen::MatrixXf::Identity(cols, cols);
  for (const char* sch :
       {"int4:g32:sym", "int4:g32:asym", "int3:channel", "nf4:g32", "e2m1:g32:f16", "int8:tensor"})
    for (bool act_order : {false, true}) {
      QuantScheme s = parse_scheme(sch);
      QuantizedMatrix a = gptq_quantize(w.data(), rows, cols, I, s, {128, 0.01f, act_order});
      QuantizedMatrix b = quantize_matrix(w.data(), rows, cols, s);
      EXPECT_EQ(a.codes, b.codes) << sch << " act_order " << act_order;
      EXPECT_EQ(a.scales, b.scales) << sch;
      EXPECT_EQ(a.zeros, b.zeros) << sch;
    }
}

TEST(Gptq, ReducesOutputErrorVsRtnOnCorrelatedInputs) {
  Layer l = synthetic_layer(48, 128, 7);
  for (const char* sch : {"int4:g32:sym", "int3:g32:sym", "int4:g32:asym", "nf4:g32", "e2m1:g32:f16", "mxfp4",
                          "int8:channel"}) {
    QuantScheme s = parse_scheme(sch);
    const double rtn = out_err(l, quantize_matrix(l.w.data(), l.rows, l.cols, s));
    for (bool act_order : {false, true}) {
      const double g =
          out_err(l, gptq_quantize(l.w.data(), l.rows, l.cols, l.gram, s, {32, 0.01f, act_order}));
      EXPECT_LT(g, 0.8 * rtn) << sch << " act_order " << act_order << ": gptq " << g << " rtn " << rtn;
    }
  }
}

// The calibration stream (one layer forward per layer) sees exactly what a forward from the embedding sees,
// also after earlier layers were quantized: every statistic bit for bit, with 3 sequences per batch.
TEST(CalibStream, EqualsAForwardFromTheEmbeddingPerLayer) {
  auto m = make_random_model(6);
  auto calib = testing::random_calib(*m, 5, 24, 3);
  CalibStream stream(*m, calib, 3);
  for (int l = 0; l < static_cast<int>(m->config.n_layers); ++l) {
    ASSERT_EQ(stream.next_layer(), l);
    const LayerStats a = stream.stats(true);
    const LayerStats b = collect_stats(*m, calib, l, l, true, 3)[0];
    for (int s = 0; s < kNumSites; ++s) {
      const SiteStats &x = a.sites[s], &y = b.sites[s];
      EXPECT_EQ(x.n, y.n) << "layer " << l << " site " << s;
      EXPECT_EQ(x.sum_sq, y.sum_sq) << "layer " << l << " site " << s;
      EXPECT_EQ(x.max_abs, y.max_abs) << "layer " << l << " site " << s;
      EXPECT_TRUE(x.gram.size() == y.gram.size() && x.gram == y.gram) << "layer " << l << " site " << s;
    }
    // Quantize the layer as the quantizer would before moving on: the next layer's inputs must follow.
    for (WeightMatrix* w : {&m->weights.layers[l].wq, &m->weights.layers[l].w_down}) {
      std::vector<float> f(static_cast<size_t>(w->rows * w->cols));
      std::memcpy(f.data(), w->data, f.size() * 4);
      QuantizedMatrix q = quantize_matrix(f.data(), w->rows, w->cols, parse_scheme("int4:g32"));
      dequantize_matrix(q, f.data());
      *w = make_f32_weight(f.data(), w->rows, w->cols);
    }
    if (l + 1 < m->config.n_layers) stream.advance();
  }
}

// AWQ's stream (stats with move_float) follows the float model: quantizing a layer after its statistics
// changes nothing downstream, every statistic equals a float model's forward from the embedding bit for bit.
TEST(CalibStream, MoveFloatFollowsTheFloatModel) {
  auto m = make_random_model(6);
  auto ref = make_random_model(6);  // the same weights, never quantized
  auto calib = testing::random_calib(*m, 5, 24, 3);
  CalibStream stream(*m, calib, 3);
  for (int l = 0; l < static_cast<int>(m->config.n_layers); ++l) {
    ASSERT_EQ(stream.next_layer(), l);
    const LayerStats a = stream.stats(true, true);
    const LayerStats b = collect_stats(*ref, calib, l, l, true, 3)[0];
    for (int s = 0; s < kNumSites; ++s) {
      EXPECT_EQ(a.sites[s].sum_sq, b.sites[s].sum_sq) << "layer " << l << " site " << s;
      EXPECT_TRUE(a.sites[s].gram == b.sites[s].gram) << "layer " << l << " site " << s;
    }
    for (WeightMatrix* w : {&m->weights.layers[l].wq, &m->weights.layers[l].w_down}) {
      std::vector<float> f(static_cast<size_t>(w->rows * w->cols));
      std::memcpy(f.data(), w->data, f.size() * 4);
      QuantizedMatrix q = quantize_matrix(f.data(), w->rows, w->cols, parse_scheme("int4:g32"));
      dequantize_matrix(q, f.data());
      *w = make_f32_weight(f.data(), w->rows, w->cols);
    }
  }
  EXPECT_EQ(stream.next_layer(), m->config.n_layers);
}

// The classifier's input statistics: the final RMSNorm of the last layer's output for every calibration
// token, whatever the batching (reference: each window alone through the decoder, normed here).
TEST(CalibStream, HeadStatsAreTheFinalNormOfTheLastLayersOutput) {
  auto m = make_random_model(7);
  auto calib = testing::random_calib(*m, 5, 24, 3);
  const SiteStats h = head_input_stats(*m, calib, true, 2);
  const int64_t D = m->config.dim;
  std::vector<double> sq(static_cast<size_t>(D), 0.0);
  int64_t n = 0;
  Decoder dec(m->config, m->weights);
  for (const auto& seq : calib.seqs) {
    const int64_t T = static_cast<int64_t>(seq.size());
    KvCache kv(m->config, 1, T, KvDtype::F32);
    std::vector<BatchEntry> b;
    for (int64_t p = 0; p < T; ++p) b.push_back({seq[static_cast<size_t>(p)], 0, p, false});
    std::vector<float> x(static_cast<size_t>(T * D)), xn(x.size());
    dec.embed(b, x.data());
    dec.forward_layers(b, kv, x.data(), 0, static_cast<int>(m->config.n_layers) - 1);
    rms_norm(x.data(), m->weights.final_norm.data(), xn.data(), T, D, m->config.norm_eps);
    for (int64_t i = 0; i < T * D; ++i) sq[static_cast<size_t>(i % D)] += static_cast<double>(xn[i]) * xn[i];
    n += T;
  }
  ASSERT_EQ(h.cols, D);
  EXPECT_EQ(h.n, n);
  ASSERT_EQ(h.gram.rows(), D);
  for (int64_t j = 0; j < D; ++j) {
    EXPECT_NEAR(h.sum_sq[j], sq[j], 1e-4 * sq[j]) << "column " << j;
    EXPECT_NEAR(h.gram(j, j), sq[j], 1e-4 * sq[j]) << "column " << j;
  }
  EXPECT_TRUE(h.gram.isApprox(h.gram.transpose())) << "the Gram matrix must be filled on both sides";
  CalibStream part(*m, calib, 2);
  EXPECT_THROW(part.head_stats(false), Error) << "head statistics before the last layer is streamed";
}

// U from the Cholesky factor of the reversed matrix and a triangular inverse is the upper Cholesky factor of
// the damped inverse Hessian (H + damp I)^-1 = U^T U, in the act-order permutation: checked in double.
TEST(Gptq, InverseHessianFactorIsTheUpperCholeskyOfTheInverse) {
  const Layer l = synthetic_layer(4, 96, 9);
  std::vector<int64_t> perm(96);
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(),
                   [&](int64_t a, int64_t b) { return l.gram(a, a) > l.gram(b, b); });
  double damp = 0;
  const Eigen::MatrixXf U = gptq_inverse_hessian_factor(l.gram.cast<double>(), perm, 0.01, &damp);
  Eigen::MatrixXd Hp(96, 96);
  for (int a = 0; a < 96; ++a)
    for (int b = 0; b < 96; ++b) Hp(a, b) = static_cast<double>(l.gram(perm[a], perm[b]));
  Hp.diagonal().array() += damp;
  const Eigen::MatrixXd inv = Hp.inverse();
  const Eigen::MatrixXd Ud = U.cast<double>();
  EXPECT_NEAR(damp, 0.01 * l.gram.cast<double>().diagonal().mean(), 1e-9 * damp);
  EXPECT_EQ(Ud.triangularView<Eigen::StrictlyLower>().toDenseMatrix().norm(), 0.0);
  EXPECT_LT((Ud.transpose() * Ud - inv).norm() / inv.norm(), 1e-4);
  const Eigen::MatrixXd ref = Eigen::LLT<Eigen::MatrixXd>(inv).matrixU();
  EXPECT_LT((Ud - ref).norm() / ref.norm(), 1e-4);
}

// The report's relative output error: exact below 2^31 multiply-adds, every k-th row above (520 x 2048: 2.2
// G, every second row), and the estimate close to the exact ratio.
TEST(Gptq, ReportErrorSamplesRowsOfLargeMatricesOnly) {
  std::mt19937_64 rng(11);
  auto check = [&](int64_t rows, int64_t cols, int64_t want_rows) {
    const std::vector<float> w = randn(rows * cols, rng, 0.05f);
    std::vector<float> wq = w;
    const std::vector<float> noise = randn(rows * cols, rng, 0.005f);
    for (size_t i = 0; i < wq.size(); ++i) wq[i] += noise[i];
    Eigen::MatrixXf X = Eigen::Map<Eigen::MatrixXf>(randn(64 * cols, rng, 1.0f).data(), 64, cols);
    const Eigen::MatrixXf gram = X.transpose() * X;
    double bx = 0, bs = 0;
    int64_t used = 0;
    const double ex = output_error(w.data(), wq.data(), rows, cols, gram, &bx);
    const double es = output_error_rows(w.data(), wq.data(), rows, cols, gram, &bs, &used);
    EXPECT_EQ(used, want_rows) << rows << "x" << cols;
    if (used == rows) EXPECT_EQ(es, ex);
    EXPECT_NEAR(std::sqrt(es / bs), std::sqrt(ex / bx), 0.03 * std::sqrt(ex / bx)) << rows << "x" << cols;
    // Token space (the inputs instead of their Gram matrix): the same rows, the same sums up to rounding.
    const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> xr = X;
    double ba = 0;
    int64_t used_a = 0;
    const double ea = output_error_rows_acts(w.data(), wq.data(), rows, cols, xr.data(), 64, &ba, &used_a);
    EXPECT_EQ(used_a, used);
    EXPECT_NEAR(ea, es, 1e-4 * es) << rows << "x" << cols;
    EXPECT_NEAR(ba, bs, 1e-4 * bs) << rows << "x" << cols;
  };
  check(100, 256, 100);
  check(520, 2048, 260);
}

TEST(Gptq, RejectsBadInput) {
  Layer l = synthetic_layer(8, 32, 3);
  EXPECT_THROW(gptq_quantize(l.w.data(), 8, 32, l.gram, parse_scheme("q4_0"), {}), UsageError);
  Eigen::MatrixXf small = Eigen::MatrixXf::Identity(16, 16);
  EXPECT_THROW(gptq_quantize(l.w.data(), 8, 32, small, parse_scheme("int4:g32"), {}), Error);
  // A zero Hessian (no calibration signal) still works: dead columns are zeroed, never NaN.
  Eigen::MatrixXf zero = Eigen::MatrixXf::Zero(32, 32);
  QuantizedMatrix q = gptq_quantize(l.w.data(), 8, 32, zero, parse_scheme("int4:g32"), {});
  std::vector<float> wq(8 * 32);
  dequantize_matrix(q, wq.data());
  for (float v : wq) EXPECT_TRUE(std::isfinite(v));
}

TEST(Awq, SearchNeverLosesToRtnAndHelpsWithOutliers) {
  Layer l = synthetic_layer(48, 128, 11);
  std::vector<float> mean_abs(static_cast<size_t>(l.cols));
  for (int64_t j = 0; j < l.cols; ++j) mean_abs[j] = std::sqrt(l.gram(j, j) / 1024.0f);
  AwqResult r = awq_search({{l.w.data(), l.rows, parse_scheme("int3:g32")}}, l.cols, mean_abs, l.gram, 20);
  EXPECT_LE(r.loss, r.loss_plain);
  EXPECT_GT(r.alpha, 0.0f);
  EXPECT_LT(r.loss, 0.9 * r.loss_plain);
}

// Scored on the inputs themselves (AWQ's down_proj) the search finds what it finds on their Gram matrix.
TEST(Awq, TokenSpaceSearchEqualsTheGramSearch) {
  Layer l = synthetic_layer(48, 128, 11);
  std::vector<float> mean_abs(static_cast<size_t>(l.cols));
  for (int64_t j = 0; j < l.cols; ++j) mean_abs[j] = std::sqrt(l.gram(j, j) / 1024.0f);
  for (const char* sch : {"int3:g32", "int4:g64:asym"}) {
    const std::vector<AwqTarget> t = {{l.w.data(), l.rows, parse_scheme(sch)}};
    const AwqResult g = awq_search(t, l.cols, mean_abs, l.gram, 20);
    const AwqResult a = awq_search(t, l.cols, mean_abs, Eigen::MatrixXf(), 20, &l.x);
    EXPECT_EQ(a.alpha, g.alpha) << sch;
    EXPECT_NEAR(a.loss, g.loss, 1e-3 * g.loss) << sch;
    EXPECT_NEAR(a.loss_plain, g.loss_plain, 1e-3 * g.loss_plain) << sch;
  }
  EXPECT_THROW(awq_search({{l.w.data(), l.rows, parse_scheme("int3:g32")}}, l.cols, mean_abs,
                          Eigen::MatrixXf(), 20, nullptr),
               Error);
}

// Token space pays where the inputs are much wider than the rows scored: a 0.5B model's down_proj (45 of 896
// rows scored, 4864 inputs) and a 7B's (9 of 4096, 11008 inputs), not kjv-brown-6M's (256 rows, 768 inputs)
// nor stories260K's (64, 172).
TEST(Awq, TokenSpaceIsChosenWhereItIsCheaper) {
  EXPECT_TRUE(awq_token_space_cheaper(896, 4864, 8192, 20));
  EXPECT_TRUE(awq_token_space_cheaper(4096, 11008, 8192, 20));
  EXPECT_FALSE(awq_token_space_cheaper(256, 768, 8192, 20));
  EXPECT_FALSE(awq_token_space_cheaper(64, 172, 8192, 20));
}

TEST(Folding, AwqStyleFoldsLeaveTheModelOutputUnchanged) {
  auto m = make_random_model(5, /*gqa=*/false);
  auto toks = testing::test_tokens(m->config.vocab_size, 24, 9);
  auto before = testing::logits_of(*m, toks);
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> u(0.25f, 4.0f);
  auto rnd = [&](int64_t n) {
    std::vector<float> s(static_cast<size_t>(n));
    for (auto& x : s) x = u(rng);
    return s;
  };
  for (int l = 0; l < m->config.n_layers; ++l) {
    LayerScales s{rnd(m->config.dim), rnd(m->config.q_dim()), rnd(m->config.dim), rnd(m->config.ffn_dim)};
    fold_layer_scales(*m, l, s);
  }
  auto after = testing::logits_of(*m, toks);
  double scale = 0;
  for (float v : before) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  EXPECT_LT(max_abs_diff(before, after), 1e-4 * std::max(1.0, scale));
  // With GQA an o-proj fold has no exact v-proj counterpart: refused.
  auto g = make_random_model(5, /*gqa=*/true);
  LayerScales o;
  o.o = rnd(g->config.q_dim());
  EXPECT_THROW(fold_layer_scales(*g, 0, o), UsageError);
}

TEST(Folding, SmoothQuantFoldIsExact) {
  auto m = make_random_model(8);
  auto calib = testing::random_calib(*m, 4, 32, 1);
  auto stats = collect_stats(*m, calib, 0, 1, false);
  auto toks = testing::test_tokens(m->config.vocab_size, 24, 4);
  auto before = testing::logits_of(*m, toks);
  for (int l = 0; l < 2; ++l) {
    auto& L = m->weights.layers[l];
    auto dense = [](const WeightMatrix& w) {
      std::vector<float> f(static_cast<size_t>(w.rows * w.cols));
      std::memcpy(f.data(), w.data, f.size() * 4);
      return f;
    };
    auto q = dense(L.wq), k = dense(L.wk), v = dense(L.wv), g = dense(L.w_gate), u = dense(L.w_up);
    LayerScales s;
    s.attn =
        smoothquant_scales(stats[l].at(ActSite::AttnIn).max_abs,
                           {{q.data(), L.wq.rows, {}}, {k.data(), L.wk.rows, {}}, {v.data(), L.wv.rows, {}}},
                           m->config.dim, 0.5f);
    s.mlp =
        smoothquant_scales(stats[l].at(ActSite::MlpIn).max_abs,
                           {{g.data(), L.w_gate.rows, {}}, {u.data(), L.w_up.rows, {}}}, m->config.dim, 0.5f);
    bool nontrivial = false;
    for (float x : s.attn) nontrivial = nontrivial || std::fabs(x - 1.0f) > 0.1f;
    EXPECT_TRUE(nontrivial);
    fold_layer_scales(*m, l, s);
  }
  auto after = testing::logits_of(*m, toks);
  double scale = 0;
  for (float v : before) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  EXPECT_LT(max_abs_diff(before, after), 1e-4 * std::max(1.0, scale));
}

TEST(Quantizer, RtnMatchesQuantizeMatrixExactly) {
  auto m = make_random_model(2);
  auto orig = make_random_model(2);
  Recipe r = parse_recipe_arg("int4:g32:sym");
  QuantReport rep = quantize_model(*m, r, {nullptr, false, false});
  auto named = m->weights.named_matrices();
  auto onamed = orig->weights.named_matrices();
  int checked = 0;
  for (size_t i = 0; i < named.size(); ++i) {
    const auto& [name, w] = named[i];
    if (name == "tok_embed" || name == "lm_head") {
      EXPECT_EQ(w->kind, WeightKind::F32) << name;  // default ignore
      continue;
    }
    ASSERT_EQ(w->kind, WeightKind::Quant) << name;
    const WeightMatrix& o = *onamed[i].second;
    QuantizedMatrix ref = quantize_matrix(reinterpret_cast<const float*>(o.data), o.rows, o.cols, r.weights);
    EXPECT_EQ(w->q->codes, ref.codes) << name;
    EXPECT_EQ(w->q->scales, ref.scales) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 14);
  EXPECT_NEAR(rep.bpw_quantized(), 4.5, 1e-9);  // 4 + 16/32
}

TEST(Quantizer, GptqAndAwqBeatRtnOnCalibrationOutputError) {
  auto base = make_random_model(4);
  auto calib = testing::random_calib(*base, 8, 48, 2);
  // Mean squared logit error vs the float model on held-out tokens.
  const std::vector<std::vector<int32_t>> held_out = {testing::test_tokens(base->config.vocab_size, 40, 77)};
  auto run = [&](const std::string& recipe) {
    return testing::mean_sq_logit_error(*base, *testing::quantized_random_model(4, recipe, calib), held_out);
  };
  const double rtn = run("int3:g32:sym");
  const double gptq = run("int3:g32:sym,algo=gptq");
  const double awq = run("int3:g32:sym,algo=awq");
  EXPECT_LT(gptq, rtn);
  EXPECT_LT(awq, rtn);
}

// lm_head is a matmul on the final norm's output: GPTQ quantizes it with that input's Gram matrix (a lower
// output error than RTN on the same grid); an untied embedding is a gather and stays RTN; a tied embedding in
// the classifier's scheme shares its GPTQ rows.
TEST(Quantizer, ClassifierIsQuantizedWithItsInputStatistics) {
  const std::string recipe = R"({"scheme": "int3:g32:sym", "algorithm": "gptq", "ignore": []})";
  auto m = make_random_model(4);
  auto orig = make_random_model(4);
  auto calib = testing::random_calib(*m, 8, 48, 2);
  QuantizeOptions o;
  o.calib = &calib;
  o.progress = false;
  QuantReport rep = quantize_model(*m, recipe_from_json(nlohmann::json::parse(recipe)), o);
  auto report = [&](const QuantReport& r, const std::string& name) {
    for (const auto& t : r.tensors)
      if (t.name == name) return t;
    ADD_FAILURE() << name << " missing from the report";
    return TensorReport{};
  };
  const TensorReport head = report(rep, "lm_head"), embed = report(rep, "tok_embed");
  EXPECT_EQ(head.algorithm, "gptq");
  EXPECT_GT(head.rel_error_out, 0.0);
  EXPECT_LT(head.rel_error_out, head.rel_error_out_rtn) << "GPTQ on the classifier's inputs must beat RTN";
  EXPECT_EQ(embed.algorithm, "rtn");
  const WeightMatrix& oe = orig->weights.tok_embed;
  QuantizedMatrix ref = quantize_matrix(reinterpret_cast<const float*>(oe.data), oe.rows, oe.cols,
                                        parse_scheme("int3:g32:sym"));
  EXPECT_EQ(m->weights.tok_embed.q->codes, ref.codes) << "an untied embedding is RTN";

  auto tied = make_random_model(4);
  tied->weights.lm_head = tied->weights.tok_embed;
  tied->config.tie_embeddings = true;
  QuantReport trep = quantize_model(*tied, recipe_from_json(nlohmann::json::parse(recipe)), o);
  EXPECT_EQ(report(trep, "tok_embed").algorithm, "gptq");
  EXPECT_EQ(tied->weights.lm_head.q, tied->weights.tok_embed.q) << "tied: one storage";
  EXPECT_NE(tied->weights.tok_embed.q->codes, ref.codes) << "the tied rows are GPTQ's, not RTN's";
}

TEST(Quantizer, RefusesDoubleQuantizationUnlessAsked) {
  auto m = make_random_model(6);
  quantize_model(*m, parse_recipe_arg("int4:g32"), {nullptr, false, false});
  try {
    quantize_model(*m, parse_recipe_arg("int8:channel"), {nullptr, false, false});
    FAIL() << "expected a refusal";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("already quantized"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--requantize"), std::string::npos) << e.what();
  }
  QuantReport rep = quantize_model(*m, parse_recipe_arg("int8:channel"), {nullptr, true, false});
  EXPECT_TRUE(rep.requantized);
  bool warned = false;
  for (auto& w : rep.warnings) warned = warned || w.find("requantized") != std::string::npos;
  EXPECT_TRUE(warned);
}

TEST(Quantizer, MissingCalibrationIsAUsageError) {
  auto m = make_random_model(6);
  EXPECT_THROW(quantize_model(*m, parse_recipe_arg("int4:g32,algo=gptq"), {nullptr, false, false}),
               UsageError);
}

TEST(Quantizer, StaticActivationAndKvScales) {
  auto m = make_random_model(12);
  auto calib = testing::random_calib(*m, 4, 32, 5);
  Recipe r = parse_recipe_arg("e4m3:tensor:f32,act=e4m3,act_static=1,kv=e4m3,kv_strategy=head");
  QuantizeOptions o;
  o.calib = &calib;
  o.progress = false;
  QuantReport rep = quantize_model(*m, r, o);
  auto stats = collect_stats(*make_random_model(12), calib, 0, 1, false);
  const auto& L = m->weights.layers[0];
  EXPECT_EQ(L.wq.act_format, FormatId::E4M3FN);
  EXPECT_FLOAT_EQ(L.wq.act_static_scale, stats[0].at(ActSite::AttnIn).absmax() / 448.0f);
  ASSERT_EQ(L.k_scale.size(), static_cast<size_t>(m->config.n_kv_heads));
  float kmax = 0;
  for (int64_t j = 0; j < m->config.head_dim; ++j)
    kmax = std::max(kmax, stats[0].at(ActSite::KeyOut).max_abs[j]);
  EXPECT_FLOAT_EQ(L.k_scale[0], kmax / 448.0f);
  EXPECT_EQ(rep.layers.size(), 2u);
}

TEST(Quantizer, SmoothQuantHelpsW8A8WithOutlierChannels) {
  auto base = make_random_model(14);
  auto calib = testing::random_calib(*base, 4, 32, 6);
  auto toks = testing::test_tokens(base->config.vocab_size, 16, 3);
  auto ref = testing::logits_of(*base, toks);
  std::vector<double> errs;
  for (const char* rec : {"W8A8", "W8A8,algo=smoothquant+rtn"}) {
    auto m = make_random_model(14);
    QuantizeOptions o;
    o.calib = &calib;
    o.progress = false;
    Recipe r = parse_recipe_arg(rec);
    QuantReport rep = quantize_model(*m, r, o);
    EXPECT_EQ(m->weights.layers[1].w_down.act_format, FormatId::INT8);
    if (r.smoothquant) EXPECT_TRUE(rep.layers[0].contains("smoothquant"));
    auto b = testing::logits_of(*m, toks);
    double e = 0;
    for (size_t i = 0; i < b.size(); ++i) e += (b[i] - ref[i]) * (b[i] - ref[i]);
    errs.push_back(e / b.size());
  }
  // The synthetic model has 6x outlier channels in its norms: migrating them into the weights must help int8
  // activations (when the kernels honour the activation route; otherwise both are weight-only and equal-ish).
  EXPECT_LT(errs[1], errs[0] * 1.05) << "plain " << errs[0] << " smoothquant " << errs[1];
}

}  // namespace
}  // namespace lowbit::quant
