// The AVX2 tier's integer-activation kernels (i8dot / i8dot16, matmul_avx2_int.cpp) against the formula in
// that file's header, and against each other:
//
//  - Direct oracle: hand-made codes at the extremes of every range (4-bit 0 / 15, 8-bit 0 / 255, so v = -128
//  /
//    127; zero points 0 / 15 / 255; activations -127 / 127, and INT4's -7 / 7) and random ones, scales from a
//    seeded generator, ragged columns and partial row blocks: both kernels equal the formula computed from
//    exact int64 group sums, bit for bit. A sum that saturated in int16, a lost fifth row or a wrong zero
//    point changes the bits.
//  - Batch invariance through matmul: a token alone (decode, the row kernel) gives the same bits as inside a
//    prefill batch (the tile), for INT4 / INT8 weights, sym and asym, per channel and grouped, INT8 and INT4
//    activations; and the kernel names say which kernels ran.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "formats/scheme.h"
#include "kernels/dispatch.h"
#include "kernels/kernel_plan.h"
#include "kernels/matmul.h"
#include "kernels/weight.h"
#include "tensor/qtensor.h"

namespace lowbit {
namespace {

uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

struct Case {
  int bits;
  bool asym;
  int64_t rows, cols, group;  // group == cols: one group per row
};

// Rows of codes as the kernels read them (4-bit: two per byte, low nibble first), per-row scale and zero
// cells.
struct Codes {
  std::vector<std::vector<uint8_t>> rows;
  std::vector<std::vector<int>> u;  // [rows][cols] the codes
  std::vector<std::vector<float>> s, z;
};

Codes make_codes(const Case& c, int pattern, std::mt19937& rng) {
  const int umax = (1 << c.bits) - 1;
  const int64_t ng = (c.cols + c.group - 1) / c.group;
  Codes k;
  std::uniform_int_distribution<int> ud(0, umax);
  std::uniform_real_distribution<float> sd(0.01f, 2.0f);
  for (int64_t r = 0; r < c.rows; ++r) {
    std::vector<int> u(static_cast<size_t>(c.cols));
    for (int64_t i = 0; i < c.cols; ++i)
      u[i] = pattern == 0 ? umax : pattern == 1 ? ((i + r) % 2 ? umax : 0) : ud(rng);
    std::vector<uint8_t> bytes(static_cast<size_t>((c.cols * c.bits + 7) / 8), 0);
    for (int64_t i = 0; i < c.cols; ++i)
      if (c.bits == 8)
        bytes[i] = static_cast<uint8_t>(u[i]);
      else
        bytes[i / 2] |= static_cast<uint8_t>(u[i] << (4 * (i % 2)));
    std::vector<float> s(static_cast<size_t>(ng)), z;
    for (auto& v : s) v = sd(rng);
    if (c.asym) {
      z.resize(static_cast<size_t>(ng));
      for (int64_t g = 0; g < ng; ++g)
        z[g] = static_cast<float>(g % 3 == 0 ? 0 : g % 3 == 1 ? umax : ud(rng));
    }
    k.rows.push_back(std::move(bytes));
    k.u.push_back(std::move(u));
    k.s.push_back(std::move(s));
    k.z.push_back(std::move(z));
  }
  return k;
}

TEST(I8Avx2, BothKernelsEqualTheFormulaAtTheExtremes) {
  if (best_isa() < Isa::Avx2) GTEST_SKIP() << "no AVX2 here";
  const Case cases[] = {{4, false, 16, 896, 896},  {4, true, 21, 333, 333}, {4, false, 9, 2200, 32},
                        {4, true, 16, 256, 64},    {4, false, 5, 200, 128}, {8, false, 16, 896, 896},
                        {8, true, 21, 333, 333},   {8, false, 9, 2200, 32}, {8, true, 16, 256, 64},
                        {8, false, 3, 4864, 4864}, {4, true, 16, 4864, 128}};
  std::mt19937 rng(7);
  for (const Case& c : cases)
    for (int pattern = 0; pattern < 3; ++pattern)
      for (int xmax : {127, 7}) {
        SCOPED_TRACE(std::to_string(c.bits) + (c.asym ? " asym " : " sym ") + std::to_string(c.rows) + "x" +
                     std::to_string(c.cols) + " g" + std::to_string(c.group) + " pattern " +
                     std::to_string(pattern) + " xmax " + std::to_string(xmax));
        const Codes k = make_codes(c, pattern, rng);
        const int64_t ng = (c.cols + c.group - 1) / c.group, xs = (c.cols + 63) / 64 * 64;
        const int zoff = c.asym ? 0 : 1 << (c.bits - 1);
        const int T = 11;
        std::uniform_int_distribution<int> xd(-xmax, xmax);
        std::vector<int8_t> xq(static_cast<size_t>(T * xs), 0);
        std::vector<int32_t> xg(static_cast<size_t>(T * ng), 0);
        std::vector<float> sx(T);
        for (int t = 0; t < T; ++t) {
          sx[t] = 0.5f + 0.125f * static_cast<float>(t);
          for (int64_t i = 0; i < c.cols; ++i) {
            // Pattern 0: every code at its largest against -xmax (the largest int16 pair sums); 1: mixed
            // signs.
            const int v = pattern == 0 ? -xmax : pattern == 1 ? ((i + t) % 3 ? -xmax : xmax) : xd(rng);
            xq[t * xs + i] = static_cast<int8_t>(v);
            xg[t * ng + i / c.group] += v;
          }
        }
        // The formula: exact group sums, then one FMA per group in order.
        std::vector<float> want(static_cast<size_t>(T * c.rows));
        for (int t = 0; t < T; ++t)
          for (int64_t r = 0; r < c.rows; ++r) {
            float acc = 0.0f;
            for (int64_t g = 0; g < ng; ++g) {
              const int zq = c.asym ? static_cast<int>(k.z[r][g]) : zoff;
              int64_t v = 0;
              for (int64_t i = g * c.group; i < std::min(c.cols, (g + 1) * c.group); ++i)
                v += int64_t{k.u[r][i] - zq} * xq[t * xs + i];
              acc = std::fma(static_cast<float>(v), k.s[r][g] * sx[t], acc);
            }
            want[t * c.rows + r] = acc;
          }
        std::vector<const uint8_t*> rp;
        std::vector<const float*> sp, zp;
        for (int64_t r = 0; r < c.rows; ++r) {
          rp.push_back(k.rows[r].data());
          sp.push_back(k.s[r].data());
          zp.push_back(c.asym ? k.z[r].data() : nullptr);
        }
        // The tile over blocks of 16 rows, all tokens at once.
        std::vector<float> tile(want.size(), -1.0f);
        for (int64_t r0 = 0; r0 < c.rows; r0 += 16)
          kern::i8dot_block_avx2(static_cast<int>(std::min<int64_t>(16, c.rows - r0)), rp.data() + r0,
                                 sp.data() + r0, zp.data() + r0, c.bits, zoff, c.cols, c.group, xq.data(), xs,
                                 xg.data(), ng, sx.data(), T, tile.data() + r0, c.rows);
        // The row kernel, tokens in its decode layout.
        const int64_t ls = kern::i8x_padded(c.cols);
        std::vector<int8_t> xl(static_cast<size_t>(T * ls));
        for (int t = 0; t < T; ++t)
          kern::i8x_layout_avx2(c.bits, c.group, ng, xq.data() + t * xs, c.cols, xl.data() + t * ls);
        std::vector<float> rows(want.size(), -1.0f);
        kern::i8dot_rows_avx2(c.bits, static_cast<int>(c.rows), rp.data(), sp.data(), zp.data(), zoff, c.cols,
                              c.group, ng, xl.data(), ls, xg.data(), sx.data(), T, rows.data(), c.rows);
        int bad = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          if (f32_bits(tile[i]) != f32_bits(want[i]) && bad++ < 3)
            ADD_FAILURE() << "tile out " << i << ": " << tile[i] << " vs " << want[i];
          if (f32_bits(rows[i]) != f32_bits(want[i]) && bad++ < 3)
            ADD_FAILURE() << "rows out " << i << ": " << rows[i] << " vs " << want[i];
        }
      }
}

// Through matmul on the avx2 tier: each token alone (T = 1) equals the same token in a batch of 17 (the tile)
// bit for bit, so a decode step gives a sequence the same logits whether it is batched or not.
TEST(I8Avx2, ATokenAloneEqualsTheSameTokenInABatch) {
  if (best_isa() < Isa::Avx2) GTEST_SKIP() << "no AVX2 here";
  set_kernel_isa(Isa::Avx2);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 0.05f), xd(0.0f, 1.0f);
  for (const char* scheme :
       {"int4:channel:sym", "int4:g128:sym", "int4:g32:asym", "int8:channel:sym", "int8:g64:asym"})
    for (FormatId act : {FormatId::INT8, FormatId::INT4})
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 896}, {21, 333}, {16, 2200}}) {
        const QuantScheme s = parse_scheme(scheme);
        if (s.gran == Granularity::Group && cols % s.group_size != 0) continue;
        std::vector<float> w(static_cast<size_t>(rows * cols));
        for (auto& v : w) v = nd(rng);
        WeightMatrix m =
            make_quant_weight(std::make_shared<QuantizedMatrix>(quantize_matrix(w.data(), rows, cols, s)));
        m.act_format = act;
        const std::string name = matmul_kernel_name(m);
        EXPECT_NE(name.find(".i8dot+i8dot16.avx2"), std::string::npos) << name;
        const int64_t T = 17;
        std::vector<float> x(static_cast<size_t>(T * cols));
        for (auto& v : x) v = xd(rng);
        std::vector<float> batch(static_cast<size_t>(T * rows)), one(static_cast<size_t>(rows));
        matmul(m, x.data(), T, batch.data());
        for (int64_t t = 0; t < T; ++t) {
          matmul(m, x.data() + t * cols, 1, one.data());
          for (int64_t r = 0; r < rows; ++r)
            ASSERT_EQ(f32_bits(one[r]), f32_bits(batch[t * rows + r]))
                << name << " " << rows << "x" << cols << " token " << t << " row " << r;
        }
      }
  set_kernel_isa(best_isa());
}

}  // namespace
}  // namespace lowbit
