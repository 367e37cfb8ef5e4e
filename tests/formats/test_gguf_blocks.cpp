// GGUF block types: hand-built blocks decode to the values the ggml layout defines (decoded here by an
// independent index formula per type; IQ4_XS also by a NumPy decoder), and the three quantizers round-trip
// within their error bounds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "formats/format.h"
#include "formats/minifloat.h"

using namespace lowbit;

namespace {
std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}
void put_f16(uint8_t* p, float v) {
  uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}
std::vector<float> deq(int type, const std::vector<uint8_t>& b, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row_ggml(type, b.data(), y.data(), n);
  return y;
}
}  // namespace

TEST(Gguf, Q4_0HandBuilt) {
  std::vector<uint8_t> b(18);
  put_f16(b.data(), 0.5f);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | (15 - j) << 4);
  auto y = deq(2, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f);
    EXPECT_EQ(y[j + 16], (7 - j) * 0.5f);
  }
}

TEST(Gguf, Q4_1Q5_0Q5_1Q8_0IQ4NLHandBuilt) {
  std::vector<uint8_t> b(20);
  put_f16(b.data(), 0.5f);
  put_f16(b.data() + 2, -1.0f);
  for (int j = 0; j < 16; ++j) b[4 + j] = static_cast<uint8_t>(j | (15 - j) << 4);
  auto y = deq(3, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], j * 0.5f - 1);
    EXPECT_EQ(y[j + 16], (15 - j) * 0.5f - 1);
  }

  std::vector<uint8_t> q5(22, 0);
  put_f16(q5.data(), 1.0f);
  const uint32_t qh = 0x80000001u;  // 5th bit of element 0 and element 31
  std::memcpy(q5.data() + 2, &qh, 4);
  y = deq(6, q5, 32);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], -16.0f);
  EXPECT_EQ(y[16], -16.0f);
  EXPECT_EQ(y[31], 0.0f);

  std::vector<uint8_t> q51(24, 0);
  put_f16(q51.data(), 2.0f);
  put_f16(q51.data() + 2, 1.0f);
  const uint32_t qh1 = 1u << 16;
  std::memcpy(q51.data() + 4, &qh1, 4);
  q51[8] = 0x31;
  y = deq(7, q51, 32);
  EXPECT_EQ(y[0], 3.0f);    // q = 1
  EXPECT_EQ(y[16], 39.0f);  // q = 3 | 16
  EXPECT_EQ(y[1], 1.0f);

  std::vector<uint8_t> q8(34);
  put_f16(q8.data(), 0.25f);
  for (int j = 0; j < 32; ++j) q8[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
  y = deq(8, q8, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], (j - 16) * 0.25f);

  const int grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  std::vector<uint8_t> nl(18);
  put_f16(nl.data(), 0.5f);
  for (int j = 0; j < 16; ++j) nl[2 + j] = static_cast<uint8_t>(j | (15 - j) << 4);
  y = deq(20, nl, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], grid[j] * 0.5f);
    EXPECT_EQ(y[j + 16], grid[15 - j] * 0.5f);
  }

  std::vector<uint8_t> mx(17);
  mx[0] = 128;  // 2.0
  for (int j = 0; j < 16; ++j) mx[1 + j] = static_cast<uint8_t>(j | (15 - j) << 4);
  y = deq(39, mx, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], fp4_e2m1_to_f32(static_cast<uint8_t>(j)) * 2);
    EXPECT_EQ(y[j + 16], fp4_e2m1_to_f32(static_cast<uint8_t>(15 - j)) * 2);
  }
}

TEST(Gguf, Q2_KRandomBlocks) {
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    auto b = random_bytes(84, seed);
    put_f16(b.data() + 80, 0.125f);
    put_f16(b.data() + 82, 0.0625f);
    auto y = deq(10, b, 256);
    for (int e = 0; e < 256; ++e) {
      const int h = e / 128, w = e % 128, k = w / 32, half = (w % 32) / 16, l = w % 16;
      const int q = (b[16 + 32 * h + 16 * half + l] >> (2 * k)) & 3;
      const int sc = b[8 * h + 2 * k + half];
      EXPECT_EQ(y[e], 0.125f * (sc & 15) * q - 0.0625f * (sc >> 4)) << e;
    }
  }
}

