// The AMX-INT8 W8A8 prefill kernel (kernels/amx_tiles.h). This machine may have no AMX, so the kernel runs on
// the scalar model of the tile unit (set_amx_emulation) and must equal the AVX-512 VNNI register tile bit for
// bit (both sum exactly in int32 and scale in the same order), and the reference within the kernel tolerance,
// over shapes with row, token and K tails. Where the CPU has the Amx tier, the hardware kernel is held to the
// same.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "formats/scheme.h"
#include "kernels/dispatch.h"
#include "kernels/matmul.h"
#include "kernels/weight.h"
#include "tensor/qtensor.h"

namespace lowbit {
namespace {

WeightMatrix w8a8(int64_t rows, int64_t cols, uint32_t seed, bool static_scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (auto& v : w) v = nd(rng);
  w[0] = 0.9f;  // an outlier row
  WeightMatrix m = make_quant_weight(
      std::make_shared<QuantizedMatrix>(quantize_matrix(w.data(), rows, cols, parse_scheme("int8:channel"))));
  m.act_format = FormatId::INT8;
  if (static_scale) m.act_static_scale = 0.9f / 127.0f;  // clips the largest activations
  return m;
}

std::vector<float> acts(int64_t T, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(T * cols));
  for (auto& v : x) v = nd(rng);
  x[1] = -7.0f;
  return x;
}

struct AmxCase {
  int64_t rows, cols, T;
};
const AmxCase kCases[] = {{37, 256, 16}, {24, 200, 17}, {33, 896, 33},
                          {16, 64, 64},  {50, 130, 31}, {80, 320, 48}};

// y from the AMX kernel (emulated or hardware) and from the VNNI tile, same weight and activations.
void compare(bool hardware) {
  for (const AmxCase& c : kCases)
    for (bool st : {false, true}) {
      WeightMatrix w = w8a8(c.rows, c.cols, static_cast<uint32_t>(c.rows * 3 + c.cols), st);
      const std::vector<float> x = acts(c.T, c.cols, static_cast<uint32_t>(c.T));
      std::vector<float> y_vnni(static_cast<size_t>(c.T * c.rows)), y_amx(y_vnni.size(), -1.0f),
          ref(y_vnni.size());
      set_kernel_isa(Isa::Avx512);  // the VNNI register tile
      matmul(w, x.data(), c.T, y_vnni.data());
      // The emulated run stays below the AMX tier even on an AMX CPU, so it tests the emulator there too.
      set_kernel_isa(hardware ? best_isa() : std::min(best_isa(), Isa::Avx512Bf16));
      if (!hardware) set_amx_emulation(true);
      const std::string name = matmul_kernel_name(w);
      matmul(w, x.data(), c.T, y_amx.data());
      set_amx_emulation(false);
      set_kernel_isa(best_isa());
      EXPECT_NE(name.find(hardware ? ".vnni+amxtile.amx" : "amxtile-emulated"), std::string::npos) << name;

      std::vector<float> xe(x.size()), row(static_cast<size_t>(c.cols));
      quantize_activations(w, x.data(), c.T, xe.data());
      WeightMatrix wref = w;
      wref.act_format = FormatId::F32;
      matmul_reference(wref, xe.data(), c.T, ref.data());
      int bad = 0;
      for (int64_t r = 0; r < c.rows; ++r) {
        weight_row_f32(w, r, row.data());
        for (int64_t t = 0; t < c.T; ++t) {
          const size_t i = static_cast<size_t>(t * c.rows + r);
          double mag = 0;
          for (int64_t k = 0; k < c.cols; ++k)
            mag += std::fabs(static_cast<double>(row[k]) * xe[t * c.cols + k]);
          if (f32_bits(y_amx[i]) != f32_bits(y_vnni[i]) && bad++ < 5)
            ADD_FAILURE() << name << " " << c.rows << "x" << c.cols << " T " << c.T << " row " << r
                          << " token " << t << ": AMX " << y_amx[i] << ", VNNI tile " << y_vnni[i];
          EXPECT_NEAR(y_amx[i], ref[i], 2e-5 * mag + 1e-6) << name << " row " << r << " token " << t;
        }
      }
      EXPECT_EQ(bad, 0) << name << " " << c.rows << "x" << c.cols << " T " << c.T;
    }
}

TEST(AmxW8A8, EmulatedTilesEqualVnniTileBitForBit) {
  if (best_isa() < Isa::Avx512) GTEST_SKIP() << "the VNNI tile it is compared with needs AVX-512";
  compare(/*hardware=*/false);
}

TEST(AmxW8A8, HardwareTilesEqualVnniTileBitForBit) {
  if (best_isa() < Isa::Amx) GTEST_SKIP() << "no AMX-INT8 on this CPU (the emulated test covers the kernel)";
  compare(/*hardware=*/true);
}

TEST(AmxW8A8, PackCountedInNbytesAndShortPrefillStaysOnVnni) {
  if (best_isa() < Isa::Avx512) GTEST_SKIP() << "no AVX-512";
  WeightMatrix w = w8a8(40, 200, 1, false);
  const size_t before = w.nbytes();
  set_amx_emulation(true);
  std::vector<float> x = acts(16, 200, 2), y(16 * 40);
  matmul(w, x.data(), 8, y.data());  // 8 tokens: the VNNI register tile (AMX from 16)
  const size_t after_vnni = w.nbytes();
  matmul(w, x.data(), 16, y.data());
  set_amx_emulation(false);
  EXPECT_GT(after_vnni, before);  // the VNNI tile copy (+1 byte per weight, + row sums)
  // The AMX pack: 3 row blocks x 4 K tiles (200 -> 256 columns) x 1 KiB.
  EXPECT_EQ(w.nbytes() - after_vnni, size_t{3 * 4 * 1024});
}

}  // namespace
}  // namespace lowbit
