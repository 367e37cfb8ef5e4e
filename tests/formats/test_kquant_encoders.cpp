// GGUF k-quant encoders (Q2_K .. Q6_K): the decoders are the oracle. Every encoded row decodes to exactly the
// values the encoder reports, on random data and on the edge cases (all-zero and constant blocks, huge and
// tiny magnitudes, NaN / Inf inputs), with and without importance weights; the error is bounded per format;
// importance moves the error off the weighted columns; and the grid / code access GPTQ uses
// (FormatInfo::row_grid, set_row_codes) describes the decoder's values for arbitrary codes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/format.h"
#include "formats/ggml_types.h"

using namespace lowbit;

namespace {
constexpr int kTypes[] = {ggml::Q2_K, ggml::Q3_K, ggml::Q4_K, ggml::Q5_K, ggml::Q6_K};

struct Encoded {
  std::vector<uint8_t> bytes;
  std::vector<float> claimed, decoded;
};

Encoded encode(int type, const std::vector<float>& x, const float* imp) {
  const auto n = static_cast<int64_t>(x.size());
  const GgmlTypeInfo* t = ggml_type_info(type);
  Encoded e;
  e.bytes.assign(static_cast<size_t>(ggml_row_bytes(*t, n)),
                 0xA5);  // garbage: the encoder must own every byte
  e.claimed.assign(x.size(), NAN);
  e.decoded.assign(x.size(), NAN);
  quantize_row_ggml(type, x.data(), e.bytes.data(), n, imp, e.claimed.data());
  dequantize_row_ggml(type, e.bytes.data(), e.decoded.data(), n);
  return e;
}

// Decoded == claimed for every element (== so that -0 and +0 agree), and both finite.
void expect_claims_hold(int type, const Encoded& e, const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < e.decoded.size() && bad < 5; ++i)
    if (!(e.decoded[i] == e.claimed[i]) || !std::isfinite(e.decoded[i])) {
      ADD_FAILURE() << ggml_type_info(type)->name << " " << what << ": element " << i << " decodes to "
                    << e.decoded[i] << ", the encoder claimed " << e.claimed[i];
      ++bad;
    }
}

double rel_rmse(const std::vector<float>& x, const std::vector<float>& y) {
  double e = 0, s = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
    s += double(x[i]) * x[i];
  }
  return std::sqrt(e / s);
}

std::vector<float> normal(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> x(n);
  for (auto& v : x) v = scale * nd(rng);
  return x;
}
}  // namespace

