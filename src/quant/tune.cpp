#include "quant/tune.h"

#include <map>
#include <memory>

#include "core/error.h"
#include "quant/train_library.h"
#include "tensor/qtensor.h"
#include "train/tune_scales.h"

namespace lowbit::quant {

nlohmann::json tune_quantized(const Model& reference, Model& m, const Recipe& r,
                              const std::vector<std::vector<int32_t>>& windows) {
  train::TuneOptions o;
  o.steps = r.tune.steps, o.lr = r.tune.lr, o.batch = r.tune.batch, o.norms = r.tune.norms;
  set_fake_quant(o, r, m.config);  // the quantizers the checkpoint runs with, as SpinQuant trains with them
  static const auto tune =
      train_entry<train::TuneScalesFn>("lowbit_train_tune_entry", "tune=" + std::to_string(r.tune.steps));
  nlohmann::json record;
  const train::TuneResult res = tune(reference, m, windows, o, &record);

  auto named = m.weights.named_matrices();
  std::map<std::string, WeightMatrix*> mats(named.begin(), named.end());
  const bool tied = m.weights.tied();
  for (const auto& [name, factors] : res.scales) {
    WeightMatrix* w = mats.at(name);
    if (w->kind != WeightKind::Quant || rescale_grid(*w->q).cells() != static_cast<int64_t>(factors.size()))
      throw Error("quant", "scale tuning returned " + std::to_string(factors.size()) + " factors for " +
                               name + ", which does not have that many scale cells");
    WeightMatrix t =
        make_quant_weight(std::make_shared<QuantizedMatrix>(rescale_cells(*w->q, factors.data())));
    t.act_format = w->act_format, t.act_static_scale = w->act_static_scale, t.act_clip = w->act_clip;
    t.act_scale = w->act_scale;
    *w = std::move(t);
  }
  if (tied) m.weights.lm_head = m.weights.tok_embed;  // one storage, as before
  auto times = [](std::vector<float>& g, const std::vector<float>& f) {
    if (g.size() != f.size()) throw Error("quant", "scale tuning returned gamma factors of the wrong size");
    for (size_t i = 0; i < g.size(); ++i) g[i] *= f[i];
  };
  for (size_t l = 0; l < res.attn_norm.size(); ++l) {
    times(m.weights.layers[l].attn_norm, res.attn_norm[l]);
    times(m.weights.layers[l].ffn_norm, res.ffn_norm[l]);
  }
  if (!res.final_norm.empty()) times(m.weights.final_norm, res.final_norm);
  if (res.reverted)
    record["warning"] = "scale tuning raised the KL on the calibration windows (" +
                        std::to_string(res.loss_before) + " -> " + std::to_string(res.reverted_loss) +
                        "); the scales and gammas stay as quantization left them. Lower tune_lr or raise "
                        "tune_batch";
  record["note"] =
      "tensors[].rel_error_* measure each matrix as quantization left it, before this tuning moved its "
      "scales";
  return record;
}

}  // namespace lowbit::quant
