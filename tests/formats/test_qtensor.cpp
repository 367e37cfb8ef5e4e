// QuantizedMatrix: formulas of every granularity / format family, layout, error bounds, edge cases.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "formats/minifloat.h"
#include "tensor/qtensor.h"

using namespace lowbit;

namespace {
std::vector<float> gaussian(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}
std::vector<float> heavy_tailed(int64_t n, uint32_t seed) {
  auto v = gaussian(n, seed);
  std::mt19937 rng(seed + 1);
  for (size_t i = 0; i < v.size(); i += 97) v[i] *= 20.0f;  // ~1% outliers
  return v;
}
double rel_rmse(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, s = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    e += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    s += double(a[i]) * a[i];
  }
  return std::sqrt(e / s);
}
std::vector<float> roundtrip(const std::vector<float>& w, int64_t rows, int64_t cols, const QuantScheme& s,
                             const float* imp = nullptr) {
  auto q = quantize_matrix(w.data(), rows, cols, s, imp);
  std::vector<float> out(w.size());
  dequantize_matrix(q, out.data());
  return out;
}
}  // namespace

TEST(Pack, LsbFirstBitStream) {
  uint8_t row[4] = {0, 0, 0, 0};
  pack_code(row, 0, 4, 0x3);
  pack_code(row, 1, 4, 0xA);
  EXPECT_EQ(row[0], 0xA3);  // element 0 in the low nibble
  uint8_t r3[3] = {0, 0, 0};
  for (int i = 0; i < 8; ++i) pack_code(r3, i, 3, static_cast<uint32_t>(i));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(unpack_code(r3, i, 3), static_cast<uint32_t>(i));
  EXPECT_EQ(r3[0], 0x88);  // 0 | 1<<3 | 2<<6 (low bits of 2) = 0b10001000
}

TEST(Int, SymmetricFormula) {
  const float w[4] = {3.5f, -7.0f, 1.75f, 4.9f};
  auto q = quantize_matrix(w, 1, 4, parse_scheme("int4:channel:sym:f32"));
  const float s = 1.0f;  // absmax 7 / 7
  EXPECT_EQ(q.scale(0, 0), s);
  EXPECT_EQ(q.zero_point(0, 0), 8);
  for (int c = 0; c < 4; ++c) {
    const int want = static_cast<int>(std::nearbyint(w[c] / s)) + 8;
    EXPECT_EQ(q.code(0, c), static_cast<uint32_t>(want)) << c;
  }
  EXPECT_EQ(q.code(0, 0), 12u);  // 3.5 -> 4 (half to even)
  EXPECT_EQ(q.code(0, 2), 10u);  // 1.75 -> 2
  float out[4];
  dequantize_row(q, 0, out);
  for (int c = 0; c < 4; ++c) EXPECT_EQ(out[c], static_cast<float>(static_cast<int>(q.code(0, c)) - 8) * s);
  EXPECT_EQ(out[1], -1.0f * 7 * s);
}

TEST(Int, AsymmetricFormula) {
  const float w[6] = {-1.0f, 0.0f, 0.5f, 2.0f, 1.3f, -0.4f};
  auto q = quantize_matrix(w, 1, 6, parse_scheme("int4:channel:asym:f32"));
  const float s = (2.0f - -1.0f) / 15.0f;
  const int z = static_cast<int>(std::nearbyint(1.0f / s));
  EXPECT_EQ(q.scale(0, 0), s);
  EXPECT_EQ(q.zero_point(0, 0), z);
  EXPECT_EQ(z, 5);
  float out[6];
  dequantize_row(q, 0, out);
  for (int c = 0; c < 6; ++c) {
    const int u = std::clamp(static_cast<int>(std::nearbyint(w[c] / s)) + z, 0, 15);
    EXPECT_EQ(q.code(0, c), static_cast<uint32_t>(u)) << c;
    EXPECT_EQ(out[c], static_cast<float>(u - z) * s);
  }
  EXPECT_EQ(out[1], 0.0f);  // zero is exact
  // All-positive group: min is clamped to 0 so zero stays representable.
  const float p[3] = {1.0f, 2.0f, 3.0f};
  auto qp = quantize_matrix(p, 1, 3, parse_scheme("int8:channel:asym:f32"));
  EXPECT_EQ(qp.zero_point(0, 0), 0);
  EXPECT_EQ(qp.scale(0, 0), 3.0f / 255.0f);
}

