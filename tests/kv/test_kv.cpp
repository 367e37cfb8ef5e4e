// Paged, quantized KV cache: spec parsing, per-format round-trip bounds, attention from quantized pages
// against the scalar reference and against F32 attention, rotation invariance, paging/budget errors,
// eviction, the bytes-per-token formula, and which store (kv/kv_store.h) KvCache picks for a spec.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "kv/kv_evict.h"
#include "kv/kv_formats.h"
#include "kv/kv_paged.h"
#include "kv/kv_rotation.h"
#include "model/weights.h"
#include "ops/rope.h"
#include "tests/common/kv_test_config.h"

using namespace lowbit;

namespace {

using lowbit::test::make_config;

// Keys with a few large channels (the outliers per-channel key quantization is for), values Gaussian.
struct Data {
  std::vector<float> k, v;  // [n, kv_dim]
};
Data make_data(const ModelConfig& c, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t D = c.kv_dim();
  Data d{std::vector<float>(n * D), std::vector<float>(n * D)};
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < D; ++i) {
      d.k[t * D + i] = nd(rng) * (i % 7 == 3 ? 6.0f : 1.0f) + (i % 11 == 5 ? 3.0f : 0.0f);
      d.v[t * D + i] = nd(rng);
    }
  return d;
}

void store_all(KvCache& kv, const ModelConfig& c, const Data& d, int64_t n, int seq = 0) {
  std::vector<int32_t> seqs(n, seq);
  std::vector<int64_t> pos(n);
  for (int64_t t = 0; t < n; ++t) pos[t] = t;
  for (int l = 0; l < c.n_layers; ++l) kv.store_rows(l, n, seqs.data(), pos.data(), d.k.data(), d.v.data());
}

// F32 attention over rows [0, n) of head kvh.
void attend_f32(const ModelConfig& c, const float* K, const float* V, int64_t n, int64_t kvh, const float* q,
                int ng, float* out) {
  const int64_t hd = c.head_dim, D = c.kv_dim();
  for (int g = 0; g < ng; ++g) {
    std::vector<double> s(n);
    double mx = -INFINITY, sum = 0;
    for (int64_t p = 0; p < n; ++p) {
      double d = 0;
      for (int64_t i = 0; i < hd; ++i) d += double(q[g * hd + i]) * K[p * D + kvh * hd + i];
      mx = std::max(mx, s[p] = d);
    }
    for (auto& x : s) sum += (x = std::exp(x - mx));
    for (int64_t i = 0; i < hd; ++i) {
      double o = 0;
      for (int64_t p = 0; p < n; ++p) o += s[p] / sum * V[p * D + kvh * hd + i];
      out[g * hd + i] = float(o);
    }
  }
}

std::vector<float> make_q(const ModelConfig& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int ng = static_cast<int>(c.n_heads / c.n_kv_heads);
  std::vector<float> q(ng * c.head_dim);
  for (auto& x : q) x = nd(rng) / std::sqrt(float(c.head_dim)) * 0.5f;  // score std ~1
  return q;
}

struct FormatCase {
  const char* spec;
  double row_tol;   // max |dequantized - original| / max|original| over the row
  double attn_tol;  // max |attention - F32 attention| (values ~N(0,1))
};

const FormatCase kCases[] = {
    {"f32:paged", 0, 1e-5},
    {"f16:paged", 1e-3, 2e-3},
    {"bf16:paged", 8e-3, 1e-2},
    {"e4m3", 0.07, 0.08},
    {"e4m3:head", 0.07, 0.15},
    {"e4m3:token", 0.07, 0.08},
    {"e5m2", 0.13, 0.15},
    {"int8", 0.005, 0.02},
    {"int4", 0.16, 0.25},
    {"int4:asym", 0.16, 0.25},
    {"int4:pertoken", 0.16, 0.25},
    {"int4:window32", 0.16, 0.25},
    {"int4+rot", 0.2, 0.4},
    {"int2:asym", 0.7, 0.8},
    {"fp4", 0.25, 0.35},
    {"int2", 0.7, 1.0},
    {"int4:prerope", 0.16, 0.35},
    {"int8:keep:0", 0.005, 0.02},
    {"e4m3:scale=0.1", 0.07, 0.15},
};

