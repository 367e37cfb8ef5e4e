// The AMX prefill kernels: W8A8, INT4 / INT8 codes with INT8 activations and the weight-only BF16 tile
// (kernels/amx_tiles.h), and the GGUF packs (kernels/amx_qblk.h, amx_kpack.h). This machine may have no AMX,
// so the kernels run on the scalar model of the tile unit (set_amx_emulation) and must equal the AVX-512 VNNI
// register tiles bit for bit (both sum exactly in int32 and scale in the same order), and the reference
// within the kernel tolerance, over shapes with row, token and K tails. Where the CPU has the Amx tier, the
// hardware kernels are held to the same.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "formats/format.h"
#include "formats/ggml_types.h"
#include "formats/scheme.h"
#include "kernels/amx_emu.h"
#include "kernels/dispatch.h"
#include "kernels/kernel_select.h"
#include "kernels/matmul.h"
#include "kernels/weight.h"
#include "tensor/qtensor.h"
#include "tests/kernels/random_ggml_blocks.h"

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

// GGUF rows of one QBlkPack type (finite MXFP4 exponents), packed at load as a model load packs them.
WeightMatrix ggml_rows(const FormatInfo& fi, int64_t rows, int64_t cols, uint32_t seed) {
  auto buf = random_block32_rows(fi, rows, cols, seed, /*every_exponent=*/false);
  WeightMatrix w = make_ggml_weight(buf, buf->data(), fi.ggml_type, rows, cols);
  prepare_weight(w, /*repack=*/true);
  return w;
}

// One weight on the reference kernels of tier `ref` and on the AMX kernels (the emulator below the Amx tier,
// or the hardware), the same activations, one rounding pass or the Q8 residual pass (x2): the outputs, and
// the kernels and names chosen for T tokens.
struct BothRuns {
  std::vector<float> ref, amx;
  Kernel ref_kernel, amx_kernel;
  std::string ref_name, amx_name;
};
BothRuns run_both(const WeightMatrix& w, const std::vector<float>& x, const AmxCase& c, Isa ref,
                  bool hardware, bool x2 = false) {
  BothRuns r;
  r.ref.assign(static_cast<size_t>(c.T * c.rows), -1.0f);
  r.amx.assign(r.ref.size(), -1.0f);
  set_q8_residual_pass(x2);
  set_kernel_isa(ref);
  r.ref_kernel = select_kernel(w, c.T).kernel;
  r.ref_name = matmul_kernel_name(w);
  matmul(w, x.data(), c.T, r.ref.data());
  set_kernel_isa(hardware ? best_isa() : std::min(best_isa(), Isa::Avx512Bf16));
  if (!hardware) set_amx_emulation(true);
  r.amx_kernel = select_kernel(w, c.T).kernel;
  r.amx_name = matmul_kernel_name(w);
  matmul(w, x.data(), c.T, r.amx.data());
  set_amx_emulation(false);
  set_q8_residual_pass(false);
  set_kernel_isa(best_isa());
  return r;
}

// The AMX output equals the reference kernel's bit for bit (the first 5 differences named).
void expect_same_bits(const BothRuns& r, const AmxCase& c, const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < r.ref.size(); ++i)
    if (f32_bits(r.amx[i]) != f32_bits(r.ref[i]) && bad++ < 5)
      ADD_FAILURE() << what << " " << r.amx_name << " " << c.rows << "x" << c.cols << " T " << c.T << " row "
                    << i % static_cast<size_t>(c.rows) << " token " << i / static_cast<size_t>(c.rows)
                    << ": AMX " << r.amx[i] << ", " << r.ref_name << " " << r.ref[i];
  EXPECT_EQ(bad, 0) << what << " " << r.amx_name << " " << c.rows << "x" << c.cols << " T " << c.T;
}

// One GGUF pack weight on the VNNI tile (Avx512 tier) and on the AMX kernel (emulated below the Amx tier, or
// the hardware), one rounding pass or the residual pass (x2): both kernel names checked, the outputs equal
// bit for bit. Returns the AMX output.
std::vector<float> amx_equals_vnni(const WeightMatrix& w, const std::vector<float>& x, const AmxCase& c,
                                   bool x2, bool hardware) {
  const BothRuns r = run_both(w, x, c, Isa::Avx512, hardware, x2);
  const std::string sfx = x2 ? "x2" : "";
  EXPECT_NE(r.amx_name.find(".q8vnni16" + sfx + "+q8amx" + (hardware ? sfx + ".amx" : "-emulated" + sfx)),
            std::string::npos)
      << r.amx_name;
  EXPECT_NE(r.ref_name.find(".q8vnni16" + sfx + ".avx512"), std::string::npos) << r.ref_name;
  expect_same_bits(r, c, x2 ? "x2" : "");
  return r.amx;
}

