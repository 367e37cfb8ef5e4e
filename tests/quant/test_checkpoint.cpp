// Quantized checkpoints: write -> load round trips for every layout, atomic writes, refusal of existing dirs,
// and inspection.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/hf_checkpoint.h"
#include "kernels/matmul.h"
#include "model/quantized_checkpoint.h"
#include "quant/checkpoint_writer.h"
#include "quant/inspect.h"
#include "quant/quantizer.h"
#include "tests/quant/quant_test_util.h"

namespace fs = std::filesystem;

namespace lowbit::quant {
namespace {

using testing::make_random_model;

void expect_same_weights(Model& a, Model& b, const std::string& what) {
  auto na = a.weights.named_matrices(), nb = b.weights.named_matrices();
  ASSERT_EQ(na.size(), nb.size());
  for (size_t i = 0; i < na.size(); ++i) {
    const WeightMatrix& x = *na[i].second;
    const WeightMatrix& y = *nb[i].second;
    // Weight-only GGUF blocks load as the rows of the checkpoint's mapping (WeightKind::Ggml), as from a GGUF
    // file; the rows are the quantized matrix's codes.
    if (x.kind == WeightKind::Quant && x.q->is_gguf() && x.act_format == FormatId::F32) {
      ASSERT_EQ(y.kind, WeightKind::Ggml) << what << " " << na[i].first;
      EXPECT_EQ(y.ggml_type, x.q->scheme.info().ggml_type) << what << " " << na[i].first;
      EXPECT_EQ(std::vector<uint8_t>(y.data, y.data + y.rows * y.row_bytes()), x.q->codes)
          << what << " " << na[i].first;
    } else {
      ASSERT_EQ(x.kind, y.kind) << what << " " << na[i].first;
    }
    EXPECT_EQ(x.act_format, y.act_format) << what << " " << na[i].first;
    EXPECT_EQ(x.act_static_scale, y.act_static_scale) << what << " " << na[i].first;
    EXPECT_EQ(x.act_clip, y.act_clip) << what << " " << na[i].first;
    EXPECT_EQ(x.act_scale, y.act_scale) << what << " " << na[i].first;
    if (x.kind == WeightKind::Quant && y.kind == WeightKind::Quant) {
      EXPECT_EQ(to_string(x.q->scheme), to_string(y.q->scheme)) << what << " " << na[i].first;
      EXPECT_EQ(x.q->codes, y.q->codes) << what << " " << na[i].first;
      EXPECT_EQ(x.q->scales, y.q->scales) << what << " " << na[i].first;
      EXPECT_EQ(x.q->zeros, y.q->zeros) << what << " " << na[i].first;
      EXPECT_EQ(x.q->global_scale, y.q->global_scale) << what;
      EXPECT_EQ(x.q->dq_scales, y.q->dq_scales) << what;
      EXPECT_EQ(x.q->dq_offset, y.q->dq_offset) << what;
    }
    // Dequantized rows are bit-identical.
    std::vector<float> rx(static_cast<size_t>(x.cols)), ry(rx.size());
    for (int64_t r = 0; r < x.rows; r += std::max<int64_t>(1, x.rows / 7)) {
      weight_row_f32(x, r, rx.data());
      weight_row_f32(y, r, ry.data());
      ASSERT_EQ(rx, ry) << what << " " << na[i].first << " row " << r;
    }
  }
  for (size_t l = 0; l < a.weights.layers.size(); ++l) {
    EXPECT_EQ(a.weights.layers[l].attn_norm, b.weights.layers[l].attn_norm) << what;
    EXPECT_EQ(a.weights.layers[l].ffn_norm, b.weights.layers[l].ffn_norm) << what;
    EXPECT_EQ(a.weights.layers[l].k_scale, b.weights.layers[l].k_scale) << what;
    EXPECT_EQ(a.weights.layers[l].v_scale, b.weights.layers[l].v_scale) << what;
  }
}

struct Case {
  const char* recipe;
  bool gqa;
};

class RoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(RoundTrip, LoadedModelEqualsQuantizedModel) {
  const Case c = GetParam();
  auto m = make_random_model(21, c.gqa, 96);
  auto calib = testing::random_calib(*m, 4, 32, 1);
  Recipe r = parse_recipe_arg(c.recipe);
  QuantizeOptions o;
  o.calib = r.needs_calibration() ? &calib : nullptr;
  o.progress = false;
  QuantReport rep = quantize_model(*m, r, o);
  const std::string dir = testing::temp_path("rt");
  write_quantized_checkpoint(*m, rep, dir);
  auto loaded = load_model(dir);
  EXPECT_EQ(loaded->config.rope_style, RopeStyle::Interleaved);
  expect_same_weights(*m, *loaded, c.recipe);
  auto toks = testing::test_tokens(m->config.vocab_size, 20, 2);
  auto a = testing::logits_of(*m, toks), b = testing::logits_of(*loaded, toks);
  // GGUF blocks load repacked for the Q8 pack kernels, which sum in another order than the row kernels of
  // the in-memory model (AVX2): close; without the packs both run the same kernels: bit-identical.
  EXPECT_LT(testing::rel_rms_diff(a, b), 1e-2) << c.recipe;
  testing::drop_load_time_packs(*loaded);
  b = testing::logits_of(*loaded, toks);
  EXPECT_EQ(testing::max_abs_diff(a, b), 0.0) << c.recipe;
  // inspect agrees on the formats
  auto j = inspect_checkpoint(dir);
  EXPECT_NEAR(j["summary"]["bits_per_weight_quantized"].get<double>(), rep.bpw_quantized(), 1e-9) << c.recipe;
  EXPECT_TRUE(j["provenance"].is_object());
  EXPECT_FALSE(inspect_table(j, true).empty());
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, RoundTrip,
    ::testing::Values(Case{"int4:g32:sym", false}, Case{"int4:g32:asym", true}, Case{"int3:g16:asym", false},
                      Case{"int2:g32:sym", false}, Case{"W8A8", false}, Case{"nf4:g32:dq", false},
                      Case{"e4m3:tensor:f32,act=e4m3,act_static=1,kv=e4m3", false},
                      Case{"e4m3:block32x32:f32", true}, Case{"e5m2:channel:bf16", false},
                      Case{"nvfp4", false}, Case{"mxfp4", false}, Case{"mxfp8", false},
                      Case{"e2m1:g32:f16", false}, Case{"int4:g32:e8m0", false}, Case{"q4_0", false},
                      Case{"int4:g32:sym,algo=gptq,kv=int8,kv_strategy=head", true},
                      // W4A4: int4 per-token activations (with QuaRot's clip), the int4 KV scales
                      Case{"int4:channel:sym,act=int4", false}, Case{"W4A4KV4,group=32,act_clip=0.9", true},
                      Case{"nvfp4,act=nvfp4,act_clip=0.9", false}, Case{"int4:g32:sym,act=nvfp4", true},
                      Case{"int4:g32:sym,act=nvfp4,act_scale=mse", false},
                      // per-row codebooks (lowbit-packed codes + the [rows, 2^b] f16 tables as weight_scale)
                      Case{"lut3", false}, Case{"lut4,algo=gptq", true}, Case{"lut2,algo=imatrix", false}),
    [](const ::testing::TestParamInfo<Case>& info) {
      std::string n = std::string(info.param.recipe) + (info.param.gqa ? "_gqa" : "");
      for (auto& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

TEST(Checkpoint, QuantizedEmbeddingAndHeadAndMixedGroups) {
  auto m = make_random_model(22);
  Recipe r = recipe_from_json(nlohmann::json::parse(
      R"({"scheme": "int4:g32", "ignore": [], "overrides": [{"pattern": "*.w_down", "scheme": "int8:channel"},
          {"pattern": "lm_head", "scheme": "int8:g64"}]})"));
  QuantReport rep = quantize_model(*m, r, {nullptr, false, false});
  EXPECT_EQ(m->weights.tok_embed.kind, WeightKind::Quant);
  const std::string dir = testing::temp_path("mixed");
  write_quantized_checkpoint(*m, rep, dir);
  auto loaded = load_model(dir);
  expect_same_weights(*m, *loaded, "mixed");
  std::ifstream in(fs::path(dir) / "config.json");
  auto cfg = nlohmann::json::parse(in);
  EXPECT_EQ(cfg["quantization_config"]["quant_method"], "compressed-tensors");
  EXPECT_EQ(cfg["quantization_config"]["config_groups"].size(), 3u);
  fs::remove_all(dir);
}

TEST(Checkpoint, TiedEmbeddingsStayTied) {
  auto m = make_random_model(23);
  m->weights.lm_head = m->weights.tok_embed;
  m->config.tie_embeddings = true;
  QuantReport rep = quantize_model(*m, parse_recipe_arg("int4:g32"), {nullptr, false, false});
  const std::string dir = testing::temp_path("tied");
  write_quantized_checkpoint(*m, rep, dir);
  auto loaded = load_model(dir);
  EXPECT_TRUE(loaded->config.tie_embeddings);
  EXPECT_EQ(loaded->weights.lm_head.data, loaded->weights.tok_embed.data);
  expect_same_weights(*m, *loaded, "tied");
  fs::remove_all(dir);
}

// An architecture row with every non-Llama flag (Gemma: GeLU-tanh MLP, embeddings x sqrt(dim), HF norms
// stored as w - 1) survives write -> load: config.json names the row, norms go back to the HF convention and
// come back bit-identical, and the reloaded model computes the same logits.
TEST(Checkpoint, GemmaStyleRowRoundTrips) {
  auto m = make_random_model(24);
  const ArchRow& row = arch_row("gemma");
  m->config.arch = row.name;
  m->config.act = row.act;
  m->config.embed_scale = row.embed_scale;
  m->config.norm_weight_offset = row.hf_norm_offset;
  QuantReport rep = quantize_model(*m, parse_recipe_arg("int4:g32"), {nullptr, false, false});
  const std::string dir = testing::temp_path("gemma");
  write_quantized_checkpoint(*m, rep, dir);
  std::ifstream in(fs::path(dir) / "config.json");
  auto cfg = nlohmann::json::parse(in);
  EXPECT_EQ(cfg["model_type"], "gemma");
  EXPECT_EQ(cfg["architectures"][0], "GemmaForCausalLM");
  EXPECT_EQ(cfg["hidden_activation"], "gelu_pytorch_tanh");
  auto loaded = load_model(dir);
  EXPECT_EQ(loaded->config.act, Activation::GeluTanh);
  EXPECT_TRUE(loaded->config.embed_scale);
  expect_same_weights(*m, *loaded, "gemma");
  auto toks = testing::test_tokens(m->config.vocab_size, 20, 2);
  EXPECT_EQ(testing::max_abs_diff(testing::logits_of(*m, toks), testing::logits_of(*loaded, toks)), 0.0);
  // The stored norms are the HF convention's w - 1, not the w the decoder multiplies by.
  auto ck = io::HfCheckpoint::open(dir);
  std::vector<float> stored(static_cast<size_t>(m->config.dim));
  to_f32(ck.tensors.at("model.layers.0.input_layernorm.weight"), stored.data());
  for (size_t i = 0; i < stored.size(); ++i)
    EXPECT_EQ(stored[i] + 1.0f, m->weights.layers[0].attn_norm[i]) << i;
  fs::remove_all(dir);
}

TEST(Checkpoint, WriteIsAtomicAndRefusesExistingDirs) {
  auto m = make_random_model(24);
  QuantReport rep = quantize_model(*m, parse_recipe_arg("int4:g32"), {nullptr, false, false});
  const std::string dir = testing::temp_path("atomic");
  for (int k = 1; k <= 3; ++k) {
    WriteOptions o;
    o.fail_after_files = k;
    EXPECT_THROW(write_quantized_checkpoint(*m, rep, dir, o), Error) << k;
    EXPECT_FALSE(fs::exists(dir)) << "a failed write must leave nothing behind (k=" << k << ")";
    for (auto& e : fs::directory_iterator(fs::path(dir).parent_path()))
      EXPECT_EQ(e.path().string().find(dir + ".tmp-"), std::string::npos) << e.path();
  }
  write_quantized_checkpoint(*m, rep, dir);
  EXPECT_TRUE(fs::exists(fs::path(dir) / "lowbit_manifest.json"));
  try {
    write_quantized_checkpoint(*m, rep, dir);
    FAIL() << "an existing output directory must be refused";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--force"), std::string::npos);
  }
  // --force replaces it; a failed forced write keeps the old one.
  WriteOptions bad;
  bad.force = true;
  bad.fail_after_files = 2;
  EXPECT_THROW(write_quantized_checkpoint(*m, rep, dir, bad), Error);
  EXPECT_TRUE(fs::exists(fs::path(dir) / "lowbit_manifest.json"));
  WriteOptions force;
  force.force = true;
  EXPECT_NO_THROW(write_quantized_checkpoint(*m, rep, dir, force));
  fs::remove_all(dir);
}

// A writer killed mid-write leaves DIR.tmp-XXXXXX behind; the next write of DIR removes it once its process
// is gone, and leaves alone one whose writer still runs (another process writing the same target right now).
TEST(Checkpoint, TemporariesOfDeadWritersAreRemoved) {
  auto m = make_random_model(25);
  QuantReport rep = quantize_model(*m, parse_recipe_arg("int4:g32"), {nullptr, false, false});
  const std::string dir = testing::temp_path("stale");
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);  // reaped: its pid names no process now
  const std::string dead = dir + ".tmp-Dead01", live = dir + ".tmp-Live01";
  fs::create_directories(dead);
  fs::create_directories(live);
  std::ofstream(fs::path(dead) / ".lowbit-writer-pid") << child << "\n";
  std::ofstream(fs::path(dead) / "model.safetensors") << "half-written";
  std::ofstream(fs::path(live) / ".lowbit-writer-pid") << ::getpid() << "\n";
  write_quantized_checkpoint(*m, rep, dir);
  EXPECT_FALSE(fs::exists(dead)) << "a dead writer's temporary must be removed";
  EXPECT_TRUE(fs::exists(live)) << "a running writer's temporary must be kept";
  EXPECT_FALSE(fs::exists(fs::path(dir) / ".lowbit-writer-pid")) << "the owner mark must not be published";
  fs::remove_all(live);
  fs::remove_all(dir);
}

TEST(Checkpoint, ShardsWithIndexWhenLarge) {
  auto m = make_random_model(25);
  QuantReport rep = quantize_model(*m, parse_recipe_arg("int4:g32"), {nullptr, false, false});
  const std::string dir = testing::temp_path("shards");
  WriteOptions o;
  o.shard_bytes = 20000;
  auto res = write_quantized_checkpoint(*m, rep, dir, o);
  EXPECT_GT(res.shards, 1);
  EXPECT_TRUE(fs::exists(fs::path(dir) / "model.safetensors.index.json"));
  auto loaded = load_model(dir);
  expect_same_weights(*m, *loaded, "sharded");
  fs::remove_all(dir);
}

TEST(Checkpoint, ManifestRecordsProvenance) {
  auto m = make_random_model(26);
  auto calib = testing::random_calib(*m, 4, 32, 1);
  calib.sha256 = "abc";
  QuantizeOptions o;
  o.calib = &calib;
  o.progress = false;
  QuantReport rep = quantize_model(*m, parse_recipe_arg("int4:g32,algo=gptq"), o);
  const std::string dir = testing::temp_path("manifest");
  write_quantized_checkpoint(*m, rep, dir);
  std::ifstream in(fs::path(dir) / "lowbit_manifest.json");
  auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["recipe"]["algorithm"], "gptq");
  EXPECT_EQ(j["calibration"]["sha256"], "abc");
  EXPECT_EQ(j["tool"]["name"], "lowbit");
  EXPECT_EQ(j["unquantized"].size(), 2u);
  bool has_out = false;
  for (auto& t : j["tensors"]) has_out = has_out || t.contains("rel_error_output");
  EXPECT_TRUE(has_out);
  // A checkpoint cannot be quantized again without --requantize.
  auto loaded = load_model(dir);
  EXPECT_THROW(quantize_model(*loaded, parse_recipe_arg("int8:channel"), {nullptr, false, false}),
               UsageError);
  fs::remove_all(dir);
}

TEST(Checkpoint, HostileQuantizedTensorsAreRejected) {
  auto m = make_random_model(27);
  quantize_model(*m, parse_recipe_arg("int4:g32"), {nullptr, false, false});
  auto packed = pack_quantized(*m->weights.layers[0].wq.q);
  std::map<std::string, TensorView> t;
  for (auto& p : packed) {
    TensorView v;
    v.dtype = p.dtype;
    v.shape = p.shape;
    v.data = p.bytes.data();
    v.nbytes = p.bytes.size();
    t["m." + p.suffix] = v;
  }
  const QuantScheme s = m->weights.layers[0].wq.q->scheme;
  EXPECT_NO_THROW(unpack_quantized(t, "m", s, 64, 64, "test"));
  EXPECT_THROW(unpack_quantized(t, "m", s, 64, 96, "test"), Error);  // shape mismatch
  auto bad = t;
  bad["m.weight_scale"].nbytes -= 2;
  EXPECT_THROW(unpack_quantized(bad, "m", s, 64, 64, "test"), Error);
  bad = t;
  bad.erase("m.weight_packed");
  EXPECT_THROW(unpack_quantized(bad, "m", s, 64, 64, "test"), Error);
  bad = t;
  bad["m.weight_scale"].dtype = DType::F32;
  EXPECT_THROW(unpack_quantized(bad, "m", s, 64, 64, "test"), Error);
}

// Found by fuzz_quantized_checkpoint: a non-string quant_method / format escaped load_quantized_weights as
// nlohmann's type_error instead of Error("model").
TEST(Checkpoint, NonStringQuantizationFieldsAreErrors) {
  auto m = make_random_model(28);
  io::HfCheckpoint ck;
  ck.dir = "ckpt";
  for (const char* field : {"quant_method", "format"}) {
    ck.config = nlohmann::json::parse(R"({"quantization_config":{"quant_method":"compressed-tensors",)"
                                      R"("config_groups":{}}})");
    ck.config["quantization_config"][field] = 5;
    try {
      load_quantized_weights(ck, m->config, nullptr, DenseMode::Native);
      ADD_FAILURE() << field << " = 5 was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("quantization_config.") + field + " must be a string"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace lowbit::quant