TEST(Int, ScaleIsRoundedToTheScaleTypeBeforeUse) {
  auto w = gaussian(8 * 96, 3);
  for (const char* sch : {"int4:g32:sym:f16", "int4:g32:sym:bf16", "int4:g32:sym:e4m3", "int4:g32:sym:e8m0",
                          "int8:g32:asym:f16"}) {
    const QuantScheme s = parse_scheme(sch);
    auto q = quantize_matrix(w.data(), 8, 96, s);
    for (int64_t i = 0; i < q.grid.rows; ++i)
      for (int64_t j = 0; j < q.grid.cols; ++j) {
        const float sc = q.scale(i, j);
        EXPECT_EQ(scale_round(s.scale_type, sc), sc) << sch;  // representable in the type
      }
    // Dequantization = (u - z) * stored scale, element by element.
    std::vector<float> out(w.size());
    dequantize_matrix(q, out.data());
    for (int64_t r = 0; r < 8; ++r)
      for (int64_t c = 0; c < 96; ++c)
        EXPECT_EQ(out[r * 96 + c],
                  static_cast<float>(static_cast<int>(q.code(r, c)) - q.zero_point(r, c / 32)) *
                      q.scale(r, c / 32));
    if (s.scale_type == ScaleType::E8M0) {
      // Rounded up, so no element clips: every |x| <= 7 * scale.
      for (int64_t r = 0; r < 8; ++r)
        for (int64_t c = 0; c < 96; ++c) EXPECT_LE(std::fabs(w[r * 96 + c]), 7 * q.scale(r, c / 32));
    }
  }
}

TEST(Granularity, RaggedLastGroupHasItsOwnScale) {
  std::vector<float> w(100, 0.1f);
  for (int c = 96; c < 100; ++c) w[c] = 7.0f;  // only the 4-element tail is large
  auto q = quantize_matrix(w.data(), 1, 100, parse_scheme("int4:g32:sym:f32"));
  ASSERT_EQ(q.grid.cols, 4);
  EXPECT_FLOAT_EQ(q.scale(0, 0), 0.1f / 7);
  EXPECT_FLOAT_EQ(q.scale(0, 3), 1.0f);
  std::vector<float> out(100);
  dequantize_row(q, 0, out.data());
  for (int c = 0; c < 100; ++c) EXPECT_NEAR(out[c], w[c], 1e-6) << c;
}

TEST(Granularity, TensorChannelBlock2D) {
  const int64_t R = 6, C = 10;
  auto w = gaussian(R * C, 5);
  w[2 * C + 3] = 9.0f;
  auto qt = quantize_matrix(w.data(), R, C, parse_scheme("e4m3:tensor"));
  EXPECT_EQ(qt.grid.cells(), 1);
  EXPECT_FLOAT_EQ(qt.scale(0, 0), 9.0f / 448);
  auto qc = quantize_matrix(w.data(), R, C, parse_scheme("e4m3:channel"));
  EXPECT_EQ(qc.grid.rows, R);
  for (int64_t r = 0; r < R; ++r) {
    float amax = 0;
    for (int64_t c = 0; c < C; ++c) amax = std::max(amax, std::fabs(w[r * C + c]));
    EXPECT_EQ(qc.scale(r, 0), amax / 448.0f);
  }
  auto qb = quantize_matrix(w.data(), R, C, parse_scheme("e4m3:block4x4"));
  ASSERT_EQ(qb.grid.rows, 2);
  ASSERT_EQ(qb.grid.cols, 3);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      float amax = 0;
      for (int64_t r = 4 * i; r < std::min<int64_t>(R, 4 * i + 4); ++r)
        for (int64_t c = 4 * j; c < std::min<int64_t>(C, 4 * j + 4); ++c)
          amax = std::max(amax, std::fabs(w[r * C + c]));
      EXPECT_EQ(qb.scale(i, j), amax / 448.0f) << i << "," << j;
    }
  // Dequantized tile max is exact (max maps to code 448).
  std::vector<float> out(R * C);
  dequantize_matrix(qb, out.data());
  EXPECT_NEAR(out[2 * C + 3], 9.0f, 1e-5);
}