const AmxCase kQblkCases[] = {{37, 256, 16}, {16, 32, 17}, {5, 96, 33}, {40, 896, 48}, {24, 160, 31}};

// The QBlkPack types: the AMX kernel (emulated or hardware) against the VNNI register tile (q8vnni16), one
// rounding pass and the residual pass (set_q8_residual_pass), and against the reference on the Q8-rounded
// activations.
void compare_qblk(bool hardware) {
  for (const char* type : {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "iq4_nl", "ggml_mxfp4"})
    for (const AmxCase& c : kQblkCases)
      for (bool x2 : {false, true}) {
        const FormatInfo& fi = format_by_name(type);
        const WeightMatrix w = ggml_rows(fi, c.rows, c.cols, static_cast<uint32_t>(c.rows * 5 + c.cols));
        const std::vector<float> x = acts(c.T, c.cols, static_cast<uint32_t>(c.T + 1));
        const std::vector<float> y_amx = amx_equals_vnni(w, x, c, x2, hardware);
        if (x2) continue;
        // The reference on the Q8-rounded activations (what both kernels multiply), within float summation.
        std::vector<float> xq(x.size()), row(static_cast<size_t>(c.cols)), ref(y_amx.size());
        std::vector<int8_t> q(static_cast<size_t>(c.cols));
        std::vector<float> d(static_cast<size_t>(c.cols / 32));
        for (int64_t t = 0; t < c.T; ++t) {
          quantize_q8_blocks(x.data() + t * c.cols, c.cols, q.data(), d.data());
          for (int64_t k = 0; k < c.cols; ++k) xq[t * c.cols + k] = static_cast<float>(q[k]) * d[k / 32];
        }
        matmul_reference(w, xq.data(), c.T, ref.data());
        for (int64_t r = 0; r < c.rows; ++r) {
          weight_row_f32(w, r, row.data());
          for (int64_t t = 0; t < c.T; ++t) {
            double mag = 0;
            for (int64_t k = 0; k < c.cols; ++k)
              mag += std::fabs(static_cast<double>(row[k]) * xq[t * c.cols + k]);
            const size_t i = static_cast<size_t>(t * c.rows + r);
            EXPECT_NEAR(y_amx[i], ref[i], 1e-5 * mag + 1e-6) << type << " row " << r << " token " << t;
          }
        }
      }
}

TEST(AmxQblk, EmulatedTilesEqualVnniTileBitForBit) {
  if (best_isa() < Isa::Avx512) GTEST_SKIP() << "the VNNI tile it is compared with needs AVX-512";
  compare_qblk(/*hardware=*/false);
}

TEST(AmxQblk, HardwareTilesEqualVnniTileBitForBit) {
  if (best_isa() < Isa::Amx) GTEST_SKIP() << "no AMX-INT8 on this CPU (the emulated test covers the kernel)";
  compare_qblk(/*hardware=*/true);
}

// GGUF k-quant rows, packed at load.
WeightMatrix kquant_rows(const FormatInfo& fi, const std::vector<int>& f16s, int64_t rows, int64_t cols,
                         uint32_t seed) {
  auto buf = random_kquant_rows(fi, f16s, rows, cols, seed);
  WeightMatrix w = make_ggml_weight(buf, buf->data(), fi.ggml_type, rows, cols);
  prepare_weight(w, /*repack=*/true);
  return w;
}