TEST(Gguf, Q3_KRandomBlocks) {
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    auto b = random_bytes(110, seed);
    put_f16(b.data() + 108, 0.25f);
    const uint8_t* s12 = b.data() + 96;
    int scale[16];
    for (int i = 0; i < 16; ++i) {
      const int low4 = i < 8 ? (s12[i % 8] & 15) : (s12[i % 8] >> 4);  // a/b bytes 0..7, low then high nibble
      const int high2 = (s12[8 + i % 4] >> (2 * (i / 4))) & 3;
      scale[i] = (low4 | high2 << 4) - 32;
    }
    auto y = deq(11, b, 256);
    for (int e = 0; e < 256; ++e) {
      const int h = e / 128, w = e % 128, k = w / 32, half = (w % 32) / 16, l = w % 16;
      const int low = (b[32 + 32 * h + 16 * half + l] >> (2 * k)) & 3;
      const bool hb = (b[16 * half + l] >> (4 * h + k)) & 1;
      const int q = low - (hb ? 0 : 4);
      EXPECT_EQ(y[e], 0.25f * scale[8 * h + 2 * k + half] * q) << e;
    }
  }
}

namespace {
void k4_expected_scales(const uint8_t* s, int* sc, int* m) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      sc[j] = s[j] & 63;
      m[j] = s[j + 4] & 63;
    } else {
      sc[j] = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
      m[j] = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
  }
}
}  // namespace

TEST(Gguf, Q4_KAndQ5_KRandomBlocks) {
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    auto b = random_bytes(144, seed);
    put_f16(b.data(), 0.5f);
    put_f16(b.data() + 2, 0.25f);
    int sc[8], m[8];
    k4_expected_scales(b.data() + 4, sc, m);
    auto y = deq(12, b, 256);
    for (int e = 0; e < 256; ++e) {
      const int c = e / 64, w = e % 64, hi = w >= 32, l = w % 32;
      const int q = hi ? b[16 + 32 * c + l] >> 4 : b[16 + 32 * c + l] & 15;
      EXPECT_EQ(y[e], 0.5f * sc[2 * c + hi] * q - 0.25f * m[2 * c + hi]) << e;
    }
    auto b5 = random_bytes(176, seed + 10);
    put_f16(b5.data(), 0.5f);
    put_f16(b5.data() + 2, 0.25f);
    k4_expected_scales(b5.data() + 4, sc, m);
    y = deq(13, b5, 256);
    for (int e = 0; e < 256; ++e) {
      const int c = e / 64, w = e % 64, hi = w >= 32, l = w % 32;
      const int low = hi ? b5[48 + 32 * c + l] >> 4 : b5[48 + 32 * c + l] & 15;
      const int bit = (b5[16 + l] >> (2 * c + hi)) & 1;
      EXPECT_EQ(y[e], 0.5f * sc[2 * c + hi] * (low + 16 * bit) - 0.25f * m[2 * c + hi]) << e;
    }
  }
}

TEST(Gguf, Q6_KRandomBlocks) {
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    auto b = random_bytes(210, seed);
    put_f16(b.data() + 208, 0.03125f);
    auto y = deq(14, b, 256);
    for (int e = 0; e < 256; ++e) {
      const int h = e / 128, w = e % 128, quarter = w / 32, l = w % 32;
      const uint8_t qlb = b[64 * h + l + 32 * (quarter & 1)];
      const int low = quarter >= 2 ? qlb >> 4 : qlb & 15;
      const int high = (b[128 + 32 * h + l] >> (2 * quarter)) & 3;
      const int sc = static_cast<int8_t>(b[192 + 8 * h + l / 16 + 2 * quarter]);
      EXPECT_EQ(y[e], 0.03125f * sc * ((low | high << 4) - 32)) << e;
    }
  }
}