TEST(Nf4, CodeValuesBitExact) {
  const float want[16] = {-1.0f,
                          -0.6961928009986877f,
                          -0.5250730514526367f,
                          -0.39491748809814453f,
                          -0.28444138169288635f,
                          -0.18477343022823334f,
                          -0.09105003625154495f,
                          0.0f,
                          0.07958029955625534f,
                          0.16093020141124725f,
                          0.24611230194568634f,
                          0.33791524171829224f,
                          0.44070982933044434f,
                          0.5626170039176941f,
                          0.7229568362236023f,
                          1.0f};
  const auto& f = format_info(FormatId::NF4);
  for (uint32_t c = 0; c < 16; ++c) EXPECT_EQ(f32_bits(f.decode(c)), f32_bits(want[c])) << c;
  // Nearest code of x / absmax.
  const float w[4] = {2.0f, -2.0f, 0.0f, 0.3f};
  auto q = quantize_matrix(w, 1, 4, parse_scheme("nf4:channel:f32"));
  EXPECT_EQ(q.scale(0, 0), 2.0f);
  EXPECT_EQ(q.code(0, 0), 15u);
  EXPECT_EQ(q.code(0, 1), 0u);
  EXPECT_EQ(q.code(0, 2), 7u);
  EXPECT_EQ(q.code(0, 3), 9u);  // 0.15 is nearest to 0.1609
}

TEST(Nf4, BeatsInt4OnGaussianAtTheSameBlock) {
  auto w = gaussian(64 * 1024, 11);
  const double e_nf4 = rel_rmse(w, roundtrip(w, 64, 1024, parse_scheme("nf4:g64:f32")));
  const double e_int4 = rel_rmse(w, roundtrip(w, 64, 1024, parse_scheme("int4:g64:sym:f32")));
  EXPECT_LT(e_nf4, e_int4 * 0.95) << e_nf4 << " vs " << e_int4;
}

TEST(Nf4, DoubleQuantizationIsCloseAndExactlyDecodable) {
  auto w = gaussian(64 * 1024, 12);
  const auto s = parse_scheme("nf4:g64:dq");
  auto q = quantize_matrix(w.data(), 64, 1024, s);
  EXPECT_EQ(q.dq_scales.size(), static_cast<size_t>((64 * 16 + 255) / 256));
  EXPECT_EQ(q.scales.size(), static_cast<size_t>(64 * 16));
  const double e_dq = rel_rmse(w, roundtrip(w, 64, 1024, s));
  const double e = rel_rmse(w, roundtrip(w, 64, 1024, parse_scheme("nf4:g64")));
  EXPECT_LT(e_dq, e * 1.05);
  // Row dequantization = nf4 value * second-level scale.
  std::vector<float> out(1024);
  dequantize_row(q, 5, out.data());
  for (int c = 0; c < 1024; ++c) {
    const int k = 5 * 16 + c / 64;
    const float sc =
        q.dq_scales[k / 256] * static_cast<float>(static_cast<int8_t>(q.scales[k])) / 127.0f + q.dq_offset;
    EXPECT_EQ(out[c], format_info(FormatId::NF4).decode(q.code(5, c)) * sc);
  }
}

