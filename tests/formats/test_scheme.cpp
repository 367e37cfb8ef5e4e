// QuantScheme parsing, validation and exact bits-per-weight accounting.
#include <gtest/gtest.h>

#include "core/error.h"
#include "formats/scheme.h"

using namespace lowbit;

TEST(Scheme, ParsesCompactStrings) {
  auto s = parse_scheme("int4:g128:sym:f16");
  EXPECT_EQ(s.format, FormatId::INT4);
  EXPECT_EQ(s.gran, Granularity::Group);
  EXPECT_EQ(s.group_size, 128);
  EXPECT_TRUE(s.symmetric);
  EXPECT_EQ(s.scale_type, ScaleType::F16);

  s = parse_scheme("int4:g32:asym");
  EXPECT_FALSE(s.symmetric);
  EXPECT_EQ(s.group_size, 32);

  s = parse_scheme("e4m3:block128x128");
  EXPECT_EQ(s.format, FormatId::E4M3FN);
  EXPECT_EQ(s.gran, Granularity::Block2D);
  EXPECT_EQ(s.block_rows, 128);
  EXPECT_EQ(s.block_cols, 128);

  s = parse_scheme("nf4:g64:dq");
  EXPECT_TRUE(s.double_quant);
  EXPECT_EQ(s.group_size, 64);

  s = parse_scheme("mxfp4");
  EXPECT_EQ(s.group_size, 32);
  EXPECT_EQ(s.scale_type, ScaleType::E8M0);
  s = parse_scheme("nvfp4");
  EXPECT_EQ(s.group_size, 16);
  EXPECT_EQ(s.scale_type, ScaleType::E4M3);
  s = parse_scheme("q4_k");
  EXPECT_EQ(s.gran, Granularity::Native);
  s = parse_scheme("e4m3:channel");
  EXPECT_EQ(s.gran, Granularity::Channel);
  s = parse_scheme("int8:token");
  EXPECT_EQ(s.gran, Granularity::Token);
  s = parse_scheme("int3:g100:mse");
  EXPECT_EQ(s.search, ScaleSearch::Mse);
  EXPECT_EQ(s.group_size, 100);
}

TEST(Scheme, ToStringRoundTripsForEveryFormat) {
  for (const auto& f : format_table()) {
    if (f.kind == FormatKind::Scale) {
      EXPECT_THROW(parse_scheme(f.name), UsageError);
      continue;
    }
    QuantScheme s = parse_scheme(f.name);
    EXPECT_EQ(parse_scheme(to_string(s)), s) << to_string(s);
  }
  for (const char* t :
       {"int4:g128:sym:f16", "int4:g32:asym:bf16", "int8:channel:sym:f32", "e4m3fn:block128x64:f32",
        "nf4:g64:f32:dq", "int2:tensor:asym:e8m0:mse", "e2m1:g16:e4m3"}) {
    QuantScheme s = parse_scheme(t);
    EXPECT_EQ(to_string(s), t);
  }
}

TEST(Scheme, RejectsBadInput) {
  EXPECT_THROW(parse_scheme("int5:g128"), UsageError);
  EXPECT_THROW(parse_scheme("int4:g0"), UsageError);
  EXPECT_THROW(parse_scheme("int4:gx"), UsageError);
  EXPECT_THROW(parse_scheme("int4:foo"), UsageError);
  EXPECT_THROW(parse_scheme("e4m3:asym"), UsageError);
  EXPECT_THROW(parse_scheme("int4:dq"), UsageError);
  EXPECT_THROW(parse_scheme("mxfp4:g64"), UsageError);
  EXPECT_THROW(parse_scheme("q4_k:g32"), UsageError);
  EXPECT_THROW(parse_scheme("e4m3:block128"), UsageError);
  EXPECT_THROW(parse_scheme(""), UsageError);
  EXPECT_NO_THROW(parse_scheme("mxfp4:g32:e8m0"));  // restating the native layout is fine
}

TEST(Scheme, ValidateAgainstShape) {
  EXPECT_THROW(validate(parse_scheme("int4:g128"), 4, 64), UsageError);  // group larger than the row
  EXPECT_NO_THROW(validate(parse_scheme("int4:g128"), 4, 200));          // ragged last group is fine
  EXPECT_THROW(validate(parse_scheme("q4_k"), 4, 300), UsageError);      // not a multiple of 256
  EXPECT_NO_THROW(validate(parse_scheme("q4_k"), 4, 512));
  EXPECT_THROW(validate(parse_scheme("e4m3:block128x128"), 64, 256), UsageError);
  EXPECT_THROW(validate(parse_scheme("int4:g32"), 0, 64), UsageError);
  try {
    validate(parse_scheme("int4:g128"), 4, 64);
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("64 columns"), std::string::npos) << e.what();
  }
}

