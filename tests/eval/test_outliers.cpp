// `lowbit eval outliers` statistics (eval/outliers.h): every number against a direct computation on a
// synthetic activation set with one planted outlier channel; on a fixture model with a planted residual
// outlier the tool names the channel, and QuaRot's rotation lowers its max/RMS; the JSON and chart shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>

#include "eval/outliers.h"
#include "kernels/matmul.h"
#include "model/fixture.h"
#include "quant/rotate.h"
#include "tests/quant/quant_test_util.h"

namespace lowbit::eval {
namespace {

constexpr int64_t kT = 64, kCols = 32, kPlanted = 7;

// [kT, kCols] standard normal with channel kPlanted scaled by 25 and offset so the mean is not 0.
std::vector<float> planted_activations() {
  std::mt19937_64 rng(42);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(kT * kCols));
  for (int64_t t = 0; t < kT; ++t)
    for (int64_t c = 0; c < kCols; ++c) x[t * kCols + c] = nd(rng) * (c == kPlanted ? 25.0f : 1.0f) + 0.5f;
  return x;
}

TEST(Outliers, StatisticsEqualADirectComputation) {
  const auto x = planted_activations();
  OutlierObserver obs(3);
  // Two calls and an ignored site: the sums must accumulate across calls and skip non-linear-input sites.
  obs.observe(0, ActSite::MlpIn, x.data(), 40, kCols);
  obs.observe(0, ActSite::MlpIn, x.data() + 40 * kCols, kT - 40, kCols);
  obs.observe(0, ActSite::KeyOut, x.data(), kT, kCols);
  const OutlierReport r = obs.report();
  ASSERT_EQ(r.sites.size(), 1u);
  const SiteOutliers& s = r.sites[0];
  EXPECT_EQ(s.site, ActSite::MlpIn);
  EXPECT_EQ(s.tokens, kT);

  const double n = static_cast<double>(x.size());
  double mx = 0, sq = 0, mean = 0, tr = 0;
  int64_t arg_t = 0;
  std::vector<double> chan(kCols, 0.0);
  for (int64_t t = 0; t < kT; ++t) {
    double tm = 0, ts = 0;
    for (int64_t c = 0; c < kCols; ++c) {
      const double v = x[t * kCols + c];
      tm = std::max(tm, std::fabs(v)), ts += v * v;
      chan[c] = std::max(chan[c], std::fabs(v));
      if (std::fabs(v) > mx) mx = std::fabs(v), arg_t = t;
    }
    sq += ts, mean += std::accumulate(x.begin() + t * kCols, x.begin() + (t + 1) * kCols, 0.0);
    tr += tm / std::sqrt(ts / kCols);
  }
  mean /= n;
  double m2 = 0, m4 = 0;
  for (float v : x) m2 += (v - mean) * (v - mean), m4 += std::pow(v - mean, 4);
  m2 /= n, m4 /= n;
  const double rms = std::sqrt(sq / n);
  EXPECT_NEAR(s.max_abs, mx, 1e-6 * mx);
  EXPECT_NEAR(s.rms, rms, 1e-9 * rms);
  EXPECT_NEAR(s.ratio, mx / rms, 1e-6 * mx / rms);
  EXPECT_NEAR(s.token_ratio, tr / kT, 1e-9 * tr);
  EXPECT_NEAR(s.kurtosis, m4 / (m2 * m2), 1e-6 * m4 / (m2 * m2));
  EXPECT_EQ(s.max_token, arg_t);
  // The planted channel is named first, with its own maximum; then the next largest channels in order.
  ASSERT_EQ(s.top.size(), 3u);
  EXPECT_EQ(s.top[0].first, kPlanted);
  EXPECT_FLOAT_EQ(s.top[0].second, static_cast<float>(chan[kPlanted]));
  EXPECT_GE(s.top[1].second, s.top[2].second);
  EXPECT_GT(s.ratio, 10.0);  // a planted 25x channel in a 32-wide Gaussian
  EXPECT_EQ(r.worst, 0);
  EXPECT_DOUBLE_EQ(r.mean_ratio, s.ratio);
}

TEST(Outliers, GaussianKurtosisIsThree) {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> nd(3.0f, 2.0f);
  std::vector<float> x(200 * 256);
  for (auto& v : x) v = nd(rng);
  OutlierObserver obs;
  obs.observe(2, ActSite::DownIn, x.data(), 200, 256);
  EXPECT_NEAR(obs.report().sites[0].kurtosis, 3.0, 0.1);  // Pearson, not excess
}

// The tiny llama fixture with residual channel `c` of every token embedding scaled up.
std::unique_ptr<Model> planted_model(int64_t c, float gain) {
  const std::string dir = quant::testing::temp_path("outliers_fixture");
  auto m = quant::testing::planted_outlier_model(dir, c, gain);
  std::filesystem::remove_all(dir);
  return m;
}

TEST(Outliers, PlantedChannelIsNamedAndRotationLowersIt) {
  constexpr int64_t kChan = 13;
  auto m = planted_model(kChan, 40.0f);
  std::vector<std::vector<int32_t>> windows = {{}};
  for (int32_t i = 0; i < 48; ++i) windows[0].push_back((i * 37 + 5) % 512);
  const OutlierReport before = measure_outliers(*m, windows, 4);
  ASSERT_EQ(before.sites.size(), 2u * 4u);  // 2 layers x 4 sites
  const SiteOutliers& attn0 = before.sites[0];
  ASSERT_EQ(attn0.site, ActSite::AttnIn);
  EXPECT_EQ(attn0.top[0].first, kChan);
  EXPECT_GT(attn0.ratio, 5.0);

  Model rotated = *m;
  quant::RotationSpec s;
  s.method = "quarot";
  quant::rotate_model(rotated, s);
  const OutlierReport after = measure_outliers(rotated, windows, 4);
  ASSERT_EQ(after.sites.size(), before.sites.size());
  // The residual outlier is spread over all 64 channels: max/RMS of the norm outputs falls well below.
  EXPECT_LT(after.sites[0].ratio, attn0.ratio / 2) << attn0.ratio;
  EXPECT_LT(after.sites[2].ratio, before.sites[2].ratio / 2) << before.sites[2].ratio;
  EXPECT_LT(after.mean_ratio, before.mean_ratio);
}

TEST(Outliers, JsonAndChartShape) {
  const auto x = planted_activations();
  OutlierObserver obs(2);
  for (int l = 0; l < 3; ++l)
    for (ActSite site : outlier_sites()) obs.observe(l, site, x.data(), kT, kCols);
  const OutlierReport r = obs.report();
  const nlohmann::json j = outliers_json(r);
  ASSERT_EQ(j["sites"].size(), 12u);
  EXPECT_EQ(j["sites"][1]["site"], "o_in");
  EXPECT_EQ(j["sites"][4]["layer"], 1);
  for (const char* k : {"max_abs", "rms", "ratio", "token_ratio", "kurtosis", "cols", "tokens", "max_token"})
    EXPECT_TRUE(j["sites"][0][k].is_number()) << k;
  EXPECT_EQ(j["sites"][0]["top"].size(), 2u);
  EXPECT_EQ(j["sites"][0]["top"][0]["channel"], kPlanted);
  EXPECT_TRUE(j["summary"]["worst"]["ratio"].is_number());
  EXPECT_TRUE(j["summary"]["mean_ratio"].is_number());
  EXPECT_EQ(j["tokens"], kT);

  const std::string svg = outliers_chart_svg(r, &r, "t<&>", "quarot");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("t&lt;&amp;&gt;"), std::string::npos);  // the title is escaped
  size_t bars = 0;
  for (size_t p = svg.find("<rect x"); p != std::string::npos; p = svg.find("<rect x", p + 1)) ++bars;
  EXPECT_EQ(bars, 2u * 12u + 2u);  // before + after per site, and the two legend swatches
  const std::string html = outliers_chart_html(r, nullptr, "t", "");
  EXPECT_NE(html.find("<table>"), std::string::npos);
  EXPECT_NE(html.find("</html>"), std::string::npos);
}

}  // namespace
}  // namespace lowbit::eval