TEST(KQuantEncoders, ClaimedValuesDecodeExactlyOnRandomAndEdgeData) {
  const size_t n = 256 * 8;
  std::vector<std::pair<std::string, std::vector<float>>> cases;
  cases.push_back({"normal", normal(n, 1)});
  {
    std::mt19937 rng(2);
    std::student_t_distribution<float> td(3.0f);
    std::vector<float> x(n);
    for (auto& v : x) v = td(rng);
    x[17] = 60.0f;  // an outlier
    cases.push_back({"heavy-tailed", x});
  }
  cases.push_back({"all-zero", std::vector<float>(n, 0.0f)});
  cases.push_back({"constant +0.37", std::vector<float>(n, 0.37f)});
  cases.push_back({"constant -2.5", std::vector<float>(n, -2.5f)});
  cases.push_back({"huge 1e6", normal(n, 3, 1e6f)});
  cases.push_back({"huge 1e30", normal(n, 4, 1e30f)});
  cases.push_back({"max float", std::vector<float>(n, 3.4e38f)});
  cases.push_back({"tiny 1e-6", normal(n, 5, 1e-6f)});
  cases.push_back({"tiny 1e-30", normal(n, 6, 1e-30f)});
  {
    std::vector<float> x(n, 0.0f);
    for (size_t b = 0; b < n / 256; ++b) x[b * 256 + 3 * b] = b % 2 ? -1.0f : 1.0f;  // one spike per block
    cases.push_back({"one spike", x});
  }
  {
    std::vector<float> x = normal(n, 7);
    for (size_t i = 0; i < 256; ++i) x[i] = 0.0f;                   // zero block
    for (size_t i = 256; i < 512; ++i) x[i] = 1000.0f * x[i];       // next to a large one
    for (size_t i = 512; i < 768; ++i) x[i] = std::fabs(x[i]) + 5;  // all positive, offset
    for (size_t i = 768; i < 1024; ++i) x[i] = -std::fabs(x[i]) - 5;
    cases.push_back({"mixed blocks", x});
  }
  std::vector<float> imp_rand(n), imp_sparse(n, 0.0f), imp_zero(n, 0.0f);
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> ud(0.0f, 4.0f);
  for (auto& v : imp_rand) v = ud(rng) * ud(rng);
  for (size_t i = 0; i < n; i += 7) imp_sparse[i] = 1e6f;
  const std::pair<const char*, const float*> imps[] = {{"unweighted", nullptr},
                                                       {"random importance", imp_rand.data()},
                                                       {"sparse importance", imp_sparse.data()},
                                                       {"zero importance", imp_zero.data()}};
  for (int type : kTypes)
    for (auto& [name, x] : cases)
      for (auto& [iname, imp] : imps) {
        const Encoded e = encode(type, x, imp);
        expect_claims_hold(type, e, name + ", " + iname);
        if (name == "all-zero") {
          for (float v : e.decoded) ASSERT_EQ(v, 0.0f) << ggml_type_info(type)->name << " " << iname;
        }
        if (name.rfind("constant", 0) == 0) {
          for (size_t i = 0; i < n; ++i)
            ASSERT_NEAR(e.decoded[i], x[i], 0.01f * std::fabs(x[i]))
                << ggml_type_info(type)->name << " " << iname;
        }
        // (sparse importance leaves 6 of 7 elements unweighted: no bound for those)
        if ((name == "huge 1e6" || name == "normal" || name == "heavy-tailed") && imp != imp_sparse.data()) {
          EXPECT_LT(rel_rmse(x, e.decoded), 0.45)
              << ggml_type_info(type)->name << " " << name << " " << iname;
        }
      }
}

TEST(KQuantEncoders, NonFiniteInputsEncodeAsZeroAndLeaveTheRestIntact) {
  const size_t n = 512;
  std::vector<float> x = normal(n, 9), clean = x;
  x[5] = NAN;
  x[300] = INFINITY;
  x[301] = -INFINITY;
  clean[5] = clean[300] = clean[301] = 0.0f;
  for (int type : kTypes) {
    const Encoded e = encode(type, x, nullptr), c = encode(type, clean, nullptr);
    expect_claims_hold(type, e, "non-finite inputs");
    EXPECT_EQ(e.bytes, c.bytes) << ggml_type_info(type)->name << ": non-finite values must encode as 0";
  }
}

TEST(KQuantEncoders, ErrorShrinksWithBitsAndStaysWithinBounds) {
  const std::vector<float> x = normal(256 * 64, 10);
  // Relative RMSE on N(0,1) rows (2.625 .. 6.5625 bpw); measured 0.280 / 0.153 / 0.0715 / 0.0362 / 0.0177
  // with the unweighted rules, the bounds leave ~15 % room.
  const double bound[] = {0.32, 0.18, 0.083, 0.042, 0.021};
  double prev = 1.0;
  for (int k = 0; k < 5; ++k) {
    const Encoded e = encode(kTypes[k], x, nullptr);
    const double r = rel_rmse(x, e.decoded);
    EXPECT_LT(r, bound[k]) << ggml_type_info(kTypes[k])->name;
    EXPECT_LT(r, prev) << ggml_type_info(kTypes[k])->name << " is not more accurate than the format below it";
    prev = r;
  }
}

