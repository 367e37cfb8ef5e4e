// Calibration: token windows sampled from any text file, and the statistics of every linear layer's input
// gathered through the decoder's ActivationObserver (per-channel |x| mean / max, mean x^2, and optionally the
// Gram matrix X^T X that GPTQ and AWQ need).
#pragma once
#include <Eigen/Dense>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "model/decoder.h"
#include "model/model.h"
#include "model/observer.h"
#include "quant/recipe.h"

namespace lowbit::quant {

struct CalibData {
  std::string file, sha256;
  int samples = 0, length = 0;
  uint64_t seed = 0;
  int64_t text_tokens = 0;                 // tokens in the whole file
  std::vector<std::vector<int32_t>> seqs;  // [samples][length]: BOS + a window of the text
  nlohmann::json to_json() const;
};

// Tokenizes the file and draws `samples` windows of `length` tokens (BOS first) at seeded random offsets.
// The length is capped at the model's context; short files give fewer/shorter windows (with a warning).
// Throws UsageError("quant") for a missing/empty file.
CalibData load_calibration(const CalibSpec& spec, const Tokenizer& tok, int64_t max_ctx, int32_t bos_id,
                           std::vector<std::string>* warnings);

// Running statistics of one activation site, over n tokens of `cols` channels.
struct SiteStats {
  int64_t cols = 0, n = 0;
  std::vector<double> sum_abs, sum_sq;  // [cols]
  std::vector<float> max_abs;           // [cols]
  Eigen::MatrixXf gram;                 // [cols, cols] sum over tokens of x x^T, when requested (else empty)
  std::vector<float> acts;              // [n, cols] the inputs themselves, when requested (else empty)
  // [cols, cols] sum over tokens of x_ref x^T, when requested (else empty): x_ref is the float model's input
  // at this site for the same token, x the input add() saw (GPTQ's float target, gptq.h)
  Eigen::MatrixXf cross;
  bool want_gram = false, want_acts = false;

  void add(const float* x, int64_t T, int64_t c);
  // cross += X_ref^T X for the T tokens add() saw last (x_ref, x: [T, c]).
  void add_cross(const float* x_ref, const float* x, int64_t T, int64_t c);
  std::vector<float> mean_abs() const;
  std::vector<float> mean_sq() const;
  float absmax() const;
  // The input is divided per channel by s (a scale folded into the layer before): update every statistic.
  void divide_channels(const std::vector<float>& s);
};

// Sites of a layer in this order: AttnIn, OIn, MlpIn, DownIn, KeyOut, ValueOut.
constexpr int kNumSites = 6;
int site_index(ActSite s);  // -1 for sites not collected (LayerOut)
struct LayerStats {
  std::array<SiteStats, kNumSites> sites;
  SiteStats& at(ActSite s) { return sites[site_index(s)]; }
  const SiteStats& at(ActSite s) const { return sites[site_index(s)]; }
};

// Runs the calibration windows through the model (batches of `batch_seqs` sequences) and returns statistics
// for layers [first, last]; the forward pass stops after layer `last` (cheap for early layers). `gram` adds
// X^T X for the four linear-input sites.
std::vector<LayerStats> collect_stats(const Model& m, const CalibData& d, int first, int last, bool gram,
                                      int batch_seqs = 8);

// Statistics of the classifier's input (the final RMSNorm of the last layer's output) on the calibration
// windows: one forward through every layer (a CalibStream run to its end).
SiteStats head_input_stats(const Model& m, const CalibData& d, bool gram, int batch_seqs = 8);

// The calibration tokens streamed through the model one layer at a time, in the order GPTQ / AWQ quantize:
// the residual stream of every token is kept ([tokens, dim] floats per batch), so layer l's statistics cost
// one forward of layer l instead of a forward through layers 0..l (n^2 / 2 layer forwards over a model).
// The statistics equal collect_stats(m, d, l, l, gram, batch_seqs) on the same weights bit for bit.
// What a layer's linears do to their input before the product (the activation route, kernels/matmul.h):
// xq[T, cols] from x[T, cols] at `site` of the layer being streamed. An empty function leaves x as it is.
using ActRoute = std::function<void(ActSite site, const float* x, int64_t T, int64_t cols, float* xq)>;

class CalibStream {
 public:
  // float_reference: the stream also carries the float model's residual stream (a second [tokens, dim] per
  // batch, moved by each layer's float weights in stats()), so that stats() can pair every linear input of
  // the quantized model with the float model's input for the same token (SiteStats::cross).
  CalibStream(const Model& m, const CalibData& d, int batch_seqs = 8, bool float_reference = false);
  ~CalibStream();
  int next_layer() const { return next_; }  // the layer whose inputs the stream holds
  int64_t tokens() const;                   // calibration tokens streamed (every window of every batch)
  // Statistics of next_layer() with its current weights. The stream does not move, unless move_float: then it
  // moves to the next layer with these float outputs, the one forward per layer of AutoAWQ's order (the next
  // layer's inputs come from the float layer; advance() is then not called for this layer).
  // down_acts: DownIn keeps its inputs (SiteStats::acts) instead of a Gram matrix (AWQ scores down_proj's
  // candidates on them: cheaper than a cols^2 Gram matrix when cols is the FFN width).
  // With a float reference: the four linear-input sites also get `cross` (their Gram matrix then needs
  // gram), and `act` is applied to the stream's inputs before both (the Gram matrix of what the kernels
  // multiply); move_float is refused (the stream moves in advance()).
  LayerStats stats(bool gram, bool move_float = false, bool down_acts = false, const ActRoute& act = {});
  // Runs next_layer() with its current (by now quantized) weights: the stream moves to the next layer.
  void advance();
  // Once every layer has been streamed: statistics of the classifier's input (the final RMSNorm of the
  // stream), the lm_head's Gram matrix and importance; with a float reference, gram and `cross`, also
  // SiteStats::cross.
  SiteStats head_stats(bool gram, bool cross = true) const;
  bool float_reference() const { return !ref_states_.empty(); }

 private:
  const Model& m_;
  std::vector<std::vector<BatchEntry>> batches_;
  std::vector<std::vector<float>> states_;      // per batch: [tokens, dim]
  std::vector<std::vector<float>> ref_states_;  // per batch: [tokens, dim], the float model's (or empty)
  std::unique_ptr<KvCache> kv_;
  int next_ = 0;
};

}  // namespace lowbit::quant