TEST(Mx, SharedExponentRule) {
  std::vector<float> w(32, 0.0f);
  w[0] = 7.9f;
  w[1] = 1.2f;
  auto q = quantize_matrix(w.data(), 1, 32, parse_scheme("mxfp4"));
  EXPECT_EQ(q.scales[0], 127);  // floor(log2 7.9) - 2 = 0
  EXPECT_EQ(q.code(0, 0), 7u);  // 7.9 clips to 6
  EXPECT_EQ(q.code(0, 1), 2u);  // 1.2 -> 1
  float out[32];
  dequantize_row(q, 0, out);
  EXPECT_EQ(out[0], 6.0f);

  struct Case {
    const char* scheme;
    float amax;
    int want_code;
  } cases[] = {
      {"mxfp8_e4m3", 1.0f, 127 - 8}, {"mxfp8_e4m3", 448.0f, 127},   {"mxfp8_e5m2", 1.0f, 127 - 15},
      {"mxfp6_e3m2", 20.0f, 127},    {"mxfp6_e2m3", 0.3f, 127 - 4}, {"mxfp4", 0.3f, 127 - 4},
      {"mxint8", 1.5f, 127},         {"mxint8", 3.0f, 128},         {"mxfp4", 0.0f, 0},
      {"mxfp4", 1e30f, 127 + 97},    {"mxfp4", 1e-38f, 0},
  };
  for (auto& cs : cases) {
    std::vector<float> b(32, 0.0f);
    b[5] = -cs.amax;
    b[6] = cs.amax / 3;
    auto qq = quantize_matrix(b.data(), 1, 32, parse_scheme(cs.scheme));
    EXPECT_EQ(qq.scales[0], cs.want_code) << cs.scheme << " amax " << cs.amax;
    const float X = e8m0_to_f32(qq.scales[0]);
    const auto& ef = format_info(qq.elem);
    EXPECT_EQ(qq.code(0, 6), ef.encode(b[6] / X, true)) << cs.scheme;
  }
  // MXFP4 with amax 0.3: 0.3 * 16 = 4.8 -> 4; MXINT8 amax 1.5: 1.5 * 64 = 96.
  std::vector<float> b(32, 0.0f);
  b[0] = 0.3f;
  EXPECT_EQ(quantize_matrix(b.data(), 1, 32, parse_scheme("mxfp4")).code(0, 0), 6u);
  b[0] = 1.5f;
  EXPECT_EQ(quantize_matrix(b.data(), 1, 32, parse_scheme("mxint8")).code(0, 0), 96u);
}

TEST(Nvfp4, TwoLevelRoundTrip) {
  const int64_t R = 8, C = 64;
  auto w = gaussian(R * C, 21, 0.05f);
  w[3] = 0.9f;
  auto q = quantize_matrix(w.data(), R, C, parse_scheme("nvfp4"));
  EXPECT_EQ(q.global_scale, 448.0f * 6.0f / 0.9f);
  ASSERT_EQ(q.grid.cols, 4);
  std::vector<float> out(R * C);
  dequantize_matrix(q, out.data());
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < 4; ++j) {
      float amax = 0;
      for (int c = 0; c < 16; ++c) amax = std::max(amax, std::fabs(w[r * C + 16 * j + c]));
      const uint8_t bs = q.scales[r * 4 + j];
      EXPECT_EQ(bs, f32_to_fp8_e4m3fn(amax / 6.0f * q.global_scale)) << r << "," << j;
      EXPECT_LT(bs, 0x80);  // UE4M3: sign 0
      for (int c = 0; c < 16; ++c) {
        const int64_t k = r * C + 16 * j + c;
        const float xs = w[k] * q.global_scale / fp8_e4m3fn_to_f32(bs);
        EXPECT_EQ(q.code(r, 16 * j + c), f32_to_fp4_e2m1(xs));
        EXPECT_EQ(out[k], fp4_e2m1_to_f32(q.code(r, 16 * j + c)) * (fp8_e4m3fn_to_f32(bs) / q.global_scale));
        EXPECT_LE(std::fabs(out[k] - w[k]), amax / 6.0f * 1.07f + 1e-7f);  // half of the widest E2M1 step
      }
    }
  EXPECT_DOUBLE_EQ(q.bits_per_weight(), 4.5 + 32.0 / (R * C));
}

