// Exhaustive checks of the small float codecs (FP8 x4, FP6 x2, FP4, E8M0) against the facts in FORMATS.md.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "core/error.h"

#include "formats/format.h"
#include "formats/minifloat.h"

using namespace lowbit;

namespace {
struct Fp {
  FormatId id;
  int e, m, bias;
  double max;
  double min_sub;
  bool fnuz;  // NaN = 0x80 only, no -0
  bool ieee;  // E5M2: exponent all-ones = Inf/NaN
};
const Fp kFp8[] = {
    {FormatId::E4M3FN, 4, 3, 7, 448.0, std::ldexp(1.0, -9), false, false},
    {FormatId::E5M2, 5, 2, 15, 57344.0, std::ldexp(1.0, -16), false, true},
    {FormatId::E4M3FNUZ, 4, 3, 8, 240.0, std::ldexp(1.0, -10), true, false},
    {FormatId::E5M2FNUZ, 5, 2, 16, 57344.0, std::ldexp(1.0, -17), true, false},
};
const Fp kSmall[] = {
    {FormatId::E2M1, 2, 1, 1, 6.0, 0.5, false, false},
    {FormatId::E2M3, 2, 3, 1, 7.5, 0.125, false, false},
    {FormatId::E3M2, 3, 2, 3, 28.0, 0.0625, false, false},
};

// Independent decoding straight from the spec text (not via MinifloatSpec).
double spec_decode(const Fp& f, uint32_t c, bool* is_nan, bool* is_inf) {
  const int nb = 1 + f.e + f.m;
  const bool s = (c >> (nb - 1)) & 1;
  const uint32_t E = (c >> f.m) & ((1u << f.e) - 1), M = c & ((1u << f.m) - 1);
  *is_nan = *is_inf = false;
  if (f.fnuz && c == (1u << (nb - 1))) {
    *is_nan = true;
    return 0;
  }
  if (f.ieee && E == (1u << f.e) - 1) {
    (M ? *is_nan : *is_inf) = true;
    return 0;
  }
  if (!f.fnuz && !f.ieee && nb == 8 && E == 15 && M == 7) {
    *is_nan = true;
    return 0;
  }
  double v = E == 0 ? M * std::ldexp(1.0, 1 - f.bias - f.m)
                    : (1.0 + M / double(1 << f.m)) * std::ldexp(1.0, int(E) - f.bias);
  return s ? -v : v;
}

void check_all_codes(const Fp& f) {
  const FormatInfo& fi = format_info(f.id);
  const int nb = 1 + f.e + f.m;
  EXPECT_EQ(fi.bits, nb);
  EXPECT_DOUBLE_EQ(fi.max_finite, f.max) << fi.name;
  EXPECT_DOUBLE_EQ(fi.min_positive, f.min_sub) << fi.name;
  EXPECT_EQ(fi.decode(1), static_cast<float>(f.min_sub)) << fi.name;
  int nan_count = 0;
  for (uint32_t c = 0; c < (1u << nb); ++c) {
    bool nan, inf;
    double want = spec_decode(f, c, &nan, &inf);
    float got = fi.decode(c);
    if (nan) {
      ++nan_count;
      EXPECT_TRUE(std::isnan(got)) << fi.name << " code " << c;
      continue;
    }
    if (inf) {
      EXPECT_TRUE(std::isinf(got)) << fi.name << " code " << c;
      EXPECT_EQ(fi.encode(got, false), c) << fi.name;
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), want) << fi.name << " code " << c;
    EXPECT_EQ(std::signbit(got), bool((c >> (nb - 1)) & 1)) << fi.name << " code " << c;
    EXPECT_EQ(fi.encode(got, true), c) << fi.name << " round trip of code " << c;
    EXPECT_EQ(fi.encode(got, false), c) << fi.name << " round trip of code " << c;
  }
  if (nb == 8) {
    EXPECT_EQ(nan_count, f.fnuz ? 1 : f.ieee ? 6 : 2) << fi.name;
  }
}

