// DuQuant's block rotations and zigzag permutation (see duquant.h).
#include "quant/duquant.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>
#include <random>

#include "core/error.h"
#include "kernels/matmul.h"
#include "kv/kv_cache.h"
#include "model/decoder.h"
#include "model/observer.h"
#include "quant/rotate.h"

namespace lowbit::quant {
namespace {

using Eigen::MatrixXd;
using nlohmann::json;

// Orthogonal, symmetric, first row (and column) all 1/sqrt(B): the Householder reflection taking e1 to the
// uniform unit vector. Applied on the right of a row whose first entry is an outlier, it spreads that entry
// evenly over the block.
MatrixXd uniform_first_row(int64_t B) {
  MatrixXd h = MatrixXd::Identity(B, B);
  if (B == 1) return h;
  Eigen::VectorXd v = Eigen::VectorXd::Constant(B, -1.0 / std::sqrt(static_cast<double>(B)));
  v(0) += 1.0;
  return h - 2.0 * v * v.transpose() / v.squaredNorm();
}

// Haar-random orthogonal matrix of order n (QR of a seeded Gaussian, signs of R's diagonal moved into Q).
MatrixXd random_orthogonal(int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<double> nd(0.0, 1.0);
  MatrixXd g(n, n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) g(i, j) = nd(rng);
  Eigen::HouseholderQR<MatrixXd> qr(g);
  MatrixXd q = qr.householderQ();
  const MatrixXd r = qr.matrixQR();
  for (int64_t j = 0; j < n; ++j)
    if (r(j, j) < 0) q.col(j) *= -1.0;
  return q;
}

// Greedy rotation of one block (row convention: the block's rows become xb * A). Each step moves the block's
// largest channel to position 0, mixes the rest randomly and spreads position 0 uniformly; a step that does
// not lower the block's max |x| ends the search (and is dropped).
MatrixXd greedy_block(const MatrixXd& xb, int steps, std::mt19937_64& rng, int* taken) {
  const int64_t B = xb.cols();
  MatrixXd a = MatrixXd::Identity(B, B);
  if (B == 1 || xb.rows() == 0) return a;
  const MatrixXd h = uniform_first_row(B);
  MatrixXd y = xb;
  double best = y.cwiseAbs().maxCoeff();
  for (int s = 0; s < steps; ++s) {
    Eigen::Index j = 0;
    y.cwiseAbs().colwise().maxCoeff().maxCoeff(&j);
    MatrixXd step = MatrixXd::Identity(B, B);
    step.col(0).swap(step.col(j));  // E_j: column j <-> column 0
    MatrixXd d = MatrixXd::Identity(B, B);
    d.bottomRightCorner(B - 1, B - 1) = random_orthogonal(B - 1, rng);
    step = step * d * h;
    MatrixXd y2 = y * step;
    const double m = y2.cwiseAbs().maxCoeff();
    if (!(m < best)) break;
    best = m, y = std::move(y2), a = a * step, ++*taken;
  }
  return a;
}

// Block-diagonal rotation of all blocks of x [rows, n]: returns the dense [n, n] matrix (row convention).
MatrixXd block_rotation(const MatrixXd& x, int64_t block, int steps, std::mt19937_64& rng, int* taken) {
  const int64_t n = x.cols();
  MatrixXd a = MatrixXd::Zero(n, n);
  for (int64_t b0 = 0; b0 < n; b0 += block)
    a.block(b0, b0, block, block) = greedy_block(x.middleCols(b0, block), steps, rng, taken);
  return a;
}

}  // namespace

int64_t duquant_block_size(int64_t n, int64_t requested) {
  if (requested > 0) {
    if (requested > n || n % requested != 0)
      throw UsageError("quant", "duquant_block=" + std::to_string(requested) +
                                    " does not divide the hidden size " + std::to_string(n) +
                                    "; choose a divisor of it (e.g. 64 or 128 when they divide it)");
    return requested;
  }
  for (int64_t b = std::min<int64_t>(128, n); b >= 1; --b)
    if (n % b == 0) return b;
  return 1;
}

std::vector<int64_t> zigzag_permutation(const std::vector<double>& chan_max, int64_t block) {
  const int64_t n = static_cast<int64_t>(chan_max.size());
  if (block < 1 || n % block != 0) fail("quant", "zigzag permutation: block does not divide the channels");
  const int64_t K = n / block;
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
    return chan_max[static_cast<size_t>(p)] > chan_max[static_cast<size_t>(q)];
  });
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    const int64_t round = r / K, pos = r % K;
    const int64_t b = (round % 2 == 0) ? pos : K - 1 - pos;
    perm[static_cast<size_t>(b * block + round)] = order[static_cast<size_t>(r)];
  }
  return perm;
}

