// QuaRot-style offline rotation (see rotate.h).
#include "quant/rotate.h"

#include <cstdlib>

#include <Eigen/Dense>
#include <filesystem>
#include <optional>
#include <random>

#include "core/error.h"
#include "core/parallel.h"
#include "io/safetensors.h"
#include "kernels/matmul.h"
#include "kv/kv_rotation.h"
#include "quant/train_library.h"
#include "train/spinquant.h"

namespace lowbit::quant {
namespace {

using nlohmann::json;

[[noreturn]] void usage(const std::string& msg) {
  throw UsageError("quant", msg);
}

// An orthogonal matrix Q of order n applied to vectors: x <- Q x. Either a (randomized) normalised Hadamard
// Q = H diag(signs), or a dense matrix.
struct Orthogonal {
  int64_t n = 0;
  Hadamard h;                 // when valid
  std::vector<float> signs;   // [n] +-1, empty = all +1
  std::vector<double> dense;  // [n, n] row-major, when !h.valid()
  std::string learned;        // how an explicit (learned) dense matrix was made; empty for generated ones

  // `count` consecutive vectors of n floats at x.
  void apply(float* x, int64_t count) const {
    if (h.valid()) {
      if (!signs.empty())
        for (int64_t v = 0; v < count; ++v)
          for (int64_t i = 0; i < n; ++i) x[v * n + i] *= signs[i];
      hadamard_transform(h, x, count);
      return;
    }
    parallel_for(count, 16, [&](int64_t v0, int64_t v1) {
      std::vector<double> y(static_cast<size_t>(n));
      for (int64_t v = v0; v < v1; ++v) {
        float* xv = x + v * n;
        for (int64_t i = 0; i < n; ++i) {
          double acc = 0;
          const double* qi = dense.data() + i * n;
          for (int64_t j = 0; j < n; ++j) acc += qi[j] * xv[j];
          y[i] = acc;
        }
        for (int64_t i = 0; i < n; ++i) xv[i] = static_cast<float>(y[i]);
      }
    });
  }
  json describe(bool randomized) const {
    if (!learned.empty()) return {{"kind", "learned"}, {"order", n}, {"how", learned}};
    if (!h.valid()) return {{"kind", "random-orthogonal"}, {"order", n}, {"how", "QR of a seeded Gaussian"}};
    return {{"kind", randomized ? "randomized-hadamard" : "hadamard"},
            {"order", n},
            {"factor", h.m},
            {"construction", h.construction}};
  }
};

// Q of order n: a Hadamard with random signs (randomized) when one is known, else QR of a seeded Gaussian.
Orthogonal make_orthogonal(int64_t n, const HadamardFactors& f, uint64_t seed, bool randomized) {
  Orthogonal q;
  q.n = n;
  std::mt19937_64 rng(seed);
  if (auto h = plan_hadamard(n, f)) {
    q.h = std::move(*h);
    if (randomized) {
      q.signs.resize(static_cast<size_t>(n));
      for (auto& s : q.signs) s = (rng() & 1) ? -1.0f : 1.0f;
    }
    return q;
  }
  std::normal_distribution<double> nd(0.0, 1.0);
  Eigen::MatrixXd g(n, n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) g(i, j) = nd(rng);
  Eigen::HouseholderQR<Eigen::MatrixXd> qr(g);
  Eigen::MatrixXd Q = qr.householderQ();
  // Signs of R's diagonal moved into Q make the distribution uniform (Haar) rather than biased by
  // Householder.
  const Eigen::MatrixXd R = qr.matrixQR();
  for (int64_t j = 0; j < n; ++j)
    if (R(j, j) < 0) Q.col(j) *= -1.0;
  q.dense.resize(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) q.dense[i * n + j] = Q(i, j);
  return q;
}

// The matrix of q as row-major [n, n] doubles: apply() to the rows of the identity gives Q e_i = column i.
std::vector<double> dense_matrix(const Orthogonal& q) {
  const int64_t n = q.n;
  std::vector<float> eye(static_cast<size_t>(n * n), 0.0f);
  for (int64_t i = 0; i < n; ++i) eye[static_cast<size_t>(i * n + i)] = 1.0f;
  q.apply(eye.data(), n);
  std::vector<double> m(eye.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) m[static_cast<size_t>(i * n + j)] = eye[static_cast<size_t>(j * n + i)];
  return m;
}

// An explicit matrix (RotationSpec::r1_matrix / r2_matrix) as an Orthogonal; UsageError when its size or
// orthogonality is wrong.
Orthogonal explicit_orthogonal(const char* what, int64_t n, const std::vector<double>& m) {
  if (static_cast<int64_t>(m.size()) != n * n)
    usage(std::string(what) + " was given as " + std::to_string(m.size()) + " numbers, not " +
          std::to_string(n) + "^2");
  Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> q(m.data(), n, n);
  const double err = (q * q.transpose() - Eigen::MatrixXd::Identity(n, n)).cwiseAbs().maxCoeff();
  if (!(err < 1e-4))
    usage(std::string(what) + " is not orthogonal (max |R R^T - I| = " + std::to_string(err) +
          "); rotating by it would change the model's function");
  Orthogonal o;
  o.n = n;
  o.dense = m;
  o.learned = "SpinQuant: Cayley SGD on the calibration loss, from the randomized Hadamard of the same seed";
  return o;
}

std::vector<float> transposed(const std::vector<float>& a, int64_t rows, int64_t cols) {
  std::vector<float> t(a.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = a[r * cols + c];
  return t;
}

// A dense float copy of one matrix, rotated and stored back as F32.
struct Work {
  WeightMatrix* w;
  std::vector<float> f;  // [w->rows, w->cols]
  explicit Work(WeightMatrix* m) : w(m), f(weight_to_f32(*m)) {}
  int64_t rows() const { return w->rows; }
  int64_t cols() const { return w->cols; }
  // W <- W diag(g): an RMSNorm gamma folded into the input side.
  void scale_cols(const std::vector<float>& g) {
    for (int64_t r = 0; r < rows(); ++r)
      for (int64_t c = 0; c < cols(); ++c) f[r * cols() + c] *= g[c];
  }
  // W <- W Q^T: every row r becomes Q r (input side). Q's order divides cols (per-head blocks).
  void input_side(const Orthogonal& q) { q.apply(f.data(), rows() * cols() / q.n); }
  // W <- Q W: every column c becomes Q c (output side). Q's order divides rows (per-head blocks).
  void output_side(const Orthogonal& q) {
    auto t = transposed(f, rows(), cols());
    q.apply(t.data(), rows() * cols() / q.n);
    f = transposed(t, cols(), rows());
  }
  void store() { *w = make_f32_weight(f.data(), rows(), cols()); }
};

void require_hadamard(const char* what, int64_t n, const HadamardFactors& f, const RotationSpec& s) {
  if (plan_hadamard(n, f)) return;
  int64_t odd = n;
  while (odd % 2 == 0) odd /= 2;
  usage(std::string(what) + " needs a Hadamard matrix of order " + std::to_string(n) +
        ", and no construction (Sylvester, Paley I/II) gives one of order " + std::to_string(odd) +
        " * 2^j <= 256" + (s.factors.empty() ? "" : " nor does " + s.factors) +
        "; pass a factor file with rotate_factors=FILE (e.g. ../shared/data/hadamard/hadamards.safetensors) "
        "or turn it off (rotate_r4=0)");
}

}  // namespace

HadamardFactors load_hadamard_factors(const std::string& path) {
  if (!std::filesystem::exists(path))
    usage("Hadamard factor file '" + path +
          "' does not exist; give a safetensors file of [n, n] +-1 tensors "
          "keyed by order (like ../shared/data/hadamard/hadamards.safetensors)");
  auto st = io::SafetensorsFile::open(path);
  HadamardFactors out;
  for (auto& [name, v] : st.tensors) {
    int64_t m = 0;
    try {
      size_t used = 0;
      m = std::stoll(name, &used);
      if (used != name.size()) m = 0;
    } catch (const std::exception&) {
    }
    if (m < 1 || v.shape.size() != 2 || v.shape[0] != m || v.shape[1] != m)
      usage("Hadamard factor file '" + path + "': tensor '" + name +
            "' is not keyed by its order n with shape [n, n]");
    std::vector<float> h(static_cast<size_t>(m * m));
    to_f32(v, h.data());
    if (!is_hadamard_matrix(h.data(), m))
      usage("Hadamard factor file '" + path + "': tensor '" + name +
            "' is not a Hadamard matrix (entries +-1, H H^T = n I)");
    out[m] = std::move(h);
  }
  return out;
}

json rotate_model(Model& m, const RotationSpec& s) {
  ModelConfig& c = m.config;
  ModelWeights& W = m.weights;
  if (!s.enabled()) fail("quant", "rotate_model called without a rotation method");
  if (W.down_rotation.valid())
    usage("'" + m.path +
          "' is rotated already (its down_proj input has an online Hadamard); rotate the "
          "16-bit source instead");
  const HadamardFactors factors = s.factors.empty() ? HadamardFactors{} : load_hadamard_factors(s.factors);
  const int64_t D = c.dim, hd = c.head_dim, F = c.ffn_dim;
  if (s.r4) require_hadamard("R4 (the down_proj input)", F, factors, s);
  const Orthogonal r1 = !s.r1                 ? Orthogonal{}
                        : s.r1_matrix.empty() ? make_orthogonal(D, factors, s.seed, true)
                                              : explicit_orthogonal("R1", D, s.r1_matrix);
  const Orthogonal r2 = !s.r2                 ? Orthogonal{}
                        : s.r2_matrix.empty() ? make_orthogonal(hd, factors, s.seed + 1, false)
                                              : explicit_orthogonal("R2", hd, s.r2_matrix);
  Orthogonal r4;
  if (s.r4) r4.n = F, r4.h = *plan_hadamard(F, factors);

  json rec = {{"method", s.method}, {"seed", s.seed}, {"norms_folded", true}};
  // Model-level matrices first: a tied lm_head shares tok_embed's storage, so both are read before either is
  // replaced.
  const bool tied = W.tied();
  {
    Work emb(&W.tok_embed), head(&W.lm_head);
    head.scale_cols(W.final_norm);
    if (s.r1) emb.input_side(r1), head.input_side(r1);
    emb.store(), head.store();
    std::fill(W.final_norm.begin(), W.final_norm.end(), 1.0f);
  }
  c.tie_embeddings = false;
  rec["untied_embeddings"] = tied;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = W.layers[static_cast<size_t>(l)];
    Work q(&L.wq), k(&L.wk), v(&L.wv), o(&L.wo), gate(&L.w_gate), up(&L.w_up), down(&L.w_down);
    for (Work* x : {&q, &k, &v}) x->scale_cols(L.attn_norm);
    for (Work* x : {&gate, &up}) x->scale_cols(L.ffn_norm);
    std::fill(L.attn_norm.begin(), L.attn_norm.end(), 1.0f);
    std::fill(L.ffn_norm.begin(), L.ffn_norm.end(), 1.0f);
    if (s.r1) {
      for (Work* x : {&q, &k, &v, &gate, &up}) x->input_side(r1);
      o.output_side(r1), down.output_side(r1);
    }
    if (s.r2) {
      v.output_side(r2);  // each KV head's rows: v_h <- P v_h
      o.input_side(r2);   // each query head's columns: o_j <- o_j P^T
      if (!L.bv.empty()) r2.apply(L.bv.data(), c.n_kv_heads);
    }
    if (s.r4) down.input_side(r4);
    for (Work* x : {&q, &k, &v, &o, &gate, &up, &down}) x->store();
  }
  if (s.r4) W.down_rotation = r4.h;
  rec["r1"] = s.r1 ? r1.describe(true) : json(nullptr);
  rec["r2"] = s.r2 ? r2.describe(false) : json(nullptr);
  if (s.r4) {
    rec["r4"] = r4.describe(false);
    rec["r4"]["online"] = true;
  } else {
    rec["r4"] = nullptr;
  }
  rec["r3"] = "not part of the checkpoint: the KV cache's +rot option rotates q/k after RoPE at run time";
  return rec;
}

json learn_spinquant(const Model& m, const Recipe& r, const std::vector<std::vector<int32_t>>& windows,
                     RotationSpec* s) {
  const ModelConfig& c = m.config;
  if (m.weights.down_rotation.valid())
    usage("'" + m.path +
          "' is rotated already (its down_proj input has an online Hadamard); train SpinQuant "
          "on the 16-bit source instead");
  const HadamardFactors factors = s->factors.empty() ? HadamardFactors{} : load_hadamard_factors(s->factors);
  if (s->r4) require_hadamard("R4 (the down_proj input)", c.ffn_dim, factors, *s);
  // The starting point is exactly QuaRot's rotation of the same seed.
  if (s->r1) s->r1_matrix = dense_matrix(make_orthogonal(c.dim, factors, s->seed, true));
  if (s->r2) s->r2_matrix = dense_matrix(make_orthogonal(c.head_dim, factors, s->seed + 1, false));
  std::optional<Hadamard> r4;
  if (s->r4) r4 = plan_hadamard(c.ffn_dim, factors);
  train::SpinOptions o;
  o.steps = s->spin_steps, o.lr = s->spin_lr, o.tokens = s->spin_tokens, o.loss = s->spin_loss;
  // The quantizers the checkpoint will run with: 4-bit activations (act=int4 or act=nvfp4) and the KV cache
  // format with the cache's own Hadamard (R3, `+rot`) as `lowbit eval --kv-cache int4+rot` runs it.
  set_fake_quant(o, r, c);
  json record;
  static const auto learn = train_entry<train::LearnRotationsFn>("lowbit_train_entry", "rotate=spinquant");
  train::SpinResult res = learn(m, windows, s->r1_matrix, s->r2_matrix, r4 ? &*r4 : nullptr, o, &record);
  s->r1_matrix = std::move(res.r1);
  s->r2_matrix = std::move(res.r2);
  return record;
}

}  // namespace lowbit::quant
