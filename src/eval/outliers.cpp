// Activation outlier statistics (see outliers.h).
#include "eval/outliers.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::eval {

using nlohmann::json;

const std::vector<ActSite>& outlier_sites() {
  static const std::vector<ActSite> s = {ActSite::AttnIn, ActSite::OIn, ActSite::MlpIn, ActSite::DownIn};
  return s;
}

namespace {
bool reported(ActSite s) {
  const auto& v = outlier_sites();
  return std::find(v.begin(), v.end(), s) != v.end();
}
int site_rank(ActSite s) {
  const auto& v = outlier_sites();
  return static_cast<int>(std::find(v.begin(), v.end(), s) - v.begin());
}
}  // namespace

void OutlierObserver::observe(int layer, ActSite site, const float* x, int64_t T, int64_t cols) {
  if (!reported(site) || T <= 0 || cols <= 0) return;
  Acc& a = acc_[{layer, site_rank(site)}];
  if (a.cols == 0) a.cols = cols, a.chan_max.assign(static_cast<size_t>(cols), 0.0f);
  if (a.cols != cols)
    fail("eval", "site " + std::string(act_site_name(site)) + " of layer " + std::to_string(layer) +
                     " changed width from " + std::to_string(a.cols) + " to " + std::to_string(cols));
  if (!a.has_shift) a.shift = x[0], a.has_shift = true;
  for (int64_t t = 0; t < T; ++t) {
    const float* row = x + t * cols;
    double tmax = 0, tsq = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double v = row[c], y = v - a.shift, y2 = y * y;
      a.s1 += y, a.s2 += y2, a.s3 += y2 * y, a.s4 += y2 * y2;
      tsq += v * v;
      const double av = std::fabs(v);
      tmax = std::max(tmax, av);
      a.chan_max[static_cast<size_t>(c)] =
          std::max(a.chan_max[static_cast<size_t>(c)], static_cast<float>(av));
    }
    a.sq += tsq;
    if (tmax > a.max_abs) a.max_abs = tmax, a.max_token = a.tokens + t;
    const double trms = std::sqrt(tsq / static_cast<double>(cols));
    if (trms > 0) a.token_ratio_sum += tmax / trms;
  }
  a.tokens += T;
}

OutlierReport OutlierObserver::report() const {
  OutlierReport r;
  double sum_ratio = 0, sum_kurt = 0, sum_tr = 0;
  for (const auto& entry : acc_) {
    // Not a structured binding: clang 16 with OpenMP (the sanitizer build) cannot capture one in a lambda.
    const auto& key = entry.first;
    const auto& a = entry.second;
    SiteOutliers s;
    s.layer = key.first;
    s.site = outlier_sites()[static_cast<size_t>(key.second)];
    s.cols = a.cols;
    s.tokens = a.tokens;
    const double n = static_cast<double>(a.tokens) * static_cast<double>(a.cols);
    s.max_abs = a.max_abs;
    s.max_token = a.max_token;
    s.rms = std::sqrt(a.sq / n);
    s.ratio = s.rms > 0 ? s.max_abs / s.rms : 0;
    s.token_ratio = a.tokens > 0 ? a.token_ratio_sum / static_cast<double>(a.tokens) : 0;
    const double mu = a.s1 / n, e2 = a.s2 / n, e3 = a.s3 / n, e4 = a.s4 / n;
    const double var = e2 - mu * mu;
    const double m4 = e4 - 4 * mu * e3 + 6 * mu * mu * e2 - 3 * mu * mu * mu * mu;
    s.kurtosis = var > 0 ? m4 / (var * var) : 0;
    std::vector<int64_t> idx(static_cast<size_t>(a.cols));
    std::iota(idx.begin(), idx.end(), 0);
    const size_t k = std::min(static_cast<size_t>(std::max(top_k_, 0)), idx.size());
    std::partial_sort(
        idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(), [&](int64_t p, int64_t q) {
          const float mp = a.chan_max[static_cast<size_t>(p)], mq = a.chan_max[static_cast<size_t>(q)];
          return mp != mq ? mp > mq : p < q;
        });
    for (size_t i = 0; i < k; ++i) s.top.push_back({idx[i], a.chan_max[static_cast<size_t>(idx[i])]});
    r.tokens = std::max(r.tokens, a.tokens);
    sum_ratio += s.ratio, sum_kurt += s.kurtosis, sum_tr += s.token_ratio;
    r.sites.push_back(std::move(s));
  }
  if (!r.sites.empty()) {
    const double cnt = static_cast<double>(r.sites.size());
    r.mean_ratio = sum_ratio / cnt, r.mean_kurtosis = sum_kurt / cnt, r.mean_token_ratio = sum_tr / cnt;
    r.worst = 0;
    for (size_t i = 1; i < r.sites.size(); ++i)
      if (r.sites[i].ratio > r.sites[static_cast<size_t>(r.worst)].ratio) r.worst = static_cast<int>(i);
  }
  return r;
}

