// `lowbit eval outliers`: activation outliers at every linear input of every layer, before and after a
// rotation. 4-bit activations are quantized per token with one scale set by the token's largest |x|; a
// channel that is always 20x the rest (an "outlier channel") leaves the other channels a few codes, which is
// why W4A4 needs a rotation (QuaRot, DuQuant) that spreads that channel over all of them. This measures it on
// the user's model: per (layer, site) max |x| / RMS, kurtosis and the channels that hold the largest values.
//
// Sites are the ActivationObserver's linear inputs (model/observer.h): attn_in (q/k/v input after the
// attention norm), o_in (o_proj input), mlp_in (gate/up input after the FFN norm), down_in (down_proj input,
// after the online Hadamard of a rotated model: what the product sees).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "model/decoder.h"
#include "model/model.h"
#include "model/observer.h"

namespace lowbit::eval {

// The statistics of one (layer, site) over every element of its activations [tokens, cols].
struct SiteOutliers {
  int layer = 0;
  ActSite site = ActSite::AttnIn;
  int64_t cols = 0, tokens = 0;
  double max_abs = 0;      // largest |x|
  double rms = 0;          // sqrt(mean x^2) over all elements
  double ratio = 0;        // max_abs / rms
  double token_ratio = 0;  // mean over tokens of (max |x| / RMS of that token): what a per-token scale sees
  double kurtosis = 0;     // Pearson: E[(x - mean)^4] / var^2 over all elements (normal = 3)
  int64_t max_token = 0;   // token index (in feeding order) of max_abs
  std::vector<std::pair<int64_t, float>> top;  // [<= top_k] (channel, max |x| of the channel), largest first
};

struct OutlierReport {
  int64_t tokens = 0;               // tokens fed
  std::vector<SiteOutliers> sites;  // layer-major, sites in the order attn_in, o_in, mlp_in, down_in
  // Whole-model summary.
  int worst = -1;  // index into sites of the largest ratio
  double mean_ratio = 0, mean_kurtosis = 0, mean_token_ratio = 0;
};

// Accumulates per-(layer, site) moments and per-channel max |x| from the decoder's hook; report() finishes
// them. Sums are in double; kurtosis comes from raw moments shifted by the site's first value, so a large
// mean does not cancel the fourth central moment.
class OutlierObserver : public ActivationObserver {
 public:
  explicit OutlierObserver(int top_k = 8) : top_k_(top_k) {}
  void observe(int layer, ActSite site, const float* x, int64_t T, int64_t cols) override;
  OutlierReport report() const;

 private:
  struct Acc {
    int64_t cols = 0, tokens = 0;
    bool has_shift = false;
    double shift = 0;                       // first value seen: moments are of (x - shift)
    double s1 = 0, s2 = 0, s3 = 0, s4 = 0;  // sums of (x - shift)^k
    double sq = 0;                          // sum of x^2 (RMS)
    double max_abs = 0, token_ratio_sum = 0;
    int64_t max_token = 0;
    std::vector<float> chan_max;  // [cols] max |x| per channel
  };
  int top_k_;
  std::map<std::pair<int, int>, Acc> acc_;  // (layer, site) -> sums
};

// The linear-input sites reported, in report order.
const std::vector<ActSite>& outlier_sites();

// Windows of the text's first `tokens` tokens (tokenized with BOS), each at most the model's context long,
// every window's first token replaced by BOS when the tokenizer has one. Error("eval") when the text has
// fewer than 2 tokens.
std::vector<std::vector<int32_t>> outlier_windows(const Model& m, const std::string& text, int64_t tokens);

// Feeds the windows through `m` (one prefill per window, F32 KV cache) and returns the statistics.
OutlierReport measure_outliers(const Model& m, const std::vector<std::vector<int32_t>>& windows,
                               int top_k = 8);

// {"tokens", "summary": {...}, "sites": [{"layer", "site", "cols", "max_abs", "rms", "ratio", "token_ratio",
// "kurtosis", "max_token", "top": [{"channel", "max_abs"}]}]}
nlohmann::json outliers_json(const OutlierReport& r);

// The chart: per layer and site, max|x|/RMS before (and after, when given) the rotation, as grouped bars on a
// log scale. `title` names the model and the rotation. Self-contained SVG / HTML (no scripts, no external
// files); the HTML adds the table.
std::string outliers_chart_svg(const OutlierReport& before, const OutlierReport* after,
                               const std::string& title, const std::string& after_label);
std::string outliers_chart_html(const OutlierReport& before, const OutlierReport* after,
                                const std::string& title, const std::string& after_label);

}  // namespace lowbit::eval