class KvFormatTest : public ::testing::TestWithParam<std::tuple<FormatCase, int>> {};

ModelConfig config_for(int which) {
  return which == 0 ? make_config(2, 4, 2, 32) : make_config(2, 8, 4, 8);  // SIMD path / scalar path (hd 8)
}

TEST_P(KvFormatTest, RoundTripAndAttention) {
  const auto& [fc, which] = GetParam();
  const ModelConfig c = config_for(which);
  KvCacheSpec spec = parse_kv_spec(fc.spec);
  if (std::string(fc.spec) == "fp4" && c.kv_dim() % 16) GTEST_SKIP() << "fp4 needs kv_dim % 16 == 0";
  const int64_t n = 77, D = c.kv_dim(), hd = c.head_dim;
  Data d = make_data(c, n, 7);
  Rope rope(c, {});
  // Post-RoPE keys are what the model attends with; pre-RoPE specs store the raw keys.
  Data post = d;
  for (int64_t t = 0; t < n; ++t) rope.apply(post.k.data() + t * D, c.n_kv_heads, t);
  KvCache kv(c, 2, 128, spec);
  ASSERT_TRUE(kv.paged());
  kv.bind_rope(&rope);
  store_all(kv, c, spec.pre_rope ? d : post, n, 1);
  const PagedKvCache& pc = *kv.paged_cache();
  double worst = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    std::vector<float> K, V;
    pc.read_rows(l, 1, &K, &V);
    ASSERT_EQ(static_cast<int64_t>(K.size()), n * D);
    const double tol = pc.layer_kept(l) ? 1e-3 : fc.row_tol;
    for (int64_t t = 0; t < n; ++t) {
      double km = 0, vm = 0, ke = 0, ve = 0;
      for (int64_t i = 0; i < D; ++i) {
        km = std::max(km, double(std::fabs(post.k[t * D + i]))),
        vm = std::max(vm, double(std::fabs(d.v[t * D + i])));
        ke = std::max(ke, double(std::fabs(K[t * D + i] - post.k[t * D + i])));
        ve = std::max(ve, double(std::fabs(V[t * D + i] - d.v[t * D + i])));
      }
      // Per-channel keys share a scale over the block: bound by the block's channel range, approximated by
      // 2x.
      const double kt = pc.layout(l, true).per_channel ? 2 * tol : tol;
      ASSERT_LE(ke, kt * km + 1e-6) << fc.spec << " layer " << l << " token " << t;
      ASSERT_LE(ve, tol * vm + 1e-6) << fc.spec << " layer " << l << " token " << t;
    }
    // Attention from the pages == reference over dequantized rows (tight), close to F32 attention.
    const int ng = static_cast<int>(c.n_heads / c.n_kv_heads);
    for (int64_t kvh = 0; kvh < c.n_kv_heads; ++kvh)
      for (int64_t np : {int64_t(1), int64_t(40), n}) {
        auto q = make_q(c, static_cast<uint32_t>(kvh * 100 + np));
        std::vector<float> o(ng * hd), r(ng * hd), f(ng * hd), scratch(ng * n);
        kv.attend(l, 1, np, kvh, q.data(), ng, o.data(), scratch.data());
        pc.attend_reference(l, 1, np, kvh, q.data(), ng, r.data());
        attend_f32(c, post.k.data(), d.v.data(), np, kvh, q.data(), ng, f.data());
        for (int64_t i = 0; i < ng * hd; ++i) {
          ASSERT_NEAR(o[i], r[i], 2e-5) << fc.spec << " l" << l << " h" << kvh << " n" << np << " i" << i;
          ASSERT_TRUE(std::isfinite(o[i]));
          worst = std::max(worst, double(std::fabs(o[i] - f[i])));
        }
      }
  }
  std::printf("%-18s hd %lld: max |attention - f32 attention| = %.5f (bound %.3f)\n", fc.spec,
              (long long)c.head_dim, worst, fc.attn_tol);
  EXPECT_LE(worst, fc.attn_tol) << fc.spec << " vs f32";
}