TEST(RoundTrip, ErrorBoundsSweepTheTable) {
  // Relative RMSE ceilings on N(0,1) data for each format under its default scheme (a few x the ideal value).
  const int64_t R = 32, C = 512;
  auto w = gaussian(R * C, 7);
  for (const auto& f : format_table()) {
    if (f.kind == FormatKind::Scale) continue;
    QuantScheme s = default_scheme(f.id);
    if (f.is_gguf() && !f.quantize_row) {
      EXPECT_THROW(quantize_matrix(w.data(), R, C, s), UsageError) << f.name;
      continue;
    }
    auto q = quantize_matrix(w.data(), R, C, s);
    std::vector<float> out(w.size());
    dequantize_matrix(q, out.data());
    const double e = rel_rmse(w, out);
    // Ideal uniform-grid error ~ 2^-bits; allow 2^(2 - bits) (e.g. int4: 0.25, 8-bit: 0.016).
    double ceiling = std::ldexp(1.0, 2 - f.bits);
    // Float elements: relative error set by the mantissa width m, about 2^-(m+1).
    const FormatId el = f.elem;
    if (el == FormatId::E4M3FN || el == FormatId::E4M3FNUZ || el == FormatId::E2M3) ceiling = 0.0625;
    if (el == FormatId::E5M2 || el == FormatId::E5M2FNUZ || el == FormatId::E3M2) ceiling = 0.125;
    if (f.bits >= 16) ceiling = 1e-2;
    if (f.id == FormatId::INT2) ceiling = 0.8;  // 3 levels
    EXPECT_LT(e, ceiling) << f.name << " rel rmse " << e;
    if (f.id != FormatId::F32) {
      EXPECT_GT(e, 0.0) << f.name;
    }
    EXPECT_GE(q.storage_bytes(), q.codes.size());
    // Storage matches the accounting to within row padding and uint8 zero points.
    const double bits = double(storage_bits(s, R, C).total());
    EXPECT_NEAR(double(q.storage_bytes()) * 8, bits, bits * 0.02 + 64) << f.name;
  }
}

TEST(Search, MseNeverWorseAndImportanceHelps) {
  const int64_t R = 16, C = 256;
  auto w = heavy_tailed(R * C, 9);
  for (const char* base :
       {"int4:g64:sym:f16", "int3:g128:asym:f16", "nf4:g64", "e2m1:g32:f16", "int4:channel:sym:f32"}) {
    QuantScheme a = parse_scheme(base), m = a;
    m.search = ScaleSearch::Mse;
    const double ea = rel_rmse(w, roundtrip(w, R, C, a));
    const double em = rel_rmse(w, roundtrip(w, R, C, m));
    EXPECT_LE(em, ea * 1.0000001) << base;
  }
  // Weighting column 0 heavily lowers its error.
  QuantScheme m = parse_scheme("int3:channel:sym:f32:mse");
  std::vector<float> imp(C, 1.0f);
  imp[0] = 1e4f;
  auto plain = roundtrip(w, R, C, m), weighted = roundtrip(w, R, C, m, imp.data());
  double e0p = 0, e0w = 0;
  for (int64_t r = 0; r < R; ++r) {
    e0p += std::pow(plain[r * C] - w[r * C], 2);
    e0w += std::pow(weighted[r * C] - w[r * C], 2);
  }
  EXPECT_LE(e0w, e0p);
}

