// Every matmul kernel against matmul_reference, on every ISA tier this machine has, over formats, shapes
// (ragged groups, odd sizes) and token counts T = 1, 2, 3, 17, 64.
//
// Tolerance (documented in docs/kernels.md): |y - y_ref| <= 2e-5 * sum_i |w_i x_i| + 1e-6 per output, where
// x is the activation the kernel is specified to see: x itself (weight-only), quantize_activations(x) for the
// INT8 / FP8 activation routes, the Q8-block-rounded x for GGUF Q4_0 / Q8_0 / Q4_K / Q5_K / Q6_K decode on
// AVX-512 (matmul_rounds_to_q8), and x rounded to BF16 for 4-bit weight-only decode on the avx512bf16 tier
// (matmul_rounds_to_bf16), where NF4's value table is rounded to BF16 as well (matmul_weight_row).
// The bound is float accumulation-order noise; a wrong code, scale or zero point in any group exceeds it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "formats/format.h"
#include "formats/scheme.h"
#include "kernels/dispatch.h"
#include "kernels/kernel_plan.h"
#include "kernels/matmul.h"
#include "kernels/weight.h"
#include "tensor/qtensor.h"

namespace lowbit {
namespace {

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (auto& v : w) v = nd(rng);
  // A few outliers so groups differ in range (and asymmetric zero points are not all 2^(b-1)).
  for (int64_t r = 0; r < rows; ++r) w[static_cast<size_t>(r * cols + (r * 7) % cols)] += 0.4f;
  return w;
}

struct Case {
  std::string weight;  // scheme string, or "ggml:<type>", or "f32"/"f16"/"bf16"
  std::string
      act;  // "" (weight-only), "int8", "int8s" (static scale), "int4", "int4c" (clip 0.9), "e4m3fn", "e5m2"
};

WeightMatrix make_weight(const Case& c, int64_t rows, int64_t cols, uint32_t seed) {
  auto w = random_matrix(rows, cols, seed);
  WeightMatrix m;
  if (c.weight == "f32")
    m = make_f32_weight(w.data(), rows, cols);
  else if (c.weight == "f16")
    m = make_half_weight(w.data(), rows, cols, WeightKind::F16);
  else if (c.weight == "bf16")
    m = make_half_weight(w.data(), rows, cols, WeightKind::BF16);
  else if (c.weight.rfind("ggml:", 0) == 0) {
    // Zero-copy GGUF weight (WeightKind::Ggml) from the llama.cpp-compatible row quantizer.
    const FormatInfo& fi = format_by_name(c.weight.substr(5));
    QuantScheme s = default_scheme(fi.id);
    validate(s, rows, cols);
    auto q = std::make_shared<QuantizedMatrix>(quantize_matrix(w.data(), rows, cols, s));
    m = make_ggml_weight(q, q->codes.data(), fi.ggml_type, rows, cols);
    prepare_weight(
        m);  // its own plan, as load_model gives every weight (the Q8_0/Q4_0 prefill tile needs one)
  } else {
    QuantScheme s = parse_scheme(c.weight);
    validate(s, rows, cols);
    m = make_quant_weight(std::make_shared<QuantizedMatrix>(quantize_matrix(w.data(), rows, cols, s)));
  }
  if (c.act == "int8") m.act_format = FormatId::INT8;
  if (c.act == "int8s") {
    m.act_format = FormatId::INT8;
    m.act_static_scale = 0.9f / 127.0f;  // clips the largest activations on purpose
  }
  if (c.act == "int4") m.act_format = FormatId::INT4;
  if (c.act == "int4c") {  // QuaRot's activation clipping
    m.act_format = FormatId::INT4;
    m.act_clip = 0.9f;
  }
  if (c.act == "e4m3fn") m.act_format = FormatId::E4M3FN;
  if (c.act == "e5m2") m.act_format = FormatId::E5M2;
  return m;
}

// Whether the scheme can hold a rows x cols matrix at all (scheme.cpp's validate): GGML and MX / NV blocks
// need whole blocks per row, a group or 2-D block must fit the matrix; every other scheme takes ragged
// groups. A case that applies and still throws fails the test (it is not skipped), so a regression in a
// scheme's validation cannot hide behind a skip.
bool applies(const Case& c, int64_t rows, int64_t cols) {
  if (c.weight == "f32" || c.weight == "f16" || c.weight == "bf16") return true;
  if (c.weight.rfind("ggml:", 0) == 0) return cols % format_by_name(c.weight.substr(5)).block_elems == 0;
  const QuantScheme s = parse_scheme(c.weight);
  const FormatInfo& fi = s.info();
  if (fi.is_gguf() || fi.is_microscaled()) return cols % fi.block_elems == 0;
  if (s.gran == Granularity::Group) return s.group_size <= cols;
  if (s.gran == Granularity::Block2D) return s.block_rows <= rows && s.block_cols <= cols;
  return true;
}

using Param = std::tuple<Isa, Case, std::pair<int64_t, int64_t>, int64_t>;

class MatmulVsReference : public ::testing::TestWithParam<Param> {};

TEST_P(MatmulVsReference, WithinTolerance) {
  const auto& [isa, c, shape, T] = GetParam();
  const auto [rows, cols] = shape;
  if (!applies(c, rows, cols))
    GTEST_SKIP() << c.weight << " does not fit a " << rows << "x" << cols << " matrix";
  const WeightMatrix w = make_weight(c, rows, cols, static_cast<uint32_t>(rows * 131 + cols));
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(T * cols));
  for (auto& v : x) v = nd(rng);
  x[0] = 6.0f;  // an activation outlier

  set_kernel_isa(isa);
  const std::string kname = matmul_kernel_name(w);
  std::vector<float> y(static_cast<size_t>(T * rows), -1.0f), ref(static_cast<size_t>(T * rows));
  matmul(w, x.data(), T, y.data());

  // The activations the kernel is specified to see.
  std::vector<float> xe(x.size());
  quantize_activations(w, x.data(), T, xe.data());
  if (matmul_rounds_to_q8(w, T)) {
    std::vector<int8_t> q(static_cast<size_t>(cols));
    std::vector<float> d(static_cast<size_t>(cols / 32));
    for (int64_t t = 0; t < T; ++t) {
      quantize_q8_blocks(xe.data() + t * cols, cols, q.data(), d.data());
      for (int64_t i = 0; i < cols; ++i) xe[t * cols + i] = static_cast<float>(q[i]) * d[i / 32];
    }
  }
  if (matmul_rounds_to_bf16(w, T))
    for (auto& v : xe) v = bf16_to_f32(f32_to_bf16(v));
  // And the weights (matmul_weight_row: NF4's table rounded to BF16 where the kernel rounds it; else exactly
  // matmul_reference's rows).
  std::vector<float> wk(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) matmul_weight_row(w, T, r, wk.data() + r * cols);
  set_kernel_isa(best_isa());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < T; ++t) {
      double acc = 0;
      for (int64_t i = 0; i < cols; ++i) acc += static_cast<double>(wk[r * cols + i]) * xe[t * cols + i];
      ref[t * rows + r] = static_cast<float>(acc);
    }

  int bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = wk.data() + r * cols;
    for (int64_t t = 0; t < T; ++t) {
      double mag = 0;
      for (int64_t i = 0; i < cols; ++i) mag += std::fabs(static_cast<double>(row[i]) * xe[t * cols + i]);
      const double err = std::fabs(static_cast<double>(y[t * rows + r]) - ref[t * rows + r]);
      if (!(err <= 2e-5 * mag + 1e-6) && bad++ < 5)
        ADD_FAILURE() << kname << " row " << r << " token " << t << ": got " << y[t * rows + r]
                      << ", reference " << ref[t * rows + r] << " (|err| " << err << ", bound "
                      << 2e-5 * mag + 1e-6 << ")";
    }
  }
  EXPECT_EQ(bad, 0) << kname;
}