INSTANTIATE_TEST_SUITE_P(Formats, KvFormatTest,
                         ::testing::Combine(::testing::ValuesIn(kCases), ::testing::Values(0, 1)));

TEST(KvRotation, LeavesF32AttentionUnchanged) {
  const ModelConfig c = make_config(1, 4, 2, 32);
  Data d = make_data(c, 50, 3);
  KvCache a(c, 1, 64, parse_kv_spec("f32:paged")), b(c, 1, 64, parse_kv_spec("f32+rot"));
  store_all(a, c, d, 50);
  store_all(b, c, d, 50);
  auto q = make_q(c, 5);
  std::vector<float> oa(2 * 32), ob(2 * 32), s(2 * 50);
  for (int64_t h = 0; h < 2; ++h) {
    a.attend(0, 0, 50, h, q.data(), 2, oa.data(), s.data());
    b.attend(0, 0, 50, h, q.data(), 2, ob.data(), s.data());
    for (int i = 0; i < 64; ++i) EXPECT_NEAR(oa[i], ob[i], 1e-5);
  }
  std::vector<float> x(64), y;
  for (int i = 0; i < 64; ++i) x[i] = float(i % 5) - 2.0f;
  y = x;
  fwht_normalized(y.data(), 64);
  fwht_normalized(y.data(), 64);
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(x[i], y[i], 1e-5);  // its own inverse
}

// KvCache's store: plain specs get the contiguous one, anything else the paged cache, which is also what
// paged_cache() returns (the engine's page accounting). Unquantized F16 rows attend alike in both.
TEST(KvStore, PlainSpecsContiguousOthersPaged) {
  const ModelConfig c = make_config(2, 4, 2, 32);
  const int64_t n = 40, D = c.kv_dim();
  Data d = make_data(c, n, 9);
  KvCache a(c, 2, 64, parse_kv_spec("f16")), b(c, 2, 64, parse_kv_spec("f16:paged"));
  EXPECT_FALSE(a.paged());
  EXPECT_EQ(a.paged_cache(), nullptr);
  EXPECT_NE(dynamic_cast<const ContiguousKvStore*>(&a.store()), nullptr);
  EXPECT_EQ(a.describe(), "f16");
  EXPECT_EQ(a.bytes_per_token(), 2 * c.n_layers * D * 2);
  EXPECT_EQ(a.total_bytes(), a.bytes_per_token() * 64 * 2);
  EXPECT_EQ(a.capacity_tokens(), 128);
  EXPECT_TRUE(a.tiled_ok());
  EXPECT_FALSE(a.keys_pre_rope());
  ASSERT_TRUE(b.paged());
  EXPECT_EQ(&b.store(), static_cast<const KvStore*>(b.paged_cache()));
  EXPECT_EQ(b.bytes_per_token(), a.bytes_per_token());
  EXPECT_NE(b.describe().find("(paged)"), std::string::npos);
  store_all(a, c, d, n, 1);
  store_all(b, c, d, n, 1);
  auto q = make_q(c, 5);
  std::vector<float> oa(2 * 32), ob(2 * 32), s(2 * n);
  for (int64_t h = 0; h < 2; ++h) {
    a.store().attend(1, 1, n, h, q.data(), 2, oa.data(), s.data());
    b.store().attend(1, 1, n, h, q.data(), 2, ob.data(), s.data());
    for (int i = 0; i < 64; ++i) EXPECT_NEAR(oa[i], ob[i], 1e-6);
  }
}

