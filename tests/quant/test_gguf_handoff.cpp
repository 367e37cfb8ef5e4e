// GGUF export of quantized checkpoints (model/gguf_model_export.h): the real models quantized by lowbit,
// written as GGUF with each matrix in the GGUF type that holds its values, and loaded back. The GGUF file's
// matrices must decode to exactly the checkpoint's values where the export says "copied" or "exact" (the q/k
// rows of a Hugging Face source moved into llama.cpp's interleaved order), the logits must agree, and what
// cannot be carried is refused without leaving a file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "arch/arch_table.h"
#include "core/error.h"
#include "kernels/matmul.h"
#include "kernels/weight.h"
#include "model/gguf_model_export.h"
#include "model/model.h"
#include "quant/checkpoint_writer.h"
#include "quant/quantizer.h"
#include "tests/common/run_cli.h"
#include "tests/quant/quant_test_util.h"
#include "tokenizer/tokenizer.h"

using namespace lowbit;
using namespace lowbit::quant;
namespace fs = std::filesystem;

namespace {

const std::string kShared = LOWBIT_SHARED_DIR;

std::string model_path(const std::string& rel) {
  const std::string p = kShared + "/models/" + rel;
  if (!fs::exists(p)) ADD_FAILURE() << p << " not found: the shared folder (LOWBIT_SHARED_DIR) is incomplete";
  return p;
}

// `src` quantized with `recipe` (RTN) and written as a lowbit checkpoint; returns its directory.
std::string checkpoint(const std::string& src, const std::string& recipe, const std::string& name) {
  auto m = load_model(src);
  QuantizeOptions o;
  o.progress = false;
  QuantReport rep = quantize_model(*m, parse_recipe_arg(recipe), o);
  const std::string dir = quant::testing::temp_path(name);
  write_quantized_checkpoint(*m, rep, dir);
  return dir;
}

// The source row of GGUF row g of a q/k matrix when the export interleaved it (HF half-split order).
int64_t source_row(int64_t g, int64_t head_dim) {
  const int64_t h = g / head_dim, j = g % head_dim;
  return h * head_dim + (j % 2) * (head_dim / 2) + j / 2;
}

struct Exported {
  std::unique_ptr<Model> ck, gguf;
  GgufModelExportReport rep;
  std::string path;
};

Exported export_and_load(const std::string& ck_dir, const GgufModelExportOptions& o = {}) {
  Exported e;
  e.ck = load_model(ck_dir);
  e.path = ck_dir + ".gguf";
  fs::remove(e.path);
  e.rep = export_gguf_model(*e.ck, o, e.path);
  e.gguf = load_model(e.path);
  return e;
}

const GgufTensorExport& entry(const GgufModelExportReport& r, const std::string& name) {
  for (const auto& t : r.tensors)
    if (t.name == name) return t;
  throw std::runtime_error("no report entry " + name);
}

// Every matrix of the GGUF model decodes to the checkpoint's values (rows mapped back when interleaved);
// `tolerance` > 0 allows that relative error for the mappings that re-round (checked against the report).
void expect_same_values(const Exported& e, bool interleaved_export, double tolerance = 0) {
  const ModelConfig& c = e.ck->config;
  auto& A = e.ck->weights;
  auto& B = e.gguf->weights;
  for (TensorRole role : layer_matrix_roles())
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const WeightMatrix& a = *A.matrix(role, l);
      const WeightMatrix& b = *B.matrix(role, l);
      ASSERT_EQ(a.rows, b.rows);
      ASSERT_EQ(a.cols, b.cols);
      const bool perm = interleaved_export && (role == TensorRole::Q || role == TensorRole::K);
      const GgufTensorExport& t = entry(e.rep, gguf_tensor_name(role, l));
      std::vector<float> ra(static_cast<size_t>(a.cols)), rb(ra.size());
      int64_t changed = 0;
      double err2 = 0, ref2 = 0;
      for (int64_t r = 0; r < a.rows; ++r) {
        weight_row_f32(a, perm ? source_row(r, c.head_dim) : r, ra.data());
        weight_row_f32(b, r, rb.data());
        for (size_t i = 0; i < ra.size(); ++i) {
          changed += ra[i] != rb[i];
          err2 += (double(ra[i]) - rb[i]) * (double(ra[i]) - rb[i]);
          ref2 += double(ra[i]) * ra[i];
        }
      }
      EXPECT_EQ(changed, t.changed) << t.name;
      if (t.mapping == "copied" || t.mapping == "exact") {
        EXPECT_EQ(changed, 0) << t.name << " (" << t.mapping << ")";
      } else {
        EXPECT_LE(std::sqrt(err2 / ref2), tolerance) << t.name << " (" << t.mapping << ")";
        EXPECT_NEAR(std::sqrt(err2 / ref2), t.rel_rms_err, 1e-9 + 1e-6 * t.rel_rms_err) << t.name;
      }
    }
}

