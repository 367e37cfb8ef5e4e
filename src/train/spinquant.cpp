// SpinQuant training loop (see spinquant.h).
#include "train/spinquant.h"

#include <Eigen/Dense>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/timer.h"
#include "train/cayley.h"
#include "train/torch_decoder.h"

namespace lowbit::train {
namespace {

using torch::Tensor;

Eigen::MatrixXd to_eigen(const std::vector<double>& v, int64_t n) {
  Eigen::MatrixXd r(n, n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) r(i, j) = v[static_cast<size_t>(i * n + j)];
  return r;
}
std::vector<double> from_eigen(const Eigen::MatrixXd& r) {
  std::vector<double> v(static_cast<size_t>(r.size()));
  for (Eigen::Index i = 0; i < r.rows(); ++i)
    for (Eigen::Index j = 0; j < r.cols(); ++j) v[static_cast<size_t>(i * r.cols() + j)] = r(i, j);
  return v;
}
Tensor to_tensor(const Eigen::MatrixXd& r) {
  // Eigen is column-major: the transpose's storage is r row-major.
  const Eigen::MatrixXd rt = r.transpose();
  return torch::from_blob(const_cast<double*>(rt.data()), {r.rows(), r.cols()}, torch::kDouble)
      .to(torch::kFloat);
}
Eigen::MatrixXd grad_of(const Tensor& t) {
  const Tensor g = t.grad().to(torch::kDouble).contiguous();
  const int64_t n = g.size(0);
  Eigen::MatrixXd r(n, n);
  const double* p = g.data_ptr<double>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) r(i, j) = p[i * n + j];
  return r;
}

}  // namespace

nlohmann::json SpinResult::to_json(const SpinOptions& o) const {
  nlohmann::json curve = nlohmann::json::array();
  for (double l : losses) curve.push_back(std::round(l * 1e5) / 1e5);
  return {{"optimizer", "cayley-sgd"},
          {"loss", o.loss},
          {"steps", o.steps},
          {"lr", o.lr},
          {"tokens", tokens},
          {"windows", windows},
          {"learned", {{"r1", learned_r1}, {"r2", learned_r2}}},
          {"fake_quant",
           {{"activations",
             o.act != FormatId::F32 ? nlohmann::json(format_info(o.act).name) : nlohmann::json(nullptr)},
            {"act_clip", o.act_clip},
            {"act_scale", act_scale_name(o.act_scale)},
            {"kv_cache", o.kv_cache.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.kv_cache)}}},
          {"loss_before", loss_before},
          {"loss_after", loss_after},
          {"losses", curve},
          {"orthogonality_error", orthogonality_error},
          {"seconds", std::round(seconds * 10) / 10}};
}

SpinResult learn_rotations(const Model& m, const std::vector<std::vector<int32_t>>& windows,
                           std::vector<double> r1, std::vector<double> r2, const Hadamard* r4,
                           const SpinOptions& o) {
  Timer timer;
  const ModelConfig& c = m.config;
  const int64_t D = c.dim, hd = c.head_dim;
  if (windows.empty() || windows.front().size() < 2)
    throw UsageError("train", "SpinQuant needs calibration windows of at least 2 tokens; pass --calib FILE");
  if (!r1.empty() && static_cast<int64_t>(r1.size()) != D * D)
    throw UsageError(
        "train", "R1 has " + std::to_string(r1.size()) + " entries, not dim^2 = " + std::to_string(D * D));
  if (!r2.empty() && static_cast<int64_t>(r2.size()) != hd * hd)
    throw UsageError("train", "R2 has " + std::to_string(r2.size()) +
                                  " entries, not head_dim^2 = " + std::to_string(hd * hd));
  const int64_t S = static_cast<int64_t>(windows.front().size());
  const int64_t n_win = std::clamp<int64_t>((o.tokens + S - 1) / S, 1, static_cast<int64_t>(windows.size()));
  const Tensor tokens = window_tokens(windows, n_win);
  const KvFakeQuant kv = make_kv_fake_quant(o.kv_cache, c);
  const FakeQuantOptions fq{o.act, o.act_clip, o.act_scale, &kv};
  const TorchModel tm = torch_model(m, torch::kFloat, r4);
  if (o.loss != "ce" && o.loss != "kl")
    throw UsageError("train", "SpinQuant loss '" + o.loss + "' is not one of ce, kl");
  // The float model's next-token log-probabilities: rotations do not change them, so once for all steps.
  Tensor teacher;
  if (o.loss == "kl") {
    torch::NoGradGuard ng;
    teacher = forward_logits(tm, tokens, {}, {}).log_softmax(-1);
  }
  auto objective = [&](const Tensor& logits) {
    return o.loss == "kl" ? kl_to_teacher(teacher, logits) : next_token_loss(logits, tokens);
  };

  SpinResult res;
  res.tokens = n_win * S, res.windows = static_cast<int>(n_win);
  res.r1 = std::move(r1), res.r2 = std::move(r2);
  Eigen::MatrixXd R1 = res.r1.empty() ? Eigen::MatrixXd() : to_eigen(res.r1, D);
  Eigen::MatrixXd R2 = res.r2.empty() ? Eigen::MatrixXd() : to_eigen(res.r2, hd);
  const bool t1 = R1.size() > 0 && o.learn_r1, t2 = R2.size() > 0 && o.learn_r2;
  res.learned_r1 = t1 && o.steps > 0, res.learned_r2 = t2 && o.steps > 0;
  for (int step = 0; step < o.steps && (t1 || t2); ++step) {
    Tensor a = R1.size() ? to_tensor(R1).requires_grad_(t1) : Tensor();
    Tensor b = R2.size() ? to_tensor(R2).requires_grad_(t2) : Tensor();
    const Tensor loss = objective(forward_logits(tm, tokens, a, b, fq));
    loss.backward();
    res.losses.push_back(loss.item<double>());
    if (!std::isfinite(res.losses.back()))
      throw Error("train", "SpinQuant's loss is not finite at step " + std::to_string(step) +
                               "; lower spin_lr (now " + std::to_string(o.lr) + ")");
    if (t1) cayley_step(R1, grad_of(a), o.lr);
    if (t2) cayley_step(R2, grad_of(b), o.lr);
  }
  {
    torch::NoGradGuard ng;
    const Tensor a = R1.size() ? to_tensor(R1) : Tensor(), b = R2.size() ? to_tensor(R2) : Tensor();
    res.loss_after = objective(forward_logits(tm, tokens, a, b, fq)).item<double>();
  }
  res.loss_before = res.losses.empty() ? res.loss_after : res.losses.front();
  if (R1.size()) res.r1 = from_eigen(R1), res.orthogonality_error = orthogonality_error(R1);
  if (R2.size())
    res.r2 = from_eigen(R2),
    res.orthogonality_error = std::max(res.orthogonality_error, orthogonality_error(R2));
  res.seconds = timer.seconds();
  return res;
}

namespace {
SpinResult learn_with_record(const Model& m, const std::vector<std::vector<int32_t>>& windows,
                             std::vector<double> r1, std::vector<double> r2, const Hadamard* r4,
                             const SpinOptions& o, nlohmann::json* record) {
  SpinResult r = learn_rotations(m, windows, std::move(r1), std::move(r2), r4, o);
  if (record) *record = r.to_json(o);
  return r;
}
}  // namespace

}  // namespace lowbit::train

extern "C" lowbit::train::LearnRotationsFn lowbit_train_entry() {
  return &lowbit::train::learn_with_record;
}