TEST(Gguf, Q4_0QuantizeBytesAndBound) {
  // x = j - 8 for the first 16, 7 - j after: the largest |x| is -8 at j = 0, so d = -8 / -8 = 1, q = x + 8.
  std::vector<float> x(32);
  for (int j = 0; j < 16; ++j) {
    x[j] = static_cast<float>(j - 8);
    x[j + 16] = static_cast<float>(7 - j);
  }
  std::vector<uint8_t> b(18);
  quantize_row_ggml(2, x.data(), b.data(), 32);
  EXPECT_EQ(b[0], 0x00);
  EXPECT_EQ(b[1], 0x3C);  // fp16 1.0
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b[2 + j], static_cast<uint8_t>(j | (15 - j) << 4)) << j;

  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<float> w(32 * 64), y(w.size());
  for (auto& v : w) v = nd(rng);
  std::vector<uint8_t> q(18 * 64);
  quantize_row_ggml(2, w.data(), q.data(), static_cast<int64_t>(w.size()));
  dequantize_row_ggml(2, q.data(), y.data(), static_cast<int64_t>(w.size()));
  for (int blk = 0; blk < 64; ++blk) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(w[blk * 32 + j]));
    const float d = amax / 8;
    for (int j = 0; j < 32; ++j)
      EXPECT_LE(std::fabs(y[blk * 32 + j] - w[blk * 32 + j]), d * 1.01f);  // +8 is not a code: up to one step
  }
}

TEST(Gguf, Q8_0QuantizeRoundTrip) {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd;
  std::vector<float> w(32 * 64), y(w.size());
  for (auto& v : w) v = nd(rng);
  std::vector<uint8_t> q(34 * 64);
  quantize_row_ggml(8, w.data(), q.data(), static_cast<int64_t>(w.size()));
  dequantize_row_ggml(8, q.data(), y.data(), static_cast<int64_t>(w.size()));
  for (int blk = 0; blk < 64; ++blk) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(w[blk * 32 + j]));
    const float d = amax / 127;
    for (int j = 0; j < 32; ++j)
      EXPECT_LE(std::fabs(y[blk * 32 + j] - w[blk * 32 + j]),
                d * (0.5f + 127.0f / 2048));  // + fp16 d rounding
  }
  // roundf: half away from zero (llama.cpp), e.g. 2.5 -> 3 with d = 1.
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = -2.5f;
  quantize_row_ggml(8, x.data(), q.data(), 32);
  EXPECT_EQ(static_cast<int8_t>(q[3]), 3);
  EXPECT_EQ(static_cast<int8_t>(q[4]), -3);
}

TEST(Gguf, Q4_KQuantizeRoundTrip) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  std::vector<float> w(256 * 16), y(w.size());
  for (auto& v : w) v = nd(rng);
  std::vector<uint8_t> q(144 * 16);
  quantize_row_ggml(12, w.data(), q.data(), static_cast<int64_t>(w.size()));
  dequantize_row_ggml(12, q.data(), y.data(), static_cast<int64_t>(w.size()));
  double e = 0, s = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    e += (y[i] - w[i]) * (y[i] - w[i]);
    s += w[i] * w[i];
  }
  EXPECT_LT(std::sqrt(e / s), 0.11);  // 4-bit affine with 32-element sub-blocks (ideal ~0.09)
  for (int blk = 0; blk < 16; ++blk)
    for (int sb = 0; sb < 8; ++sb) {
      float mn = 0, mx = 0;
      for (int j = 0; j < 32; ++j) {
        mn = std::min(mn, w[blk * 256 + sb * 32 + j]);
        mx = std::max(mx, w[blk * 256 + sb * 32 + j]);
      }
      for (int j = 0; j < 32; ++j) {
        const size_t i = blk * 256 + sb * 32 + j;
        EXPECT_LE(std::fabs(y[i] - w[i]), (mx - mn) / 15 * 1.0f) << i;
      }
    }
}