// The logits of the source vocabulary agree up to the kernels' rounding: a GGUF Q4_0 / Q8_0 / K-quant matrix
// runs llama.cpp's scheme (activations rounded to 8-bit blocks) where the checkpoint's INT matrix multiplies
// float activations. A wrong hyperparameter, RoPE order or norm would be off by far more.
void expect_close_logits(const Exported& e, double rel_rms) {
  const auto toks = quant::testing::test_tokens(e.ck->config.vocab_size, 24, 5);
  const auto la = quant::testing::logits_of(*e.ck, toks), lb = quant::testing::logits_of(*e.gguf, toks);
  const int64_t va = e.ck->config.vocab_size, vb = e.gguf->config.vocab_size;
  double ref2 = 0, err2 = 0;
  int same_top1 = 0;
  for (size_t t = 0; t < toks.size(); ++t) {
    const float* a = la.data() + t * va;
    const float* b = lb.data() + t * vb;
    for (int64_t v = 0; v < va; ++v) {
      ref2 += double(a[v]) * a[v];
      err2 += (double(a[v]) - b[v]) * (double(a[v]) - b[v]);
    }
    same_top1 += std::max_element(a, a + va) - a == std::max_element(b, b + va) - b;
  }
  EXPECT_LE(std::sqrt(err2 / ref2), rel_rms);
  EXPECT_GE(same_top1, static_cast<int>(toks.size()) - 2);
}

// One tensor of a GGUF file decoded by tests/reference/gguf_tensor.py (an independent NumPy reader written
// from the GGUF and ggml block definitions), row-major.
std::vector<float> numpy_decode(const std::string& gguf, const std::string& name, size_t n) {
  const std::string out = gguf + "." + name + ".f32";
  const std::string cmd = "timeout -k 5 120 /usr/bin/python3 " LOWBIT_SOURCE_DIR
                          "/tests/reference/gguf_tensor.py " +
                          gguf + " " + name + " " + out;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << "the reference reader failed (needs /usr/bin/python3 with numpy)";
  std::vector<float> v(n);
  std::FILE* f = std::fopen(out.c_str(), "rb");
  EXPECT_TRUE(f) << out;
  if (f) {
    EXPECT_EQ(std::fread(v.data(), sizeof(float), n, f), n) << out;
    std::fclose(f);
  }
  fs::remove(out);
  return v;
}

// The NumPy reader's values of a matrix against the checkpoint's (exact mappings: bit for bit; Q4_1's
// re-rounded min: against lowbit's decoding of the same GGUF rows, within float rounding of d*q + m).
void expect_numpy_agrees(const Exported& e, TensorRole role, int64_t layer) {
  const std::string name = gguf_tensor_name(role, layer);
  const WeightMatrix& a = *e.ck->weights.matrix(role, layer);
  const WeightMatrix& g = *e.gguf->weights.matrix(role, layer);
  const GgufTensorExport& t = entry(e.rep, name);
  const auto ref = numpy_decode(e.path, name, static_cast<size_t>(a.rows * a.cols));
  std::vector<float> row(static_cast<size_t>(a.cols));
  for (int64_t r = 0; r < a.rows; ++r) {
    weight_row_f32(t.changed == 0 ? a : g, r, row.data());
    for (int64_t c = 0; c < a.cols; ++c) {
      const float x = ref[static_cast<size_t>(r * a.cols + c)];
      if (t.changed == 0)
        ASSERT_EQ(x, row[c]) << name << " (" << t.type << ") at " << r << "," << c;
      else
        ASSERT_NEAR(x, row[c], 1e-6f * std::fabs(row[c]) + 1e-12f) << name << " at " << r << "," << c;
    }
  }
}

// kjv-brown-6M (llama2.c: rows already interleaved) quantized to a GGUF block type with lowbit's encoder and
// exported: every block copied, the file type and the loaded format that type, the values identical.
Exported export_copied_blocks(const std::string& type, std::string* ck) {
  *ck = checkpoint(model_path("kjv-brown-6M/model.bin"), type, "kjv_" + type);
  Exported e = export_and_load(*ck);
  for (TensorRole role : layer_matrix_roles())
    EXPECT_EQ(entry(e.rep, gguf_tensor_name(role, 0)).mapping, "copied");
  EXPECT_EQ(e.rep.file_type, type);
  EXPECT_EQ(e.gguf->weights.layers[0].wq.format_name(), type);
  expect_same_values(e, false);
  return e;
}

}  // namespace