std::vector<Case> weight_cases() {
  std::vector<Case> v;
  for (const char* s :
       {"f32", "f16", "bf16", "int4:g32:sym", "int4:g128:sym", "int4:g32:asym", "int4:g128:asym",
        "int4:g64:asym:bf16", "int4:channel", "int4:g48",
        // nib lane path: 8 groups per chunk, 2 chunks per group, per-channel zero points
        "int4:g16:asym", "int4:g256", "int4:g256:asym", "int4:channel:asym", "int8:channel", "int8:g32",
        "int8:g128:asym", "int8:tensor", "int3:g64", "int2:g32:asym", "nf4:g64", "nf4:g64:dq", "e2m1:g32",
        "mxfp4", "mxfp8", "nvfp4", "e4m3:channel", "e4m3:tensor", "e4m3:block32x64", "e5m2:channel",
        "e3m2:g32", "q4_0", "q8_0", "q4_k", "ggml:q4_0", "ggml:q8_0", "ggml:q4_k",
        // the other k-quants from their encoders: rows (decode by row) and load-time KPack
        "q2_k", "q3_k", "q5_k", "q6_k", "ggml:q2_k", "ggml:q3_k", "ggml:q5_k", "ggml:q6_k",
        // IQ4_XS from its encoder: rows (unfused) and the load-time KPack
        "iq4_xs", "ggml:iq4_xs",
        // per-row codebooks: the lut kernels (every tier), FP32 tile prefill on AVX-512
        "lut4", "lut3", "lut2"})
    // GGUF types lowbit reads but does not write (q4_1, q5_0, q5_1, iq4_nl, mxfp4)
    // have no quantizer to build them from: GgmlRandomBlocks tests them on random blocks.
    v.push_back({s, ""});
  return v;
}

