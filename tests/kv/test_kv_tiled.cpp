// Tiled prefill attention (kernels/attn_tiled.h) against the per-token attend() and the scalar
// attend_reference(): every cache kind (contiguous F32/F16/BF16, paged F32..INT2/FP8/FP4, rotation, pre-RoPE
// keys, F16 staging windows), GQA group 1 and > 1, SIMD (head_dim % 16 == 0) and portable head sizes, prompts
// that are not a multiple of the tile or query block, a prefill continuing an existing sequence, two
// sequences in one stored batch, and every ISA tier. Also the softmax's vector exp against std::exp.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "core/error.h"
#include "kernels/attn_tiled.h"
#include "kernels/dispatch.h"
#include "kv/kv_cache.h"
#include "kv/kv_formats.h"
#include "kv/kv_paged.h"
#include "kv/kv_rotation.h"
#include "ops/rope.h"
#include "tests/common/kv_test_config.h"

using namespace lowbit;

namespace {

using lowbit::test::make_config;

std::vector<float> gaussian(int64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = nd(rng) * scale;
  return x;
}

// Restores the kernels' ISA tier when a test ends (tests switch it to cover every path).
struct IsaGuard {
  Isa saved = kernel_isa();
  ~IsaGuard() { set_kernel_isa(saved); }
};

// Tolerances: tiled vs per-token attend() differ by the online softmax's rescaling, summation order and the
// polynomial exp (|rel| ~1e-7 per term); vs the double reference additionally by attend()'s own float
// rounding.
constexpr double kTolAttend = 2e-5, kTolReference = 3e-5;

// Sequence 1 holds p0 earlier tokens (stored by an earlier call), then one store_rows call writes the prefill
// of T tokens of sequence 1 together with T0 tokens of sequence 0 (a batch of two sequences). Every query of
// both prefills is then answered by attend_tiled in blocks of `block` and compared with attend() /
// attend_reference().
void check_tiled(const ModelConfig& c, const std::string& spec_text, int64_t p0, int64_t T, int64_t block) {
  const KvCacheSpec spec = parse_kv_spec(spec_text);
  const int64_t D = c.kv_dim(), hd = c.head_dim, Q = c.n_heads * hd, T0 = 45;
  const int ng = static_cast<int>(c.n_heads / c.n_kv_heads);
  KvCache kv(c, 2, 512, spec);
  Rope rope(c, {});
  kv.bind_rope(&rope);
  const int64_t n1 = p0 + T;
  // Keys with outlier channels (as in test_kv), values Gaussian; RoPE'd unless the cache keeps pre-RoPE keys.
  std::vector<float> k1 = gaussian(n1 * D, 11, 1.0f), v1 = gaussian(n1 * D, 12, 1.0f);
  std::vector<float> k0 = gaussian(T0 * D, 13, 1.0f), v0 = gaussian(T0 * D, 14, 1.0f);
  for (int64_t i = 0; i < n1 * D; ++i) k1[i] += i % D % 11 == 5 ? 3.0f : 0.0f;
  if (!spec.pre_rope) {
    for (int64_t t = 0; t < n1; ++t) rope.apply(k1.data() + t * D, c.n_kv_heads, t);
    for (int64_t t = 0; t < T0; ++t) rope.apply(k0.data() + t * D, c.n_kv_heads, t);
  }
  for (int l = 0; l < c.n_layers; ++l) {
    std::vector<int32_t> seqs(p0, 1);
    std::vector<int64_t> pos(p0);
    for (int64_t t = 0; t < p0; ++t) pos[t] = t;
    if (p0 > 0) kv.store_rows(l, p0, seqs.data(), pos.data(), k1.data(), v1.data());
    // The batch: sequence 1's new tokens, then sequence 0's.
    std::vector<float> kb(k1.begin() + p0 * D, k1.end()), vb(v1.begin() + p0 * D, v1.end());
    kb.insert(kb.end(), k0.begin(), k0.end()), vb.insert(vb.end(), v0.begin(), v0.end());
    seqs.assign(T, 1), pos.resize(T);
    for (int64_t t = 0; t < T; ++t) pos[t] = p0 + t;
    for (int64_t t = 0; t < T0; ++t) seqs.push_back(0), pos.push_back(t);
    kv.store_rows(l, T + T0, seqs.data(), pos.data(), kb.data(), vb.data());
  }
  const PagedKvCache* pc = kv.paged_cache();
  const std::vector<float> q = gaussian((T + T0) * Q, 21, 0.5f / std::sqrt(float(hd)));
  std::vector<int64_t> qpos(T + T0);
  for (int64_t t = 0; t < T; ++t) qpos[t] = p0 + t;
  for (int64_t t = 0; t < T0; ++t) qpos[T + t] = t;
  std::vector<float> tiled((T + T0) * Q), one(ng * hd), ref(ng * hd), scratch(ng * 512);
  for (int l = 0; l < c.n_layers; ++l)
    for (int64_t h = 0; h < c.n_kv_heads; ++h) {
      const int64_t ho = h * ng * hd;
      for (auto [seq, t0, m] : {std::tuple<int, int64_t, int64_t>{1, 0, T}, {0, T, T0}})
        for (int64_t b = t0; b < t0 + m; b += block) {
          const int64_t mm = std::min(block, t0 + m - b);
          kv.attend_tiled(l, seq, qpos.data() + b, mm, h, q.data() + b * Q + ho, Q, ng,
                          tiled.data() + b * Q + ho, Q);
        }
      double worst = 0;
      for (int64_t t = 0; t < T + T0; ++t) {
        const int seq = t < T ? 1 : 0;
        kv.attend(l, seq, qpos[t] + 1, h, q.data() + t * Q + ho, ng, one.data(), scratch.data());
        const bool check_ref = pc && t % 7 == 0;  // the reference re-reads the whole layer per call
        if (check_ref) pc->attend_reference(l, seq, qpos[t] + 1, h, q.data() + t * Q + ho, ng, ref.data());
        for (int64_t i = 0; i < ng * hd; ++i) {
          const float x = tiled[t * Q + ho + i];
          ASSERT_TRUE(std::isfinite(x));
          ASSERT_NEAR(x, one[i], kTolAttend)
              << spec_text << " l" << l << " h" << h << " token " << t << " i" << i;
          if (check_ref) {
            ASSERT_NEAR(x, ref[i], kTolReference) << spec_text << " vs reference, token " << t;
          }
          worst = std::max(worst, double(std::fabs(x - one[i])));
        }
      }
      EXPECT_LT(worst, kTolAttend);
    }
}

const char* const kSpecs[] = {"f32",
                              "f16",
                              "bf16",
                              "f32:paged",
                              "f16:paged",
                              "bf16:paged",
                              "int8",
                              "int8+rot",
                              "int8:prerope",
                              "int4",
                              "int4+rot",
                              "int4:prerope",
                              "int4:asym",
                              "int4:window32",
                              "int2:asym",
                              "e4m3",
                              "e4m3:token",
                              "fp4",
                              "f32:prerope",
                              "int4:pertoken",
                              "int8:prerope+rot",
                              "int4:window32+rot",
                              "int2:asym:window32+rot",
                              "int4:window128+rot"};

bool spec_fits(const ModelConfig& c, const std::string& s) {
  if (s.find("rot") != std::string::npos && !kv_rotation_supported(c.head_dim)) return false;
  if (s == "fp4" && c.kv_dim() % 16) return false;
  return true;
}

// GQA group 2, head_dim 32 (AVX-512 tile) and head_dim 8 (portable path), every spec, every ISA tier; the
// 77-token prompt is neither a multiple of the 64-position tile nor of the 32-token query block.
TEST(KvTiled, MatchesPerTokenAttentionEverySpec) {
  IsaGuard guard;
  for (Isa isa : available_isas()) {
    set_kernel_isa(isa);
    for (const ModelConfig& c : {make_config(2, 4, 2, 32), make_config(1, 8, 4, 8)})
      for (const char* s : kSpecs) {
        if (!spec_fits(c, s)) continue;
        SCOPED_TRACE(std::string(s) + " hd " + std::to_string(c.head_dim) + " isa " + isa_name(isa));
        check_tiled(c, s, 0, 77, 32);
        if (HasFatalFailure()) return;
      }
  }
}

// A prefill continuing a sequence (p0 > 0, tiles straddling the old and new tokens) with the whole prompt as
// one query block, and GQA shapes: group 1 (head_dim 16), group 7 (head_dim 64, Qwen2.5-0.5B's), group 3 with
// head_dim 48 (a 3-vector row remainder in the P.V kernel).
TEST(KvTiled, ContinuedPrefillAndGqaShapes) {
  IsaGuard guard;
  const char* const specs[] = {"f32",      "f16",  "bf16:paged",   "int8",
                               "int8+rot", "int4", "int4:prerope", "e5m2"};
  for (Isa isa : available_isas()) {
    set_kernel_isa(isa);
    for (const ModelConfig& c : {make_config(1, 2, 2, 16), make_config(1, 7, 1, 64), make_config(1, 6, 2, 48),
                                 make_config(2, 4, 2, 32)})
      for (const char* s : specs) {
        if (!spec_fits(c, s)) continue;
        SCOPED_TRACE(std::string(s) + " heads " + std::to_string(c.n_heads) + "/" +
                     std::to_string(c.n_kv_heads) + " hd " + std::to_string(c.head_dim) + " isa " +
                     isa_name(isa));
        check_tiled(c, s, 40, 150, 150);
        if (HasFatalFailure()) return;
        check_tiled(c, s, 97, 30, 13);
        if (HasFatalFailure()) return;
      }
  }
}

// Decode steps of a long sequence take the tiled kernel with single-query blocks (Decoder: from 128 cached
// positions): one query per block, 200 earlier tokens.
TEST(KvTiled, SingleQueryBlocksForDecode) {
  IsaGuard guard;
  const char* const specs[] = {"f32",      "f16",          "bf16:paged", "int8",
                               "int8+rot", "int4:prerope", "e4m3",       "int4:window32"};
  for (Isa isa : available_isas()) {
    set_kernel_isa(isa);
    for (const ModelConfig& c : {make_config(1, 7, 1, 64), make_config(2, 4, 2, 32)})
      for (const char* s : specs) {
        if (!spec_fits(c, s)) continue;
        SCOPED_TRACE(std::string(s) + " hd " + std::to_string(c.head_dim) + " isa " + isa_name(isa));
        check_tiled(c, s, 200, 9, 1);
        if (HasFatalFailure()) return;
      }
  }
}

// H2O needs every query's normalised probabilities: the tiled path refuses it and the decoder stays per
// token.
TEST(KvTiled, RefusesH2O) {
  const ModelConfig c = make_config(1, 4, 2, 32);
  KvCache plain(c, 1, 64, parse_kv_spec("f16")),
      streaming(c, 1, 64, parse_kv_spec("int8", "", "", "streaming:4+28"));
  KvCache h2o(c, 1, 64, parse_kv_spec("int8", "", "", "h2o:32"));
  EXPECT_TRUE(plain.tiled_ok());
  EXPECT_TRUE(streaming.tiled_ok());
  EXPECT_FALSE(h2o.tiled_ok());
  std::vector<float> k(c.kv_dim(), 0.5f), q(2 * 32, 0.1f), out(2 * 32);
  h2o.store(0, 0, 0, k.data(), k.data());
  const int64_t p = 0;
  EXPECT_THROW(h2o.attend_tiled(0, 0, &p, 1, 0, q.data(), 64, 2, out.data(), 64), Error);
}

TEST(KvTiled, ExpMatchesStdExp) {
  IsaGuard guard;
  std::vector<float> x;
  for (float v = -100.0f; v <= 10.0f; v += 0.0137f) x.push_back(v);
  x.push_back(0.0f), x.push_back(-0.0f), x.push_back(-87.0f), x.push_back(-1e-7f);
  std::vector<float> y(x.size());
  for (Isa isa : available_isas()) {
    set_kernel_isa(isa);
    attn_exp(x.data(), y.data(), static_cast<int64_t>(x.size()));
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double e = std::exp(double(x[i]));
      if (x[i] < -87.3f) {
        EXPECT_LE(std::fabs(y[i] - e), 1e-37) << x[i];
        continue;
      }
      worst = std::max(worst, std::fabs(y[i] - e) / e);
    }
    std::printf("attn_exp %s: max relative error %.3g\n", isa_name(isa), worst);
    EXPECT_LE(worst, 4e-7) << isa_name(isa);
  }
}

}  // namespace