// IQ4_XS against the NumPy decoder tests/reference/dequant_ggml_blocks.py (written from the format
// definition): random blocks, every scale code, fp16 d from 2^-20 to 2^4 of both signs, bit for bit.
TEST(Gguf, IQ4_XSMatchesNumpyReference) {
  const int nb = 64;
  auto b = random_bytes(136 * nb, 11);
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> ue(-20.0f, 4.0f);
  for (int i = 0; i < nb; ++i) put_f16(b.data() + 136 * i, (i % 2 ? -1.0f : 1.0f) * std::exp2(ue(rng)));
  put_f16(b.data() + 136 * 5, 0.0f);
  const std::string dir = ::testing::TempDir();
  const std::string in = dir + "/iq4_xs_blocks.bin", out = dir + "/iq4_xs_values.bin";
  {
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(in.c_str(), "wb"), std::fclose);
    ASSERT_TRUE(f);
    ASSERT_EQ(std::fwrite(b.data(), 1, b.size(), f.get()), b.size());
  }
  const std::string cmd = "timeout -k 5 120 /usr/bin/python3 " LOWBIT_SOURCE_DIR
                          "/tests/reference/dequant_ggml_blocks.py iq4_xs " +
                          in + " " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0)
      << "the reference decoder failed (needs /usr/bin/python3 with numpy)";
  std::vector<float> ref(256 * nb);
  {
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(out.c_str(), "rb"), std::fclose);
    ASSERT_TRUE(f);
    ASSERT_EQ(std::fread(ref.data(), sizeof(float), ref.size(), f.get()), ref.size());
  }
  auto y = deq(23, b, 256 * nb);
  for (size_t i = 0; i < y.size(); ++i) {
    uint32_t a, r;
    std::memcpy(&a, &y[i], 4);
    std::memcpy(&r, &ref[i], 4);
    ASSERT_EQ(a, r) << "element " << i << ": lowbit " << y[i] << ", reference " << ref[i];
  }
  std::remove(in.c_str());
  std::remove(out.c_str());
}

// The sub-block scale bits by hand: scale codes 0, 1, ..., 7 + 56 -> ls - 32 = -32 .. 31 reach both ends.
TEST(Gguf, IQ4_XSHandBuilt) {
  std::vector<uint8_t> b(136, 0);
  put_f16(b.data(), 0.5f);
  const int ls[8] = {0, 63, 32, 33, 31, 16, 48, 1};
  uint16_t h = 0;
  for (int s = 0; s < 8; ++s) {
    b[4 + s / 2] |= static_cast<uint8_t>((ls[s] & 15) << 4 * (s % 2));
    h |= static_cast<uint16_t>((ls[s] >> 4) << 2 * s);
  }
  std::memcpy(b.data() + 2, &h, 2);
  for (int s = 0; s < 8; ++s)
    for (int j = 0; j < 16; ++j) b[8 + 16 * s + j] = static_cast<uint8_t>(j | (15 - j) << 4);
  const int grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  auto y = deq(23, b, 256);
  for (int s = 0; s < 8; ++s)
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[32 * s + j], 0.5f * (ls[s] - 32) * grid[j]) << s << " " << j;
      EXPECT_EQ(y[32 * s + j + 16], 0.5f * (ls[s] - 32) * grid[15 - j]) << s << " " << j;
    }
}

TEST(Gguf, UnsupportedTypesAndBadLengthsThrow) {
  std::vector<float> x(256);
  std::vector<uint8_t> b(1024);
  EXPECT_THROW(quantize_row_ggml(16, x.data(), b.data(), 256), Error);    // IQ2_XXS: no codec
  EXPECT_THROW(quantize_row_ggml(24, x.data(), b.data(), 256), Error);    // I8: no block encoder
  EXPECT_THROW(dequantize_row_ggml(99, b.data(), x.data(), 256), Error);  // unknown id
  EXPECT_THROW(dequantize_row_ggml(12, b.data(), x.data(), 100), Error);  // not a multiple of 256
  EXPECT_NO_THROW(dequantize_row_ggml(1, b.data(), x.data(), 256));       // F16 rows
}