// The k-quants: the AMX kernel against the VNNI k-quant tile, bit for bit, one pass and the residual pass.
void compare_kpack(bool hardware) {
  const AmxCase cases[] = {{37, 256, 16}, {16, 512, 17}, {5, 768, 33}, {24, 256, 40}};
  for (auto [type, f16s] : {std::pair<const char*, std::vector<int>>{"q2_k", {80, 82}},
                            {"q3_k", {108}},
                            {"q4_k", {0, 2}},
                            {"q5_k", {0, 2}},
                            {"q6_k", {208}},
                            {"iq4_xs", {0}}})
    for (const AmxCase& c : cases)
      for (bool x2 : {false, true}) {
        const WeightMatrix w = kquant_rows(format_by_name(type), f16s, c.rows, c.cols,
                                           static_cast<uint32_t>(c.rows * 3 + c.cols));
        amx_equals_vnni(w, acts(c.T, c.cols, static_cast<uint32_t>(c.T + 2)), c, x2, hardware);
      }
}

TEST(AmxKpack, EmulatedTilesEqualVnniTileBitForBit) {
  if (best_isa() < Isa::Avx512) GTEST_SKIP() << "the VNNI tile it is compared with needs AVX-512";
  compare_kpack(/*hardware=*/false);
}

TEST(AmxKpack, HardwareTilesEqualVnniTileBitForBit) {
  if (best_isa() < Isa::Amx) GTEST_SKIP() << "no AMX-INT8 on this CPU (the emulated test covers the kernel)";
  compare_kpack(/*hardware=*/true);
}

// INT4 / INT8 codes with INT8 or INT4 activations (W4A8, W4A4, grouped / asymmetric INT8) on the per-call
// 16-row blocks: the AMX kernel against the VNNI block tile bit for bit, over groups of one tile (g32, g64),
// several tiles (g128; per channel with K padded to 64) and a 16-column tile (g16), symmetric and asymmetric,
// with row and token tails.
struct BlockCase {
  const char* scheme;
  FormatId act;
  AmxCase c;
};
const BlockCase kBlockCases[] = {
    {"int4:g32", FormatId::INT8, {37, 256, 16}},         {"int4:g128", FormatId::INT8, {24, 384, 17}},
    {"int4:g64:asym", FormatId::INT8, {33, 896, 33}},    {"int4:channel", FormatId::INT8, {40, 200, 20}},
    {"int8:g128:asym", FormatId::INT8, {16, 256, 64}},   {"int8:g32", FormatId::INT8, {50, 160, 31}},
    {"int4:g16", FormatId::INT8, {20, 384, 18}},         {"int4:g128", FormatId::INT4, {24, 512, 48}},
    {"int4:channel:asym", FormatId::INT4, {17, 128, 16}}};

WeightMatrix int_codes(const BlockCase& b, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(b.c.rows * b.c.cols));
  for (auto& v : w) v = nd(rng);
  w[3] = 0.7f;  // an outlier in the first group
  WeightMatrix m = make_quant_weight(std::make_shared<QuantizedMatrix>(
      quantize_matrix(w.data(), b.c.rows, b.c.cols, parse_scheme(b.scheme))));
  m.act_format = b.act;
  return m;
}

void compare_block(bool hardware) {
  for (const BlockCase& b : kBlockCases) {
    const AmxCase& c = b.c;
    const WeightMatrix w = int_codes(b, static_cast<uint32_t>(c.rows * 7 + c.cols));
    const std::vector<float> x = acts(c.T, c.cols, static_cast<uint32_t>(c.T + 3));
    const BothRuns r = run_both(w, x, c, Isa::Avx512, hardware);
    EXPECT_NE(r.ref_name.find(".vnni+vnniblock.avx512"), std::string::npos) << r.ref_name;
    EXPECT_NE(r.amx_name.find(hardware ? ".vnni+amxblock.amx" : ".vnni+amxblock-emulated."),
              std::string::npos)
        << r.amx_name;
    expect_same_bits(r, c, b.scheme);
  }
}

TEST(AmxBlock, EmulatedTilesEqualVnniBlockBitForBit) {
  if (best_isa() < Isa::Avx512) GTEST_SKIP() << "the VNNI tile it is compared with needs AVX-512";
  compare_block(/*hardware=*/false);
}

TEST(AmxBlock, HardwareTilesEqualVnniBlockBitForBit) {
  if (best_isa() < Isa::Amx) GTEST_SKIP() << "no AMX-INT8 on this CPU (the emulated test covers the kernel)";
  compare_block(/*hardware=*/true);
}