TEST(Scheme, BitsPerWeightExamples) {
  EXPECT_DOUBLE_EQ(bits_per_weight(parse_scheme("int4:g128:sym:f16"), 4096, 4096), 4.125);
  EXPECT_DOUBLE_EQ(bits_per_weight(parse_scheme("int4:g128:asym:f16"), 4096, 4096), 4.15625);
  EXPECT_DOUBLE_EQ(bits_per_weight(parse_scheme("mxfp4"), 256, 256), 4.25);
  EXPECT_DOUBLE_EQ(bits_per_weight(parse_scheme("mxfp8"), 256, 256), 8.25);
  EXPECT_DOUBLE_EQ(bits_per_weight(parse_scheme("mxfp6"), 256, 256), 6.25);
  EXPECT_DOUBLE_EQ(bits_per_weight(parse_scheme("mxint8"), 256, 256), 8.25);
  EXPECT_DOUBLE_EQ(bits_per_weight(parse_scheme("nvfp4"), 256, 256), 4.5 + 32.0 / (256 * 256));
  EXPECT_DOUBLE_EQ(bits_per_weight(parse_scheme("nf4:g64"), 256, 256), 4.5);
  // NF4 double quant: 8/64 + 32/(64*256) per weight + one FP32 mean per tensor.
  EXPECT_DOUBLE_EQ(bits_per_weight(parse_scheme("nf4:g64:dq"), 256, 256),
                   4 + 8.0 / 64 + 32.0 / (64 * 256) + 32.0 / 65536);
  EXPECT_DOUBLE_EQ(bits_per_weight(parse_scheme("q4_0"), 64, 256), 4.5);
  EXPECT_DOUBLE_EQ(bits_per_weight(parse_scheme("q8_0"), 64, 256), 8.5);
  EXPECT_DOUBLE_EQ(bits_per_weight(parse_scheme("q4_k"), 64, 256), 4.5);
  EXPECT_DOUBLE_EQ(bits_per_weight(parse_scheme("q6_k"), 64, 256), 6.5625);
  EXPECT_DOUBLE_EQ(bits_per_weight(parse_scheme("q2_k"), 64, 256), 2.625);
  EXPECT_DOUBLE_EQ(bits_per_weight(parse_scheme("q3_k"), 64, 256), 3.4375);
  EXPECT_DOUBLE_EQ(bits_per_weight(parse_scheme("f16"), 3, 5), 16.0);
  EXPECT_DOUBLE_EQ(bits_per_weight(parse_scheme("e4m3:channel"), 10, 64), 8 + 32.0 / 64);
  EXPECT_DOUBLE_EQ(bits_per_weight(parse_scheme("e4m3:tensor"), 10, 64), 8 + 32.0 / 640);
  EXPECT_DOUBLE_EQ(bits_per_weight(parse_scheme("e4m3:block128x128"), 256, 384), 8 + 6 * 32.0 / (256 * 384));
}

TEST(Scheme, RaggedGroupsAreCounted) {
  // 100 columns in groups of 32: 4 groups per row (32, 32, 32, 4).
  const auto s = parse_scheme("int4:g32:asym:f16");
  const auto b = storage_bits(s, 3, 100);
  EXPECT_EQ(b.elements, 3 * 100 * 4);
  EXPECT_EQ(b.scales, 3 * 4 * 16);
  EXPECT_EQ(b.zeros, 3 * 4 * 4);
  EXPECT_DOUBLE_EQ(bits_per_weight(s, 3, 100), (1200.0 + 192 + 48) / 300);
  const auto g = scale_grid(s, 3, 100);
  EXPECT_EQ(g.rows, 3);
  EXPECT_EQ(g.cols, 4);
  const auto g2 = scale_grid(parse_scheme("e4m3:block2x64"), 5, 100);
  EXPECT_EQ(g2.rows, 3);
  EXPECT_EQ(g2.cols, 2);
}

TEST(Scheme, BitsFormulaSweep) {
  // For every non-GGUF, non-plain format with its default scheme, bpw = bits + scale bits / group (+ second
  // level).
  for (const auto& f : format_table()) {
    if (f.kind == FormatKind::Scale || f.is_gguf()) continue;
    QuantScheme s = default_scheme(f.id);
    const int64_t rows = 32, cols = 512;
    double want = f.bits;
    if (s.gran == Granularity::Group) want += double(scale_type_bits(s.scale_type)) / s.group_size;
    // Per-row codebooks: 2^b f16 table entries per row.
    if (s.gran == Granularity::Channel)
      want +=
          double(scale_type_bits(s.scale_type)) * (f.kind == FormatKind::Codebook ? 1 << f.bits : 1) / cols;
    if (f.id == FormatId::NVFP4) want += 32.0 / (rows * cols);
    EXPECT_DOUBLE_EQ(bits_per_weight(s, rows, cols), want) << f.name;
  }
}