std::vector<Case> act_cases() {
  std::vector<Case> v;
  for (const char* s :
       {"int8:channel", "int8:g32", "int8:g128:asym", "int8:g64:asym", "int4:g128", "int4:g32",
        "int4:g32:asym", "int4:g64", "int4:channel", "int4:g48", "nf4:g64", "f32", "ggml:q4_0",
        // one scale group per row: per-channel zero points, one tensor scale
        "int8:channel:asym", "int4:channel:asym", "int8:tensor"})
    for (const char* a : {"int8", "int8s"}) v.push_back({s, a});
  for (const char* s : {"e4m3:channel", "f16", "int4:g128"})
    for (const char* a : {"e4m3fn", "e5m2"}) v.push_back({s, a});
  // W4A4 (and W8A4): the integer kernels with 4-bit activation codes; NF4 / F32 weights emulate the route.
  for (const char* s : {"int4:channel", "int4:g128", "int4:g32", "int4:g32:asym", "int4:g48", "int4:g64",
                        "int4:channel:asym", "int8:channel", "int8:g32", "nf4:g64", "f32"})
    for (const char* a : {"int4", "int4c"}) v.push_back({s, a});
  return v;
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const auto& [isa, c, shape, T] = info.param;
  std::string s = std::string(isa_name(isa)) + "_" + c.weight + (c.act.empty() ? "" : "_a" + c.act) + "_" +
                  std::to_string(shape.first) + "x" + std::to_string(shape.second) + "_T" + std::to_string(T);
  for (auto& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

// 37 / 7 rows: row tiles of 4 (T = 1, 2) and 2 (T = 3) leave remainders; 200 / 333 columns: ragged last group
// and a partial last 128-element chunk (333: odd, so the last code byte is half padding).
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{37, 256}, {16, 200}, {24, 896}, {7, 333}};

INSTANTIATE_TEST_SUITE_P(Formats, MatmulVsReference,
                         ::testing::Combine(::testing::ValuesIn(available_isas()),
                                            ::testing::ValuesIn(weight_cases()), ::testing::ValuesIn(kShapes),
                                            ::testing::Values(1, 2, 3, 17, 64)),
                         param_name);
INSTANTIATE_TEST_SUITE_P(Activations, MatmulVsReference,
                         ::testing::Combine(::testing::ValuesIn(available_isas()),
                                            ::testing::ValuesIn(act_cases()), ::testing::ValuesIn(kShapes),
                                            ::testing::Values(1, 3, 17)),
                         param_name);
// Long rows: decode (T = 1) reads rows of more than 1 KiB of codes one after another (row_seq / byte_rows_seq
// on the Avx512Bf16 tier), T = 2 keeps the row tile. 2200 columns: 1100 bytes of 4-bit codes, 18 chunks of
// 128 (the last partial), a ragged last group; 9 rows: two groups of four and one row alone. 2304 columns
// (whole 256-element super-blocks) and 2336 (73 Q4_0 blocks: the one-row Q4_0 kernel's four-block steps and a
// last block alone) for the GGUF types; INT8 activations (W8A8 VNNI, GGUF Q8 blocks) on the same rows.
const auto kLongRows =
    ::testing::Values(std::pair<int64_t, int64_t>{9, 2200}, std::pair<int64_t, int64_t>{6, 2304},
                      std::pair<int64_t, int64_t>{5, 2336});
INSTANTIATE_TEST_SUITE_P(LongRows, MatmulVsReference,
                         ::testing::Combine(::testing::ValuesIn(available_isas()),
                                            ::testing::ValuesIn(weight_cases()), kLongRows,
                                            ::testing::Values(1, 2)),
                         param_name);
INSTANTIATE_TEST_SUITE_P(LongRowsActivations, MatmulVsReference,
                         ::testing::Combine(::testing::ValuesIn(available_isas()),
                                            ::testing::ValuesIn(act_cases()), kLongRows,
                                            ::testing::Values(1)),
                         param_name);
// INT2 / INT3 on nib16 (codes widened to 4 bits in registers) and FP6 on byte16 (widened to bytes per block):
// rows of more than 1 KiB of codes (the one-row stream: INT3 4608 columns = 1728 bytes, INT2 = 1152), a row
// ending inside a 128-code chunk (4480 + 40), and 4-row tiles (1 KiB or less); T = 17: the BF16 prefill tile
// over the widened rows.
INSTANTIATE_TEST_SUITE_P(LowBitRows, MatmulVsReference,
                         ::testing::Combine(::testing::ValuesIn(available_isas()),
                                            ::testing::Values(Case{"int3:g64", ""}, Case{"int2:g32:asym", ""},
                                                              Case{"int3:g128:asym", ""},
                                                              Case{"int2:channel", ""}, Case{"e2m3:g32", ""},
                                                              Case{"mxfp6", ""}, Case{"lut3", ""},
                                                              Case{"lut2", ""}),
                                            ::testing::Values(std::pair<int64_t, int64_t>{5, 4608},
                                                              std::pair<int64_t, int64_t>{6, 4520},
                                                              std::pair<int64_t, int64_t>{9, 1024}),
                                            ::testing::Values(1, 2, 3, 17)),
                         param_name);
// The W8A8 prefill tile (16 rows x 8 tokens, columns padded to 4): ragged rows, columns not a multiple of 4,
// token counts that leave a partial tile.
INSTANTIATE_TEST_SUITE_P(W8A8Tile, MatmulVsReference,
                         ::testing::Combine(::testing::ValuesIn(available_isas()),
                                            ::testing::Values(Case{"int8:channel", "int8"},
                                                              Case{"int8:channel", "int8s"}),
                                            ::testing::Values(std::pair<int64_t, int64_t>{21, 133},
                                                              std::pair<int64_t, int64_t>{48, 64}),
                                            ::testing::Values(4, 9, 64)),
                         param_name);

// The fast kernels must actually be selected on AVX-512 (a silent fallback would pass the accuracy tests).
TEST(KernelNames, FastPathsSelected) {
  if (best_isa() < Isa::Avx512) GTEST_SKIP() << "no AVX-512 here";
  set_kernel_isa(Isa::Avx512);
  auto name = [](const std::string& s, FormatId act = FormatId::F32) {
    WeightMatrix w = make_weight({s, ""}, 8, 256, 1);
    w.act_format = act;
    return matmul_kernel_name(w);
  };
  EXPECT_EQ(name("int4:g128"), "int4:g128:sym:f16.nib+f32tile.avx512");  // prefill: FP32 tile
  EXPECT_NE(name("nf4:g64:dq").find(".nib+f32tile.avx512"), std::string::npos);
  EXPECT_NE(name("nvfp4").find(".nib+f32tile.avx512"), std::string::npos);
  EXPECT_NE(name("mxfp4").find(".nib+f32tile.avx512"), std::string::npos);
  EXPECT_NE(name("e4m3:channel").find(".byte+f32tile.avx512"), std::string::npos);
  EXPECT_EQ(name("int8:channel", FormatId::INT8), "int8:channel:sym:f16+a8.vnni+vnnitile.avx512");
  // INT4 / grouped / per-tensor INT codes with INT8 activations: prefill on per-call decoded VNNI blocks.
  EXPECT_EQ(name("int4:g32:asym", FormatId::INT8), "int4:g32:asym:f16+a8.vnni+vnniblock.avx512");
  EXPECT_NE(name("int4:g128", FormatId::INT8).find("+a8.vnni+vnniblock.avx512"), std::string::npos);
  EXPECT_NE(name("int8:tensor", FormatId::INT8).find("+a8.vnni+vnniblock.avx512"), std::string::npos);
  // W4A4: 4-bit activation codes on the same integer kernels.
  EXPECT_EQ(name("int4:channel", FormatId::INT4), "int4:channel:sym:f16+a4.vnni+vnniblock.avx512");
  EXPECT_EQ(name("int4:g128", FormatId::INT4), "int4:g128:sym:f16+a4.vnni+vnniblock.avx512");
  EXPECT_EQ(name("int8:channel", FormatId::INT4), "int8:channel:sym:f16+a4.vnni+vnnitile.avx512");
  EXPECT_EQ(name("ggml:q4_0"), "q4_0.q8vnni16.avx512");  // load-time 16-row pack
  EXPECT_EQ(name("ggml:q8_0"), "q8_0.q8vnni16.avx512");
  {  // types lowbit reads but does not write (random blocks) are packed at load too
    for (auto [t, kname] : {std::pair{"iq4_nl", "iq4_nl"},
                            {"ggml_mxfp4", "mxfp4"},
                            {"q4_1", "q4_1"},
                            {"q5_0", "q5_0"},
                            {"q5_1", "q5_1"}}) {
      const FormatInfo& fi = format_by_name(t);
      auto buf =
          std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(16 * 256 / 32 * fi.block_bytes), 1);
      WeightMatrix g = make_ggml_weight(buf, buf->data(), fi.ggml_type, 16, 256);
      prepare_weight(g);
      EXPECT_EQ(matmul_kernel_name(g), std::string(kname) + ".q8vnni16.avx512");
    }
    for (const char* t : {"q2_k", "q3_k", "q4_k", "q5_k", "q6_k"}) {  // every k-quant packed at load
      const FormatInfo& fi = format_by_name(t);
      auto buf = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(16 * fi.block_bytes), 1);
      WeightMatrix g = make_ggml_weight(buf, buf->data(), fi.ggml_type, 16, 256);
      prepare_weight(g);
      EXPECT_EQ(matmul_kernel_name(g), std::string(t) + ".q8vnni16.avx512");
      WeightMatrix rows = make_ggml_weight(buf, buf->data(), fi.ggml_type, 16, 256);
      prepare_weight(rows, false);  // held as rows: decode by row, prefill on a per-call pack
      EXPECT_EQ(matmul_kernel_name(rows), std::string(t) + ".q8vnni+q8vnni16.avx512");
    }
    {  // IQ4_XS: the load-time KPack; held as rows it has no row kernel: decode and prefill on a per-call
       // pack
      const FormatInfo& fi = format_by_name("iq4_xs");
      auto buf = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(16 * fi.block_bytes), 1);
      WeightMatrix g = make_ggml_weight(buf, buf->data(), fi.ggml_type, 16, 256);
      prepare_weight(g);
      EXPECT_EQ(matmul_kernel_name(g), "iq4_xs.q8vnni16.avx512");
      WeightMatrix rows = make_ggml_weight(buf, buf->data(), fi.ggml_type, 16, 256);
      prepare_weight(rows, false);
      EXPECT_EQ(matmul_kernel_name(rows), "iq4_xs.q8vnni16.avx512");
    }
  }
  EXPECT_EQ(name("ggml:q4_k"), "q4_k.q8vnni16.avx512");    // load-time KPack
  EXPECT_EQ(name("q4_k"), "q4_k.q8vnni+q8vnni16.avx512");  // online: rows, prefill on a per-call KPack
  // Online Q8_0 / Q4_0 (rows, no load-time pack): decode by row, prefill on a per-call pack.
  EXPECT_EQ(name("q8_0"), "q8_0.q8vnni+q8vnni16.avx512");
  EXPECT_EQ(name("q4_0"), "q4_0.q8vnni+q8vnni16.avx512");
  EXPECT_EQ(name("f32"), "f32.dense.avx512");
  EXPECT_EQ(name("int3:g64"), "int3:g64:sym:f16.deq.avx512");  // INT2 / INT3 fuse on the avx512bf16 tier only
  set_kernel_isa(Isa::Generic);
  EXPECT_EQ(name("int4:g128"), "int4:g128:sym:f16.deq.generic");
  EXPECT_EQ(name("int4:channel", FormatId::INT4), "int4:channel:sym:f16+a4.deq.generic");  // the fallback
  set_kernel_isa(best_isa());
}

