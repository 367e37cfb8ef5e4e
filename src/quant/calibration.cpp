// Calibration windows and activation statistics (see calibration.h).
#include "quant/calibration.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "core/error.h"
#include "core/hash.h"
#include "kv/kv_cache.h"
#include "model/decoder.h"
#include "ops/norm.h"
#include "quant/blas.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::quant {

nlohmann::json CalibData::to_json() const {
  return {{"file", file},
          {"sha256", sha256},
          {"samples", samples},
          {"length", length},
          {"seed", seed},
          {"text_tokens", text_tokens},
          {"tokens", static_cast<int64_t>(samples) * length}};
}

CalibData load_calibration(const CalibSpec& spec, const Tokenizer& tok, int64_t max_ctx, int32_t bos_id,
                           std::vector<std::string>* warnings) {
  if (spec.file.empty())
    throw UsageError("quant",
                     "this recipe needs calibration text; pass --calib FILE (any text file, e.g. "
                     "../shared/data/tinystories/tinystories_train_head.txt)");
  std::error_code ec;
  if (std::filesystem::is_directory(spec.file, ec))
    throw UsageError("quant", "--calib '" + spec.file + "' is a directory; give a text file");
  std::ifstream in(spec.file, std::ios::binary);
  if (!in)
    throw UsageError("quant", "cannot open calibration file '" + spec.file + "'; check the --calib path");
  // Calibration needs a few thousand tokens: read at most 16 MiB so a huge corpus does not stall
  // tokenization.
  constexpr size_t kMaxBytes = 16u << 20;
  std::string text(kMaxBytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(kMaxBytes));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.empty())
    throw UsageError("quant", "calibration file '" + spec.file + "' is empty; give a text file");
  CalibData d;
  d.file = spec.file;
  d.sha256 = sha256_file_hex(spec.file);
  d.seed = spec.seed;
  std::vector<int32_t> ids = tok.encode(text, false);
  d.text_tokens = static_cast<int64_t>(ids.size());
  // Below this, Hessians / activation statistics describe a handful of tokens, not the model's inputs: refuse
  // instead of quantizing on noise.
  constexpr int64_t kMinCalibTokens = 64;
  if (d.text_tokens < kMinCalibTokens)
    throw UsageError("quant", "calibration file '" + spec.file + "' has only " +
                                  std::to_string(d.text_tokens) + " tokens; calibration needs at least " +
                                  std::to_string(kMinCalibTokens) + " (the recipe asks for " +
                                  std::to_string(spec.samples) + " windows of " +
                                  std::to_string(spec.length) + "); give a longer text with --calib");
  int64_t len = std::min<int64_t>(spec.length, max_ctx);
  if (len < spec.length && warnings)
    warnings->push_back("calibration length " + std::to_string(spec.length) +
                        " capped at the model context " + std::to_string(max_ctx));
  const bool bos = bos_id >= 0;
  int64_t body = len - (bos ? 1 : 0);
  if (static_cast<int64_t>(ids.size()) < body) {
    body = static_cast<int64_t>(ids.size());
    len = body + (bos ? 1 : 0);
    if (warnings)
      warnings->push_back("calibration file '" + spec.file + "' has only " + std::to_string(ids.size()) +
                          " tokens; windows shortened to " + std::to_string(len));
  }
  if (body < 1) throw UsageError("quant", "calibration file '" + spec.file + "' has no tokens");
  std::mt19937_64 rng(spec.seed);
  const int64_t span = static_cast<int64_t>(ids.size()) - body;
  for (int i = 0; i < spec.samples; ++i) {
    const int64_t start = span > 0 ? static_cast<int64_t>(rng() % static_cast<uint64_t>(span + 1)) : 0;
    std::vector<int32_t> s;
    s.reserve(static_cast<size_t>(len));
    if (bos) s.push_back(bos_id);
    s.insert(s.end(), ids.begin() + start, ids.begin() + start + body);
    d.seqs.push_back(std::move(s));
  }
  d.samples = spec.samples;
  d.length = static_cast<int>(len);
  return d;
}

int site_index(ActSite s) {
  switch (s) {
    case ActSite::AttnIn:
      return 0;
    case ActSite::OIn:
      return 1;
    case ActSite::MlpIn:
      return 2;
    case ActSite::DownIn:
      return 3;
    case ActSite::KeyOut:
      return 4;
    case ActSite::ValueOut:
      return 5;
    case ActSite::LayerOut:
      return -1;
  }
  return -1;
}