TEST(Edge, NonFiniteWeightsAreRejectedWithLocation) {
  std::vector<float> w(64, 1.0f);
  w[37] = std::numeric_limits<float>::quiet_NaN();
  try {
    quantize_matrix(w.data(), 2, 32, parse_scheme("int4:g32"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("row 1, col 5"), std::string::npos) << e.what();
  }
  w[37] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(quantize_matrix(w.data(), 2, 32, parse_scheme("mxfp4")), Error);
  EXPECT_THROW(quantize_matrix(w.data(), 2, 32, parse_scheme("q8_0")), Error);
}

TEST(Edge, AllZeroMatrix) {
  std::vector<float> w(4 * 64, 0.0f), out(4 * 64, 1.0f);
  for (const char* s :
       {"int4:g32", "int4:g32:asym", "nf4:g64:dq", "mxfp4", "nvfp4", "e4m3:tensor", "q4_k", "q4_0"}) {
    auto q = quantize_matrix(w.data(), 1, 256, parse_scheme(s));
    std::vector<float> o(256, 1.0f);
    dequantize_row(q, 0, o.data());
    for (float v : o) EXPECT_EQ(v, 0.0f) << s;
  }
}

TEST(Activations, Int8PerToken) {
  const float x[5] = {0.5f, -2.54f, 1.27f, 0.0f, 2.54f};
  uint8_t codes[5];
  float scale;
  quantize_activation_row(FormatId::INT8, x, 5, 0, codes, &scale);
  EXPECT_EQ(scale, 2.54f / 127.0f);
  EXPECT_EQ(static_cast<int8_t>(codes[1]), -127);
  EXPECT_EQ(static_cast<int8_t>(codes[4]), 127);
  float out[5];
  dequantize_activation_row(FormatId::INT8, codes, &scale, 5, 0, out);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(out[i], x[i], scale / 2 + 1e-7);
  // Groups along the row, ragged tail.
  float sc[2];
  quantize_activation_row(FormatId::E4M3FN, x, 5, 3, codes, sc);
  EXPECT_EQ(sc[0], 2.54f / 448.0f);
  EXPECT_EQ(sc[1], 2.54f / 448.0f);
  dequantize_activation_row(FormatId::E4M3FN, codes, sc, 5, 3, out);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(out[i], x[i], std::fabs(x[i]) / 16 + 1e-6);
  EXPECT_THROW(quantize_activation_row(FormatId::NF4, x, 5, 0, codes, &scale), UsageError);
}

TEST(Activations, NonFiniteNeverUndefined) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float x[4] = {1.0f, nan, -inf, 0.5f};
  uint8_t codes[4];
  float s;
  quantize_activation_row(FormatId::E4M3FN, x, 4, 0, codes, &s);
  EXPECT_EQ(s, 1.0f / 448.0f);
  EXPECT_EQ(codes[0], 0x7E);
  EXPECT_TRUE(std::isnan(fp8_e4m3fn_to_f32(codes[1])));
  EXPECT_EQ(codes[2], 0xFE);  // -Inf saturates
  quantize_activation_row(FormatId::INT8, x, 4, 0, codes, &s);
  EXPECT_TRUE(std::isnan(s));  // the row dequantizes to NaN: visible downstream
  EXPECT_EQ(static_cast<int8_t>(codes[2]), -127);
  float out[4];
  dequantize_activation_row(FormatId::INT8, codes, &s, 4, 0, out);
  EXPECT_TRUE(std::isnan(out[0]));
}

// ---- LUT2/3/4 per-row codebooks ----

TEST(Codebook, SchemeStringAndBits) {
  const QuantScheme s = parse_scheme("lut3");
  EXPECT_EQ(s.gran, Granularity::Channel);
  EXPECT_EQ(s.scale_type, ScaleType::F16);
  EXPECT_EQ(to_string(s), "lut3");
  EXPECT_EQ(parse_scheme("lut3:channel"), s);
  EXPECT_THROW(parse_scheme("lut3:g32"), UsageError);
  EXPECT_THROW(parse_scheme("lut4:mse"), UsageError);
  EXPECT_THROW(parse_scheme("lut4:bf16"), UsageError);
  const ScaleGrid g = scale_grid(s, 10, 896);
  EXPECT_EQ(g.rows, 10);
  EXPECT_EQ(g.cols, 8);
  // b + 16 * 2^b / cols: the table is counted exactly.
  EXPECT_DOUBLE_EQ(bits_per_weight(s, 10, 896), 3.0 + 16.0 * 8 / 896);
  EXPECT_DOUBLE_EQ(bits_per_weight(parse_scheme("lut4"), 7, 4864), 4.0 + 16.0 * 16 / 4864);
  EXPECT_DOUBLE_EQ(bits_per_weight(parse_scheme("lut2"), 3, 64), 2.0 + 16.0 * 4 / 64);
}