// The avx2 tier names its own fused kernels (a silent deq fallback would pass the accuracy tests): F32 / F16
// / BF16 on dense.avx2, the nib route's 4-bit formats on nib.avx2, INT8 / FP8 on byte.avx2, the GGUF legacy
// types on q8dot.avx2 held as rows and on q8dot16.avx2 with the load-time pack (test_q8_avx2.cpp checks the
// other GGUF types); other formats stay on deq.
TEST(KernelNames, Avx2TierKernels) {
  if (best_isa() < Isa::Avx2) GTEST_SKIP() << "no AVX2 on this CPU";
  set_kernel_isa(Isa::Avx2);
  const std::pair<const char*, const char*> want[] = {{"int4:g128", "int4:g128:sym:f16.nib.avx2"},
                                                      {"int4:g32:asym", "int4:g32:asym:f16.nib.avx2"},
                                                      {"nf4:g64", "nf4:g64:f32.nib.avx2"},
                                                      {"q4_0", "q4_0.q8dot.avx2"},
                                                      {"q8_0", "q8_0.q8dot.avx2"},
                                                      {"ggml:q4_0", "q4_0.q8dot16.avx2"},
                                                      {"ggml:q8_0", "q8_0.q8dot16.avx2"},
                                                      {"ggml:q4_k", "q4_k.q8dot16.avx2"},
                                                      {"f32", "f32.dense.avx2"},
                                                      {"f16", "f16.dense.avx2"},
                                                      {"bf16", "bf16.dense.avx2"},
                                                      {"int8:channel", "int8:channel:sym:f16.byte.avx2"},
                                                      {"e4m3:channel", "e4m3fn:channel:f32.byte.avx2"},
                                                      {"int3:g64", "int3:g64:sym:f16.deq.avx2"}};
  for (const auto& [weight, name] : want)
    EXPECT_EQ(matmul_kernel_name(make_weight({weight, ""}, 8, 256, 1)), name) << weight;
  set_kernel_isa(best_isa());
}

// On CPUs with AVX512_BF16 + VBMI, 4- and 8-bit weight-only decode runs the BF16-activation kernels.
// Per-row codebooks run their own lut kernel on every tier (a silent deq fallback would pass the accuracy
// tests): decode fused (VBMI code extraction on the avx512bf16 tier), prefill on the FP32 tile over
// lut-decoded rows on AVX-512.
TEST(KernelNames, LutKernelOnEveryTier) {
  const WeightMatrix w = make_weight({"lut3", ""}, 8, 256, 1);
  const std::pair<Isa, const char*> want[] = {{Isa::Generic, "lut3.lut.generic"},
                                              {Isa::Avx2, "lut3.lut.avx2"},
                                              {Isa::Avx512, "lut3.lut+f32tile.avx512"},
                                              {Isa::Avx512Bf16, "lut3.lut+f32tile.avx512bf16"}};
  for (const auto& [isa, name] : want) {
    if (best_isa() < isa) continue;
    set_kernel_isa(isa);
    EXPECT_EQ(matmul_kernel_name(w), name) << isa_name(isa);
  }
  set_kernel_isa(best_isa());
}

TEST(KernelNames, Bf16KernelsSelected) {
  if (best_isa() < Isa::Avx512Bf16) GTEST_SKIP() << "no AVX512_BF16 + VBMI here";
  set_kernel_isa(Isa::Avx512Bf16);
  auto name = [](const std::string& s) { return matmul_kernel_name(make_weight({s, ""}, 8, 256, 1)); };
  // Decode on nib16 / byte16, prefill on the BF16 tile.
  EXPECT_EQ(name("int4:g128"), "int4:g128:sym:f16.nib16+bf16tile.avx512bf16");
  for (const char* s : {"int4:g32:asym", "nf4:g64", "nvfp4", "mxfp4", "e2m1:g32", "int4:channel"})
    EXPECT_NE(name(s).find(".nib16+bf16tile.avx512bf16"), std::string::npos) << s;
  for (const char* s :
       {"e4m3:channel", "e5m2:channel", "int8:channel", "int8:g128:asym", "int8:g32", "mxfp8"})
    EXPECT_NE(name(s).find(".byte16+bf16tile.avx512bf16"), std::string::npos) << s;
  // g48: not a lane group for the decode kernel, but whole pairs for the tile.
  EXPECT_EQ(name("int4:g48"), "int4:g48:sym:f16.nib+bf16tile.avx512bf16");
  EXPECT_EQ(name("f32"), "f32.dense.avx512");
  // INT2 / INT3: decode on nib16 with the codes widened in registers, prefill on the tile over widened rows.
  EXPECT_EQ(name("int3:g64"), "int3:g64:sym:f16.nib16+bf16tile.avx512bf16");
  EXPECT_EQ(name("int2:g32:asym"), "int2:g32:asym:f16.nib16+bf16tile.avx512bf16");
  set_kernel_isa(best_isa());
}

// Q8-block rounding of x (quantize_q8_blocks per token), the activations a matmul_rounds_to_q8 kernel sees.
std::vector<float> q8_rounded(const std::vector<float>& x, int64_t T, int64_t cols) {
  std::vector<float> xe(x.size());
  std::vector<int8_t> q(static_cast<size_t>(cols));
  std::vector<float> d(static_cast<size_t>(cols / 32));
  for (int64_t t = 0; t < T; ++t) {
    quantize_q8_blocks(x.data() + t * cols, cols, q.data(), d.data());
    for (int64_t i = 0; i < cols; ++i) xe[t * cols + i] = static_cast<float>(q[i]) * d[i / 32];
  }
  return xe;
}

// The activations a Q8 kernel with the residual pass sees: q8(x) + q8(x - q8(x)) per token.
std::vector<float> q8x2_rounded(const std::vector<float>& x, int64_t T, int64_t cols) {
  const std::vector<float> a = q8_rounded(x, T, cols);
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = x[i] - a[i];
  const std::vector<float> b = q8_rounded(r, T, cols);
  for (size_t i = 0; i < x.size(); ++i) r[i] = a[i] + b[i];
  return r;
}

// The activations matmul(w, ., T, .) is specified to multiply: Q8-rounded, Q8 plus the rounded residual, or
// x.
std::vector<float> kernel_activations(const WeightMatrix& w, const std::vector<float>& x, int64_t T,
                                      int64_t cols) {
  if (matmul_rounds_to_q8(w, T)) return q8_rounded(x, T, cols);
  if (select_kernel(w, T).rounding == ActRounding::Q8x2) return q8x2_rounded(x, T, cols);
  return x;
}

// nblk random blocks of a GGUF type, the f16 fields at f16_offsets of each block set to scales from ud.
std::shared_ptr<std::vector<uint8_t>> random_ggml_blocks(const FormatInfo& fi, int64_t nblk,
                                                         const std::vector<int>& f16_offsets,
                                                         std::mt19937& rng,
                                                         std::uniform_real_distribution<float>& ud) {
  auto buf = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(nblk * fi.block_bytes));
  for (auto& b : *buf) b = static_cast<uint8_t>(rng());
  for (int64_t k = 0; k < nblk; ++k)
    for (int off : f16_offsets) {
      const uint16_t h = f32_to_f16(ud(rng));
      std::memcpy(buf->data() + k * fi.block_bytes + off, &h, 2);
    }
  return buf;
}