TEST(KQuantEncoders, ImportanceLowersTheWeightedError) {
  // Every 8th column 100x more important (an imatrix with a few hot input channels): the weighted encoders
  // must trade error on the cold columns for error on the hot ones.
  const size_t n = 256 * 64;
  const std::vector<float> x = normal(n, 11);
  std::vector<float> imp(n, 1.0f);
  for (size_t i = 0; i < n; i += 8) imp[i] = 100.0f;
  for (int type : kTypes) {
    const Encoded plain = encode(type, x, nullptr), weighted = encode(type, x, imp.data());
    double ep = 0, ew = 0;
    for (size_t i = 0; i < n; ++i) {
      ep += imp[i] * (plain.decoded[i] - x[i]) * (plain.decoded[i] - x[i]);
      ew += imp[i] * (weighted.decoded[i] - x[i]) * (weighted.decoded[i] - x[i]);
    }
    EXPECT_LT(ew, 0.7 * ep) << ggml_type_info(type)->name << ": weighted " << ew << " vs unweighted " << ep;
  }
}

TEST(KQuantEncoders, GridAndCodesDescribeTheDecoderForAnyCode) {
  std::mt19937 rng(12);
  const std::vector<float> x = normal(256 * 4, 13);
  for (int type : kTypes) {
    const FormatInfo* f = format_by_ggml_type(type);
    ASSERT_TRUE(f && f->row_grid && f->set_row_codes && f->quantize_row_weighted) << type;
    const int64_t n = static_cast<int64_t>(x.size());
    Encoded e = encode(type, x, nullptr);
    std::vector<float> scale(x.size()), offset(x.size()), y(x.size());
    f->row_grid(e.bytes.data(), scale.data(), offset.data(), n);
    // The encoder's own codes sit on this grid: decoded = scale * q + offset for q in range.
    for (size_t i = 0; i < x.size(); ++i) {
      const float q = (e.decoded[i] - offset[i]) / scale[i];
      if (scale[i] != 0) {
        EXPECT_EQ(q, std::nearbyint(q)) << f->name << " element " << i;
        EXPECT_GE(q, f->code_min);
        EXPECT_LE(q, f->code_max);
      }
    }
    // Random codes, including both ends of the range, through set_row_codes: the decoder reads them back.
    std::uniform_int_distribution<int> ui(f->code_min, f->code_max);
    std::vector<int8_t> codes(x.size());
    for (size_t i = 0; i < codes.size(); ++i)
      codes[i] = static_cast<int8_t>(i < 256 ? (i % 2 ? f->code_max : f->code_min) : ui(rng));
    f->set_row_codes(e.bytes.data(), codes.data(), n);
    dequantize_row_ggml(type, e.bytes.data(), y.data(), n);
    std::vector<float> s2(x.size()), o2(x.size());
    f->row_grid(e.bytes.data(), s2.data(), o2.data(), n);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(s2[i], scale[i]) << f->name << ": set_row_codes changed the scales";
      ASSERT_EQ(o2[i], offset[i]) << f->name;
      ASSERT_EQ(y[i], scale[i] * static_cast<float>(codes[i]) + offset[i]) << f->name << " element " << i;
    }
  }
}

TEST(KQuantEncoders, Q4_KWithoutImportanceKeepsTheReferenceRule) {
  // llama.cpp's reference Q4_K: d = max sub-block scale / 63, so the largest 6-bit scale code is 63.
  const std::vector<float> x = normal(256, 14);
  const Encoded e = encode(ggml::Q4_K, x, nullptr);
  int max_sc = 0;
  for (int j = 0; j < 4; ++j) max_sc = std::max(max_sc, e.bytes[4 + j] & 63);
  for (int j = 4; j < 8; ++j)
    max_sc = std::max(max_sc, (e.bytes[4 + j + 4] & 0xF) | ((e.bytes[4 + j - 4] >> 6) << 4));
  EXPECT_EQ(max_sc, 63);
}