// Every midpoint between neighbouring positive (and negative) finite codes rounds to the even code; a hair
// below/above goes to the nearer neighbour.
void check_midpoints(const Fp& f) {
  const FormatInfo& fi = format_info(f.id);
  const int nb = 1 + f.e + f.m;
  const uint32_t sign = 1u << (nb - 1);
  uint32_t maxc = 0;
  while (maxc + 1 < sign && std::isfinite(fi.decode(maxc + 1))) ++maxc;
  EXPECT_EQ(static_cast<double>(fi.decode(maxc)), f.max) << fi.name;
  for (uint32_t k = 0; k < maxc; ++k) {
    const float a = fi.decode(k), b = fi.decode(k + 1);
    const float mid = (a + b) / 2;
    ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(a) + b) / 2) << "midpoint not exact in f32";
    const uint32_t even = (k % 2 == 0) ? k : k + 1;
    EXPECT_EQ(fi.encode(mid, true), even) << fi.name << " midpoint " << mid;
    EXPECT_EQ(fi.encode(std::nextafter(mid, 0.0f), true), k) << fi.name << " below " << mid;
    EXPECT_EQ(fi.encode(std::nextafter(mid, 1e30f), true), k + 1) << fi.name << " above " << mid;
    const uint32_t neg_even = (f.fnuz && even == 0) ? 0 : even | sign;
    EXPECT_EQ(fi.encode(-mid, true), neg_even) << fi.name << " midpoint " << -mid;
  }
  // Saturation.
  EXPECT_EQ(fi.encode(static_cast<float>(f.max) * 4, true), maxc) << fi.name;
  EXPECT_EQ(fi.encode(-static_cast<float>(f.max) * 4, true), maxc | sign) << fi.name;
  EXPECT_EQ(fi.encode(std::numeric_limits<float>::infinity(), true), maxc) << fi.name;
  EXPECT_EQ(fi.encode(-std::numeric_limits<float>::infinity(), true), maxc | sign) << fi.name;
}
}  // namespace

TEST(Fp8, AllCodesDecodeAsSpecified) {
  for (auto& f : kFp8) check_all_codes(f);
}
TEST(Fp8, MidpointsRoundToEvenAndSaturate) {
  for (auto& f : kFp8) check_midpoints(f);
}
TEST(SmallFloats, AllCodesDecodeAsSpecified) {
  for (auto& f : kSmall) check_all_codes(f);
}
TEST(SmallFloats, MidpointsRoundToEvenAndSaturate) {
  for (auto& f : kSmall) check_midpoints(f);
}

TEST(Fp8, KnownCodes) {
  EXPECT_EQ(f32_to_fp8_e4m3fn(448.0f), 0x7E);
  EXPECT_EQ(f32_to_fp8_e4m3fn(-448.0f), 0xFE);
  EXPECT_EQ(f32_to_fp8_e4m3fn(1.0f), 0x38);
  EXPECT_EQ(f32_to_fp8_e5m2(1.0f), 0x3C);
  EXPECT_EQ(f32_to_fp8_e4m3fnuz(1.0f), 0x40);
  EXPECT_EQ(f32_to_fp8_e5m2fnuz(1.0f), 0x40);
  EXPECT_EQ(fp8_e4m3fn_to_f32(0x7E), 448.0f);
  EXPECT_EQ(fp8_e5m2_to_f32(0x7B), 57344.0f);
  EXPECT_EQ(fp8_e4m3fnuz_to_f32(0x7F), 240.0f);
  EXPECT_EQ(fp8_e5m2fnuz_to_f32(0x7F), 57344.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3fn_to_f32(0x7F)));
  EXPECT_TRUE(std::isnan(fp8_e4m3fn_to_f32(0xFF)));
  EXPECT_TRUE(std::isinf(fp8_e5m2_to_f32(0x7C)));
  EXPECT_TRUE(std::isnan(fp8_e4m3fnuz_to_f32(0x80)));
  EXPECT_EQ(fp8_e4m3fn_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3fn_to_f32(0x08), std::ldexp(1.0f, -6));  // min normal
  // -0 exists for FN types, not for FNUZ.
  EXPECT_EQ(f32_to_fp8_e4m3fn(-0.0f), 0x80);
  EXPECT_EQ(f32_to_fp8_e4m3fnuz(-0.0f), 0x00);
  EXPECT_EQ(f32_to_fp8_e5m2fnuz(-1e-30f), 0x00);  // underflows to +0, never to the NaN code
  // Half the min subnormal ties to 0 (even); 0.75 of it rounds up.
  EXPECT_EQ(f32_to_fp8_e4m3fn(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(f32_to_fp8_e4m3fn(std::ldexp(1.5f, -10)), 0x01);
}

TEST(Fp8, NonSaturatingOverflow) {
  EXPECT_EQ(f32_to_fp8_e4m3fn(460.0f, false), 0x7E);  // below the midpoint to the (virtual) 480
  EXPECT_EQ(f32_to_fp8_e4m3fn(464.0f, false), 0x7E);  // tie -> even code 0x7E
  EXPECT_EQ(f32_to_fp8_e4m3fn(465.0f, false), 0x7F);  // -> NaN
  EXPECT_EQ(f32_to_fp8_e4m3fn(-1e9f, false), 0xFF);
  EXPECT_EQ(f32_to_fp8_e5m2(61439.0f, false), 0x7B);
  EXPECT_EQ(f32_to_fp8_e5m2(61440.0f, false), 0x7C);  // tie -> even code = Inf
  EXPECT_EQ(f32_to_fp8_e5m2(-1e9f, false), 0xFC);
  EXPECT_EQ(f32_to_fp8_e5m2(std::numeric_limits<float>::infinity(), false), 0x7C);
  EXPECT_EQ(f32_to_fp8_e4m3fnuz(1e9f, false), 0x80);
  EXPECT_EQ(f32_to_fp8_e5m2fnuz(-1e9f, false), 0x80);
}

TEST(Fp8, NanPropagates) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (bool sat : {true, false}) {
    EXPECT_TRUE(std::isnan(fp8_e4m3fn_to_f32(f32_to_fp8_e4m3fn(nan, sat))));
    EXPECT_TRUE(std::isnan(fp8_e5m2_to_f32(f32_to_fp8_e5m2(nan, sat))));
    EXPECT_EQ(f32_to_fp8_e4m3fnuz(nan, sat), 0x80);
    EXPECT_EQ(f32_to_fp8_e5m2fnuz(-nan, sat), 0x80);
  }
}