// GGUF block types lowbit can read but not write (and Q4_K, whose quantizer never produces some code / scale
// / min combinations, e.g. scales and mins both at 63): random blocks with sane f16 scale fields, T = 1 and 3
// (decode: the Q8 VNNI kernels on AVX-512) and T = 17 (prefill: full and partial token tiles).
TEST(GgmlRandomBlocks, MatchReferenceOnEveryIsa) {
  struct T {
    const char* name;
    std::vector<int> f16_offsets;
    bool e8m0 = false;  // ggml MXFP4: byte 0 is an E8M0 exponent (near 2^0, and the denormal scales 0 and 1)
  };
  const std::vector<T> types = {{"q4_1", {0, 2}}, {"q5_0", {0}},           {"q5_1", {0, 2}},
                                {"iq4_nl", {0}},  {"iq4_xs", {0}},         {"q4_k", {0, 2}},
                                {"q5_k", {0, 2}}, {"q6_k", {208}},         {"q2_k", {80, 82}},
                                {"q3_k", {108}},  {"ggml_mxfp4", {}, true}};
  const int64_t rows = 9, cols = 768, maxtok = 17;  // 17: two full 8-token tiles and one token
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> ud(0.001f, 0.01f);
  std::vector<float> xall(static_cast<size_t>(maxtok * cols));
  for (auto& v : xall) v = ud(rng) * 100 - 0.5f;
  xall[3] = 4.0f;  // an outlier: one Q8 block with a coarse scale
  for (const auto& t : types) {
    const FormatInfo& fi = format_by_name(t.name);
    const int64_t nblk = rows * cols / fi.block_elems;
    auto buf = random_ggml_blocks(fi, nblk, t.f16_offsets, rng, ud);
    if (t.e8m0)
      for (int64_t k = 0; k < nblk; ++k)
        (*buf)[static_cast<size_t>(k * fi.block_bytes)] =
            static_cast<uint8_t>(k == 1   ? 0
                                 : k == 2 ? 1
                                          : 117 + static_cast<int>(rng() % 12));
    // With the load-time pack where the type has one (QBlkPack / KPack: decode and prefill on it), and
    // without (the row-at-a-time kernels, as an unpacked weight such as an untied embedding runs); with and
    // without the Q8 kernels' residual pass.
    for (int mode = 0; mode < 4; ++mode) {
      const bool repack = mode % 2 == 0;
      set_q8_residual_pass(mode >= 2);
      WeightMatrix w = make_ggml_weight(buf, buf->data(), fi.ggml_type, rows, cols);
      prepare_weight(w, repack);
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t ntok : {int64_t{1}, int64_t{3}, maxtok}) {
        const std::vector<float> x(xall.begin(), xall.begin() + ntok * cols);
        std::vector<float> ref(static_cast<size_t>(ntok * rows)), y(ref.size());
        for (Isa isa : available_isas()) {
          set_kernel_isa(isa);
          const std::vector<float> xe = kernel_activations(w, x, ntok, cols);
          matmul_reference(w, xe.data(), ntok, ref.data());
          matmul(w, x.data(), ntok, y.data());
          for (int64_t r = 0; r < rows; ++r) {
            weight_row_f32(w, r, row.data());
            for (int64_t tk = 0; tk < ntok; ++tk) {
              double mag = 0;
              for (int64_t i = 0; i < cols; ++i)
                mag += std::fabs(static_cast<double>(row[i]) * xe[tk * cols + i]);
              EXPECT_NEAR(y[tk * rows + r], ref[tk * rows + r], 2e-5 * mag + 1e-6)
                  << t.name << " " << matmul_kernel_name(w) << " T " << ntok << " row " << r;
            }
          }
        }
      }
    }
    set_q8_residual_pass(false);
    set_kernel_isa(best_isa());
  }
}

// The residual pass brings the Q8 kernels' products close to the unrounded ones: random GGUF blocks of the
// packed types, decode and prefill, with and without the pack, on every tier that rounds to Q8 blocks; the
// error against the float-activation reference shrinks by far more than 20x (the rounding step shrinks
// ~254-fold; the kernels' float sums remain).
TEST(Q8ResidualPass, ShrinksTheActivationRounding) {
  struct T {
    const char* name;
    std::vector<int> f16_offsets;
  };
  const std::vector<T> types = {{"q4_0", {0}},   {"q8_0", {0}},   {"q4_k", {0, 2}},
                                {"q6_k", {208}}, {"q3_k", {108}}, {"iq4_xs", {0}}};
  const int64_t rows = 20, cols = 512;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.001f, 0.01f);
  std::vector<float> xall(static_cast<size_t>(17 * cols));
  for (auto& v : xall) v = nd(rng);
  xall[5] = 9.0f;  // an outlier: a coarse Q8 block
  int checked = 0;
  for (const auto& t : types) {
    const FormatInfo& fi = format_by_name(t.name);
    const int64_t nblk = rows * cols / fi.block_elems;
    auto buf = random_ggml_blocks(fi, nblk, t.f16_offsets, rng, ud);
    for (bool repack : {true, false}) {
      WeightMatrix w = make_ggml_weight(buf, buf->data(), fi.ggml_type, rows, cols);
      prepare_weight(w, repack);
      for (int64_t ntok : {int64_t{1}, int64_t{3}, int64_t{17}}) {
        const std::vector<float> x(xall.begin(), xall.begin() + ntok * cols);
        std::vector<float> ref(static_cast<size_t>(ntok * rows)), y1(ref.size()), y2(ref.size());
        matmul_reference(w, x.data(), ntok, ref.data());
        for (Isa isa : available_isas()) {
          set_kernel_isa(isa);
          set_q8_residual_pass(false);
          const bool q8 = matmul_rounds_to_q8(w, ntok);
          matmul(w, x.data(), ntok, y1.data());
          set_q8_residual_pass(true);
          const std::string name = matmul_kernel_name(w);
          matmul(w, x.data(), ntok, y2.data());
          set_q8_residual_pass(false);
          if (!q8) {  // a kernel without Q8 rounding: the pass changes nothing
            EXPECT_EQ(y1, y2) << t.name << " " << name;
            EXPECT_EQ(name.find("x2."), std::string::npos) << name;
            continue;
          }
          EXPECT_NE(name.find("x2"), std::string::npos) << name;
          double e1 = 0, e2 = 0;
          for (size_t i = 0; i < ref.size(); ++i) {
            e1 = std::max(e1, std::fabs(double(y1[i]) - ref[i]));
            e2 = std::max(e2, std::fabs(double(y2[i]) - ref[i]));
          }
          EXPECT_LT(e2 * 20, e1) << t.name << " " << name << " T " << ntok << ": " << e2 << " vs " << e1;
          ++checked;
        }
      }
    }
  }
  set_kernel_isa(best_isa());
  if (best_isa() >= Isa::Avx2) EXPECT_GT(checked, 0);
}