// The reference decode is the table entry of each code, and the tables are ascending f16 values.
TEST(Codebook, DecodeIsTheRowTable) {
  const int64_t R = 5, C = 77;
  auto w = gaussian(R * C, 3);
  for (int bits : {2, 3, 4}) {
    const QuantScheme s = parse_scheme("lut" + std::to_string(bits));
    auto q = quantize_matrix(w.data(), R, C, s);
    ASSERT_EQ(q.scales.size(), static_cast<size_t>(R * (2 << bits)));
    EXPECT_EQ(q.row_bytes, (C * bits + 7) / 8);
    std::vector<float> out(static_cast<size_t>(C));
    for (int64_t r = 0; r < R; ++r) {
      for (int u = 0; u + 1 < (1 << bits); ++u) EXPECT_LE(q.scale(r, u), q.scale(r, u + 1));
      dequantize_row(q, r, out.data());
      for (int64_t c = 0; c < C; ++c) {
        uint16_t h;
        std::memcpy(&h, q.scales.data() + (r * (1 << bits) + q.code(r, c)) * 2, 2);
        ASSERT_EQ(out[c], f16_to_f32(h));
        // Nearest entry: no other table value is strictly closer.
        for (int u = 0; u < (1 << bits); ++u)
          EXPECT_LE(std::fabs(out[c] - w[r * C + c]), std::fabs(q.scale(r, u) - w[r * C + c]) + 1e-6f);
      }
    }
  }
}

// A row with at most 2^b distinct (f16-exact) values is reproduced exactly; quantizing is deterministic.
TEST(Codebook, ExactOnFewValuesAndDeterministic) {
  const float vals[4] = {-1.5f, -0.25f, 0.5f, 2.0f};
  std::vector<float> w(2 * 64);
  for (size_t i = 0; i < w.size(); ++i) w[i] = vals[(i * 7 + i / 5) % 4];
  auto q = quantize_matrix(w.data(), 2, 64, parse_scheme("lut2"));
  std::vector<float> out(w.size());
  dequantize_matrix(q, out.data());
  EXPECT_EQ(out, w);
  auto g = gaussian(8 * 300, 9);
  auto a = quantize_matrix(g.data(), 8, 300, parse_scheme("lut4"));
  auto b = quantize_matrix(g.data(), 8, 300, parse_scheme("lut4"));
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_EQ(a.scales, b.scales);
}

// Non-uniform beats uniform at the same code width: LUT3 (3.14 bpw at 896 columns) against INT3 per channel
// with the MSE clip search (3.02 bpw) on Gaussian and heavy-tailed rows, and the importance weighting lowers
// the weighted error it is asked to lower.
TEST(Codebook, BeatsUniformAndImportanceHelps) {
  const int64_t R = 16, C = 896;
  // Gaussian rows: 8 Lloyd-Max levels against 7 uniform ones (~10 % lower error); heavy tails: much more.
  for (const auto& [w, factor] :
       {std::pair{gaussian(R * C, 4), 0.95}, std::pair{heavy_tailed(R * C, 5), 0.8}}) {
    const double lut = rel_rmse(w, roundtrip(w, R, C, parse_scheme("lut3")));
    const double uni = rel_rmse(w, roundtrip(w, R, C, parse_scheme("int3:channel:mse")));
    EXPECT_LT(lut, factor * uni) << lut << " vs " << uni;
  }
  auto w = gaussian(R * C, 6);
  std::vector<float> imp(static_cast<size_t>(C), 0.01f);
  for (int64_t c = 0; c < C; c += 8) imp[c] = 100.0f;
  auto weighted_err = [&](const std::vector<float>& d) {
    double e = 0;
    for (int64_t i = 0; i < R * C; ++i) e += imp[i % C] * (double(d[i]) - w[i]) * (double(d[i]) - w[i]);
    return e;
  };
  const auto s = parse_scheme("lut3");
  EXPECT_LT(weighted_err(roundtrip(w, R, C, s, imp.data())), 0.9 * weighted_err(roundtrip(w, R, C, s)));
}