TEST(KvSpec, ParsesFlags) {
  auto s = parse_kv_spec("int4:window128+rot:keep:0,-1", "", "int2", "h2o:25%");
  EXPECT_EQ(s.k.format, KvFormat::INT4);
  EXPECT_EQ(s.v.format, KvFormat::INT2);
  EXPECT_EQ(s.window, 128);
  EXPECT_TRUE(s.rotate);
  EXPECT_EQ(s.keep_layers, (std::vector<int>{0, -1}));
  EXPECT_EQ(s.evict.policy, KvEvictPolicy::H2O);
  EXPECT_EQ(kv_evict_budget(s.evict, 512), 128);
  auto e = parse_kv_spec("e4m3:head:prerope", "", "", "streaming:4+60");
  EXPECT_EQ(e.k.fp8_scale, KvScaleMode::Head);
  EXPECT_TRUE(e.pre_rope);
  EXPECT_EQ(kv_evict_budget(e.evict, 512), 64);
  EXPECT_TRUE(parse_kv_spec("f16").is_plain());
  EXPECT_FALSE(parse_kv_spec("f16:paged").is_plain());
  EXPECT_EQ(parse_kv_spec("f16:budget=64MiB").budget_bytes, 64 << 20);
  for (const char* bad : {"int5", "int4:window", "int4:bogus", "int4:keep", "int4:keep:x", "e4m3:scale=-1",
                          "int4:block=0", "int4:budget=0"})
    EXPECT_THROW(parse_kv_spec(bad), UsageError) << bad;
  for (const char* bad : {"h2o", "h2o:0%", "h2o:1", "streaming:4", "streaming:a+4", "lru:3", "h2o:50%:foo"})
    EXPECT_THROW(parse_kv_spec("", "", "", bad), UsageError) << bad;
  const ModelConfig c = make_config(2, 4, 2, 32);
  EXPECT_THROW(KvCache(c, 1, 16, parse_kv_spec("int4:keep:5")), UsageError);
  EXPECT_THROW(KvCache(make_config(2, 4, 2, 24), 1, 16, parse_kv_spec("int8+rot")), UsageError);
}

// bytes per token = 2 x layers x kv_heads x head_dim x bytes per element + scale overhead, equal to what is
// allocated (pages) for every format; capacity grows by the expected factor at a fixed byte budget.
TEST(KvBytes, FormulaMatchesAllocation) {
  const ModelConfig c = make_config(24, 14, 2, 64);  // Qwen2.5-0.5B shape
  const int64_t L = c.n_layers, H = c.n_kv_heads, D = c.kv_dim(), B = 16;
  struct Want {
    const char* spec;
    double per_token;
  };
  const Want wants[] = {
      {"f32:paged", 2.0 * L * D * 4},
      {"f16:paged", 2.0 * L * D * 2},
      {"bf16:paged", 2.0 * L * D * 2},
      {"e4m3", 2.0 * L * D * 1},
      {"e4m3:token", 2.0 * L * (D + 2 * H)},
      {"int8", 2.0 * L * (D + 2 * H)},
      {"int4", L * (D / 2 + 2.0 * D / B) + L * (D / 2 + D / 32 * 4)},
      {"int4:asym", L * (D / 2 + 4.0 * D / B) + L * (D / 2 + D / 32 * 4)},
      {"int2", L * (D / 4 + 2.0 * D / B) + L * (D / 4 + D / 32 * 4)},
      {"fp4", 2.0 * L * (D / 2 + D / 16)},
  };
  for (const auto& w : wants) {
    KvCache kv(c, 1, 1024, parse_kv_spec(w.spec));
    const PagedKvCache& p = *kv.paged_cache();
    EXPECT_DOUBLE_EQ(p.bytes_per_token_exact(), w.per_token) << w.spec;
    EXPECT_EQ(p.pool_bytes(), p.n_blocks() * p.block_bytes()) << w.spec;
    EXPECT_EQ(kv.total_bytes(), p.pool_bytes() + p.staging_bytes()) << w.spec;
    EXPECT_DOUBLE_EQ(p.block_bytes(), w.per_token * B) << w.spec;
  }
  auto cap = [&](const char* s) {
    KvCacheSpec sp = parse_kv_spec(std::string(s) + ":budget=64MiB");
    return double(KvCache(c, 1, 1, sp).capacity_tokens());
  };
  const double f16 = cap("f16");
  EXPECT_GT(cap("int8") / f16, 1.9);
  EXPECT_GT(cap("e4m3") / f16, 1.99);
  EXPECT_GT(cap("int4") / f16, 3.2);  // symmetric per-channel keys + asymmetric group-32 values
  EXPECT_GT(cap("fp4") / f16, 3.5);
  // Keeping layers in 16 bit costs exactly their F16 bytes.
  KvCache keep(c, 1, 64, parse_kv_spec("int8:keep:0,-1"));
  EXPECT_DOUBLE_EQ(keep.bytes_per_token_exact(), 22 * 2.0 * (D + 2 * H) + 2 * 2.0 * D * 2);
}