DuquantTransform build_duquant(const std::vector<float>& x, int64_t rows, int64_t n,
                               const DuquantOptions& o) {
  if (rows < 1 || static_cast<int64_t>(x.size()) != rows * n)
    fail("quant", "DuQuant needs calibration rows [rows, " + std::to_string(n) + "]");
  DuquantTransform t;
  t.n = n;
  t.block = duquant_block_size(n, o.block);
  MatrixXd X(rows, n);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c) X(r, c) = x[static_cast<size_t>(r * n + c)];
  t.max_before = X.cwiseAbs().maxCoeff();
  t.rms = std::sqrt(X.squaredNorm() / static_cast<double>(rows * n));
  std::mt19937_64 rng(o.seed);
  const MatrixXd a1 = block_rotation(X, t.block, o.steps, rng, &t.steps1);
  const MatrixXd y1 = X * a1;
  std::vector<double> cmax(static_cast<size_t>(n));
  for (int64_t c = 0; c < n; ++c) cmax[static_cast<size_t>(c)] = y1.col(c).cwiseAbs().maxCoeff();
  t.zigzag = zigzag_permutation(cmax, t.block);
  MatrixXd p = MatrixXd::Zero(n, n);  // (y P)[:, i] = y[:, zigzag[i]]
  for (int64_t i = 0; i < n; ++i) p(t.zigzag[static_cast<size_t>(i)], i) = 1.0;
  const MatrixXd a2 = block_rotation(y1 * p, t.block, o.steps, rng, &t.steps2);
  const MatrixXd rowt = a1 * p * a2;  // rows: x' = x A1 P A2
  t.max_after = (X * rowt).cwiseAbs().maxCoeff();
  t.g.resize(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i)  // columns: x' = (A1 P A2)^T x
    for (int64_t j = 0; j < n; ++j) t.g[static_cast<size_t>(i * n + j)] = rowt(j, i);
  return t;
}

json DuquantTransform::describe() const {
  return {{"kind", "duquant"},
          {"order", n},
          {"block", block},
          {"permutation", "zigzag"},
          {"greedy_steps", {steps1, steps2}},
          {"calibration_max_abs_before", max_before},
          {"calibration_max_abs_after", max_after},
          {"calibration_rms", rms}};
}

namespace {

// Collects attn_in / mlp_in rows divided by gamma: a uniform reservoir plus the rows with the largest max
// |x|.
class RowSampler : public ActivationObserver {
 public:
  RowSampler(const Model& m, int64_t max_rows, uint64_t seed)
      : m_(m), dim_(m.config.dim), top_cap_(max_rows / 4), res_cap_(max_rows - max_rows / 4), rng_(seed) {}
  void observe(int layer, ActSite site, const float* x, int64_t T, int64_t cols) override {
    if ((site != ActSite::AttnIn && site != ActSite::MlpIn) || cols != dim_) return;
    const auto& L = m_.weights.layers[static_cast<size_t>(layer)];
    const std::vector<float>& g = site == ActSite::AttnIn ? L.attn_norm : L.ffn_norm;
    std::vector<float> row(static_cast<size_t>(dim_));
    for (int64_t t = 0; t < T; ++t) {
      float mx = 0;
      for (int64_t c = 0; c < dim_; ++c) {
        const float gc = g.empty() ? 1.0f : g[static_cast<size_t>(c)];
        row[static_cast<size_t>(c)] = gc != 0 ? x[t * cols + c] / gc : 0.0f;
        mx = std::max(mx, std::fabs(row[static_cast<size_t>(c)]));
      }
      offer(row, mx);
    }
  }
  std::vector<float> rows(int64_t* count) const {
    std::vector<float> out;
    auto top = top_;
    while (!top.empty()) out.insert(out.end(), top.top().second.begin(), top.top().second.end()), top.pop();
    for (const auto& r : res_) out.insert(out.end(), r.begin(), r.end());
    *count = static_cast<int64_t>(out.size()) / dim_;
    return out;
  }

