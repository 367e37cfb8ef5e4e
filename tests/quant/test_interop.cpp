// Hand-off interop: GPTQ / AWQ import (model/hub_layouts.h) and `lowbit export` (quant/export.h).
//  - export -> import round trips give identical codes, scales, zeros and logits;
//  - GPTQ / AWQ checkpoints built here from known integers with packing written from the published layouts
//    (not lowbit's pack functions) load to exactly those integers, and run through the kernels;
//  - an independent NumPy decoder (tests/reference/dequant_checkpoint.py) dequantizes lowbit's
//    compressed-tensors checkpoint and every export to lowbit's own dequantized weights, bit for bit;
//  - hostile tensors and configs, and unexportable checkpoints, give errors that say what to do.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "core/error.h"
#include "core/half.h"
#include "io/hf_checkpoint.h"
#include "io/safetensors.h"
#include "kernels/dispatch.h"
#include "kernels/matmul.h"
#include "model/hub_layouts.h"
#include "quant/checkpoint_writer.h"
#include "quant/export.h"
#include "quant/inspect.h"
#include "quant/quantizer.h"
#include "tests/quant/quant_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace lowbit::quant {
namespace {

using testing::make_random_model;
using testing::temp_path;

// A random model with the Hugging Face RoPE pairing (rows are not reordered on export), quantized and
// written.
std::string quantized_dir(const std::string& recipe, const std::string& name, bool interleaved = false) {
  auto m = make_random_model(7, true, 96);
  if (!interleaved) m->config.rope_style = RopeStyle::Half;
  const Recipe r = parse_recipe_arg(recipe);
  auto calib = testing::random_calib(*m, 4, 32, 1);
  QuantizeOptions o;
  o.progress = false;
  o.calib = r.needs_calibration() ? &calib : nullptr;
  QuantReport rep = quantize_model(*m, r, o);
  const std::string dir = temp_path(name);
  write_quantized_checkpoint(*m, rep, dir);
  return dir;
}

std::string exported(const std::string& src, const std::string& to, bool v2 = false) {
  ExportOptions o;
  o.to = to;
  o.gptq_v2 = v2;
  const std::string out = src + "-" + to + (v2 ? "v2" : "");
  export_checkpoint(src, out, o);
  return out;
}

std::vector<float> dequantized(const WeightMatrix& w) {
  std::vector<float> f(static_cast<size_t>(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) weight_row_f32(w, r, f.data() + r * w.cols);
  return f;
}

void expect_same_matrices(Model& a, Model& b, const std::string& what) {
  auto na = a.weights.named_matrices(), nb = b.weights.named_matrices();
  ASSERT_EQ(na.size(), nb.size());
  for (size_t i = 0; i < na.size(); ++i) {
    const WeightMatrix &x = *na[i].second, &y = *nb[i].second;
    ASSERT_EQ(x.kind, y.kind) << what << " " << na[i].first;
    if (x.kind == WeightKind::Quant) {
      EXPECT_EQ(to_string(x.q->scheme), to_string(y.q->scheme)) << what << " " << na[i].first;
      EXPECT_EQ(x.q->codes, y.q->codes) << what << " " << na[i].first;
      EXPECT_EQ(x.q->scales, y.q->scales) << what << " " << na[i].first;
      EXPECT_EQ(x.q->zeros, y.q->zeros) << what << " " << na[i].first;
    }
    EXPECT_EQ(dequantized(x), dequantized(y)) << what << " " << na[i].first;
  }
}

void expect_reference_agrees(const std::string& dir, Model& m, const std::string& what) {
  auto ref = testing::reference_decoder_modules("dequant_checkpoint.py", dir);
  int n = 0;
  for (auto& [name, w] : m.weights.named_matrices()) {
    if (w->kind != WeightKind::Quant) continue;
    auto it = ref.find(hf_module_name(name));
    ASSERT_NE(it, ref.end()) << what << ": the reference decoded no " << hf_module_name(name);
    EXPECT_EQ(it->second, dequantized(*w)) << what << " " << name;
    ++n;
  }
  EXPECT_GT(n, 0) << what;
}

struct ExportCase {
  const char* recipe;
  const char* to;
  bool v2;
};

// gtest prints a parameter it cannot format as its raw bytes (pointers included) in the test listing.
void PrintTo(const ExportCase& c, std::ostream* os) {
  *os << c.recipe << " -> " << c.to << (c.v2 ? " (v2)" : "");
}

class ExportRoundTrip : public ::testing::TestWithParam<ExportCase> {};

TEST_P(ExportRoundTrip, ImportGivesIdenticalTensorsAndLogits) {
  const ExportCase c = GetParam();
  const std::string src = quantized_dir(c.recipe, std::string("exp_") + c.to);
  const std::string out = exported(src, c.to, c.v2);
  auto a = load_model(src), b = load_model(out);
  const std::string what = std::string(c.recipe) + " -> " + c.to;
  expect_same_matrices(*a, *b, what);
  auto toks = testing::test_tokens(a->config.vocab_size, 24, 5);
  EXPECT_EQ(testing::logits_of(*a, toks), testing::logits_of(*b, toks)) << what;
  // Independent decoder: the source's compressed-tensors tensors and the export's own layout.
  expect_reference_agrees(src, *a, what + " (source)");
  expect_reference_agrees(out, *b, what);
  // And back to compressed-tensors: the same tensors again.
  const std::string back = exported(out, "compressed-tensors");
  auto d = load_model(back);
  expect_same_matrices(*a, *d, what + " -> compressed-tensors");
  expect_reference_agrees(back, *d, what + " -> compressed-tensors");
  // An imported checkpoint is quantized: quantizing it again is refused like any offline checkpoint.
  QuantizeOptions qo;
  qo.progress = false;
  EXPECT_THROW(quantize_model(*b, parse_recipe_arg("int4:g32"), qo), UsageError);
  for (auto& p : {src, out, back}) fs::remove_all(p);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ExportRoundTrip,
    ::testing::Values(ExportCase{"int4:g32:sym", "gptq", false}, ExportCase{"int4:g32:asym", "gptq", true},
                      ExportCase{"int8:g32:asym", "gptq", true}, ExportCase{"int3:g32:asym", "gptq", true},
                      ExportCase{"int3:g32:sym", "gptq", false},
                      ExportCase{"int4:channel:sym", "gptq", false},
                      ExportCase{"int4:g16:asym", "awq", false}, ExportCase{"int4:g32:sym", "awq", false},
                      ExportCase{"int4:g32:asym,algo=gptq", "compressed-tensors", false}),
    [](const ::testing::TestParamInfo<ExportCase>& info) {
      std::string n = std::string(info.param.recipe) + "_" + info.param.to + (info.param.v2 ? "_v2" : "");
      for (auto& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

// ---- GPTQ / AWQ checkpoints built from known integers ----

struct Known {  // per module, lowbit orientation: u [rows, cols], zero [rows, groups], scale [rows, groups]
  int64_t rows = 0, cols = 0, groups = 0, gs = 0;
  std::vector<int> u, zero;
  std::vector<float> scale;
  std::vector<int32_t> g_idx;  // [cols], group of input column c (act-order: a permutation of c / gs)
  bool act_order = false;
};

template <class T>
std::vector<uint8_t> raw(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// AutoGPTQ's 3-bit pack (qlinear_cuda_old.QuantLinear.pack), transcribed loop for loop: 32 values into 3
// words, value 10 split 2 + 1 bits and value 21 split 1 + 2 bits across word boundaries.
std::vector<uint32_t> pack3_autogptq(const std::vector<uint32_t>& v) {
  std::vector<uint32_t> out(v.size() / 32 * 3, 0);
  size_t i = 0, row = 0;
  while (row < out.size()) {
    for (size_t j = i; j < i + 10; ++j) out[row] |= v[j] << (3 * (j - i));
    i += 10;
    out[row] |= v[i] << 30;
    ++row;
    out[row] |= (v[i] >> 2) & 1;
    ++i;
    for (size_t j = i; j < i + 10; ++j) out[row] |= v[j] << (3 * (j - i) + 1);
    i += 10;
    out[row] |= v[i] << 31;
    ++row;
    out[row] |= (v[i] >> 1) & 0x3;
    ++i;
    for (size_t j = i; j < i + 10; ++j) out[row] |= v[j] << (3 * (j - i) + 2);
    i += 10;
    ++row;
  }
  return out;
}

// Replaces every quantized module of the compressed-tensors checkpoint `src` by random integers packed by
// hand in the GPTQ (v1: zero - 1 stored) or AWQ layout, group size gs; returns the integers the loader must
// find. act_order: a GPTQ g_idx as act-order quantization leaves it, g_idx[order[i]] = i / gs for a random
// column order (each group holds gs columns, the last one the rest, scattered over the row).
std::map<std::string, Known> write_hub_fixture(const std::string& src, const std::string& out,
                                               const std::string& method, int gs, int bits, bool v2,
                                               bool act_order = false) {
  auto ck = io::HfCheckpoint::open(src);
  std::mt19937 rng(3);
  std::map<std::string, Known> known;
  std::deque<std::vector<uint8_t>> store;
  std::vector<io::TensorToWrite> list;
  auto add = [&](const std::string& n, DType dt, std::vector<int64_t> shape, std::vector<uint8_t> b) {
    store.push_back(std::move(b));
    list.push_back({n, dt, std::move(shape), store.back().data(), store.back().size()});
  };
  const int pf = 32 / bits, mx = (1 << bits) - 1;  // (bits 3: packed by pack3_autogptq instead)
  for (auto& [name, v] : ck.tensors) {
    const auto dot = name.rfind('.');
    const std::string module = name.substr(0, dot), suffix = name.substr(dot + 1);
    if (suffix.rfind("weight_", 0) == 0) {
      if (suffix != "weight_shape") continue;
      int64_t d[2];
      std::memcpy(d, v.data, sizeof d);
      Known k;
      k.rows = d[0], k.cols = d[1], k.gs = gs, k.groups = (k.cols + gs - 1) / gs;
      for (int64_t i = 0; i < k.rows * k.cols; ++i) k.u.push_back(static_cast<int>(rng() % (mx + 1)));
      for (int64_t i = 0; i < k.rows * k.groups; ++i) {
        // GPTQ v1 stores zero - 1 in b bits: zero is 1..2^b (a stored all-ones reads as 2^b); AWQ/v2:
        // 0..2^b-1.
        k.zero.push_back(method == "gptq" && !v2 ? 1 + static_cast<int>(rng() % (mx + 1))
                                                 : static_cast<int>(rng() % (mx + 1)));
        k.scale.push_back(f16_to_f32(f32_to_f16(0.001f * static_cast<float>(1 + rng() % 50))));
      }
      std::vector<uint16_t> sc(static_cast<size_t>(k.groups * k.rows));
      for (int64_t r = 0; r < k.rows; ++r)
        for (int64_t g = 0; g < k.groups; ++g) sc[g * k.rows + r] = f32_to_f16(k.scale[r * k.groups + g]);
      add(module + ".scales", DType::F16, {k.groups, k.rows}, raw(sc));
      const int64_t zw = k.rows * bits / 32;  // qzeros words per group
      std::vector<uint32_t> qz(static_cast<size_t>(k.groups * zw), 0);
      k.g_idx.resize(static_cast<size_t>(k.cols));
      for (int64_t i = 0; i < k.cols; ++i) k.g_idx[i] = static_cast<int32_t>(i / gs);
      if (act_order) {
        std::vector<int64_t> order(static_cast<size_t>(k.cols));
        for (int64_t i = 0; i < k.cols; ++i) order[i] = i;
        std::shuffle(order.begin(), order.end(), rng);
        for (int64_t i = 0; i < k.cols; ++i) k.g_idx[order[i]] = static_cast<int32_t>(i / gs);
        for (int64_t i = 0; i < k.cols; ++i)  // (one group per row stays trivial: nothing to permute)
          k.act_order = k.act_order || k.g_idx[i] != i / gs;
      }
      if (method == "gptq") {
        std::vector<uint32_t> qw(static_cast<size_t>(k.cols * bits / 32 * k.rows), 0);
        if (bits == 3) {
          for (int64_t j = 0; j < k.rows; ++j) {  // output j: its inputs packed down column j of qweight
            std::vector<uint32_t> col(static_cast<size_t>(k.cols));
            for (int64_t i = 0; i < k.cols; ++i) col[i] = static_cast<uint32_t>(k.u[j * k.cols + i]);
            auto words = pack3_autogptq(col);
            for (size_t w = 0; w < words.size(); ++w) qw[w * k.rows + j] = words[w];
          }
          for (int64_t g = 0; g < k.groups; ++g) {  // group g: its outputs packed along row g of qzeros
            std::vector<uint32_t> zr(static_cast<size_t>(k.rows));
            for (int64_t j = 0; j < k.rows; ++j)
              zr[j] = static_cast<uint32_t>(k.zero[j * k.groups + g] - (v2 ? 0 : 1)) & mx;
            auto words = pack3_autogptq(zr);
            for (size_t w = 0; w < words.size(); ++w) qz[g * zw + w] = words[w];
          }
        } else {
          for (int64_t i = 0; i < k.cols; ++i)  // input i of output j: word [i / pf, j], slot i % pf
            for (int64_t j = 0; j < k.rows; ++j)
              qw[(i / pf) * k.rows + j] |= static_cast<uint32_t>(k.u[j * k.cols + i]) << (bits * (i % pf));
          for (int64_t g = 0; g < k.groups; ++g)
            for (int64_t j = 0; j < k.rows; ++j) {
              const uint32_t z = static_cast<uint32_t>(k.zero[j * k.groups + g] - (v2 ? 0 : 1)) & mx;
              qz[g * zw + j / pf] |= z << (bits * (j % pf));
            }
        }
        add(module + ".qweight", DType::I32, {k.cols * bits / 32, k.rows}, raw(qw));
        add(module + ".g_idx", DType::I32, {k.cols}, raw(k.g_idx));
      } else {
        const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
        std::vector<uint32_t> qw(static_cast<size_t>(k.cols * k.rows / 8), 0);
        for (int64_t i = 0; i < k.cols; ++i)
          for (int64_t w = 0; w < k.rows / 8; ++w)
            for (int s = 0; s < 8; ++s)
              qw[i * (k.rows / 8) + w] |= static_cast<uint32_t>(k.u[(w * 8 + order[s]) * k.cols + i])
                                          << (4 * s);
        for (int64_t g = 0; g < k.groups; ++g)
          for (int64_t w = 0; w < k.rows / 8; ++w)
            for (int s = 0; s < 8; ++s)
              qz[g * (k.rows / 8) + w] |= static_cast<uint32_t>(k.zero[(w * 8 + order[s]) * k.groups + g])
                                          << (4 * s);
        add(module + ".qweight", DType::I32, {k.cols, k.rows / 8}, raw(qw));
      }
      add(module + ".qzeros", DType::I32, {k.groups, zw}, raw(qz));
      known[module] = k;
      continue;
    }
    add(name, v.dtype, v.shape, std::vector<uint8_t>(v.data, v.data + v.nbytes));
  }
  fs::create_directories(out);
  io::write_safetensors(out + "/model.safetensors", list);
  json cfg = ck.config;
  if (method == "gptq")
    cfg["quantization_config"] = {{"quant_method", "gptq"}, {"bits", bits},
                                  {"group_size", gs},       {"desc_act", act_order},
                                  {"sym", false},           {"checkpoint_format", v2 ? "gptq_v2" : "gptq"}};
  else
    cfg["quantization_config"] = {
        {"quant_method", "awq"}, {"bits", 4}, {"group_size", gs}, {"zero_point", true}, {"version", "GEMM"}};
  std::ofstream(out + "/config.json") << cfg.dump(2);
  return known;
}

void expect_known(Model& m, const std::map<std::string, Known>& known, const std::string& what) {
  int n = 0;
  for (auto& [name, w] : m.weights.named_matrices()) {
    auto it = known.find(hf_module_name(name));
    if (it == known.end()) continue;
    const Known& k = it->second;
    ASSERT_EQ(w->kind, WeightKind::Quant) << what << " " << name;
    const QuantizedMatrix& q = *w->q;
    ASSERT_EQ(q.grid.cols, k.groups) << what << " " << name;
    EXPECT_EQ(q.bits, q.scheme.info().bits) << what << " " << name;
    // Stored column j is input column perm[j]: without act-order the identity (no permutation kept); with
    // it, the columns sorted by g_idx (stable), so stored groups are consecutive.
    std::vector<int64_t> perm(static_cast<size_t>(k.cols));
    for (int64_t j = 0; j < k.cols; ++j) perm[j] = j;
    if (k.act_order) {
      ASSERT_EQ(q.input_perm.size(), static_cast<size_t>(k.cols)) << what << " " << name;
      std::vector<bool> seen(static_cast<size_t>(k.cols), false);
      for (int64_t j = 0; j < k.cols; ++j) {
        const int64_t c = q.input_perm[j];
        ASSERT_TRUE(c >= 0 && c < k.cols && !seen[c]) << what << " " << name << " input_perm[" << j << "]";
        seen[c] = true;
        ASSERT_EQ(k.g_idx[c], j / k.gs) << what << " " << name << ": stored column " << j;
        if (j > 0 && j % k.gs != 0) ASSERT_LT(q.input_perm[j - 1], c) << what << " stable order";
        perm[j] = c;
      }
    } else {
      EXPECT_TRUE(q.input_perm.empty()) << what << " " << name;
    }
    for (int64_t r = 0; r < k.rows; ++r) {
      for (int64_t j = 0; j < k.cols; ++j)
        ASSERT_EQ(q.code(r, j), k.u[r * k.cols + perm[j]]) << what << " " << name;
      for (int64_t g = 0; g < k.groups; ++g) {
        ASSERT_EQ(q.zero_point(r, g), k.zero[r * k.groups + g]) << what << " " << name << " row " << r;
        ASSERT_EQ(q.scale(r, g), k.scale[r * k.groups + g]) << what << " " << name;
      }
    }
    // Dequantized rows, in the original input order: (u - zero) * scale of the column's group g_idx[c].
    auto f = dequantized(*w);
    for (int64_t r = 0; r < k.rows; ++r)
      for (int64_t c = 0; c < k.cols; ++c) {
        const int64_t g = k.g_idx[c];
        ASSERT_EQ(f[r * k.cols + c], static_cast<float>(k.u[r * k.cols + c] - k.zero[r * k.groups + g]) *
                                         k.scale[r * k.groups + g]);
      }
    ++n;
  }
  EXPECT_EQ(n, static_cast<int>(known.size())) << what;
}

// Every quantized matrix through the kernels (T = 1 decode and T = 9 prefill) against a double-precision
// product with its dequantized rows. Prefill may run on BF16 activations, hence the relative bound; a zero
// point a kernel mishandled (GPTQ's 16 wrapped to 0) shifts a whole group by 16 scales, far outside it.
void expect_kernels_match_dense(Model& m, const std::string& what) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  int n = 0;
  for (auto& [name, w] : m.weights.named_matrices()) {
    if (w->kind != WeightKind::Quant) continue;
    const auto f = dequantized(*w);
    for (int64_t T : {1, 9}) {
      std::vector<float> x(static_cast<size_t>(T * w->cols)), y(static_cast<size_t>(T * w->rows));
      for (auto& v : x) v = nd(rng);
      std::vector<float> yr(y.size());
      matmul(*w, x.data(), T, y.data());
      matmul_reference(*w, x.data(), T, yr.data());
      std::vector<float> row(static_cast<size_t>(w->cols));
      for (int64_t t = 0; t < T; ++t)
        for (int64_t r = 0; r < w->rows; ++r) {
          double ref = 0, mag = 0, as_run = 0;
          matmul_weight_row(*w, T, r, row.data());  // the row as the kernel multiplies it (original order)
          for (int64_t c = 0; c < w->cols; ++c) {
            ref += static_cast<double>(f[r * w->cols + c]) * x[t * w->cols + c];
            mag += std::fabs(static_cast<double>(f[r * w->cols + c]) * x[t * w->cols + c]);
            as_run += static_cast<double>(row[c]) * x[t * w->cols + c];
          }
          ASSERT_NEAR(y[t * w->rows + r], ref, 1e-2 * mag + 1e-6) << what << " " << name << " T=" << T;
          ASSERT_NEAR(yr[t * w->rows + r], ref, 1e-5 * mag + 1e-6) << what << " reference " << name;
          ASSERT_NEAR(as_run, ref, 1e-2 * mag + 1e-6) << what << " matmul_weight_row " << name;
        }
    }
    ++n;
  }
  EXPECT_GT(n, 0) << what;
}

TEST(HubImport, GptqAndAwqFromKnownIntegers) {
  const std::string src = quantized_dir("int4:g32:asym", "known_src");
  struct K {
    const char* method;
    int gs, bits;
    bool v2;
  } cases[] = {{"gptq", 32, 4, false},
               {"gptq", 16, 4, true},
               {"gptq", 32, 8, true},
               {"gptq", 64, 2, true},
               {"awq", 32, 4, false}};
  for (auto& k : cases) {
    const std::string what = std::string(k.method) + " g" + std::to_string(k.gs) + " b" +
                             std::to_string(k.bits) + (k.v2 ? " v2" : "");
    const std::string dir =
        temp_path(std::string("known_") + k.method + std::to_string(k.gs) + std::to_string(k.bits));
    auto known = write_hub_fixture(src, dir, k.method, k.gs, k.bits, k.v2);
    auto m = load_model(dir);
    expect_known(*m, known, what);
    expect_reference_agrees(dir, *m, what);
    expect_kernels_match_dense(*m, what);
    EXPECT_NE(inspect_checkpoint(dir)["tensors"][1]["layout"], "pack-quantized") << what;
    fs::remove_all(dir);
  }
  fs::remove_all(src);
}

// 3-bit GPTQ (AutoGPTQ's straddling pack, v1 and v2): exactly the integers, int3 group schemes; and back out
// through `export --to gptq`, byte for byte the same tensors.
TEST(HubImport, Gptq3BitFromKnownIntegers) {
  const std::string src = quantized_dir("int4:g32:asym", "known3_src");
  for (bool v2 : {false, true})
    for (int gs : {32, 64}) {
      const std::string what = std::string("gptq 3-bit g") + std::to_string(gs) + (v2 ? " v2" : " v1");
      const std::string dir = temp_path(std::string("known3_") + (v2 ? "v2_" : "v1_") + std::to_string(gs));
      auto known = write_hub_fixture(src, dir, "gptq", gs, 3, v2);
      auto m = load_model(dir);
      expect_known(*m, known, what);
      for (auto& [name, w] : m->weights.named_matrices())
        if (w->kind == WeightKind::Quant)
          EXPECT_EQ(to_string(w->q->scheme).rfind("int3:g" + std::to_string(gs) + ":", 0), 0u)
              << what << " " << name << " " << to_string(w->q->scheme);
      expect_reference_agrees(dir, *m, what);
      expect_kernels_match_dense(*m, what);
      // Export: the same qweight / qzeros / scales / g_idx bytes as the hand-packed fixture.
      ExportOptions o;
      o.to = "gptq";
      o.gptq_v2 = v2;
      export_checkpoint(dir, dir + "-out", o);
      auto a = io::HfCheckpoint::open(dir), b = io::HfCheckpoint::open(dir + "-out");
      int n = 0;
      for (auto& [name, v] : a.tensors) {
        if (name.find(".qweight") == std::string::npos && name.find(".qzeros") == std::string::npos &&
            name.find(".scales") == std::string::npos && name.find(".g_idx") == std::string::npos)
          continue;
        ASSERT_TRUE(b.tensors.count(name)) << what << " export lacks " << name;
        const TensorView& e = b.tensors.at(name);
        EXPECT_EQ(e.shape, v.shape) << what << " " << name;
        EXPECT_TRUE(e.nbytes == v.nbytes && std::memcmp(e.data, v.data, v.nbytes) == 0)
            << what << " " << name;
        ++n;
      }
      EXPECT_GT(n, 0) << what;
      EXPECT_EQ(b.config["quantization_config"]["bits"], 3) << what;
      fs::remove_all(dir);
      fs::remove_all(dir + "-out");
    }
  fs::remove_all(src);
}

// Every tensor of two checkpoints: the same names, dtypes, shapes and bytes.
void expect_same_tensors(const std::string& a_dir, const std::string& b_dir, const std::string& what) {
  auto a = io::HfCheckpoint::open(a_dir), b = io::HfCheckpoint::open(b_dir);
  ASSERT_EQ(a.tensors.size(), b.tensors.size()) << what;
  for (auto& [name, v] : a.tensors) {
    ASSERT_TRUE(b.tensors.count(name)) << what << " lacks " << name;
    const TensorView& e = b.tensors.at(name);
    EXPECT_TRUE(e.dtype == v.dtype && e.shape == v.shape && e.nbytes == v.nbytes &&
                std::memcmp(e.data, v.data, v.nbytes) == 0)
        << what << " " << name;
  }
}

// An act-order export to compressed-tensors, as compressed-tensors and vLLM read it: each config group's
// weights args hold only QuantizationArgs fields (test_ct_layouts.cpp's expect_ct_config checks the rest of
// the config the same way), "actorder": "group" (ActivationOrdering.GROUP, the value vLLM's WNA16 scheme
// reads weight_g_idx with) with strategy "group" exactly for the groups whose modules have a weight_g_idx,
// that g_idx int32 [in] equal to the GPTQ fixture's, and weight_packed holding the known integers in the
// original column order (offset-binary, value k of a word at bits [k*b, k*b + b)).
void expect_ct_actorder_export(const std::string& dir, const std::map<std::string, Known>& known,
                               const std::string& what) {
  static const std::set<std::string> args_fields = {
      "num_bits",        "type",    "symmetric", "group_size", "strategy",
      "block_structure", "dynamic", "actorder",  "observer",   "observer_kwargs"};
  static const std::set<std::string> scheme_fields = {"targets", "weights", "input_activations",
                                                      "output_activations", "format"};
  auto ck = io::HfCheckpoint::open(dir);
  const json& qc = ck.config.at("quantization_config");
  EXPECT_EQ(qc.at("quant_method"), "compressed-tensors") << what;
  EXPECT_EQ(qc.at("format"), "pack-quantized") << what;
  std::map<std::string, bool> group_act_order;  // module -> its group's actorder is "group"
  for (auto& [gname, g] : qc.at("config_groups").items()) {
    for (auto& [key, v] : g.items())
      EXPECT_TRUE(scheme_fields.count(key)) << what << " " << gname << " " << key;
    const json& w = g.at("weights");
    for (auto& [key, v] : w.items())
      EXPECT_TRUE(args_fields.count(key)) << what << " " << gname << " " << key;
    const bool ao = w.at("actorder") == "group";
    EXPECT_TRUE(ao || w.at("actorder").is_null()) << what << " " << gname << " " << w.at("actorder");
    if (ao) {
      EXPECT_EQ(w.at("strategy"), "group") << what << ": actorder needs the group strategy";
    }
    EXPECT_TRUE(qc.at("lowbit_groups").contains(gname)) << what;
    for (auto& t : g.at("targets")) group_act_order[t.get<std::string>()] = ao;
  }
  int n = 0;
  for (auto& [module, k] : known) {
    ASSERT_TRUE(group_act_order.count(module)) << what << ": no group targets " << module;
    const std::string gn = module + ".weight_g_idx";
    EXPECT_EQ(group_act_order.at(module), k.act_order) << what << " " << module;
    EXPECT_EQ(ck.tensors.count(gn) > 0, k.act_order) << what << " " << gn;
    if (k.act_order) {
      const TensorView& g = ck.tensors.at(gn);
      EXPECT_EQ(g.dtype, DType::I32) << what;
      EXPECT_EQ(g.shape, std::vector<int64_t>{k.cols}) << what;
      EXPECT_EQ(std::memcmp(g.data, k.g_idx.data(), static_cast<size_t>(k.cols) * 4), 0) << what << " " << gn;
      ++n;
    }
    const int bits = qc.at("config_groups").begin().value().at("weights").at("num_bits").get<int>();
    const int pf = 32 / bits;
    const TensorView& p = ck.tensors.at(module + ".weight_packed");
    const int64_t words = (k.cols + pf - 1) / pf;
    ASSERT_EQ(p.shape, (std::vector<int64_t>{k.rows, words})) << what << " " << module;
    for (int64_t r = 0; r < k.rows; ++r)
      for (int64_t c = 0; c < k.cols; ++c) {
        uint32_t w;
        std::memcpy(&w, p.data + (r * words + c / pf) * 4, 4);
        ASSERT_EQ(static_cast<int>((w >> (bits * (c % pf))) & ((1u << bits) - 1)), k.u[r * k.cols + c])
            << what << " " << module << " [" << r << ", " << c << "]";
      }
  }
  EXPECT_GT(n, 0) << what;
}

// Act-order GPTQ (desc_act, a g_idx that scatters each group over the row): loads exactly, with the columns
// sorted into consecutive groups and the permutation kept; dequantizes in the original column order; the
// kernels gather x; `export --to gptq` writes the same g_idx (desc_act=true) and the original columns back;
// `export --to compressed-tensors` writes weight_g_idx with actorder "group" (v2 zeros; v1's 2^b is refused)
// and loads back to the same matrix, permutation and logits; AWQ refuses it.
TEST(HubImport, GptqActOrderFromKnownIntegers) {
  const std::string src = quantized_dir("int4:g32:asym", "actorder_src");
  struct K {
    int gs, bits;
    bool v2;
  } cases[] = {{32, 4, false}, {40, 4, true}, {32, 3, true},
               {64, 2, false}, {32, 8, true}, {32, 4, true}};  // 40, 64: ragged
  for (auto& k : cases) {
    const std::string what =
        "act-order gptq g" + std::to_string(k.gs) + " b" + std::to_string(k.bits) + (k.v2 ? " v2" : " v1");
    const std::string dir = temp_path("actorder_" + std::to_string(k.gs) + "_" + std::to_string(k.bits));
    auto known = write_hub_fixture(src, dir, "gptq", k.gs, k.bits, k.v2, /*act_order=*/true);
    auto m = load_model(dir);
    expect_known(*m, known, what);
    expect_reference_agrees(dir, *m, what);
    expect_kernels_match_dense(*m, what);
    // Logits through the whole model (a 12-token prefill): equal to a model whose matrices are the
    // dequantized ones (F32, original column order), up to float summation order. Run below the Avx512Bf16
    // tier, whose 4-bit kernels round activations to BF16 (checked per matrix above), which two layers of
    // random-integer weights amplify.
    auto dense = load_model(dir);
    for (auto& [name, w] : dense->weights.named_matrices())
      if (w->kind == WeightKind::Quant) *w = make_f32_weight(dequantized(*w).data(), w->rows, w->cols);
    auto toks = testing::test_tokens(m->config.vocab_size, 12, 3);
    const Isa isa = kernel_isa();
    set_kernel_isa(std::min(isa, Isa::Avx512));
    const auto lq = testing::logits_of(*m, toks), ld = testing::logits_of(*dense, toks);
    set_kernel_isa(isa);
    float amax = 0;
    for (float v : ld) amax = std::max(amax, std::fabs(v));
    EXPECT_LT(testing::max_abs_diff(lq, ld), 1e-4f * (1.0f + amax)) << what;
    // GPTQ export: the original g_idx and columns, desc_act=true; import gives the same matrix again.
    ExportOptions o;
    o.to = "gptq";
    o.gptq_v2 = k.v2;  // (v1 fixtures hold zeros of 2^b, which only v1 stores)
    export_checkpoint(dir, dir + "-gptq", o);
    auto ex = io::HfCheckpoint::open(dir + "-gptq");
    EXPECT_EQ(ex.config["quantization_config"]["desc_act"], true) << what;
    const std::string qn = "model.layers.1.mlp.down_proj.g_idx";
    ASSERT_TRUE(ex.tensors.count(qn)) << what;
    std::vector<int32_t> gi(known.at("model.layers.1.mlp.down_proj").g_idx);
    EXPECT_EQ(std::memcmp(ex.tensors.at(qn).data, gi.data(), gi.size() * 4), 0) << what;
    auto back = load_model(dir + "-gptq");
    expect_same_matrices(*m, *back, what + " -> gptq");
    for (size_t i = 0; i < m->weights.named_matrices().size(); ++i) {
      const WeightMatrix& a = *m->weights.named_matrices()[i].second;
      const WeightMatrix& b = *back->weights.named_matrices()[i].second;
      if (a.kind == WeightKind::Quant) EXPECT_EQ(a.q->input_perm, b.q->input_perm) << what;
    }
    expect_reference_agrees(dir + "-gptq", *back, what + " -> gptq");
    EXPECT_EQ(testing::logits_of(*m, toks), testing::logits_of(*back, toks)) << what;
    // compressed-tensors export (pack-quantized, actorder "group"): weight_packed in the original column
    // order, weight_g_idx = the fixture's g_idx; import gives the same matrix and permutation again. v1
    // fixtures hold zero points of 2^b, which compressed-tensors' b-bit zero points cannot: refused.
    ExportOptions oc;
    oc.to = "compressed-tensors";
    bool zero_2b = false;
    for (auto& [mod, kn] : known)
      for (int z : kn.zero) zero_2b = zero_2b || z == (1 << k.bits);
    if (zero_2b) {
      try {
        export_checkpoint(dir, dir + "-ct", oc);
        ADD_FAILURE() << what << ": zero points of 2^b exported to compressed-tensors";
      } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find("--to gptq"), std::string::npos) << e.what();
      }
      EXPECT_FALSE(fs::exists(dir + "-ct")) << what;
    } else {
      export_checkpoint(dir, dir + "-ct", oc);
      expect_ct_actorder_export(dir + "-ct", known, what);
      auto ct = load_model(dir + "-ct");
      expect_known(*ct, known, what + " -> ct");
      expect_same_matrices(*m, *ct, what + " -> ct");
      for (size_t i = 0; i < m->weights.named_matrices().size(); ++i) {
        const WeightMatrix& a = *m->weights.named_matrices()[i].second;
        const WeightMatrix& b = *ct->weights.named_matrices()[i].second;
        if (a.kind == WeightKind::Quant) EXPECT_EQ(a.q->input_perm, b.q->input_perm) << what << " -> ct";
      }
      expect_reference_agrees(dir + "-ct", *ct, what + " -> ct");
      EXPECT_EQ(testing::logits_of(*m, toks), testing::logits_of(*ct, toks)) << what << " -> ct";
      // ... and compressed-tensors -> compressed-tensors / gptq again: the same tensors.
      export_checkpoint(dir + "-ct", dir + "-ct2", oc);
      expect_same_tensors(dir + "-ct", dir + "-ct2", what + " ct -> ct");
      o.gptq_v2 = true;
      export_checkpoint(dir + "-ct", dir + "-ct-gptq", o);
      auto back2 = load_model(dir + "-ct-gptq");
      expect_same_matrices(*m, *back2, what + " -> ct -> gptq");
      EXPECT_EQ(testing::logits_of(*m, toks), testing::logits_of(*back2, toks)) << what << " -> ct -> gptq";
    }
    // AWQ has no per-column group index: refused, naming the module and what to do.
    if (k.bits == 4) {
      ExportOptions r;
      r.to = "awq";
      try {
        export_checkpoint(dir, dir + "-refused", r);
        ADD_FAILURE() << what << " exported to awq";
      } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find("act-order"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("--to gptq"), std::string::npos) << e.what();
      }
      EXPECT_FALSE(fs::exists(dir + "-refused")) << what << " awq";
    }
    for (const char* sfx : {"", "-gptq", "-ct", "-ct2", "-ct-gptq"}) fs::remove_all(dir + sfx);
  }
  fs::remove_all(src);
}

// ---- hostile input and refusals ----

void expect_model_error(const std::string& dir, const std::string& needle, const std::string& what) {
  try {
    load_model(dir);
    ADD_FAILURE() << what << ": loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << what << ": " << e.what();
  }
}

TEST(HubImport, HostileTensorsAndConfigsAreRejected) {
  const std::string src = quantized_dir("int4:g32:asym", "hostile_src");
  const std::string base = temp_path("hostile_gptq");
  write_hub_fixture(src, base, "gptq", 32, 4, false);
  auto edit_config = [&](const std::string& name, auto&& fn) {
    const std::string d = temp_path(name);
    fs::copy(base, d);
    json cfg = json::parse(std::ifstream(d + "/config.json"));
    fn(cfg["quantization_config"]);
    std::ofstream(d + "/config.json") << cfg.dump();
    return d;
  };
  // Config: bits / group size / version that do not match or are unsupported.
  expect_model_error(edit_config("h_bits5", [](json& q) { q["bits"] = 5; }), "5 bits", "bits 5");
  expect_model_error(edit_config("h_bits3", [](json& q) { q["bits"] = 3; }), "qweight",
                     "bits 3 vs 4-bit tensors");
  expect_model_error(edit_config("h_bits8", [](json& q) { q["bits"] = 8; }), "qweight",
                     "bits 8 vs 4-bit tensors");
  expect_model_error(edit_config("h_gs", [](json& q) { q["group_size"] = 16; }), "qzeros", "group size");
  expect_model_error(edit_config("h_gs0", [](json& q) { q["group_size"] = 0; }), "group_size",
                     "group size 0");
  expect_model_error(edit_config("h_fmt", [](json& q) { q["checkpoint_format"] = "marlin"; }),
                     "checkpoint_format", "format");
  expect_model_error(edit_config("h_sym", [](json& q) { q["sym"] = true; }), "sym=true",
                     "sym with asym zeros");
  expect_model_error(edit_config("h_bad", [](json& q) { q["bits"] = "four"; }), "malformed", "bits string");
  expect_model_error(
      edit_config("h_awq",
                  [](json& q) {
                    q = {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 32}, {"version", "gemv"}};
                  }),
      "gemv", "awq gemv");
  // Tensors: hostile g_idx, wrong dtype, wrong shape.
  auto edit_tensor = [&](const std::string& name, const std::string& tensor, DType dt,
                         std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    const std::string d = temp_path(name);
    fs::create_directories(d);
    fs::copy(base + "/config.json", d + "/config.json");
    auto ck = io::HfCheckpoint::open(base);
    std::vector<io::TensorToWrite> list;
    for (auto& [n, v] : ck.tensors)
      if (n == tensor)
        list.push_back({n, dt, shape, bytes.data(), bytes.size()});
      else
        list.push_back({n, v.dtype, v.shape, v.data, v.nbytes});
    io::write_safetensors(d + "/model.safetensors", list);
    return d;
  };
  const std::string m = "model.layers.0.self_attn.q_proj";
  std::vector<int32_t> gidx(64);
  for (int i = 0; i < 64; ++i) gidx[i] = (i * 7) % 2;  // act-order groups (32 each), not i / 32: loads
  {
    const std::string d = edit_tensor("h_gidx_ok", m + ".g_idx", DType::I32, {64}, raw(gidx));
    auto ok = load_model(d);
    EXPECT_EQ(ok->weights.layers[0].wq.q->input_perm.size(), 64u);
  }
  auto gidx_error = [&](const std::string& name, std::vector<int32_t> g, const std::string& needle) {
    expect_model_error(edit_tensor(name, m + ".g_idx", DType::I32, {64}, raw(g)), needle, name);
    expect_model_error(edit_tensor(name + "b", m + ".g_idx", DType::I32, {64}, raw(g)), m + ".g_idx", name);
  };
  auto g = gidx;
  g[5] = 2;  // only groups 0 and 1 exist
  gidx_error("h_gidx_range", g, "g_idx[5] = 2");
  g = gidx;
  g[6] = -1;
  gidx_error("h_gidx_neg", g, "g_idx[6] = -1");
  g = gidx;
  g[1] = 0;  // group 0 used 33 times, group 1 31 times
  gidx_error("h_gidx_over", g, "group 0 holds 33");
  expect_model_error(edit_tensor("h_gidx_short", m + ".g_idx", DType::I32, {8}, std::vector<uint8_t>(32)),
                     "g_idx", "g_idx short");
  expect_model_error(edit_tensor("h_gidx_2d", m + ".g_idx", DType::I32, {2, 32}, raw(gidx)), "shape",
                     "g_idx 2-D");
  expect_model_error(edit_tensor("h_gidx_dt", m + ".g_idx", DType::I64, {64}, std::vector<uint8_t>(512)),
                     "dtype", "g_idx int64");
  expect_model_error(edit_tensor("h_qw_dt", m + ".qweight", DType::F32, {8, 64}, std::vector<uint8_t>(2048)),
                     "dtype", "qweight dtype");
  expect_model_error(
      edit_tensor("h_qw_shape", m + ".qweight", DType::I32, {64, 8}, std::vector<uint8_t>(2048)), "shape",
      "qweight transposed");
  expect_model_error(edit_tensor("h_sc", m + ".scales", DType::F32, {2, 64}, std::vector<uint8_t>(512)),
                     "dtype", "scales f32");
  for (auto& e : fs::directory_iterator(fs::temp_directory_path()))
    if (e.path().filename().string().find("lowbit_quant_test_" + std::to_string(::getpid()) + "_h") == 0)
      fs::remove_all(e.path());
  fs::remove_all(base);
  fs::remove_all(src);
}

// `lowbit quantize` of an act-order GPTQ model that leaves its MLP as it is (ignore + --requantize for the
// rest): the kept matrices are written with weight_g_idx in a group of their own with actorder "group", and
// load back with the same codes, scales, zeros and permutation.
TEST(HubImport, QuantizeKeepsActOrderMatricesWithGidx) {
  const std::string src = quantized_dir("int4:g32:asym", "keep_ao_src");
  const std::string fix = temp_path("keep_ao_fixture"), out = temp_path("keep_ao_out");
  write_hub_fixture(src, fix, "gptq", 32, 4, /*v2=*/true, /*act_order=*/true);
  auto m = load_model(fix);
  auto orig = load_model(fix);
  const Recipe r = parse_recipe_arg("int8:channel,ignore=re:.*mlp.*");
  QuantizeOptions o;
  o.progress = false;
  o.requantize = true;
  QuantReport rep = quantize_model(*m, r, o);
  write_quantized_checkpoint(*m, rep, out);
  const json qc = io::HfCheckpoint::open(out).config.at("quantization_config");
  int ao_groups = 0;
  for (auto& [gname, g] : qc.at("config_groups").items()) {
    const bool mlp = g.at("targets").at(0).get<std::string>().find(".mlp.") != std::string::npos;
    EXPECT_EQ(g.at("weights").at("actorder") == "group", mlp) << gname << " " << g.dump();
    ao_groups += mlp;
  }
  EXPECT_EQ(ao_groups, 1);
  auto back = load_model(out);
  int n = 0;
  const auto na = orig->weights.named_matrices(), nb = back->weights.named_matrices();
  ASSERT_EQ(na.size(), nb.size());
  for (size_t i = 0; i < na.size(); ++i) {
    const auto& [name, a] = na[i];
    const WeightMatrix& b = *nb[i].second;
    if (name.find("w_gate") == std::string::npos && name.find("w_up") == std::string::npos &&
        name.find("w_down") == std::string::npos)
      continue;
    ASSERT_EQ(b.kind, WeightKind::Quant) << name;
    EXPECT_FALSE(a->q->input_perm.empty()) << name;
    EXPECT_EQ(a->q->input_perm, b.q->input_perm) << name;
    EXPECT_EQ(a->q->codes, b.q->codes) << name;
    EXPECT_EQ(a->q->scales, b.q->scales) << name;
    EXPECT_EQ(a->q->zeros, b.q->zeros) << name;
    EXPECT_EQ(dequantized(*a), dequantized(b)) << name;
    ++n;
  }
  EXPECT_EQ(n, 6);
  expect_reference_agrees(out, *back, "quantize keeping act-order MLP");
  for (auto& p : {src, fix, out}) fs::remove_all(p);
}

// compressed-tensors weight_g_idx that does not describe groups of group_size columns, has the wrong dtype or
// shape, or sits on a module without INT groups: Error("model") naming the tensor. An index of all -1
// (compressed-tensors' unset value) is column order.
TEST(HubImport, CtActOrderHostileGidxIsRejected) {
  const std::string src = quantized_dir("int4:g32:asym", "ct_gidx_src");
  const std::string fix = temp_path("ct_gidx_fixture"), base = temp_path("ct_gidx");
  write_hub_fixture(src, fix, "gptq", 32, 4, /*v2=*/true, /*act_order=*/true);
  ExportOptions oc;
  oc.to = "compressed-tensors";
  export_checkpoint(fix, base, oc);
  const std::string m = "model.layers.0.self_attn.q_proj", gn = m + ".weight_g_idx";
  auto edit = [&](const std::string& from, const std::string& name, const std::string& tensor, DType dt,
                  std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    const std::string d = temp_path(name);
    fs::create_directories(d);
    fs::copy(from + "/config.json", d + "/config.json");
    auto ck = io::HfCheckpoint::open(from);
    std::vector<io::TensorToWrite> list;
    bool put = false;
    for (auto& [n, v] : ck.tensors)
      if (n == tensor) {
        list.push_back({n, dt, shape, bytes.data(), bytes.size()});
        put = true;
      } else {
        list.push_back({n, v.dtype, v.shape, v.data, v.nbytes});
      }
    if (!put) list.push_back({tensor, dt, shape, bytes.data(), bytes.size()});
    io::write_safetensors(d + "/model.safetensors", list);
    return d;
  };
  auto ck = io::HfCheckpoint::open(base);
  ASSERT_TRUE(ck.tensors.count(gn));
  std::vector<int32_t> gidx(64);
  std::memcpy(gidx.data(), ck.tensors.at(gn).data, 256);
  auto g = gidx;
  g[5] = 2;  // only groups 0 and 1 exist
  expect_model_error(edit(base, "ct_g_range", gn, DType::I32, {64}, raw(g)), "g_idx[5] = 2", "range");
  expect_model_error(edit(base, "ct_g_range2", gn, DType::I32, {64}, raw(g)), gn, "range names the tensor");
  g = gidx;
  g[7] = -1;  // partly unset
  expect_model_error(edit(base, "ct_g_neg", gn, DType::I32, {64}, raw(g)), "g_idx[7] = -1", "negative");
  g = gidx;
  for (int i = 0; i < 64; ++i)
    if (g[i] == 1) {
      g[i] = 0;  // group 0 holds 33 columns
      break;
    }
  expect_model_error(edit(base, "ct_g_over", gn, DType::I32, {64}, raw(g)), "group 0 holds 33", "overfull");
  expect_model_error(edit(base, "ct_g_short", gn, DType::I32, {32}, raw(std::vector<int32_t>(32, 0))), gn,
                     "short");
  expect_model_error(edit(base, "ct_g_dt", gn, DType::I64, {64}, std::vector<uint8_t>(512)), "dtype",
                     "int64");
  // All -1: compressed-tensors' "not set", column order (no permutation).
  {
    auto d = edit(base, "ct_g_unset", gn, DType::I32, {64}, raw(std::vector<int32_t>(64, -1)));
    auto ok = load_model(d);
    EXPECT_TRUE(ok->weights.layers[0].wq.q->input_perm.empty());
    EXPECT_FALSE(ok->weights.layers[0].wk.q->input_perm.empty());
  }
  // A float-quantized module cannot take a group index.
  const std::string fp8 = quantized_dir("FP8_DYNAMIC", "ct_g_fp8src");
  expect_model_error(edit(fp8, "ct_g_fp8", gn, DType::I32, {64}, raw(gidx)), gn, "fp8 with g_idx");
  for (auto& e : fs::directory_iterator(fs::temp_directory_path()))
    if (e.path().filename().string().find("lowbit_quant_test_" + std::to_string(::getpid()) + "_ct_g") == 0)
      fs::remove_all(e.path());
  for (auto& p : {src, fix, base}) fs::remove_all(p);
}

TEST(Export, UnrepresentableCheckpointsAreRefused) {
  auto expect_refused = [](const std::string& src, const std::string& to, const std::string& needle) {
    ExportOptions o;
    o.to = to;
    const std::string out = src + "-refused";
    try {
      export_checkpoint(src, out, o);
      ADD_FAILURE() << src << " -> " << to << " exported";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(out)) << "a refused export left " << out;
  };
  const std::string nf4 = quantized_dir("nf4:g32", "refuse_nf4");
  expect_refused(nf4, "gptq", "INT2/3/4/8");
  expect_refused(nf4, "awq", "INT4");
  const std::string w8a8 = quantized_dir("W8A8", "refuse_w8a8");
  expect_refused(w8a8, "gptq", "weight-only");
  const std::string i8 = quantized_dir("int8:g32", "refuse_i8");
  expect_refused(i8, "awq", "INT4");
  const std::string chan = quantized_dir("int4:channel", "refuse_chan");
  expect_refused(chan, "awq", "groups");
  expect_refused(chan, "onnx", "gptq, awq or compressed-tensors");
  // An existing output directory is refused unless forced.
  const std::string ok = exported(i8, "gptq");
  ExportOptions o;
  o.to = "gptq";
  EXPECT_THROW(export_checkpoint(i8, ok, o), UsageError);
  o.force = true;
  EXPECT_NO_THROW(export_checkpoint(i8, ok, o));
  // GPTQ v1 cannot hold a zero point of 0 (it reads back as 2^b): refused, v2 holds it.
  QuantizedMatrix q =
      quantize_matrix(std::vector<float>(64 * 32, 1.0f).data(), 64, 32, parse_scheme("int4:g32:asym"));
  ASSERT_FALSE(q.zeros.empty());
  q.zeros[5] = 0;
  EXPECT_THROW(pack_gptq(q, false, "m"), UsageError);
  EXPECT_NO_THROW(pack_gptq(q, true, "m"));
  // ... and v2 cannot hold a zero point of 2^b (v1 stores it as all ones).
  q.zeros[5] = 16;
  try {
    pack_gptq(q, true, "m");
    ADD_FAILURE() << "a zero point of 16 was packed into 4-bit v2 zeros";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--gptq-format v1"), std::string::npos) << e.what();
  }
  for (auto& p : {nf4, w8a8, i8, chan, ok}) fs::remove_all(p);
}

TEST(Export, InterleavedRopeRowsAreReorderedExactly) {
  const std::string src = quantized_dir("int4:g32:asym", "rope_src", /*interleaved=*/true);
  for (const char* to : {"gptq", "awq"}) {
    ExportOptions o;
    o.to = to;
    const std::string out = src + "-" + to;
    auto r = export_checkpoint(src, out, o);
    EXPECT_FALSE(r.warnings.empty());
    auto a = load_model(src), b = load_model(out);
    EXPECT_EQ(a->config.rope_style, RopeStyle::Interleaved);
    EXPECT_EQ(b->config.rope_style, RopeStyle::Half) << to;
    auto toks = testing::test_tokens(a->config.vocab_size, 20, 4);
    EXPECT_LT(testing::max_abs_diff(testing::logits_of(*a, toks), testing::logits_of(*b, toks)), 1e-4) << to;
    fs::remove_all(out);
  }
  fs::remove_all(src);
}

}  // namespace
}  // namespace lowbit::quant
