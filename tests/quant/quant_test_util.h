// Helpers for the quant tests: a tiny random Llama-style model held in memory, logits of a token sequence,
// random calibration windows, and the NumPy reference decoders' output.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "io/safetensors.h"
#include "kernels/kernel_plan.h"
#include "kernels/matmul.h"
#include "kernels/weight.h"
#include "kv/kv_cache.h"
#include "model/decoder.h"
#include "model/fixture.h"
#include "model/model.h"
#include "quant/calibration.h"
#include "quant/quantizer.h"
#include "quant/recipe.h"

namespace lowbit::quant::testing {

inline std::vector<float> randn(size_t n, std::mt19937_64& rng, float sd) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// dim 64, 2 layers, 4 heads of 16 (kv_heads 4, or 2 with gqa), ffn 96, vocab 80, interleaved RoPE, untied
// head. A few input channels carry large activations (outliers) so scale migration has something to do.
inline std::unique_ptr<Model> make_random_model(uint64_t seed, bool gqa = false, int64_t ffn = 96) {
  std::mt19937_64 rng(seed);
  auto m = std::make_unique<Model>();
  ModelConfig& c = m->config;
  c.arch = "llama";
  c.source_format = "synthetic";
  c.dim = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = gqa ? 2 : 4;
  c.head_dim = 16;
  c.ffn_dim = ffn;
  c.vocab_size = 80;
  c.max_seq_len = 128;
  c.rope_style = RopeStyle::Interleaved;
  c.tie_embeddings = false;
  c.validate();
  m->path = "synthetic";
  m->format = "synthetic";
  auto mat = [&](int64_t r, int64_t k) {
    auto v = randn(static_cast<size_t>(r * k), rng, 1.0f / std::sqrt(static_cast<float>(k)));
    return make_f32_weight(v.data(), r, k);
  };
  auto norm = [&](int64_t n) {
    std::vector<float> v = randn(static_cast<size_t>(n), rng, 0.1f);
    for (size_t i = 0; i < v.size(); ++i) v[i] += (i % 17 == 3) ? 6.0f : 1.0f;  // outlier channels
    return v;
  };
  const int64_t D = c.dim, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn_dim;
  auto emb = randn(static_cast<size_t>(c.vocab_size * D), rng, 1.0f);
  m->weights.tok_embed = make_f32_weight(emb.data(), c.vocab_size, D);
  m->weights.lm_head = mat(c.vocab_size, D);
  m->weights.final_norm = norm(D);
  m->weights.layers.resize(static_cast<size_t>(c.n_layers));
  for (auto& L : m->weights.layers) {
    L.attn_norm = norm(D);
    L.ffn_norm = norm(D);
    L.wq = mat(Q, D);
    L.wk = mat(KV, D);
    L.wv = mat(KV, D);
    L.wo = mat(D, Q);
    L.w_gate = mat(F, D);
    L.w_up = mat(F, D);
    L.w_down = mat(D, F);
  }
  return m;
}

inline std::vector<int32_t> test_tokens(int64_t vocab, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  return t;
}

// Logits [T, vocab] for one sequence.
inline std::vector<float> logits_of(const Model& m, const std::vector<int32_t>& toks) {
  Decoder dec(m.config, m.weights);
  KvCache kv(m.config, 1, static_cast<int64_t>(toks.size()), KvDtype::F32);
  std::vector<BatchEntry> b;
  for (size_t i = 0; i < toks.size(); ++i) b.push_back({toks[i], 0, static_cast<int64_t>(i), true});
  std::vector<float> out(toks.size() * static_cast<size_t>(m.config.vocab_size));
  dec.forward(b, kv, out.data());
  return out;
}

// Rebuilds the kernel plans of m's GGUF-block weights without their load-time packs, so they run the row
// kernels a quantized in-memory model (WeightKind::Quant, no pack) runs: the same arithmetic on every tier.
inline void drop_load_time_packs(Model& m) {
  for (auto& [name, w] : m.weights.named_matrices())
    if (w->kind == WeightKind::Ggml && w->plan && w->plan->load_pack()) {
      w->plan = nullptr;
      prepare_weight(*w, /*repack=*/false);
    }
}

// Relative RMS difference of two logit arrays.
inline double rel_rms_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double e2 = 0, r2 = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    e2 += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    r2 += double(a[i]) * a[i];
  }
  return r2 > 0 ? std::sqrt(e2 / r2) : std::sqrt(e2);
}