// Decode and prompts under kAmxTokens stay on the VNNI kernels; a group that is not whole (200 columns in
// groups of 32) keeps the VNNI block tile at any length.
TEST(AmxBlock, ShortPrefillAndRaggedGroupsStayOnVnni) {
  if (best_isa() < Isa::Avx512) GTEST_SKIP() << "no AVX-512";
  const WeightMatrix w = int_codes({"int4:g32", FormatId::INT8, {32, 256, 16}}, 4);
  const WeightMatrix ragged = int_codes({"int4:g32", FormatId::INT8, {32, 200, 16}}, 5);
  set_kernel_isa(std::min(best_isa(), Isa::Avx512Bf16));
  set_amx_emulation(true);
  EXPECT_EQ(select_kernel(w, 1).kernel, Kernel::VnniGemv);
  EXPECT_EQ(select_kernel(w, kAmxTokens - 1).kernel, Kernel::VnniBlock);
  EXPECT_EQ(select_kernel(w, kAmxTokens).kernel, Kernel::AmxBlockEmulated);
  EXPECT_EQ(select_kernel(ragged, 64).kernel, Kernel::VnniBlock);
  set_amx_emulation(false);
  EXPECT_EQ(select_kernel(w, kAmxTokens).kernel, Kernel::VnniBlock);
  set_kernel_isa(best_isa());
}

// GGUF types held as rows (online --quantize q4_0 / q8_0 / q4_k ..., no load-time pack): prefill packs each
// 16-row block per call; the AMX kernel over those blocks against the VNNI one (Q8PackPerCall), bit for bit,
// one pass and the residual pass.
void compare_per_call(bool hardware) {
  const AmxCase cases[] = {{37, 256, 16}, {20, 512, 33}};
  for (const char* type : {"q4_0", "q4_1", "q5_1", "q8_0", "q2_k", "q4_k", "q6_k"})
    for (const AmxCase& c : cases)
      for (bool x2 : {false, true}) {
        std::mt19937 rng(static_cast<uint32_t>(c.rows + c.T));
        std::normal_distribution<float> nd(0.0f, 0.05f);
        std::vector<float> wf(static_cast<size_t>(c.rows * c.cols));
        for (auto& v : wf) v = nd(rng);
        const WeightMatrix w = make_quant_weight(std::make_shared<QuantizedMatrix>(
            quantize_matrix(wf.data(), c.rows, c.cols, parse_scheme(type))));
        const std::vector<float> x = acts(c.T, c.cols, static_cast<uint32_t>(c.T + 4));
        const BothRuns r = run_both(w, x, c, Isa::Avx512, hardware, x2);
        EXPECT_EQ(r.ref_kernel, Kernel::Q8PackPerCall) << type;
        EXPECT_EQ(r.amx_kernel, hardware ? Kernel::AmxQ8PackPerCall : Kernel::AmxQ8PackPerCallEmulated)
            << type;
        expect_same_bits(r, c, std::string(type) + (x2 ? " x2" : ""));
      }
}

TEST(AmxPerCall, EmulatedTilesEqualVnniPerCallPackBitForBit) {
  if (best_isa() < Isa::Avx512) GTEST_SKIP() << "the VNNI tile it is compared with needs AVX-512";
  compare_per_call(/*hardware=*/false);
}

TEST(AmxPerCall, HardwareTilesEqualVnniPerCallPackBitForBit) {
  if (best_isa() < Isa::Amx) GTEST_SKIP() << "no AMX-INT8 on this CPU (the emulated test covers the kernel)";
  compare_per_call(/*hardware=*/true);
}

// Weight-only formats on the BF16 tile (4-bit, 8-bit and FP8 codes, INT2 / INT3 widened, symmetric and
// asymmetric, per channel and in groups of 128, 32 and 16 columns): the AMX-BF16 kernel against the BF16
// register tile and the reference. Both multiply the same exact BF16 code values by the same BF16-rounded
// activations with FP32 accumulation and apply the same FP32 epilogue; only the order of the FP32 sums
// differs (the tile unit adds one pair at a time in column order), so they agree to float summation, not bit
// for bit.
struct Bf16Case {
  const char* scheme;
  AmxCase c;
};
const Bf16Case kBf16Cases[] = {
    {"int4:g128", {37, 256, 16}},    {"int4:g32:asym", {24, 200, 17}},  {"nf4:g64", {33, 896, 33}},
    {"int4:channel", {16, 130, 20}}, {"int8:g128:asym", {20, 384, 31}}, {"e4m3:channel", {18, 160, 48}},
    {"int3:g32", {40, 256, 16}},     {"int2:g16:asym", {17, 128, 19}},  {"mxfp4", {24, 192, 16}}};

