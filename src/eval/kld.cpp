#include "eval/kld.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace lowbit::eval {

namespace {
nlohmann::json ppl_json(const Perplexity& p) {
  return {{"ppl", p.ppl},
          {"ppl_stderr", p.ppl_stderr},
          {"mean_nll", p.mean_nll},
          {"mean_nll_stderr", p.mean_nll_stderr},
          {"tokens", p.tokens}};
}
}  // namespace

KldSummary summarize_kld(const Baseline& base, const EvalRun& run, int64_t vocab) {
  const ScoreTable& b = base.table;
  const ScoreTable& v = run.scores;
  if (run.compare.size() != b.rows.size() || v.rows.size() != b.rows.size())
    throw Error("eval", "variant run and baseline have different numbers of scored tokens (internal error)");
  KldSummary s;
  s.tokens = b.size();
  s.k = b.k;
  const double n = static_cast<double>(s.tokens);
  SampleStats kl, nb, nv, diff, agree, dp, dp2;
  double sum_ab = 0;
  std::vector<double> kls;
  kls.reserve(b.rows.size());
  for (size_t i = 0; i < b.rows.size(); ++i) {
    const RowCompare& c = run.compare[i];
    kl.add(c.kl);
    kls.push_back(c.kl);
    const double a = -v.rows[i].logprob, r = -b.rows[i].logprob;
    nv.add(a);
    nb.add(r);
    diff.add(a - r);
    sum_ab += a * r;
    agree.add(c.same_top1 ? 1.0 : 0.0);
    dp.add(c.dp);
    dp2.add(c.dp * c.dp);
    s.tail_mean += b.rows[i].tail;
    s.tail_max = std::max(s.tail_max, b.rows[i].tail);
  }
  s.tail_mean /= std::max(1.0, n);
  std::sort(kls.begin(), kls.end());
  s.kl_mean = kl.mean();
  s.kl_mean_stderr = kl.stderr_mean();
  s.kl_median = percentile_sorted(kls, 0.5);
  s.kl_p90 = percentile_sorted(kls, 0.9);
  s.kl_p99 = percentile_sorted(kls, 0.99);
  s.kl_p999 = percentile_sorted(kls, 0.999);
  s.kl_max = kls.empty() ? 0 : kls.back();
  s.kl_min = kls.empty() ? 0 : kls.front();
  s.base = perplexity_from(nb);
  s.variant = perplexity_from(nv);
  s.ln_ratio = diff.mean();
  s.ln_ratio_stderr = diff.stderr_mean();
  // Covariance of the two mean NLLs (paired samples), then the delta method for PPL_v - PPL_b.
  const double cov = n > 1 ? (sum_ab / n - nv.mean() * nb.mean()) / (n - 1) : 0.0;
  const double va = nv.variance(), vb = nb.variance();
  s.nll_correlation = va > 0 && vb > 0 ? (sum_ab / n - nv.mean() * nb.mean()) / std::sqrt(va * vb) : 0.0;
  s.dppl = s.variant.ppl - s.base.ppl;
  const double var_d = s.variant.ppl * s.variant.ppl * s.variant.mean_nll_stderr * s.variant.mean_nll_stderr +
                       s.base.ppl * s.base.ppl * s.base.mean_nll_stderr * s.base.mean_nll_stderr -
                       2 * s.variant.ppl * s.base.ppl * cov;
  s.dppl_stderr = std::sqrt(std::max(0.0, var_d));
  s.top1_agree = agree.mean();
  s.top1_agree_stderr = agree.stderr_mean();
  s.mean_dp = dp.mean();
  s.rms_dp = std::sqrt(dp2.mean());
  s.rms_dp_stderr = s.rms_dp > 0 ? dp2.stderr_mean() / (2 * s.rms_dp) : 0.0;
  s.base_hist = base.meta.histograms;
  if (s.base_hist.top1_prob.total() != s.tokens) s.base_hist = score_histograms(b, vocab);
  s.variant_hist = score_histograms(v, vocab);
  return s;
}

nlohmann::json KldSummary::to_json() const {
  return {{"tokens", tokens},
          {"baseline_topk", k},
          {"kld",
           {{"mean", kl_mean},
            {"mean_stderr", kl_mean_stderr},
            {"median", kl_median},
            {"p90", kl_p90},
            {"p99", kl_p99},
            {"p99_9", kl_p999},
            {"max", kl_max},
            {"min", kl_min}}},
          {"baseline_tail_mass", {{"mean", tail_mean}, {"max", tail_max}}},
          {"ppl_baseline", ppl_json(base)},
          {"ppl_variant", ppl_json(variant)},
          {"delta_ppl", {{"value", dppl}, {"stderr", dppl_stderr}}},
          {"ln_ppl_ratio", {{"value", ln_ratio}, {"stderr", ln_ratio_stderr}}},
          {"nll_correlation", nll_correlation},
          {"top1_agreement", {{"value", top1_agree}, {"stderr", top1_agree_stderr}}},
          {"delta_p", {{"rms", rms_dp}, {"rms_stderr", rms_dp_stderr}, {"mean", mean_dp}}},
          {"histograms", {{"baseline", base_hist.to_json()}, {"variant", variant_hist.to_json()}}}};
}

}  // namespace lowbit::eval