void SiteStats::add(const float* x, int64_t T, int64_t c) {
  if (cols == 0) {
    cols = c;
    sum_abs.assign(static_cast<size_t>(c), 0.0);
    sum_sq.assign(static_cast<size_t>(c), 0.0);
    max_abs.assign(static_cast<size_t>(c), 0.0f);
    if (want_gram) gram = Eigen::MatrixXf::Zero(c, c);
  }
  if (c != cols)
    fail("quant", "activation width changed between batches (" + std::to_string(cols) + " -> " +
                      std::to_string(c) + ")");
  for (int64_t t = 0; t < T; ++t) {
    const float* r = x + t * c;
    for (int64_t j = 0; j < c; ++j) {
      const float a = std::fabs(r[j]);
      sum_abs[j] += a;
      sum_sq[j] += static_cast<double>(r[j]) * r[j];
      if (a > max_abs[j]) max_abs[j] = a;
    }
  }
  if (want_acts) acts.insert(acts.end(), x, x + T * c);
  if (want_gram) {
    // Lower triangle of gram += X^T X: x is [T, c] row-major, i.e. the column-major [c, T] matrix X^T.
    cblas_ssyrk(CblasColMajor, CblasLower, CblasNoTrans, static_cast<int>(c), static_cast<int>(T), 1.0f, x,
                static_cast<int>(c), 1.0f, gram.data(), static_cast<int>(c));
  }
  n += T;
}

std::vector<float> SiteStats::mean_abs() const {
  std::vector<float> m(static_cast<size_t>(cols));
  for (int64_t j = 0; j < cols; ++j)
    m[j] = n ? static_cast<float>(sum_abs[j] / static_cast<double>(n)) : 0.0f;
  return m;
}

std::vector<float> SiteStats::mean_sq() const {
  std::vector<float> m(static_cast<size_t>(cols));
  for (int64_t j = 0; j < cols; ++j) m[j] = n ? static_cast<float>(sum_sq[j] / static_cast<double>(n)) : 0.0f;
  return m;
}

float SiteStats::absmax() const {
  float a = 0.0f;
  for (float v : max_abs) a = std::max(a, v);
  return a;
}

void SiteStats::divide_channels(const std::vector<float>& s) {
  for (int64_t j = 0; j < cols; ++j) {
    sum_abs[j] /= s[j];
    sum_sq[j] /= static_cast<double>(s[j]) * s[j];
    max_abs[j] /= s[j];
  }
  for (size_t r = 0; r < acts.size(); r += static_cast<size_t>(cols))
    for (int64_t j = 0; j < cols; ++j) acts[r + static_cast<size_t>(j)] /= s[j];
  if (gram.size() > 0) {
    // Only the lower triangle is accumulated (ssyrk); symmetrise before scaling.
    Eigen::MatrixXf full = gram.selfadjointView<Eigen::Lower>();
    gram = full;
    for (int64_t a = 0; a < cols; ++a)
      for (int64_t b = 0; b < cols; ++b) gram(a, b) /= s[a] * s[b];
  }
  if (cross.size() > 0)
    for (int64_t a = 0; a < cols; ++a)
      for (int64_t b = 0; b < cols; ++b) cross(a, b) /= s[a] * s[b];
}

void SiteStats::add_cross(const float* x_ref, const float* x, int64_t T, int64_t c) {
  if (c != cols)
    fail("quant",
         "add_cross: width " + std::to_string(c) + " differs from the statistics' " + std::to_string(cols));
  if (cross.size() == 0) cross = Eigen::MatrixXf::Zero(c, c);
  // cross += X_ref^T X: both [T, c] row-major, i.e. the column-major [c, T] matrices X_ref^T and X^T.
  cblas_sgemm(CblasColMajor, CblasNoTrans, CblasTrans, static_cast<int>(c), static_cast<int>(c),
              static_cast<int>(T), 1.0f, x_ref, static_cast<int>(c), x, static_cast<int>(c), 1.0f,
              cross.data(), static_cast<int>(c));
}