void compare_bf16(bool hardware) {
  for (const Bf16Case& b : kBf16Cases) {
    const AmxCase& c = b.c;
    std::mt19937 rng(static_cast<uint32_t>(c.rows * 11 + c.cols));
    std::normal_distribution<float> nd(0.0f, 0.05f);
    std::vector<float> wf(static_cast<size_t>(c.rows * c.cols));
    for (auto& v : wf) v = nd(rng);
    wf[5] = 0.6f;
    const WeightMatrix w = make_quant_weight(std::make_shared<QuantizedMatrix>(
        quantize_matrix(wf.data(), c.rows, c.cols, parse_scheme(b.scheme))));
    const std::vector<float> x = acts(c.T, c.cols, static_cast<uint32_t>(c.T + 5));
    const BothRuns r = run_both(w, x, c, Isa::Avx512Bf16, hardware);
    const std::vector<float>&y_tile = r.ref, &y_amx = r.amx;
    std::vector<float> ref(y_tile.size());
    EXPECT_EQ(r.ref_kernel, Kernel::Bf16Tile) << b.scheme;
    EXPECT_EQ(r.amx_kernel, hardware ? Kernel::AmxBf16 : Kernel::AmxBf16Emulated) << b.scheme;
    EXPECT_NE(r.amx_name.find(hardware ? "+amxbf16.amx" : "+amxbf16-emulated."), std::string::npos)
        << r.amx_name;
    // The reference on the BF16-rounded activations (what both kernels multiply).
    std::vector<float> xb(x.size()), row(static_cast<size_t>(c.cols));
    for (size_t i = 0; i < x.size(); ++i) xb[i] = bf16_to_f32(f32_to_bf16(x[i]));
    matmul_reference(w, xb.data(), c.T, ref.data());
    for (int64_t r = 0; r < c.rows; ++r) {
      weight_row_f32(w, r, row.data());
      for (int64_t t = 0; t < c.T; ++t) {
        double mag = 0;
        for (int64_t k = 0; k < c.cols; ++k)
          mag += std::fabs(static_cast<double>(row[k]) * xb[t * c.cols + k]);
        const size_t i = static_cast<size_t>(t * c.rows + r);
        EXPECT_NEAR(y_amx[i], y_tile[i], 2e-6 * mag + 1e-7) << b.scheme << " row " << r << " token " << t;
        // NF4's values are not exact in BF16: both kernels read them rounded (2^-9 relative), as nib16 does.
        const double wtol = std::string(b.scheme).rfind("nf4", 0) == 0 ? 1.0 / 256 : 1e-5;
        EXPECT_NEAR(y_amx[i], ref[i], wtol * mag + 1e-6) << b.scheme << " row " << r << " token " << t;
      }
    }
  }
}

TEST(AmxBf16, EmulatedTilesMatchTheBf16Tile) {
  if (best_isa() < Isa::Avx512Bf16) GTEST_SKIP() << "the BF16 tile it is compared with needs AVX512_BF16";
  compare_bf16(/*hardware=*/false);
}

TEST(AmxBf16, HardwareTilesMatchTheBf16Tile) {
  if (best_isa() < Isa::Amx) GTEST_SKIP() << "no AMX on this CPU (the emulated test covers the kernel)";
  compare_bf16(/*hardware=*/true);
}

// Decode and prompts under kAmxTokens stay on nib16 / the BF16 register tile; so do groups that make no whole
// tile product (48 columns = 24 pairs).
TEST(AmxBf16, ShortPrefillAndOddGroupsStayOnTheBf16Tile) {
  if (best_isa() < Isa::Avx512Bf16) GTEST_SKIP() << "no AVX512_BF16";
  auto weight = [](const char* scheme, int64_t cols) {
    std::vector<float> wf(static_cast<size_t>(32 * cols), 0.01f);
    return make_quant_weight(
        std::make_shared<QuantizedMatrix>(quantize_matrix(wf.data(), 32, cols, parse_scheme(scheme))));
  };
  const WeightMatrix w = weight("int4:g128", 256), g48 = weight("int4:g48", 192);
  set_kernel_isa(Isa::Avx512Bf16);
  set_amx_emulation(true);
  EXPECT_EQ(select_kernel(w, 1).kernel, Kernel::Nib16);
  EXPECT_EQ(select_kernel(w, kAmxTokens - 1).kernel, Kernel::Bf16Tile);
  EXPECT_EQ(select_kernel(w, kAmxTokens).kernel, Kernel::AmxBf16Emulated);
  EXPECT_EQ(select_kernel(g48, 64).kernel, Kernel::Bf16Tile);  // 24 pairs: no whole tile per group
  set_amx_emulation(false);
  EXPECT_EQ(select_kernel(w, kAmxTokens).kernel, Kernel::Bf16Tile);
  set_kernel_isa(best_isa());
}

