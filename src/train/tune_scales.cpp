#include "train/tune_scales.h"

#include <torch/optim/adam.h>

#include <cmath>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "arch/arch_table.h"
#include "core/error.h"
#include "core/timer.h"
#include "tensor/qtensor.h"
#include "train/torch_decoder.h"

namespace lowbit::train {
namespace {

using torch::Tensor;

// One tuned matrix: its log-factors theta [grid.rows, grid.cols] and the cell size that expands them.
struct CellParam {
  std::string name;
  Tensor theta;
  int64_t row_block = 1, col_block = 1;
};

// base * exp(theta) expanded over the cells.
Tensor scaled(const Tensor& base, const CellParam* p) {
  if (!p) return base;
  Tensor mu = p->theta.exp();
  if (p->row_block > 1) mu = mu.repeat_interleave(p->row_block, 0).narrow(0, 0, base.size(0));
  if (p->col_block > 1) mu = mu.repeat_interleave(p->col_block, 1).narrow(1, 0, base.size(1));
  return base * mu;
}

// A parameter for w's cells, or nullptr when w is not quantized or its scales cannot move.
std::unique_ptr<CellParam> cell_param(const std::string& name, const WeightMatrix& w, TuneResult* res) {
  if (w.kind == WeightKind::Ggml) {
    res->fixed.push_back(name);
    return nullptr;
  }
  if (w.kind != WeightKind::Quant || w.q->is_plain()) return nullptr;
  const ScaleGrid g = rescale_grid(*w.q);
  if (g.cells() == 0) {
    res->fixed.push_back(name);
    return nullptr;
  }
  auto p = std::make_unique<CellParam>();
  p->name = name;
  p->theta = torch::zeros({g.rows, g.cols}, torch::kFloat).requires_grad_(true);
  p->row_block = g.row_block, p->col_block = g.col_block;
  return p;
}

std::vector<float> factors_of(const Tensor& theta) {
  const Tensor f = theta.detach().exp().contiguous().reshape({-1});
  return std::vector<float>(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
}

}  // namespace

nlohmann::json TuneResult::to_json(const TuneOptions& o) const {
  nlohmann::json curve = nlohmann::json::array();
  for (double l : losses) curve.push_back(std::round(l * 1e6) / 1e6);
  return {{"optimizer", "adam"},
          {"loss", "kl"},
          {"steps", o.steps},
          {"lr", o.lr},
          {"batch", o.batch},
          {"norms", o.norms},
          {"tokens", tokens},
          {"windows", windows},
          {"parameters", parameters},
          {"matrices", scales.size()},
          {"fixed", fixed},
          {"fake_quant",
           {{"activations",
             o.act != FormatId::F32 ? nlohmann::json(format_info(o.act).name) : nlohmann::json(nullptr)},
            {"act_clip", o.act_clip},
            {"act_scale", act_scale_name(o.act_scale)},
            {"kv_cache", o.kv_cache.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.kv_cache)}}},
          {"loss_before", loss_before},
          {"loss_after", loss_after},
          {"reverted", reverted},
          {"reverted_loss", reverted ? nlohmann::json(reverted_loss) : nlohmann::json(nullptr)},
          {"losses", curve},
          {"seconds", std::round(seconds * 10) / 10}};
}

TuneResult tune_scales(const Model& reference, const Model& quantized,
                       const std::vector<std::vector<int32_t>>& windows, const TuneOptions& o) {
  Timer timer;
  const ModelConfig& c = quantized.config;
  if (windows.empty() || windows.front().size() < 2)
    throw UsageError("train",
                     "scale tuning needs calibration windows of at least 2 tokens; pass --calib FILE");
  if (reference.config.dim != c.dim || reference.config.n_layers != c.n_layers ||
      reference.config.vocab_size != c.vocab_size)
    throw UsageError("train", "the reference model's shape differs from the quantized model's");
  if (o.steps < 0 || !(o.lr > 0) || o.batch < 1)
    throw UsageError("train", "scale tuning needs steps >= 0, lr > 0 and batch >= 1");
  const int64_t S = static_cast<int64_t>(windows.front().size());
  const int64_t n_win = static_cast<int64_t>(windows.size());
  const Tensor tokens = window_tokens(windows, n_win);
  const KvFakeQuant kv = make_kv_fake_quant(o.kv_cache, c);
  const FakeQuantOptions fq{o.act, o.act_clip, o.act_scale, &kv};

  // The teacher: the float model's log-probabilities, kept for every window when they fit in 512 MiB,
  // else computed per batch (a forward without gradient).
  const TorchModel teacher_model = torch_model(reference, torch::kFloat);
  const bool keep_teacher = n_win * S * c.vocab_size * 4 <= (int64_t{512} << 20);
  Tensor teacher_all;
  auto teacher = [&](int64_t w0, int64_t nb) {
    if (teacher_all.defined()) return teacher_all.narrow(0, w0, nb);
    torch::NoGradGuard ng;
    return forward_logits(teacher_model, tokens.narrow(0, w0, nb), {}, {}).log_softmax(-1);
  };
  if (keep_teacher) teacher_all = teacher(0, n_win);

  // The student: the quantized model with its gammas unfolded, and a parameter per tunable matrix.
  TuneResult res;
  const TorchModel base = torch_model(quantized, torch::kFloat, nullptr, false);
  Model q = quantized;  // named_matrices needs a mutable ModelWeights; the handles are shared
  std::vector<std::unique_ptr<CellParam>> cells;  // in named_matrices order
  std::map<const QuantizedMatrix*, CellParam*> by_storage;
  std::map<std::string, CellParam*> by_name;
  for (auto& [name, w] : q.weights.named_matrices()) {
    const QuantizedMatrix* key = w->kind == WeightKind::Quant ? w->q.get() : nullptr;
    if (key && by_storage.count(key)) {  // a tied lm_head: its embedding's factors
      by_name[name] = by_storage[key];
      continue;
    }
    std::unique_ptr<CellParam> p = cell_param(name, *w, &res);
    if (!p) continue;
    by_name[name] = by_storage[key] = p.get();
    cells.push_back(std::move(p));
  }
  std::vector<Tensor> params;
  for (const auto& p : cells) params.push_back(p->theta);
  std::vector<Tensor> g_attn, g_ffn;
  Tensor g_final;
  if (o.norms) {
    for (int64_t l = 0; l < c.n_layers; ++l) {
      g_attn.push_back(torch::zeros({c.dim}, torch::kFloat).requires_grad_(true));
      g_ffn.push_back(torch::zeros({c.dim}, torch::kFloat).requires_grad_(true));
      params.push_back(g_attn.back()), params.push_back(g_ffn.back());
    }
    g_final = torch::zeros({c.dim}, torch::kFloat).requires_grad_(true);
    params.push_back(g_final);
  }
  for (const Tensor& p : params) res.parameters += p.numel();
  auto param = [&](TensorRole r, int64_t l) -> const CellParam* {
    auto it = by_name.find(lowbit_tensor_name(r, l));
    return it == by_name.end() ? nullptr : it->second;
  };
  auto student = [&]() {
    TorchModel m = base;
    m.embed = scaled(base.embed, param(TensorRole::TokEmbed, -1));
    m.head = scaled(base.head, param(TensorRole::LmHead, -1));
    if (g_final.defined()) m.final_gamma = base.final_gamma * g_final.exp();
    for (int64_t l = 0; l < c.n_layers; ++l) {
      TorchLayer& t = m.layers[static_cast<size_t>(l)];
      const TorchLayer& b = base.layers[static_cast<size_t>(l)];
      t.wq = scaled(b.wq, param(TensorRole::Q, l)), t.wk = scaled(b.wk, param(TensorRole::K, l));
      t.wv = scaled(b.wv, param(TensorRole::V, l)), t.wo = scaled(b.wo, param(TensorRole::O, l));
      t.gate = scaled(b.gate, param(TensorRole::Gate, l)), t.up = scaled(b.up, param(TensorRole::Up, l));
      t.down = scaled(b.down, param(TensorRole::Down, l));
      if (o.norms) {
        t.attn_gamma = b.attn_gamma * g_attn[static_cast<size_t>(l)].exp();
        t.ffn_gamma = b.ffn_gamma * g_ffn[static_cast<size_t>(l)].exp();
      }
    }
    return m;
  };
  auto full_loss = [&]() {
    torch::NoGradGuard ng;
    const TorchModel m = student();
    double sum = 0;
    for (int64_t w0 = 0; w0 < n_win; w0 += o.batch) {
      const int64_t nb = std::min<int64_t>(o.batch, n_win - w0);
      sum += kl_to_teacher(teacher(w0, nb), forward_logits(m, tokens.narrow(0, w0, nb), {}, {}, fq))
                 .item<double>() *
             static_cast<double>(nb);
    }
    return sum / static_cast<double>(n_win);
  };

  res.tokens = n_win * S, res.windows = static_cast<int>(n_win);
  res.loss_before = full_loss();
  if (!params.empty() && o.steps > 0) {
    torch::optim::Adam opt(params, torch::optim::AdamOptions(o.lr));
    for (int step = 0; step < o.steps; ++step) {
      const int64_t w0 = (static_cast<int64_t>(step) * o.batch) % n_win;
      const int64_t nb = std::min<int64_t>(o.batch, n_win - w0);
      opt.zero_grad();
      const Tensor loss =
          kl_to_teacher(teacher(w0, nb), forward_logits(student(), tokens.narrow(0, w0, nb), {}, {}, fq));
      loss.backward();
      res.losses.push_back(loss.item<double>());
      if (!std::isfinite(res.losses.back()))
        throw Error("train", "scale tuning's loss is not finite at step " + std::to_string(step) +
                                 "; lower tune_lr (now " + std::to_string(o.lr) + ")");
      opt.step();
    }
  }
  res.loss_after = full_loss();
  // Adam moves every factor by about lr per step whatever its gradient's size, so too large a step size
  // (or a quantization error already near the noise) can end above the start: keep the start then.
  if (!(res.loss_after < res.loss_before)) {
    torch::NoGradGuard ng;
    for (Tensor& p : params) p.zero_();
    res.reverted_loss = res.loss_after;
    res.loss_after = res.loss_before;
    res.reverted = true;
  }
  for (const auto& p : cells) res.scales.emplace_back(p->name, factors_of(p->theta));
  if (o.norms) {
    for (int64_t l = 0; l < c.n_layers; ++l) {
      res.attn_norm.push_back(factors_of(g_attn[static_cast<size_t>(l)]));
      res.ffn_norm.push_back(factors_of(g_ffn[static_cast<size_t>(l)]));
    }
    res.final_norm = factors_of(g_final);
  }
  res.seconds = timer.seconds();
  return res;
}

namespace {
TuneResult tune_with_record(const Model& reference, const Model& quantized,
                            const std::vector<std::vector<int32_t>>& windows, const TuneOptions& o,
                            nlohmann::json* record) {
  TuneResult r = tune_scales(reference, quantized, windows, o);
  if (record) *record = r.to_json(o);
  return r;
}
}  // namespace

}  // namespace lowbit::train

extern "C" lowbit::train::TuneScalesFn lowbit_train_tune_entry() {
  return &lowbit::train::tune_with_record;
}