// The row helpers (attention's widen / axpy, the MLP's silu_mul): every binary16 / bfloat16 bit pattern
// widens exactly as the scalar reference (NaN stays NaN of the same sign), and axpy matches y + a*x to float
// rounding, on every tier and for lengths that leave a tail.
TEST(RowHelpers, MatchScalarOnEveryIsa) {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  for (Isa isa : available_isas()) {
    if (static_cast<int>(isa) > static_cast<int>(best_isa())) continue;
    set_kernel_isa(isa);
    for (int64_t n : {int64_t(65536), int64_t(65533), int64_t(7)}) {
      std::vector<float> f(static_cast<size_t>(n)), b(static_cast<size_t>(n));
      widen_f16(all.data(), f.data(), n);
      widen_bf16(all.data(), b.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const float rf = f16_to_f32(all[i]), rb = bf16_to_f32(all[i]);
        if (std::isnan(
                rf))  // the conversion instruction quiets signalling NaNs; the scalar keeps the payload
          ASSERT_TRUE(std::isnan(f[i]) && std::signbit(f[i]) == std::signbit(rf))
              << isa_name(isa) << " " << i;
        else
          ASSERT_EQ(std::memcmp(&f[i], &rf, 4), 0) << isa_name(isa) << " f16 0x" << std::hex << i;
        ASSERT_EQ(std::memcmp(&b[i], &rb, 4), 0) << isa_name(isa) << " bf16 0x" << std::hex << i;
      }
    }
    // A tile of scattered F16 rows (the paged cache's K / V tiles): each row as widen_f16 gives it, in order,
    // for row lengths with and without a tail.
    for (int64_t n : {int64_t(64), int64_t(24), int64_t(5)}) {
      const int64_t n_rows = 37;
      std::vector<const uint16_t*> rows(static_cast<size_t>(n_rows));
      for (int64_t i = 0; i < n_rows; ++i)
        rows[static_cast<size_t>(i)] = all.data() + (i * 7919 + 31) % 60000;
      std::vector<float> tile(static_cast<size_t>(n_rows * n)), one(static_cast<size_t>(n));
      widen_f16_rows(rows.data(), n_rows, n, tile.data());
      for (int64_t i = 0; i < n_rows; ++i) {
        widen_f16(rows[static_cast<size_t>(i)], one.data(), n);
        ASSERT_EQ(std::memcmp(tile.data() + i * n, one.data(), static_cast<size_t>(n) * 4), 0)
            << isa_name(isa) << " row " << i << " n " << n;
      }
    }
    // FP8 rows: every E4M3FN / E5M2 code, scaled, equal to the formats library's decode times the scale (NaN
    // codes NaN); lengths that leave a tail.
    std::vector<uint8_t> codes(256);
    for (int i = 0; i < 256; ++i) codes[i] = static_cast<uint8_t>(i);
    for (bool e4m3 : {true, false})
      for (int64_t n : {int64_t(256), int64_t(253), int64_t(9)}) {
        const FormatInfo& fi = format_info(e4m3 ? FormatId::E4M3FN : FormatId::E5M2);
        std::vector<float> out(static_cast<size_t>(n));
        widen_fp8(codes.data(), e4m3, 0.37f, out.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          const float want = fi.decode(static_cast<uint32_t>(i)) * 0.37f;
          if (std::isnan(want))
            ASSERT_TRUE(std::isnan(out[i])) << isa_name(isa) << " code " << i;
          else
            ASSERT_EQ(std::memcmp(&out[i], &want, 4), 0)
                << isa_name(isa) << (e4m3 ? " e4m3 " : " e5m2 ") << i;
        }
      }
    for (int64_t n : {1, 15, 16, 17, 64, 100}) {
      std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n)), ref;
      for (int64_t i = 0; i < n; ++i) x[i] = 0.25f * i - 3, y[i] = 1.0f / (i + 1);
      ref = y;
      for (int64_t i = 0; i < n; ++i) ref[i] += 0.75f * x[i];
      axpy_f32(0.75f, x.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i)
        EXPECT_NEAR(y[i], ref[i], 1e-6f * (1 + std::fabs(ref[i]))) << n << " " << i;
    }
    // silu(g) * u against libm (the generic tier is the reference): the whole float range that matters, the
    // saturated ends, and NaN; lengths that leave a tail.
    for (int64_t n : {1, 16, 17, 200}) {
      std::vector<float> g(static_cast<size_t>(n)), u(static_cast<size_t>(n)), want(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        g[i] = i % 7 == 6 ? (i % 2 ? -120.0f : 95.0f) : 0.37f * static_cast<float>(i % 61) - 11.0f;
        u[i] = 1.0f - 0.013f * static_cast<float>(i);
      }
      if (n == 200) g[100] = std::numeric_limits<float>::quiet_NaN();
      for (int64_t i = 0; i < n; ++i) want[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
      silu_mul_f32(g.data(), u.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        if (std::isnan(want[i]))
          EXPECT_TRUE(std::isnan(g[i])) << isa_name(isa) << " " << i;
        else
          EXPECT_NEAR(g[i], want[i], 1e-6f * (std::fabs(want[i]) + 1e-30f))
              << isa_name(isa) << " " << n << " " << i;
      }
    }
  }
  set_kernel_isa(best_isa());
}

// The AVX2 prefill tile over up to 16 decoded rows: every (row, token) sum is the same FMAs in the same
// order whether the rows come 16, 5 or one at a time, across token blocks (T = 1, 3, 130) and column tails,
// and it is the dot product (double reference).
TEST(RowsGemmAvx2, RowAndTokenCountsDoNotChangeTheBits) {
  if (best_isa() < Isa::Avx2) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t n : {int64_t(8), int64_t(261), int64_t(1029)})
    for (int64_t T : {int64_t(1), int64_t(2), int64_t(3), int64_t(62), int64_t(130)}) {
      std::vector<float> w(static_cast<size_t>(16 * n)), x(static_cast<size_t>(T * n));
      for (auto& v : w) v = nd(rng);
      for (auto& v : x) v = nd(rng);
      const float* rows[16];
      for (int i = 0; i < 16; ++i) rows[i] = w.data() + i * n;
      for (int nr : {16, 13, 5, 1}) {
        std::vector<float> all(static_cast<size_t>(T * nr)), one(all.size());
        kern::rows_gemm_f32_avx2(rows, nr, x.data(), T, n, all.data(), nr);
        for (int i = 0; i < nr; ++i)
          kern::rows_gemm_f32_avx2(rows + i, 1, x.data(), T, n, one.data() + i, nr);
        for (int64_t t = 0; t < T; ++t)
          for (int i = 0; i < nr; ++i) {
            const size_t k = static_cast<size_t>(t * nr + i);
            ASSERT_EQ(std::memcmp(&all[k], &one[k], 4), 0)
                << "n " << n << " T " << T << " nr " << nr << " row " << i << " token " << t;
            double ref = 0;
            for (int64_t c = 0; c < n; ++c) ref += static_cast<double>(rows[i][c]) * x[t * n + c];
            ASSERT_NEAR(all[k], ref, 1e-4 * std::sqrt(static_cast<double>(n))) << n << " " << T << " " << i;
          }
      }
      // Nor does the token count: a token alone gets the bits it gets in a 3-, 2- or 1-token tile of a batch
      // (the engine's batch invariance rests on it).
      std::vector<float> batch(static_cast<size_t>(T * 16)), alone(16);
      kern::rows_gemm_f32_avx2(rows, 16, x.data(), T, n, batch.data(), 16);
      for (int64_t t = 0; t < T; ++t) {
        kern::rows_gemm_f32_avx2(rows, 16, x.data() + t * n, 1, n, alone.data(), 16);
        ASSERT_EQ(std::memcmp(alone.data(), batch.data() + t * 16, 64), 0)
            << "n " << n << " T " << T << " t " << t;
      }
    }
}