// The tile-unit model's TDPBF16PS (kernels/amx_emu.h), as the SDM writes it: one FP32 rounding per product
// in column order (1 + 2^-24 + 2^-24 stays 1 under round-to-nearest-even; one rounding of the pair sum would
// give 1 + 2^-23), denormal BF16 inputs read as 0 (DAZ), denormal results flushed to 0 (FTZ).
TEST(AmxEmuModel, Bf16DotRoundsEachProductAndFlushesDenormals) {
  using kern::AmxEmu;
  auto bf = [](float f) { return f32_to_bf16(f); };
  auto run = [&](float c0, std::initializer_list<float> a, std::initializer_list<float> b) {
    kern::AmxTileCfg cfg;
    cfg.colsb[0] = 4, cfg.rows[0] = 1;  // C: 1 x 1 FP32
    cfg.colsb[4] = 4, cfg.rows[4] = 1;  // A: one BF16 pair
    cfg.colsb[6] = 4, cfg.rows[6] = 1;  // B: one BF16 pair for one column
    AmxEmu::config(cfg);
    uint16_t av[2], bv[2];
    std::transform(a.begin(), a.end(), av, bf);
    std::transform(b.begin(), b.end(), bv, bf);
    AmxEmu::load<0>(&c0, 4);
    AmxEmu::load<4>(av, 4);
    AmxEmu::load<6>(bv, 4);
    AmxEmu::dpbf16ps<0, 4, 6>();
    float c = -1;
    AmxEmu::store<0>(&c, 4);
    AmxEmu::release();
    return c;
  };
  const float tiny = std::ldexp(1.0f, -24);
  EXPECT_EQ(run(1.0f, {tiny, tiny}, {1.0f, 1.0f}), 1.0f);
  EXPECT_EQ(run(0.0f, {tiny, tiny}, {1.0f, 1.0f}), 2 * tiny);
  const float denormal = bf16_to_f32(0x0001);  // the smallest BF16 denormal, 2^-133
  ASSERT_GT(denormal, 0.0f);
  EXPECT_EQ(run(0.0f, {denormal, 0.0f}, {std::ldexp(1.0f, 100), 0.0f}), 0.0f);  // DAZ: not 2^-33
  EXPECT_EQ(run(0.0f, {std::ldexp(1.0f, -70), 0.0f}, {std::ldexp(1.0f, -70), 0.0f}),
            0.0f);                                            // FTZ: not 2^-140
  EXPECT_EQ(run(0.5f, {3.0f, -2.0f}, {0.25f, 0.5f}), 0.25f);  // 0.5 + 0.75 - 1
}

TEST(AmxQblk, DecodeAndShortPrefillStayOnVnni) {
  if (best_isa() < Isa::Avx512) GTEST_SKIP() << "no AVX-512";
  const WeightMatrix w = ggml_rows(format_by_name("q4_0"), 32, 256, 3);
  set_kernel_isa(std::min(best_isa(), Isa::Avx512Bf16));
  set_amx_emulation(true);
  EXPECT_EQ(select_kernel(w, 1).kernel, Kernel::Q8Pack);
  EXPECT_EQ(select_kernel(w, kAmxTokens - 1).kernel, Kernel::Q8Pack);
  EXPECT_EQ(select_kernel(w, kAmxTokens).kernel, Kernel::AmxQ8PackEmulated);
  set_amx_emulation(false);
  EXPECT_EQ(select_kernel(w, kAmxTokens).kernel, Kernel::Q8Pack);
  set_kernel_isa(best_isa());
}

}  // namespace
}  // namespace lowbit