TEST(GgufHandoff, KQuantCheckpointCopiesBlocks) {
  std::string ck;
  Exported e = export_copied_blocks("q4_k", &ck);
  EXPECT_EQ(e.rep.appended_tokens, 0);
  // The checkpoint's k-quant modules load as GGUF blocks too: both run the load-time pack's kernel (AVX2 /
  // AVX-512) on the same blocks.
  EXPECT_EQ(e.ck->weights.layers[0].wq.kind, WeightKind::Ggml);
  EXPECT_EQ(weight_is_repacked(e.ck->weights.layers[0].wq), weight_is_repacked(e.gguf->weights.layers[0].wq));
  expect_close_logits(e, 1e-4);
  // Both without the packs: the row kernels (another summation order than the pack's, so an activation code
  // can round the other way), still equal up to float noise.
  quant::testing::drop_load_time_packs(*e.ck);
  quant::testing::drop_load_time_packs(*e.gguf);
  expect_close_logits(e, 1e-4);
  // The tokenizer travels: same ids for the same text.
  ASSERT_TRUE(e.ck->tokenizer && e.gguf->tokenizer);
  const std::string text = "In the beginning God created the heaven and the earth.";
  EXPECT_EQ(e.ck->tokenizer->encode(text, true), e.gguf->tokenizer->encode(text, true));
  fs::remove_all(ck);
  fs::remove(e.path);
}

// IQ4_XS: the independent NumPy reader decodes the copied blocks to the checkpoint's values bit for bit.
TEST(GgufHandoff, Iq4XsCheckpointCopiesBlocks) {
  std::string ck;
  Exported e = export_copied_blocks("iq4_xs", &ck);
  for (TensorRole role : {TensorRole::Q, TensorRole::Down}) expect_numpy_agrees(e, role, 1);
  expect_close_logits(e, 1e-4);
  fs::remove_all(ck);
  fs::remove(e.path);
}

// INT4 sym -> Q4_0, INT8 sym -> Q8_0, MXFP4 -> ggml MXFP4: exact; INT4 asym -> Q4_1 (min as f16).
TEST(GgufHandoff, IntAndMxfp4MapExactly) {
  const std::string src = model_path("kjv-brown-6M/model.bin");
  struct Case {
    const char* recipe;
    const char* type;
    double tol;
  };
  for (const Case& k : {Case{"int4:g32", "q4_0", 0}, Case{"int4:g64", "q4_0", 0}, Case{"int8:g32", "q8_0", 0},
                        Case{"int8:channel", "q8_0", 0}, Case{"mxfp4", "ggml_mxfp4", 0},
                        Case{"int4:g32:asym", "q4_1", 2e-3}}) {
    SCOPED_TRACE(k.recipe);
    const std::string ck = checkpoint(src, k.recipe, std::string("kjv_") + k.type);
    Exported e = export_and_load(ck);
    const GgufTensorExport& q = entry(e.rep, "blk.0.attn_q.weight");
    EXPECT_EQ(q.type, k.type);
    if (k.tol == 0) EXPECT_EQ(q.mapping, "exact");
    expect_same_values(e, false, k.tol);
    expect_close_logits(e, 0.02);
    for (TensorRole role : {TensorRole::Q, TensorRole::Down}) expect_numpy_agrees(e, role, 1);
    fs::remove_all(ck);
    fs::remove(e.path);
  }
}

// A Hugging Face source (half-split RoPE rows) comes out in llama.cpp's interleaved order with the byte
// tokens llama.cpp's SPM needs appended; the logits of the source vocabulary agree.
TEST(GgufHandoff, HuggingFaceSourceIsInterleaved) {
  const std::string ck = checkpoint(model_path("tinystories-656K"), "int4:g32", "ts_int4");
  Exported e = export_and_load(ck);
  EXPECT_EQ(e.rep.appended_tokens, 256);
  EXPECT_EQ(e.gguf->config.vocab_size, e.ck->config.vocab_size + 256);
  EXPECT_EQ(e.gguf->config.rope_style, RopeStyle::Interleaved);
  expect_same_values(e, true);
  expect_close_logits(e, 0.02);
  fs::remove_all(ck);
  fs::remove(e.path);
}