TEST(KernelPlan, SideTablesCountedInNbytes) {
  WeightMatrix w = make_weight({"int4:g32", ""}, 64, 256, 3);
  // codes 64*128 + f16 scales 64*8*2; decoded float scales 64*8*4 + 16-entry LUT.
  EXPECT_EQ(w.q->storage_bytes(), 64u * 128 + 64 * 8 * 2);
  EXPECT_EQ(w.nbytes(), w.q->storage_bytes() + 64 * 8 * 4 + 16 * 4);
}

// The byte16 decode table is built with the plan on CPUs with the Avx512Bf16 tier, and counted.
TEST(KernelPlan, Byte16TableCountedInNbytes) {
  WeightMatrix w = make_weight({"e4m3:channel", ""}, 64, 256, 3);
  const bool bf16 = best_isa() >= Isa::Avx512Bf16;
  EXPECT_EQ(w.plan->byte16 != nullptr, bf16);
  // decoded float scales 64 (per channel) + 256-entry LUT, + the BF16 byte planes.
  EXPECT_EQ(w.nbytes(), w.q->storage_bytes() + 64 * 4 + 256 * 4 + (bf16 ? sizeof(kern::Byte16Lut) : 0));
}

// What a decode reads (the bench's bandwidth bound): codes + the decoded tables, not the stored scale cells
// they were decoded from; a GGUF weight with a load-time pack reads the pack; an online Q4_0 weight its
// blocks.
TEST(KernelPlan, DecodeBytesCountWhatTheKernelReads) {
  // NF4: double-quantized cells decoded into an FP32 table, which is what the kernels read (stored f16 / E8M0
  // / E4M3 cells: next test).
  WeightMatrix mx = make_weight({"nf4:g64", ""}, 64, 256, 4);
  const size_t tables =
      (mx.plan->scales.size() + mx.plan->zeros.size() + mx.plan->lut.size()) * sizeof(float);
  EXPECT_EQ(mx.plan->scales.size(), 64u * 4u);
  EXPECT_EQ(mx.plan->scales_f16, nullptr);
  EXPECT_EQ(mx.plan->scales_e8m0, nullptr);
  EXPECT_EQ(mx.plan->scales_e4m3, nullptr);
  EXPECT_EQ(mx.decode_bytes(), mx.q->codes.size() + tables);
  EXPECT_EQ(mx.nbytes() - mx.decode_bytes(), mx.q->storage_bytes() - mx.q->codes.size());  // stored cells
  WeightMatrix q40 = make_weight({"q4_0", ""}, 64, 256, 5);
  EXPECT_EQ(q40.decode_bytes(), 64u * 8u * 18u);  // 8 blocks of 18 bytes per row, scales inside
  WeightMatrix f32 = make_weight({"f32", ""}, 64, 256, 6);
  EXPECT_EQ(f32.decode_bytes(), 64u * 256u * 4u);
  if (best_isa() >= Isa::Avx512) {
    WeightMatrix gg = make_weight({"ggml:q4_0", ""}, 64, 256, 7);
    ASSERT_TRUE(gg.plan->load_pack());
    EXPECT_EQ(gg.decode_bytes(), gg.plan->qblk->bytes());
  }
}

// nib16 decode from the stored binary16 / uint8 cells gives the same bits as from the plan's FP32 tables, and
// is used exactly where the cells decode exactly (f16 scales; not NF4's double quantization, not NVFP4).
TEST(KernelPlan, StoredCellsDecodeLikeTheFloatTables) {
  if (best_isa() < Isa::Avx512Bf16) GTEST_SKIP() << "no AVX512_BF16 + VBMI here";
  set_kernel_isa(Isa::Avx512Bf16);
  for (const char* f : {"int4:g32", "int4:g32:asym", "int4:g128:asym", "int4:channel", "e2m1:g32",
                        "int4:g64:asym", "mxfp4", "nvfp4"}) {
    for (int64_t cols : {256, 896, 200}) {
      const bool e8m0 = std::string(f) == "mxfp4", e4m3 = std::string(f) == "nvfp4";
      if ((e8m0 || e4m3) && cols % 32) continue;
      WeightMatrix w = make_weight({f, ""}, 37, cols, 11);
      const void* cells = e8m0   ? static_cast<const void*>(w.plan->scales_e8m0)
                          : e4m3 ? static_cast<const void*>(w.plan->scales_e4m3)
                                 : static_cast<const void*>(w.plan->scales_f16);
      ASSERT_NE(cells, nullptr) << f;
      EXPECT_EQ(w.plan->zeros_u8 != nullptr, w.plan->asym) << f;
      auto tables = std::make_shared<KernelPlan>(*w.plan);
      tables->scales_f16 = nullptr, tables->zeros_u8 = nullptr, tables->scales_e8m0 = nullptr;
      tables->scales_e4m3 = nullptr;
      WeightMatrix wt = w;
      wt.plan = tables;
      std::mt19937 rng(3);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (int64_t T : {1, 2, 3}) {
        std::vector<float> x(static_cast<size_t>(T * cols)), a(static_cast<size_t>(T * 37)), b(a.size());
        for (auto& v : x) v = nd(rng);
        matmul(w, x.data(), T, a.data());
        matmul(wt, x.data(), T, b.data());
        // NVFP4's cells are e4m3 / 2^8 with 2^8 / global applied once per output: one rounding more than the
        // table.
        float scale = 0.0f;  // tolerance relative to the outputs' magnitude (sums cancel: not per element)
        for (float v : b) scale = std::max(scale, std::fabs(v));
        for (size_t i = 0; i < a.size(); ++i) {
          if (e4m3)
            ASSERT_NEAR(a[i], b[i], 1e-5f * scale) << f << " cols " << cols << " T " << T;
          else
            ASSERT_EQ(f32_bits(a[i]), f32_bits(b[i])) << f << " cols " << cols << " T " << T;
        }
      }
      // What a decode reads: codes + 2 (f16) or 1 (E8M0) bytes per scale cell (+ 1 per zero point), not the
      // 4-byte tables.
      const size_t ncells = w.plan->scales.size();
      EXPECT_EQ(w.decode_bytes(), w.q->codes.size() + ncells * (e8m0 || e4m3 ? 1 : 2) +
                                      (w.plan->asym ? ncells : 0) + w.plan->lut.size() * 4)
          << f;
    }
  }
  EXPECT_EQ(make_weight({"nf4:g64", ""}, 8, 256, 1).plan->scales_f16, nullptr);  // double-quantized scales
  set_kernel_isa(best_isa());
}