inline CalibData random_calib(const Model& m, int samples, int length, uint64_t seed) {
  CalibData d;
  d.file = "random";
  d.samples = samples;
  d.length = length;
  d.seed = seed;
  for (int s = 0; s < samples; ++s)
    d.seqs.push_back(test_tokens(m.config.vocab_size, length, seed * 1000 + s));
  return d;
}

// make_random_model(seed) quantized by `recipe` (the --recipe form) on the calibration windows `calib`.
inline std::unique_ptr<Model> quantized_random_model(uint64_t seed, const std::string& recipe,
                                                     const CalibData& calib) {
  auto m = make_random_model(seed);
  QuantizeOptions o;
  o.calib = &calib;
  o.progress = false;
  quantize_model(*m, parse_recipe_arg(recipe), o);
  return m;
}

// Mean squared difference of two models' logits over the token sequences.
inline double mean_sq_logit_error(const Model& a, const Model& b,
                                  const std::vector<std::vector<int32_t>>& seqs) {
  double e = 0, n = 0;
  for (const auto& seq : seqs) {
    auto la = logits_of(a, seq), lb = logits_of(b, seq);
    for (size_t i = 0; i < la.size(); ++i) e += (la[i] - lb[i]) * (la[i] - lb[i]);
    n += static_cast<double>(la.size());
  }
  return e / n;
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
  return d;
}

// A fresh path under the build tree's temp area (removed first).
inline std::string temp_path(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() /
           ("lowbit_quant_test_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(p);
  return p.string();
}

// The modules a NumPy reference decoder (tests/reference/SCRIPT, run as SCRIPT DIR OUT.safetensors) writes
// for the checkpoint `dir`, by Hugging Face module name; empty (and a test failure) when the script fails.
inline std::map<std::string, std::vector<float>> reference_decoder_modules(const std::string& script,
                                                                           const std::string& dir) {
  const std::string out = dir + ".ref.safetensors";
  const std::string cmd = "timeout -k 5 120 /usr/bin/python3 " LOWBIT_SOURCE_DIR "/tests/reference/" +
                          script + " " + dir + " " + out + " > /dev/null";
  std::map<std::string, std::vector<float>> r;
  if (std::system(cmd.c_str()) != 0) {
    ADD_FAILURE() << "the reference decoder failed (needs /usr/bin/python3 with numpy): " << cmd;
    return r;
  }
  auto sf = io::SafetensorsFile::open(out);
  for (auto& [name, v] : sf.tensors) {
    std::vector<float> f(static_cast<size_t>(v.numel()));
    std::memcpy(f.data(), v.data, v.nbytes);
    r[name] = f;
  }
  std::filesystem::remove(out);
  return r;
}

// The tiny llama fixture (Hugging Face, f32) written to `dir` and loaded, with residual channel `channel` of
// every token embedding scaled by `gain`: RMSNorm keeps it the largest channel of every attention / FFN
// input.
inline std::unique_ptr<Model> planted_outlier_model(const std::string& dir, int64_t channel, float gain) {
  FixtureOptions o;
  o.seed = 3;
  o.dtype = "f32";
  write_fixture_hf(fixture_shape("tiny-llama"), o, dir);
  auto m = load_model(dir, {DenseMode::F32, {}});
  WeightMatrix& e = m->weights.tok_embed;
  std::vector<float> f = weight_to_f32(e);
  for (int64_t r = 0; r < e.rows; ++r) f[r * e.cols + channel] *= gain;
  e = make_f32_weight(f.data(), e.rows, e.cols);
  return m;
}

}  // namespace lowbit::quant::testing