namespace {

struct StopForward {};

// SiteStats::add accumulates the lower triangle of each Gram matrix (ssyrk): make them full symmetric.
void fill_upper_gram(SiteStats& s) {
  if (s.gram.size() > 0) {
    Eigen::MatrixXf full = s.gram.selfadjointView<Eigen::Lower>();
    s.gram = full;
  }
}

void fill_upper_grams(LayerStats& L) {
  for (auto& s : L.sites) fill_upper_gram(s);
}

class StatsObserver : public ActivationObserver {
 public:
  // `need_output`: the last layer's output is wanted (it moves a stream); without it the forward stops at
  // down_proj's input, the last statistic, and skips down_proj's matmul (a third of the MLP's work).
  // `ref` (the float model's inputs of the four linear-input sites for this batch) adds SiteStats::cross;
  // `act` rounds those sites' inputs as the kernels will before any statistic.
  StatsObserver(std::vector<LayerStats>* out, int first, int last, bool need_output = true,
                const std::array<std::vector<float>, 4>* ref = nullptr, const ActRoute* act = nullptr)
      : out_(out), first_(first), last_(last), need_output_(need_output), ref_(ref), act_(act) {}
  void observe(int layer, ActSite site, const float* x, int64_t T, int64_t cols) override {
    if (site == ActSite::LayerOut) {
      if (layer >= last_) throw StopForward{};
      return;
    }
    if (layer < first_ || layer > last_) return;
    const int i = site_index(site);
    if (i >= 0 && i < 4 && act_ && *act_) {
      xq_.resize(static_cast<size_t>(T * cols));
      (*act_)(site, x, T, cols, xq_.data());
      x = xq_.data();
    }
    if (i >= 0) (*out_)[layer - first_].sites[i].add(x, T, cols);
    if (i >= 0 && i < 4 && ref_) {
      const std::vector<float>& r = (*ref_)[static_cast<size_t>(i)];
      if (static_cast<int64_t>(r.size()) != T * cols)
        fail("quant", std::string("float reference of site ") + act_site_name(site) + " has " +
                          std::to_string(r.size()) + " values, the stream " + std::to_string(T * cols));
      (*out_)[layer - first_].sites[i].add_cross(r.data(), x, T, cols);
    }
    if (site == ActSite::DownIn && layer == last_ && !need_output_) throw StopForward{};
  }

 private:
  std::vector<LayerStats>* out_;
  int first_, last_;
  bool need_output_;
  const std::array<std::vector<float>, 4>* ref_;
  const ActRoute* act_;
  std::vector<float> xq_;
};

// Copies the four linear inputs of one layer (the float reference of StatsObserver).
class CaptureObserver : public ActivationObserver {
 public:
  explicit CaptureObserver(std::array<std::vector<float>, 4>* out) : out_(out) {}
  void observe(int, ActSite site, const float* x, int64_t T, int64_t cols) override {
    const int i = site_index(site);
    if (i >= 0 && i < 4) (*out_)[static_cast<size_t>(i)].assign(x, x + T * cols);
  }

 private:
  std::array<std::vector<float>, 4>* out_;
};

}  // namespace

std::vector<LayerStats> collect_stats(const Model& m, const CalibData& d, int first, int last, bool gram,
                                      int batch_seqs) {
  if (first < 0 || last >= m.config.n_layers || first > last)
    fail("quant",
         "collect_stats: bad layer range [" + std::to_string(first) + ", " + std::to_string(last) + "]");
  std::vector<LayerStats> out(static_cast<size_t>(last - first + 1));
  for (auto& L : out)
    for (int s = 0; s < 4; ++s) L.sites[s].want_gram = gram;
  StatsObserver obs(&out, first, last, false);
  Decoder dec(m.config, m.weights);
  dec.set_observer(&obs);
  const int n = static_cast<int>(d.seqs.size());
  std::vector<float> logits(static_cast<size_t>(m.config.vocab_size));
  // One KV cache for all batches: every batch rewrites positions [0, len) of its sequences before attending
  // to them, so nothing stale is ever read, and the memory is allocated once.
  int64_t cap = 1;
  for (const auto& seq : d.seqs) cap = std::max<int64_t>(cap, static_cast<int64_t>(seq.size()));
  KvCache kv(m.config, std::max(1, std::min(batch_seqs, n)), cap, KvDtype::F32);
  std::vector<BatchEntry> batch;
  for (int b0 = 0; b0 < n; b0 += batch_seqs) {
    const int nb = std::min(batch_seqs, n - b0);
    batch.clear();
    for (int s = 0; s < nb; ++s) {
      const auto& seq = d.seqs[b0 + s];
      for (size_t p = 0; p < seq.size(); ++p) batch.push_back({seq[p], s, static_cast<int64_t>(p), false});
    }
    try {
      dec.forward(batch, kv, logits.data());
    } catch (const StopForward&) {
    }
  }
  for (auto& L : out) fill_upper_grams(L);
  return out;
}

CalibStream::CalibStream(const Model& m, const CalibData& d, int batch_seqs, bool float_reference) : m_(m) {
  batch_seqs = std::max(1, batch_seqs);
  const int n = static_cast<int>(d.seqs.size());
  int64_t cap = 1;
  for (const auto& seq : d.seqs) cap = std::max<int64_t>(cap, static_cast<int64_t>(seq.size()));
  // As collect_stats: one cache for every batch, each batch rewrites positions [0, len) before attending.
  kv_ = std::make_unique<KvCache>(m.config, std::max(1, std::min(batch_seqs, n)), cap, KvDtype::F32);
  Decoder dec(m.config, m.weights);
  for (int b0 = 0; b0 < n; b0 += batch_seqs) {
    const int nb = std::min(batch_seqs, n - b0);
    std::vector<BatchEntry> batch;
    for (int s = 0; s < nb; ++s) {
      const auto& seq = d.seqs[b0 + s];
      for (size_t p = 0; p < seq.size(); ++p) batch.push_back({seq[p], s, static_cast<int64_t>(p), false});
    }
    std::vector<float> x(batch.size() * static_cast<size_t>(m.config.dim));
    dec.embed(batch, x.data());
    batches_.push_back(std::move(batch));
    if (float_reference) ref_states_.push_back(x);
    states_.push_back(std::move(x));
  }
}