// Scale tuning's rescale (rescale_grid / rescale_cells): a factor per cell moves every value of the cell by
// that factor, up to the rounding of the stored scale to its type, and nothing else of the matrix.
TEST(RescaleCells, EveryTunableSchemeScalesItsCellsAndKeepsItsCodes) {
  const int64_t rows = 6, cols = 512;
  std::mt19937_64 rng(11);
  // Unit-scale weights: Q6_K's d of weights ~0.02 is an fp16 subnormal, whose rounding is coarser than the
  // relative bound checked here.
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (auto& v : w) v = nd(rng) + (nd(rng) > 1.5f ? 2.5f : 0.0f);  // a few larger values, mins not zero
  for (const char* name : {"int4:g32:sym:f16", "int4:g64:asym:f16", "int8:channel:sym:f32",
                           "int3:g32:sym:bf16", "nf4:g64", "e2m1:g32:f16", "lut4", "q4_0", "q4_1", "q5_0",
                           "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs"}) {
    SCOPED_TRACE(name);
    const QuantScheme s = parse_scheme(name);
    const QuantizedMatrix q = quantize_matrix(w.data(), rows, cols, s);
    const ScaleGrid g = rescale_grid(q);
    ASSERT_GT(g.cells(), 0);
    // Factor 1 everywhere: the same bytes.
    const std::vector<float> ones(static_cast<size_t>(g.cells()), 1.0f);
    const QuantizedMatrix same = rescale_cells(q, ones.data());
    EXPECT_EQ(same.codes, q.codes);
    EXPECT_EQ(same.scales, q.scales);
    std::vector<float> f(static_cast<size_t>(g.cells()));
    std::uniform_real_distribution<float> ud(0.6f, 1.7f);
    for (auto& v : f) v = ud(rng);
    const QuantizedMatrix t = rescale_cells(q, f.data());
    EXPECT_EQ(t.zeros, q.zeros);
    const Matrix a = dequantize_matrix(q), b = dequantize_matrix(t);
    // The stored scale is rounded once more: half an ulp of its type (fp16 2^-11, bf16 2^-8) of each term; a
    // block with a min (d q + m, |m| and |d q| up to twice the cell's largest value) rounds two.
    const double tol = s.scale_type == ScaleType::BF16 && !s.info().is_gguf() ? 1.0 / 256 : 1.0 / 1024;
    std::vector<double> cell_max(static_cast<size_t>(g.cells()), 0.0);
    auto cell = [&](int64_t r, int64_t c) {
      return static_cast<size_t>((r / g.row_block) * g.cols + c / g.col_block);
    };
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        cell_max[cell(r, c)] =
            std::max(cell_max[cell(r, c)], std::fabs(static_cast<double>(a.data()[r * cols + c])));
    int moved = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const float fac = f[cell(r, c)];
        const double want = static_cast<double>(a.data()[r * cols + c]) * fac;
        const double got = b.data()[r * cols + c];
        ASSERT_NEAR(got, want, 2 * tol * cell_max[cell(r, c)] * fac + 1e-9) << "row " << r << " col " << c;
        moved += got != a.data()[r * cols + c];
      }
    EXPECT_GT(moved, rows * cols / 2);
  }
}

TEST(RescaleCells, SchemesWhoseScalesCannotMoveAreRefused) {
  const int64_t rows = 4, cols = 256;
  std::vector<float> w(static_cast<size_t>(rows * cols), 0.01f);
  for (const char* name : {"mxfp4", "nvfp4", "nf4:g64:dq", "f16"}) {
    SCOPED_TRACE(name);
    const QuantizedMatrix q = quantize_matrix(w.data(), rows, cols, parse_scheme(name));
    EXPECT_EQ(rescale_grid(q).cells(), 0);
    const float one = 1.0f;
    EXPECT_THROW(rescale_cells(q, &one), UsageError);
  }
  const QuantizedMatrix q = quantize_matrix(w.data(), rows, cols, parse_scheme("int4:g32"));
  std::vector<float> f(static_cast<size_t>(rescale_grid(q).cells()), 1.0f);
  f[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(rescale_cells(q, f.data()), UsageError);
  f[3] = 0.0f;
  EXPECT_THROW(rescale_cells(q, f.data()), UsageError);
}