std::vector<std::vector<int32_t>> outlier_windows(const Model& m, const std::string& text, int64_t tokens) {
  if (!m.tokenizer) fail("eval", "'" + m.path + "' has no tokenizer; pass --tokenizer PATH");
  if (tokens < 2) throw UsageError("eval", "--tokens must be >= 2, got " + std::to_string(tokens));
  const int32_t bos = m.tokenizer->bos_id();
  std::vector<int32_t> ids = m.tokenizer->encode(text, bos >= 0);
  if (ids.size() < 2)
    fail("eval", "the text encodes to " + std::to_string(ids.size()) +
                     " token(s); outliers need at least 2: give a longer text");
  if (static_cast<int64_t>(ids.size()) > tokens) ids.resize(static_cast<size_t>(tokens));
  const int64_t ctx = std::max<int64_t>(1, m.config.max_seq_len);
  std::vector<std::vector<int32_t>> w;
  for (int64_t s = 0; s < static_cast<int64_t>(ids.size()); s += ctx) {
    const int64_t e = std::min<int64_t>(s + ctx, static_cast<int64_t>(ids.size()));
    w.emplace_back(ids.begin() + s, ids.begin() + e);
    if (bos >= 0) w.back()[0] = bos;
  }
  return w;
}

OutlierReport measure_outliers(const Model& m, const std::vector<std::vector<int32_t>>& windows, int top_k) {
  OutlierObserver obs(top_k);
  Decoder dec(m.config, m.weights);
  dec.set_observer(&obs);
  for (const auto& w : windows) {
    KvCache kv(m.config, 1, static_cast<int64_t>(w.size()), KvDtype::F32);
    std::vector<BatchEntry> b;
    b.reserve(w.size());
    for (size_t i = 0; i < w.size(); ++i) b.push_back({w[i], 0, static_cast<int64_t>(i), false});
    std::vector<float> none(1);
    dec.forward(b, kv, none.data());
  }
  return obs.report();
}

json outliers_json(const OutlierReport& r) {
  json sites = json::array();
  for (const auto& s : r.sites) {
    json top = json::array();
    for (const auto& [c, v] : s.top) top.push_back({{"channel", c}, {"max_abs", v}});
    sites.push_back({{"layer", s.layer},
                     {"site", act_site_name(s.site)},
                     {"cols", s.cols},
                     {"tokens", s.tokens},
                     {"max_abs", s.max_abs},
                     {"rms", s.rms},
                     {"ratio", s.ratio},
                     {"token_ratio", s.token_ratio},
                     {"kurtosis", s.kurtosis},
                     {"max_token", s.max_token},
                     {"top", top}});
  }
  json summary = {{"mean_ratio", r.mean_ratio},
                  {"mean_token_ratio", r.mean_token_ratio},
                  {"mean_kurtosis", r.mean_kurtosis}};
  if (r.worst >= 0) {
    const auto& w = r.sites[static_cast<size_t>(r.worst)];
    summary["worst"] = {{"layer", w.layer}, {"site", act_site_name(w.site)}, {"ratio", w.ratio}};
  } else {
    summary["worst"] = nullptr;
  }
  return {
      {"tokens", r.tokens},
      {"kurtosis_definition", "Pearson: E[(x - mean)^4] / var^2 over all elements of the site (normal = 3)"},
      {"summary", summary},
      {"sites", sites}};
}

}  // namespace lowbit::eval