TEST(Fp4, E2M1Magnitudes) {
  const float want[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(fp4_e2m1_to_f32(static_cast<uint8_t>(c)), want[c]);
    EXPECT_EQ(fp4_e2m1_to_f32(static_cast<uint8_t>(c | 8)), -want[c]);
  }
  EXPECT_EQ(f32_to_fp4_e2m1(2.5f), 4);   // 2.5 -> 2 (code 4, even)
  EXPECT_EQ(f32_to_fp4_e2m1(5.0f), 6);   // 5 -> 4 (code 6, even)
  EXPECT_EQ(f32_to_fp4_e2m1(0.25f), 0);  // tie -> 0
  EXPECT_EQ(f32_to_fp4_e2m1(7.9f), 7);   // saturate to 6
  EXPECT_EQ(f32_to_fp4_e2m1(-100.0f), 15);
}

TEST(E8m0, CodesAndRounding) {
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(0), std::ldexp(1.0f, -127));
  EXPECT_EQ(e8m0_to_f32(254), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(e8m0_to_f32(255)));
  EXPECT_EQ(f32_to_e8m0(3.0f, false), 128);  // floor: 2
  EXPECT_EQ(f32_to_e8m0(3.0f, true), 129);   // ceil: 4
  EXPECT_EQ(f32_to_e8m0(4.0f, true), 129);   // exact power stays
  EXPECT_EQ(f32_to_e8m0(1e-45f, false), 0);  // clamped
  EXPECT_EQ(f32_to_e8m0(std::numeric_limits<float>::quiet_NaN(), false), 255);
}

TEST(Table, RowsInIdOrderWithUniqueNames) {
  const auto& t = format_table();
  ASSERT_EQ(t.size(), static_cast<size_t>(kNumFormats));
  std::set<std::string> names;
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(t[i].id), i);
    EXPECT_TRUE(names.insert(t[i].name).second) << t[i].name;
    EXPECT_EQ(&format_by_name(t[i].name), &t[i]);
    if (t[i].is_gguf()) {
      EXPECT_NE(t[i].dequantize_row, nullptr) << t[i].name;
      EXPECT_GT(t[i].block_bytes, 0) << t[i].name;
    } else {
      EXPECT_NE(t[i].decode, nullptr) << t[i].name;
      EXPECT_NE(t[i].encode, nullptr) << t[i].name;
    }
  }
}

TEST(Table, UnknownNameSuggests) {
  try {
    format_by_name("int5");
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'int4'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(format_by_name("E4M3").id, FormatId::E4M3FN);
  EXPECT_EQ(format_by_name("Q4_K").id, FormatId::Q4_K);
}

TEST(Table, ElementCodesRoundTrip) {
  // Every element/microscaled row: encode(decode(c)) == c for every non-NaN code (up to the -0 / +0 pair).
  for (const auto& f : format_table()) {
    if (f.is_gguf() || f.bits > 16) continue;
    for (uint32_t c = 0; c < (1u << f.bits); ++c) {
      const float v = f.decode(c);
      if (std::isnan(v)) continue;
      const uint32_t back = f.encode(v, false);
      if (v == 0.0f) {
        EXPECT_EQ(f.decode(back), 0.0f) << f.name;
        continue;
      }
      if (f.id == FormatId::MXINT8 && c == 0x80) {  // -128/64 is decodable but the cast is symmetric (+-127)
        EXPECT_EQ(back, 0x81u);
        continue;
      }
      EXPECT_EQ(back, c) << f.name << " code " << c;
    }
  }
}