// Special scale cells (an E8M0 0 = 2^-127 or 255 = NaN, a negative or NaN E4M3 cell) are outside the kernels'
// short cell decode: such a matrix keeps the FP32 tables, and still multiplies as its reference (a NaN cell's
// row NaN).
TEST(KernelPlan, SpecialScaleCellsKeepTheTables) {
  for (const char* f : {"mxfp4", "nvfp4"}) {
    const bool e8m0 = std::string(f) == "mxfp4";
    for (uint8_t special : e8m0 ? std::vector<uint8_t>{0, 255} : std::vector<uint8_t>{0xB8, 0x7F}) {
      const WeightMatrix base = make_weight({f, ""}, 9, 256, 5);
      ASSERT_NE(e8m0 ? static_cast<const void*>(base.plan->scales_e8m0) : base.plan->scales_e4m3, nullptr)
          << f;
      auto q = std::make_shared<QuantizedMatrix>(*base.q);
      const size_t cell = q->scales.size() / 2;  // a cell of row 4
      q->scales[cell] = special;
      const WeightMatrix w = make_quant_weight(q);
      EXPECT_EQ(e8m0 ? static_cast<const void*>(w.plan->scales_e8m0) : w.plan->scales_e4m3, nullptr)
          << f << " cell " << int{special};
      std::vector<float> x(256), y(9), ref(9);
      for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
      for (Isa isa : available_isas()) {
        set_kernel_isa(isa);
        matmul(w, x.data(), 1, y.data());
        WeightMatrix wref = w;
        matmul_reference(wref, x.data(), 1, ref.data());
        for (int r = 0; r < 9; ++r) {
          if (std::isnan(ref[r])) {
            EXPECT_TRUE(std::isnan(y[r])) << f << " " << isa_name(isa) << " row " << r;
            continue;
          }
          // BF16 activations on the Avx512Bf16 tier: within their rounding of the reference.
          EXPECT_NEAR(y[r], ref[r], 1e-2f * (std::fabs(ref[r]) + 1.0f))
              << f << " " << isa_name(isa) << " row " << r;
        }
      }
      set_kernel_isa(best_isa());
      if (special == 255 || special == 0x7F) {
        EXPECT_TRUE(std::isnan(ref[4])) << f;
      }
    }
  }
}

// The vectorized per-token INT8 activation quantizer against the scalar definition, bit for bit: codes and
// scale (NaN scale when an input is NaN), with NaN, infinities, signed zeros, rounding ties (x = k + 0.5 with
// scale 1), ragged lengths, and inputs with no finite non-zero value (scale 0).
TEST(ActivationInt8, VectorMatchesScalarBitForBit) {
  if (best_isa() < Isa::Avx2) GTEST_SKIP() << "no AVX2 here";
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<std::vector<float>> inputs;
  for (int64_t n : {1, 5, 16, 17, 100, 4864}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = nd(rng);
    inputs.push_back(x);
    std::vector<float> ties(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ties[i] = static_cast<float>(i % 254) - 126.5f;  // k + 0.5
    ties[0] = 127.0f;                                                                // amax 127: scale 1
    inputs.push_back(ties);
    std::vector<float> special = x;
    const float sp[] = {nan, inf, -inf, 0.0f, -0.0f, 1e-30f, -1e30f};
    for (int64_t i = 0; i < n; i += 3) special[i] = sp[(i / 3) % 7];
    inputs.push_back(special);
    inputs.push_back(std::vector<float>(static_cast<size_t>(n), 0.0f));
    std::vector<float> no_finite(static_cast<size_t>(n), -inf);
    no_finite[0] = inf;
    if (n > 2) no_finite[2] = nan;
    inputs.push_back(no_finite);
  }
  // The AVX2 quantizers on every CPU with AVX2, the AVX-512 ones where it has them.
  struct Tier {
    const char* name;
    void (*quantize)(const float*, int64_t, int8_t*, float*);
    void (*codes)(const float*, int64_t, float, int8_t*);
  };
  std::vector<Tier> tiers = {{"avx2", kern::quantize_activation_int8_avx2, kern::int8_act_codes_avx2}};
  if (best_isa() >= Isa::Avx512)
    tiers.push_back({"avx512", kern::quantize_activation_int8_avx512, kern::int8_act_codes_avx512});
  for (const Tier& tier : tiers)
    for (const auto& x : inputs) {
      const int64_t n = static_cast<int64_t>(x.size());
      std::vector<uint8_t> a(x.size());
      std::vector<int8_t> b(x.size(), 99);
      float sa = 0, sb = 0;
      quantize_activation_row(FormatId::INT8, x.data(), n, 0, a.data(), &sa);
      tier.quantize(x.data(), n, b.data(), &sb);
      ASSERT_EQ(f32_bits(sa), f32_bits(sb)) << tier.name << " n " << n;
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(static_cast<int8_t>(a[i]), b[i]) << tier.name << " n " << n << " i " << i << " x " << x[i];
      if (sa > 0 && !std::isnan(sb)) {  // the static-scale codes with the same scale
        std::vector<int8_t> c(x.size());
        tier.codes(x.data(), n, sa, c.data());
        EXPECT_EQ(std::memcmp(c.data(), b.data(), c.size()), 0) << tier.name << " n " << n;
      }
    }
}

TEST(Dispatch, IsaNames) {
  EXPECT_EQ(isa_from_string("avx2"), Isa::Avx2);
  EXPECT_THROW(isa_from_string("sse9"), UsageError);
  EXPECT_FALSE(available_isas().empty());
  EXPECT_EQ(available_isas().back(), best_isa());
}

// The BF16 lane layouts (vectorized) against their definition: element o of each C-element chunk, rounded by
// f32_to_bf16, lands at dst(o); padding words are zero. Values include NaN, infinities, subnormals (which
// vcvtneps2bf16 would flush) and ties of the rounding.
TEST(Bf16LaneLayout, MatchesDefinitionBitExact) {
  if (best_isa() < Isa::Avx512Bf16) GTEST_SKIP() << "no AVX512_BF16 + VBMI here";
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            1e-40f,
                            -3e-39f,
                            0.0f,
                            -0.0f,
                            1.00390625f /* tie: 1 + 2^-8 */,
                            1.01171875f /* tie, odd */,
                            3.4e38f};
  struct L {
    int64_t chunk;
    void (*fn)(const float*, int64_t, int64_t, uint16_t*, float*);
    int64_t (*dst)(int64_t);
  };
  const L layouts[] = {
      {128, kern::nib16_layout, [](int64_t o) { return 32 * (o % 4) + 2 * (o / 8) + o / 4 % 2; }},
      {64, kern::byte16_layout, [](int64_t o) { return 32 * (o / 8 % 2) + 8 * (o / 16) + o % 8; }}};
  for (const L& l : layouts)
    for (int64_t cols : {1, 17, 63, 64, 100, 128, 200, 896, 1000}) {
      std::vector<float> x(static_cast<size_t>(cols));
      for (int64_t i = 0; i < cols; ++i) x[i] = i % 7 == 3 ? specials[(i / 7) % 10] : nd(rng);
      const int64_t pad = (cols + l.chunk - 1) / l.chunk * l.chunk;
      std::vector<uint16_t> got(static_cast<size_t>(pad), 0xABCD), want(static_cast<size_t>(pad), 0);
      for (int64_t i = 0; i < cols; ++i) want[i - i % l.chunk + l.dst(i % l.chunk)] = f32_to_bf16(x[i]);
      l.fn(x.data(), cols, cols, got.data(), nullptr);
      for (int64_t i = 0; i < pad; ++i)
        ASSERT_EQ(got[i], want[i]) << "chunk " << l.chunk << " cols " << cols << " @" << i;
    }
}

}  // namespace
}  // namespace lowbit