 private:
  using Entry = std::pair<float, std::vector<float>>;
  struct Greater {
    bool operator()(const Entry& a, const Entry& b) const { return a.first > b.first; }
  };
  void offer(const std::vector<float>& row, float mx) {
    // Into the top rows; the row it displaces (or this one) goes on to the reservoir.
    Entry e{mx, row};
    if (static_cast<int64_t>(top_.size()) < top_cap_) {
      top_.push(std::move(e));
      return;
    }
    if (top_cap_ > 0 && mx > top_.top().first) {
      Entry out = top_.top();
      top_.pop();
      top_.push(std::move(e));
      e = std::move(out);
    }
    ++seen_;
    if (static_cast<int64_t>(res_.size()) < res_cap_) {
      res_.push_back(std::move(e.second));
    } else {
      const auto k = static_cast<int64_t>(rng_() % static_cast<uint64_t>(seen_));
      if (k < res_cap_) res_[static_cast<size_t>(k)] = std::move(e.second);
    }
  }
  const Model& m_;
  int64_t dim_, top_cap_, res_cap_, seen_ = 0;
  std::mt19937_64 rng_;
  std::priority_queue<Entry, std::vector<Entry>, Greater> top_;  // min-heap by max |x|
  std::vector<std::vector<float>> res_;
};

}  // namespace

std::vector<float> duquant_calibration_rows(const Model& m, const std::vector<std::vector<int32_t>>& seqs,
                                            int64_t max_rows, uint64_t seed, int64_t* rows) {
  RowSampler s(m, std::max<int64_t>(max_rows, 4), seed);
  Decoder dec(m.config, m.weights);
  dec.set_observer(&s);
  std::vector<float> none(1);
  for (const auto& q : seqs) {
    if (q.empty()) continue;
    KvCache kv(m.config, 1, static_cast<int64_t>(q.size()), KvDtype::F32);
    std::vector<BatchEntry> b;
    for (size_t i = 0; i < q.size(); ++i) b.push_back({q[i], 0, static_cast<int64_t>(i), false});
    dec.forward(b, kv, none.data());
  }
  return s.rows(rows);
}

namespace {

// W <- W G^T (every row r becomes G r): a linear reading the residual stream, or the embedding's rows.
void input_side(WeightMatrix* w, const MatrixXd& g) {
  std::vector<float> f = weight_to_f32(*w);
  Eigen::Map<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> a(f.data(), w->rows,
                                                                                      w->cols);
  a = (a.cast<double>() * g.transpose()).cast<float>();
  *w = make_f32_weight(f.data(), w->rows, w->cols);
}

// W <- G W: a linear writing the residual stream (o_proj, down_proj).
void output_side(WeightMatrix* w, const MatrixXd& g) {
  std::vector<float> f = weight_to_f32(*w);
  Eigen::Map<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> a(f.data(), w->rows,
                                                                                      w->cols);
  a = (g * a.cast<double>()).cast<float>();
  *w = make_f32_weight(f.data(), w->rows, w->cols);
}

}  // namespace

json rotate_model_duquant(Model& m, const RotationSpec& s, const std::vector<std::vector<int32_t>>& windows) {
  if (!s.r1)
    throw UsageError("quant",
                     "rotate=duquant builds R1 (the residual stream's rotation); rotate_r1=0 leaves "
                     "nothing of it: drop rotate_r1=0 or use rotate=quarot");
  if (windows.empty())
    throw UsageError("quant",
                     "rotate=duquant builds its rotation from calibration activations; pass --calib FILE");
  const int64_t D = m.config.dim;
  DuquantOptions o;
  o.block = duquant_block_size(D, s.duquant_block);  // checked before anything runs
  o.steps = s.duquant_steps;
  o.seed = s.seed;
  constexpr int64_t kMaxRows = 4096;
  int64_t rows = 0;
  const std::vector<float> x = duquant_calibration_rows(m, windows, kMaxRows, s.seed, &rows);
  const DuquantTransform t = build_duquant(x, rows, D, o);
  RotationSpec rest = s;
  rest.r1 = false;  // norms folded, R2 and R4 as QuaRot's; G takes R1's place below
  json rec = rotate_model(m, rest);
  const MatrixXd g = Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
      t.g.data(), D, D);
  ModelWeights& W = m.weights;
  input_side(&W.tok_embed, g);
  input_side(&W.lm_head, g);
  for (auto& L : W.layers) {
    for (WeightMatrix* w : {&L.wq, &L.wk, &L.wv, &L.w_gate, &L.w_up}) input_side(w, g);
    output_side(&L.wo, g);
    output_side(&L.w_down, g);
  }
  rec["r1"] = t.describe();
  rec["r1"]["calibration_rows"] = rows;
  rec["r1"]["rows_from"] = "attn_in and mlp_in of every layer divided by the norm's gamma";
  return rec;
}

}  // namespace lowbit::quant