TEST(KvPaged, BudgetAllocationAndFree) {
  const ModelConfig c = make_config(2, 4, 2, 32);
  KvCacheSpec s = parse_kv_spec("int8:budget=64");  // 4 pages of 16 tokens, shared
  KvCache kv(c, 3, 64, s);
  PagedKvCache& p = *kv.paged_cache();
  EXPECT_EQ(p.n_blocks(), 4);
  Data d = make_data(c, 64, 1);
  store_all(kv, c, d, 40, 0);  // 3 pages
  EXPECT_EQ(p.free_blocks(), 1);
  store_all(kv, c, d, 16, 1);  // 1 page
  EXPECT_EQ(p.free_blocks(), 0);
  try {
    store_all(kv, c, d, 1, 2);
    FAIL() << "expected a budget error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV cache is full"), std::string::npos) << e.what();
  }
  kv.clear(0);
  EXPECT_EQ(p.free_blocks(), 3);
  store_all(kv, c, d, 33, 2);
  EXPECT_EQ(p.free_blocks(), 0);
  EXPECT_EQ(p.positions(1, 2).size(), 33u);
  // Rewinding (storing position 0 again) starts the sequence over and returns its pages.
  store_all(kv, c, d, 5, 2);
  EXPECT_EQ(p.positions(0, 2).size(), 5u);
  EXPECT_EQ(p.free_blocks(), 2);
}

TEST(KvEvict, StreamingKeepsSinksAndWindow) {
  const ModelConfig c = make_config(2, 4, 2, 32);
  for (const char* f : {"f16:paged", "int4", "int8:window8"}) {
    KvCache kv(c, 1, 64, parse_kv_spec(f, "", "", "streaming:4+12"));
    Data d = make_data(c, 100, 2);
    for (int64_t t = 0; t < 100; ++t) {
      std::vector<int32_t> sq{0};
      for (int l = 0; l < 2; ++l)
        kv.store_rows(l, 1, sq.data(), &t, d.k.data() + t * 64, d.v.data() + t * 64);
    }
    std::vector<int64_t> want{0, 1, 2, 3};
    for (int64_t t = 88; t < 100; ++t) want.push_back(t);
    EXPECT_EQ(kv.paged_cache()->positions(0, 0), want) << f;
    EXPECT_EQ(kv.paged_cache()->positions(1, 0), want) << f;
    // Kept tokens still decode to their original rows.
    std::vector<float> K, V;
    kv.paged_cache()->read_rows(0, 0, &K, &V);
    for (size_t r = 0; r < want.size(); ++r)
      EXPECT_NEAR(V[r * 64 + 3], d.v[want[r] * 64 + 3], 0.2) << f << " row " << r;
  }
}