CalibStream::~CalibStream() = default;

int64_t CalibStream::tokens() const {
  int64_t n = 0;
  for (const auto& b : batches_) n += static_cast<int64_t>(b.size());
  return n;
}

LayerStats CalibStream::stats(bool gram, bool move_float, bool down_acts, const ActRoute& act) {
  if (next_ >= m_.config.n_layers) fail("quant", "CalibStream: every layer has been streamed already");
  const bool ref = float_reference();
  if (ref && (move_float || down_acts || !gram))
    fail("quant",
         "CalibStream: a float reference pairs Gram matrices of inputs streamed through the "
         "quantized layers (gram, no move_float, no down_acts)");
  std::vector<LayerStats> out(1);
  for (int s = 0; s < 4; ++s) out[0].sites[s].want_gram = gram;
  if (down_acts) {
    SiteStats& d = out[0].at(ActSite::DownIn);
    d.want_gram = false;
    d.want_acts = true;
    // One allocation for every batch's inputs (160 MB for a 0.5B model's 8,192 tokens).
    d.acts.reserve(static_cast<size_t>(tokens() * m_.config.ffn_dim));
  }
  std::array<std::vector<float>, 4> ref_inputs;
  StatsObserver obs(&out, next_, next_, move_float, ref ? &ref_inputs : nullptr, act ? &act : nullptr);
  CaptureObserver capture(&ref_inputs);
  Decoder dec(m_.config, m_.weights);
  Decoder ref_dec(m_.config, m_.weights);
  ref_dec.set_observer(&capture);
  dec.set_observer(&obs);
  std::vector<float> x;
  for (size_t b = 0; b < batches_.size(); ++b) {
    // The float model's layer (its weights are still float here) moves the reference stream and leaves its
    // inputs in ref_inputs; the same positions of the cache are rewritten by the stream's forward below.
    if (ref) ref_dec.forward_layers(batches_[b], *kv_, ref_states_[b].data(), next_, next_);
    float* state = states_[b].data();
    if (!move_float) {
      x = states_[b];  // the stream itself moves in advance(), with the quantized layer
      state = x.data();
    }
    // The observer stops the forward at the layer's output, which by then is complete in state (or, when only
    // the statistics are wanted, at down_proj's input: x is a scratch copy then).
    try {
      dec.forward_layers(batches_[b], *kv_, state, next_, next_);
    } catch (const StopForward&) {
    }
  }
  if (move_float) ++next_;
  fill_upper_grams(out[0]);
  return std::move(out[0]);
}

void CalibStream::advance() {
  if (next_ >= m_.config.n_layers) fail("quant", "CalibStream: every layer has been streamed already");
  Decoder dec(m_.config, m_.weights);
  for (size_t b = 0; b < batches_.size(); ++b)
    dec.forward_layers(batches_[b], *kv_, states_[b].data(), next_, next_);
  ++next_;
}

SiteStats CalibStream::head_stats(bool gram, bool cross) const {
  if (next_ != m_.config.n_layers)
    fail("quant", "CalibStream: head statistics need every layer streamed (at layer " +
                      std::to_string(next_) + " of " + std::to_string(m_.config.n_layers) + ")");
  SiteStats st;
  st.want_gram = gram;
  const int64_t D = m_.config.dim;
  std::vector<float> xn, xr;
  for (size_t b = 0; b < batches_.size(); ++b) {
    const int64_t T = static_cast<int64_t>(batches_[b].size());
    xn.resize(static_cast<size_t>(T * D));
    rms_norm(states_[b].data(), m_.weights.final_norm.data(), xn.data(), T, D, m_.config.norm_eps);
    st.add(xn.data(), T, D);
    if (float_reference() && gram && cross) {
      xr.resize(static_cast<size_t>(T * D));
      rms_norm(ref_states_[b].data(), m_.weights.final_norm.data(), xr.data(), T, D, m_.config.norm_eps);
      st.add_cross(xr.data(), xn.data(), T, D);
    }
  }
  fill_upper_gram(st);
  return st;
}

SiteStats head_input_stats(const Model& m, const CalibData& d, bool gram, int batch_seqs) {
  CalibStream s(m, d, batch_seqs);
  while (s.next_layer() < m.config.n_layers) s.advance();
  return s.head_stats(gram);
}

}  // namespace lowbit::quant