// NF4 has no GGUF block type: refused (no file) unless --requant, which reports the error it adds.
TEST(GgufHandoff, InexactFormatsNeedRequant) {
  const std::string ck = checkpoint(model_path("kjv-brown-6M/model.bin"), "nf4", "kjv_nf4");
  auto m = load_model(ck);
  const std::string out = ck + ".gguf";
  fs::remove(out);
  try {
    export_gguf_model(*m, {}, out);
    ADD_FAILURE() << "nf4 exported without --requant";
  } catch (const UsageError& err) {
    EXPECT_NE(std::string(err.what()).find("--requant"), std::string::npos) << err.what();
  }
  EXPECT_FALSE(fs::exists(out));
  GgufModelExportOptions o;
  o.requant = "q4_0";
  Exported e = export_and_load(ck, o);
  const GgufTensorExport& q = entry(e.rep, "blk.0.attn_q.weight");
  EXPECT_EQ(q.mapping, "re-quantized");
  EXPECT_EQ(q.type, "q4_0");
  EXPECT_GT(q.changed, 0);
  EXPECT_GT(q.rel_rms_err, 0.0);
  expect_same_values(e, false, 0.2);
  fs::remove_all(ck);
  fs::remove(e.path);
}

TEST(GgufHandoff, CliRefusalsAndJson) {
  using testing_cli::run_cli;
  const std::string ck = checkpoint(model_path("stories260K/stories260K.bin"), "int4:g32", "s260_cli");
  const std::string out = ck + ".gguf";
  fs::remove(out);
  auto r = run_cli("export -m " + ck + " --to gguf -o " + out + " --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("file_bytes").get<int64_t>(), static_cast<int64_t>(fs::file_size(out)));
  EXPECT_FALSE(j.at("tensors").empty());
  // stories260K's down_proj rows (172 elements) fit no GGUF block: widened to f32, values unchanged.
  bool widened = false;
  for (const auto& t : j.at("tensors"))
    if (t.at("name") == "blk.0.ffn_down.weight") {
      widened = true;
      EXPECT_EQ(t.at("mapping"), "widened");
      EXPECT_EQ(t.at("type"), "f32");
      EXPECT_EQ(t.at("changed"), 0);
    }
  EXPECT_TRUE(widened);
  // An existing output is kept unless --force.
  r = run_cli("export -m " + ck + " --to gguf -o " + out, true);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("--force"), std::string::npos) << r.out;
  // A GGUF source, a bad type name.
  r = run_cli("export -m " + out + " --to gguf -o " + out + ".2", true);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("already GGUF"), std::string::npos) << r.out;
  r = run_cli("export -m " + ck + " --to gguf --dense q9_9 -o " + out + ".3", true);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("unsupported GGUF tensor type"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out + ".2"));
  EXPECT_FALSE(fs::exists(out + ".3"));
  // A rotated checkpoint (online Hadamard before down_proj, which llama.cpp does not run).
  const std::string rot = quant::testing::temp_path("ts_rot");
  ASSERT_EQ(
      run_cli("quantize -m " + model_path("tinystories-656K") + " -r W8A16,rotate=quarot -o " + rot, true).rc,
      0);
  r = run_cli("export -m " + rot + " --to gguf -o " + out + ".5", true);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("online Hadamard"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out + ".5"));
  fs::remove_all(rot);
  // quantize --format gguf / gptq: the layout directly, no intermediate checkpoint left behind.
  r = run_cli(
      "quantize -m " + model_path("kjv-brown-6M/model.bin") + " -r q4_k --format gguf -q -o " + out + ".6",
      true);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_FALSE(fs::exists(out + ".6.lowbit-ck"));
  EXPECT_EQ(load_model(out + ".6")->weights.layers[0].wq.format_name(), "q4_k");
  r = run_cli(
      "quantize -m " + model_path("kjv-brown-6M/model.bin") + " -r q4_k --format gguf -q -o " + out + ".6",
      true);
  EXPECT_NE(r.rc, 0) << "an existing output needs --force";
  r = run_cli(
      "quantize -m " + model_path("tinystories-656K") + " -r int4:g32:asym --format gptq -q -o " + out + ".7",
      true);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_FALSE(fs::exists(out + ".7.lowbit-ck"));
  {
    std::ifstream f(out + ".7/config.json");
    const auto cfg = nlohmann::json::parse(f);
    EXPECT_EQ(cfg.at("quantization_config").at("quant_method"), "gptq");
  }
  fs::remove(out + ".6");
  fs::remove_all(out + ".7");
  // A llama2.c model converts directly (dense, f16).
  r = run_cli("export -m " + model_path("stories260K/stories260K.bin") + " --to gguf --dense f16 -o " + out +
              ".4 --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  auto g = load_model(out + ".4");
  EXPECT_EQ(g->weights.layers[0].wq.format_name(), "f16");
  fs::remove_all(ck);
  for (const char* s : {"", ".4"}) fs::remove(out + s);
}