TEST(KvEvict, H2OKeepsHeavyHitters) {
  const ModelConfig c = make_config(1, 2, 1, 32);
  for (const char* f : {"f32:paged", "int4"}) {
    KvCache kv(c, 1, 64, parse_kv_spec(f, "", "", "h2o:16:recent4"));
    PagedKvCache& p = *kv.paged_cache();
    std::mt19937 rng(9);
    std::normal_distribution<float> nd(0, 0.1f);
    // Tokens 5, 17 and 30 share a key direction every query looks for: they must survive.
    std::vector<float> key(32), q(64), out(64), scratch(2 * 64);
    for (int i = 0; i < 32; ++i) q[i] = q[32 + i] = (i % 2 ? 1.0f : -1.0f);
    for (int64_t t = 0; t < 60; ++t) {
      const bool heavy = t == 5 || t == 17 || t == 30;
      for (int i = 0; i < 32; ++i) key[i] = heavy ? q[i] : nd(rng);
      std::vector<float> v(32, float(t));
      int32_t sq = 0;
      kv.store_rows(0, 1, &sq, &t, key.data(), v.data());
      kv.attend(0, 0, t + 1, 0, q.data(), 2, out.data(), scratch.data());
      EXPECT_LE(static_cast<int64_t>(p.positions(0, 0).size()), 16);
    }
    auto pos = p.positions(0, 0);
    for (int64_t h : {5, 17, 30})
      EXPECT_NE(std::find(pos.begin(), pos.end(), h), pos.end()) << f << " lost " << h;
    for (int64_t t = 56; t < 60; ++t)
      EXPECT_NE(std::find(pos.begin(), pos.end(), t), pos.end()) << f << " recent";
    // The victim rule itself: lowest score outside the recent window.
    KvEvictSpec e = parse_kv_evict("h2o:6:recent2");
    const float sc[] = {5, 1, 3, 0.5f, 0.1f, 0.2f};
    EXPECT_EQ(kv_choose_victim(e, 6, sc, 100), 3);
  }
}

}  // namespace

namespace lowbit {
namespace {
// A quantized checkpoint's k_scale / v_scale become the cache's calibrated FP8 scales, only where they apply.
TEST(KvCheckpointScales, AppliedToFp8TensorAndHeadLayersOnly) {
  const ModelConfig c = make_config(2, 4, 2, 32);
  ModelWeights w;
  w.layers.resize(2);
  for (auto& L : w.layers) L.k_scale = {0.02f}, L.v_scale = {0.01f, 0.03f};  // per tensor / per head
  struct Case {
    const char* spec;
    int sides;
  };
  for (const Case& k : {Case{"e4m3", 4}, Case{"e5m2:head", 4}, Case{"e4m3:token", 0},
                        Case{"e4m3:scale=0.1", 0}, Case{"e4m3+rot", 0}, Case{"int8", 0}, Case{"f16", 0}}) {
    KvCache kv(c, 1, 32, parse_kv_spec(k.spec));
    EXPECT_EQ(use_checkpoint_kv_scales(kv, w), k.sides) << k.spec;
    EXPECT_EQ(use_checkpoint_kv_scales(kv, w), k.sides) << k.spec << " (second call is a no-op)";
  }
  // The calibrated scale is the one used: a value encoded with scale s decodes to a multiple of s's grid.
  KvCache kv(c, 1, 32, parse_kv_spec("e4m3"));
  use_checkpoint_kv_scales(kv, w);
  std::vector<float> x(static_cast<size_t>(c.kv_dim()), 0.0f);
  x[0] = 0.02f * 3.0f;  // exactly representable: 3 * scale
  kv.store(0, 0, 0, x.data(), x.data());
  std::vector<float> K, V;
  kv.paged_cache()->read_rows(0, 0, &K, &V);
  EXPECT_FLOAT_EQ(K[0], 0.06f);
}
}  // namespace
}  // namespace lowbit
