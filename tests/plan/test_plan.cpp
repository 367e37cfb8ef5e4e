// Memory planner: the seed's KV arithmetic, agreement with the engine's KV allocation, weight bytes against
// hand computations, presets against published parameter counts, the searches, the recommendation path,
// inputs (config.json, llama2.c header, quantized checkpoint, GGUF), bad input, reports and the CLI's exit
// codes.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "kv/kv_cache.h"
#include "plan/plan.h"

namespace lowbit::plan {
namespace {

namespace fs = std::filesystem;

class Scratch {
 public:
  Scratch() {
    static std::atomic<int> n{0};
    path_ =
        fs::temp_directory_path() / ("lowbit_plan_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string dir() const { return path_.string(); }

 private:
  fs::path path_;
};

void write_text(const std::string& path, const std::string& s) {
  std::ofstream(path, std::ios::binary) << s;
}

// The seed article's example: LLaMA-7B-like, 40 layers, 32 heads x 128, MHA.
ModelConfig seed_config() {
  ModelConfig c;
  c.dim = 4096;
  c.n_layers = 40;
  c.n_heads = 32;
  c.n_kv_heads = 32;
  c.head_dim = 128;
  c.ffn_dim = 11008;
  c.vocab_size = 32000;
  return c;
}

// A small shape with round numbers for hand computations.
ModelConfig small_config() {
  ModelConfig c;
  c.dim = 256;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 64;
  c.ffn_dim = 768;
  c.vocab_size = 1000;
  c.tie_embeddings = false;
  return c;
}

PlanModel preset_model(const std::string& id) {
  return load_plan_model(id, true);
}

PlanRequest request(int64_t ctx, int64_t conc, const std::string& device) {
  PlanRequest r;
  r.ctx = {ctx};
  r.concurrency = conc;
  r.device = device_by_name(device);
  return r;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("NOT A UsageError: ") + e.what();
  }
  return "no error";
}

// ------------------------------------------------------------------ KV arithmetic

TEST(PlanKv, SeedExampleFp16Is1342177280BytesPerSequence) {
  const ModelConfig c = seed_config();
  EXPECT_EQ(kv_bytes_per_sequence(c, kv_config("bf16"), 2048), 1342177280);
  EXPECT_EQ(kv_bytes_per_token(c, KvDtype::F16) * 2048, 1342177280);
  EXPECT_EQ(kv_bytes_per_sequence(c, kv_config("fp8"), 2048), 1342177280 / 2);
  EXPECT_EQ(kv_bytes_per_sequence(c, kv_config("int8"), 2048), 1342177280 / 2);
}

TEST(PlanKv, Int4CountsGroupScalesAndResidualWindow) {
  const ModelConfig c = seed_config();
  // Per head per token: 128 x 4 bits = 64 bytes + 4 groups of 32 x 4 bytes (f16 scale + f16 zero) = 80 bytes.
  EXPECT_EQ(kv_bytes_per_token(c, kv_config("int4")), 2 * 40 * 32 * 80);
  const int64_t bf16 = 2 * 40 * 32 * 128 * 2;
  // Tokens inside the 128-token window cost BF16.
  EXPECT_EQ(kv_bytes_per_sequence(c, kv_config("int4"), 100), 100 * bf16);
  EXPECT_EQ(kv_bytes_per_sequence(c, kv_config("int4"), 2048),
            2048 * (2 * 40 * 32 * 80) + 128 * (bf16 - 2 * 40 * 32 * 80));
}

TEST(PlanKv, MatchesEngineAllocationForEveryDtype) {
  std::vector<ModelConfig> configs = {seed_config(), small_config()};
  for (const auto& p : model_presets()) configs.push_back(p.config);
  for (const auto& c : configs) {
    for (KvDtype d : {KvDtype::F32, KvDtype::F16, KvDtype::BF16}) {
      KvCache kv(c, 1, 1, d);
      EXPECT_EQ(kv_bytes_per_token(c, d), kv.bytes_per_token()) << c.n_layers << " " << kv_dtype_name(d);
    }
    EXPECT_EQ(kv_bytes_per_token(c, kv_config("bf16")), KvCache(c, 1, 1, KvDtype::BF16).bytes_per_token());
  }
}

// Plans for lowbit's own engine (device "cpu") use the engine's layout for every KV configuration: the
// planned KV bytes equal what a KvCache of that spec allocates (pages rounded to 16 tokens, per-token scales,
// F16 staging).
TEST(PlanKv, CpuPlansEqualTheEngineAllocationForEveryKvConfig) {
  PlanRequest r = request(200, 3, "cpu");
  for (const ModelConfig& c : {small_config(), seed_config()}) {
    PlanModel m;
    m.config = c;
    m.name = "test";
    const Plan p = make_plan(m, r);
    for (const auto& kvc : kv_configs()) {
      const Row* row = p.per_ctx[0].find("bf16", kvc.id);
      ASSERT_NE(row, nullptr) << kvc.id;
      KvCache kv(c, 3, p.per_ctx[0].tokens, parse_kv_spec(kvc.engine_spec));
      EXPECT_EQ(row->kv_total, kv.total_bytes()) << kvc.id << " (" << kvc.engine_spec << ")";
      EXPECT_EQ(row->kv_per_token, static_cast<int64_t>(std::ceil(kv.bytes_per_token_exact()))) << kvc.id;
      EXPECT_EQ(kv_footprint(c, parse_kv_spec(kvc.engine_spec)).bytes(3, p.per_ctx[0].tokens),
                kv.total_bytes());
    }
  }
  // FP8 in the engine is exactly half of BF16 per token (per-tensor scales live outside the pages).
  const KvFootprint bf = engine_kv_footprint(seed_config(), kv_config("bf16"));
  const KvFootprint f8 = engine_kv_footprint(seed_config(), kv_config("fp8"));
  EXPECT_EQ(2 * f8.bytes_per_token(), bf.bytes_per_token());
}

// ------------------------------------------------------------------ weight bytes

TEST(PlanWeights, Bf16IsTwoBytesPerParameter) {
  const ModelConfig c = model_preset("llama-3.2-1b").config;
  EXPECT_EQ(c.n_params(), 1235814400);
  EXPECT_EQ(weight_bytes(c, "").total(), 2 * int64_t(1235814400));
  for (const auto& p : model_presets())
    EXPECT_EQ(weight_bytes(p.config, "").total(), 2 * p.config.n_params()) << p.id;
}

TEST(PlanWeights, W4A16G128MatchesHandComputation) {
  const ModelConfig c = small_config();
  // Linear matrices per layer [rows, cols]: q 256x256, k 128x256, v 128x256, o 256x256, gate/up 768x256,
  // down 256x768.
  struct M {
    int64_t r, k;
  };
  const M ms[] = {{256, 256}, {128, 256}, {128, 256}, {256, 256}, {768, 256}, {768, 256}, {256, 768}};
  int64_t elems = 0, scales = 0;
  for (auto m : ms) {
    elems += m.r * m.k / 2;           // 4 bits each
    scales += m.r * (m.k / 128) * 2;  // one f16 scale per 128 inputs of a row
  }
  elems *= 2, scales *= 2;                                       // 2 layers
  const int64_t unq = 2 * (2 * 1000 * 256 + 2 * 2 * 256 + 256);  // embed + lm_head + norms, 16-bit
  const WeightBytes w = weight_bytes(c, weight_config("w4a16").scheme);
  EXPECT_EQ(w.elements, elems);
  EXPECT_EQ(w.scales, scales);
  EXPECT_EQ(w.zeros, 0);
  EXPECT_EQ(w.unquantized, unq);
  EXPECT_EQ(w.metadata, 7 * 2 * 16);  // compressed-tensors weight_shape (int64 [2]) per packed matrix
  EXPECT_EQ(w.total(), elems + scales + w.metadata + unq);
  EXPECT_EQ(w.quantized_params + w.unquantized_params, c.n_params());
  // Asymmetric adds a 4-bit zero point per group.
  const WeightBytes a = weight_bytes(c, weight_config("w4a16-asym").scheme);
  EXPECT_EQ(a.zeros, scales / 2 / 2);  // groups x 4 bits / 8
  EXPECT_EQ(a.total(), w.total() + scales / 4);
}

TEST(PlanWeights, OtherSchemesCountScalesExactly) {
  const ModelConfig c = small_config();
  const int64_t qparams = 2 * (256 * 256 * 2 + 128 * 256 * 2 + 768 * 256 * 3);
  const int64_t rows = 2 * (256 + 128 + 128 + 256 + 768 + 768 + 256);
  auto w = [&](const char* id) { return weight_bytes(c, weight_config(id).scheme); };
  EXPECT_EQ(w("fp8-w").elements, qparams);
  EXPECT_EQ(w("fp8-w").scales, rows * 4);      // one f32 per output channel
  EXPECT_EQ(w("w8a8-int8").scales, rows * 2);  // one f16 per output channel
  EXPECT_EQ(w("mxfp4").elements, qparams / 2);
  EXPECT_EQ(w("mxfp4").scales, qparams / 32);              // one E8M0 byte per 32
  EXPECT_EQ(w("nvfp4").scales, qparams / 16 + 7 * 2 * 4);  // E4M3 per 16 + one FP32 per matrix
  EXPECT_EQ(w("nf4").scales, qparams / 64 * 4);            // f32 absmax per 64
  EXPECT_LT(w("nf4-dq").scales, w("nf4").scales / 3);
  for (const auto& wc : weight_configs())
    if (!wc.scheme.empty()) {
      EXPECT_LT(w(wc.id.c_str()).total(), weight_bytes(c, "").total()) << wc.id;
      EXPECT_EQ(w(wc.id.c_str()).unquantized, 2 * (2 * 1000 * 256 + 2 * 2 * 256 + 256)) << wc.id;
    }
}

TEST(PlanWeights, MatrixTooSmallForTheGroupStays16Bit) {
  ModelConfig c = small_config();
  c.dim = 64, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 32, c.ffn_dim = 96;
  const WeightBytes w = weight_bytes(c, "int4:g128:sym:f16");
  // Every linear has fewer than 128 inputs: nothing is quantized, and the plan says why.
  EXPECT_EQ(w.quantized_params, 0);
  EXPECT_EQ(w.total(), 2 * c.n_params());
  EXPECT_FALSE(w.notes.empty());
}

// ------------------------------------------------------------------ presets

TEST(PlanPresets, ParameterCountsMatchPublishedModels) {
  const std::pair<const char*, int64_t> known[] = {
      {"llama-2-7b", 6738415616},   {"llama-2-13b", 13015864320}, {"llama-2-70b", 68976648192},
      {"llama-3-8b", 8030261248},   {"llama-3-70b", 70553706496}, {"llama-3.2-1b", 1235814400},
      {"llama-3.2-3b", 3212749824}, {"mistral-7b", 7241732096},   {"qwen2.5-0.5b", 494032768},
      {"qwen2.5-7b", 7615616512},   {"qwen2.5-72b", 72706203648}, {"qwen3-8b", 8190735360},
      {"smollm2-135m", 134515008},  {"smollm2-1.7b", 1711376384}};
  for (auto& [id, n] : known) EXPECT_EQ(model_preset(id).config.n_params(), n) << id;
}

TEST(PlanPresets, LookupIsCaseInsensitiveAndAcceptsHfIds) {
  EXPECT_EQ(model_preset("Llama-3-8B").id, "llama-3-8b");
  EXPECT_EQ(model_preset("Qwen/Qwen2.5-7B").id, "qwen2.5-7b");
}

TEST(PlanPresets, UnknownPresetSuggestsClosest) {
  std::string e = error_of([] { model_preset("llama-3-8"); });
  EXPECT_NE(e.find("unknown model preset 'llama-3-8'"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'llama-3-8b'"), std::string::npos) << e;
  e = error_of([] { model_preset("qwen25-7b"); });
  EXPECT_NE(e.find("'qwen2.5-7b'"), std::string::npos) << e;
  e = error_of([] { load_plan_model("mistral7b", false); });  // not a path: points at the preset
  EXPECT_NE(e.find("--preset mistral-7b"), std::string::npos) << e;
  e = error_of([] { device_by_name("h10"); });
  EXPECT_NE(e.find("did you mean 'h100'"), std::string::npos) << e;
}

// ------------------------------------------------------------------ budgets and devices

TEST(PlanBudget, ParsesUnits) {
  EXPECT_EQ(parse_bytes("24GiB"), int64_t(24) << 30);
  EXPECT_EQ(parse_bytes("24 gib"), int64_t(24) << 30);
  EXPECT_EQ(parse_bytes("80GB"), int64_t(80000000000));
  EXPECT_EQ(parse_bytes("512MiB"), int64_t(512) << 20);
  EXPECT_EQ(parse_bytes("1.5GiB"), int64_t(3) << 29);
  EXPECT_EQ(parse_bytes("100MB"), int64_t(100000000));
  EXPECT_EQ(parse_bytes("4096"), 4096);
  EXPECT_EQ(parse_bytes("2T"), int64_t(2) << 40);
}

TEST(PlanBudget, RejectsImpossibleBudgets) {
  for (const char* s : {"0GiB", "-5", "abc", "", "24XB", "nan", "inf", "0", "2000TiB", "-1GiB", "GiB"}) {
    const std::string e = error_of([&] { parse_bytes(s); });
    EXPECT_NE(e.find("invalid size"), std::string::npos) << s << ": " << e;
  }
}

TEST(PlanDevices, CapabilitiesFollowComputeCapability) {
  EXPECT_TRUE(device_by_name("l4").fp8);
  EXPECT_TRUE(device_by_name("RTX 4090").fp8);
  EXPECT_FALSE(device_by_name("a100-40gb").fp8);
  EXPECT_FALSE(device_by_name("a100").fp8);
  EXPECT_TRUE(device_by_name("h100").fp8);
  EXPECT_TRUE(device_by_name("h200").fp8);
  for (const auto& d : device_presets()) {
    EXPECT_EQ(d.fp4, d.id == "b200") << d.id;
    EXPECT_TRUE(d.int8) << d.id;
  }
  EXPECT_EQ(device_by_name("a100-40gb").memory_bytes, int64_t(40960) << 20);
  const Device cpu = device_by_name("cpu");
  EXPECT_TRUE(cpu.is_cpu);
  EXPECT_GT(cpu.memory_bytes, 0);
  EXPECT_EQ(weight_support(device_by_name("a100-80gb"), weight_config("w8a8-fp8")).level, "dequant");
  EXPECT_EQ(weight_support(device_by_name("h100"), weight_config("w8a8-fp8")).level, "native");
  EXPECT_EQ(weight_support(device_by_name("b200"), weight_config("nvfp4")).level, "native");
  EXPECT_EQ(weight_support(device_by_name("h200"), weight_config("nvfp4")).level, "dequant");
}

// ------------------------------------------------------------------ the plan

TEST(PlanMake, RowsCrossEveryWeightWithEveryKvAndSearchesAreTight) {
  const PlanModel m = preset_model("llama-3-8b");
  PlanRequest r = request(8192, 16, "l4");
  r.ctx = {2048, 8192};
  const Plan p = make_plan(m, r);
  ASSERT_EQ(p.per_ctx.size(), 2u);
  for (const auto& cp : p.per_ctx) {
    EXPECT_EQ(cp.rows.size(), weight_configs().size() * kv_configs().size());
    for (const auto& row : cp.rows) {
      const auto& kv = kv_config(row.kv_id);
      EXPECT_EQ(row.total,
                row.weights.total() + row.kv_total + row.workspace.total() + r.device.reserve_bytes);
      EXPECT_EQ(row.fits, row.total <= r.device.memory_bytes);
      EXPECT_EQ(row.kv_total, 16 * kv_bytes_per_sequence(m.config, kv, cp.tokens));
      const int64_t budget = r.device.memory_bytes;
      if (row.max_concurrency > 0) {
        EXPECT_LE(total_bytes(m.config, row.weights, kv, cp.tokens, row.max_concurrency, r), budget);
        EXPECT_GT(total_bytes(m.config, row.weights, kv, cp.tokens, row.max_concurrency + 1, r), budget);
      }
      if (row.max_tokens > 0) {
        EXPECT_LE(total_bytes(m.config, row.weights, kv, row.max_tokens, 16, r), budget);
        EXPECT_GT(total_bytes(m.config, row.weights, kv, row.max_tokens + 1, 16, r), budget);
      }
      EXPECT_EQ(row.fits, row.max_concurrency >= 16);
    }
  }
}

TEST(PlanMake, OutputTokensCountInTheContext) {
  PlanRequest r = request(1000, 1, "h100");
  r.output = 24;
  const Plan p = make_plan(preset_model("llama-2-7b"), r);
  const Row* row = p.per_ctx[0].find("bf16", "bf16");
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(p.per_ctx[0].tokens, 1024);
  EXPECT_EQ(row->kv_total, 1024 * 2 * 32 * 32 * 128 * 2);
}

TEST(PlanMake, WorkspaceFollowsTheDocumentedFormula) {
  const ModelConfig c = small_config();
  const Workspace w = workspace_bytes(c, 2048, 4, 512, 8);
  EXPECT_EQ(w.batch_tokens, 512);
  EXPECT_EQ(w.hidden, 512 * (3 * 256 + 2 * 256 + 2 * 128 + 2 * 768) * 4);
  EXPECT_EQ(w.attention, 8 * 2 * 2048 * 4);
  EXPECT_EQ(w.logits, 4 * (1000 + 256) * 4);
  EXPECT_EQ(workspace_bytes(c, 100, 300, 512, 1).batch_tokens, 300);  // decode batch of 300 sequences
}

TEST(PlanMake, RejectsBadRequests) {
  const PlanModel m = preset_model("llama-3-8b");
  PlanRequest r = request(0, 1, "l4");
  EXPECT_NE(error_of([&] { make_plan(m, r); }).find("--ctx 0"), std::string::npos);
  r = request(1024, 0, "l4");
  EXPECT_NE(error_of([&] { make_plan(m, r); }).find("--concurrency 0"), std::string::npos);
  r = request(1024, 1, "l4");
  r.output = -1;
  EXPECT_NE(error_of([&] { make_plan(m, r); }).find("--output -1"), std::string::npos);
  PlanModel huge = m;
  huge.config.n_heads = huge.config.n_kv_heads = int64_t(1) << 30;
  huge.config.head_dim = 2;
  r = request(1024, 1, "l4");
  EXPECT_NE(error_of([&] { make_plan(huge, r); }).find("implausible"), std::string::npos);
  r.weights = {"int5"};
  EXPECT_NE(error_of([&] { make_plan(m, r); }).find("unknown weight configuration"), std::string::npos);
}

// ------------------------------------------------------------------ recommendation

TEST(PlanRecommend, KvDominatesQuantizesKvFirst) {
  // Llama-3-8B at 64K x 16 on an H100: 128 GiB of BF16 KV against 15 GiB of weights; FP8 KV (64 GiB) plus the
  // weights and the runtime reserve is just over 79.6 GiB, INT4 KV fits.
  const Plan p = make_plan(preset_model("llama-3-8b"), request(65536, 16, "h100"));
  const Recommendation& rec = p.per_ctx[0].rec;
  EXPECT_EQ(rec.bottleneck, "kv");
  EXPECT_TRUE(rec.fits);
  EXPECT_EQ(rec.weight_id, "bf16");
  EXPECT_EQ(rec.kv_id, "int4");
  ASSERT_FALSE(rec.commands.empty());
  EXPECT_EQ(rec.commands[0].rfind("lowbit compare --model meta-llama/Meta-Llama-3-8B --preset kv-first", 0),
            0u)
      << rec.commands[0];
}

TEST(PlanRecommend, KvFirstPicksFp8WhenItFits) {
  const Plan p = make_plan(preset_model("llama-3-8b"), request(32768, 16, "h100"));
  const Recommendation& rec = p.per_ctx[0].rec;
  EXPECT_EQ(rec.bottleneck, "kv");
  EXPECT_EQ(rec.weight_id, "bf16");
  EXPECT_EQ(rec.kv_id, "fp8");
  // 16 sequences: compute-bound hint with the FP8 path on Hopper.
  bool w8 = false;
  for (const auto& c : rec.commands) w8 |= c.find("--preset compute") != std::string::npos;
  EXPECT_TRUE(w8);
}

TEST(PlanRecommend, WeightsDominateQuantizesWeightsFirst) {
  const Plan p = make_plan(preset_model("llama-2-70b"), request(2048, 1, "h100"));
  const Recommendation& rec = p.per_ctx[0].rec;
  EXPECT_EQ(rec.bottleneck, "weights");
  EXPECT_EQ(rec.weight_id, "fp8-w");
  EXPECT_EQ(rec.kv_id, "bf16");
  EXPECT_NE(rec.commands[0].find("--preset weights-first --ctx 2048 --concurrency 1"), std::string::npos)
      << rec.commands[0];
}

TEST(PlanRecommend, BaselineFitsNeedsNoQuantization) {
  const Plan p = make_plan(preset_model("smollm2-135m"), request(2048, 1, "l4"));
  EXPECT_EQ(p.per_ctx[0].rec.bottleneck, "none");
  EXPECT_EQ(p.per_ctx[0].rec.weight_id, "bf16");
  EXPECT_EQ(p.per_ctx[0].rec.kv_id, "bf16");
}

TEST(PlanRecommend, NothingFitsSaysSo) {
  const Plan p = make_plan(preset_model("llama-3-70b"), request(8192, 4, "l4"));
  const Recommendation& rec = p.per_ctx[0].rec;
  EXPECT_FALSE(rec.fits);
  bool larger = false;
  for (const auto& s : rec.reasons) larger |= s.find("larger device") != std::string::npos;
  EXPECT_TRUE(larger);
}

TEST(PlanRecommend, Fp4HardwareEvaluatesFp4Separately) {
  const Plan p = make_plan(preset_model("llama-3-70b"), request(8192, 1, "b200"));
  bool fp4 = false;
  for (const auto& c : p.per_ctx[0].rec.commands) fp4 |= c.find("--preset fp4") != std::string::npos;
  EXPECT_TRUE(fp4);
}

// ------------------------------------------------------------------ inputs

TEST(PlanInput, HfConfigAndMissingFields) {
  Scratch s;
  write_text(s.file("config.json"),
             R"({"model_type":"llama","hidden_size":256,"num_hidden_layers":2,"num_attention_heads":4,)"
             R"("num_key_value_heads":2,"intermediate_size":768,"vocab_size":1000})");
  PlanModel m = load_plan_model(s.dir(), false);
  EXPECT_EQ(m.source, "hf");
  EXPECT_EQ(m.config.n_params(), small_config().n_params());
  m = load_plan_model(s.file("config.json"), false);
  EXPECT_EQ(m.source, "hf-config");

  write_text(s.file("bad.json"), R"({"model_type":"llama","num_hidden_layers":2})");
  std::string e = error_of([&] { load_plan_model(s.file("bad.json"), false); });
  EXPECT_NE(e.find("hidden_size"), std::string::npos) << e;
  write_text(s.file("broken.json"), "{not json");
  EXPECT_NE(error_of([&] { load_plan_model(s.file("broken.json"), false); }).find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of([&] { load_plan_model(s.file("absent.json"), false); }).find("no such file"),
            std::string::npos);
}

TEST(PlanInput, Llama2cHeaderOnly) {
  const int32_t h[7] = {64, 172, 5, 8, 4, 512, 512};
  ModelConfig c = config_from_llama2c_header(reinterpret_cast<const uint8_t*>(h), sizeof h, "x.bin");
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_NE(error_of([&] {
              config_from_llama2c_header(reinterpret_cast<const uint8_t*>(h), 20, "x.bin");
            }).find("28-byte"),
            std::string::npos);
  const int32_t bad[7] = {64, 172, 0, 8, 4, 512, 512};
  EXPECT_NE(error_of([&] {
              config_from_llama2c_header(reinterpret_cast<const uint8_t*>(bad), 28, "x.bin");
            }).find("non-positive"),
            std::string::npos);
}

TEST(PlanInput, QuantizedCheckpointReportsStoredBytes) {
  Scratch s;
  write_text(s.file("config.json"),
             R"({"model_type":"llama","hidden_size":256,"num_hidden_layers":2,"num_attention_heads":4,)"
             R"("num_key_value_heads":2,"intermediate_size":768,"vocab_size":1000,)"
             R"("quantization_config":{"quant_method":"compressed-tensors","format":"pack-quantized"}})");
  std::vector<uint8_t> a(1000), b(4096);
  io::write_safetensors(s.file("model.safetensors"),
                        {{"a.weight_packed", DType::I32, {250}, a.data(), a.size()},
                         {"b.weight", DType::BF16, {2048}, b.data(), b.size()}});
  const PlanModel m = load_plan_model(s.dir(), false);
  EXPECT_EQ(m.source, "hf-quantized");
  ASSERT_TRUE(m.stored_bytes.has_value());
  EXPECT_EQ(*m.stored_bytes, 1000 + 4096);
  const Plan p = make_plan(m, request(1024, 1, "l4"));
  const Row* st = p.per_ctx[0].find("stored", "bf16");
  ASSERT_NE(st, nullptr);
  EXPECT_EQ(st->weights.total(), 5096);
  EXPECT_NE(plan_table(p).find("stored"), std::string::npos);
}

TEST(PlanInput, GgufConfigAndStoredBytes) {
  Scratch s;
  io::GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.embedding_length", 256);
  w.set_u32("llama.block_count", 2);
  w.set_u32("llama.attention.head_count", 4);
  w.set_u32("llama.attention.head_count_kv", 2);
  w.set_u32("llama.feed_forward_length", 768);
  w.set_u32("llama.context_length", 512);
  w.set_u32("llama.vocab_size", 1000);
  std::vector<float> emb(1000 * 256);
  w.add_tensor("token_embd.weight", 0, {1000, 256}, emb.data(), emb.size() * 4);
  w.write(s.file("m.gguf"));
  const PlanModel m = load_plan_model(s.file("m.gguf"), false);
  EXPECT_EQ(m.source, "gguf");
  EXPECT_EQ(m.config.n_kv_heads, 2);
  ASSERT_TRUE(m.stored_bytes.has_value());
  EXPECT_EQ(*m.stored_bytes, 1000 * 256 * 4);
  write_text(s.file("junk.gguf"), "GGUF but not really");
  EXPECT_NE(error_of([&] { load_plan_model(s.file("junk.gguf"), false); }).find("cannot plan"),
            std::string::npos);
}

// ------------------------------------------------------------------ reports

TEST(PlanReport, JsonTableAndChart) {
  PlanRequest r = request(8192, 16, "l4");
  r.ctx = {2048, 8192, 32768};
  const Plan p = make_plan(preset_model("llama-3-8b"), r);
  const nlohmann::json j = plan_to_json(p);
  ASSERT_EQ(j["contexts"].size(), 3u);
  EXPECT_EQ(j["contexts"][0]["rows"].size(), 40u);
  EXPECT_EQ(j["weight_configs"].size(), 10u);
  EXPECT_EQ(j["kv_configs"][3]["id"], "int4");
  EXPECT_EQ(j["contexts"][1]["rows"][0]["kv_bytes"].get<int64_t>(),
            int64_t(16) * 8192 * 2 * 32 * 8 * 128 * 2);
  const std::string t = plan_table(p);
  EXPECT_NE(t.find("W4A16 INT4 g128 sym"), std::string::npos);
  EXPECT_NE(t.find("recommendation:"), std::string::npos);
  EXPECT_NE(t.find("lowbit compare --model meta-llama/Meta-Llama-3-8B"), std::string::npos);
  const std::string svg = plan_chart_svg(p);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("budget"), std::string::npos);
  EXPECT_NE(svg.find("total memory (GiB)"), std::string::npos);
  EXPECT_NE(svg.find("context length"), std::string::npos);
  EXPECT_NE(svg.find("BF16 / KV BF16"), std::string::npos);
  EXPECT_NE(svg.find("W4A16 g128 / KV FP8"), std::string::npos);
  EXPECT_EQ(svg.find("NaN"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  const std::string html = plan_chart_html(p);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("</html>"), std::string::npos);
}

// ------------------------------------------------------------------ CLI

int run_cli(const std::string& args) {
  const std::string cmd =
      std::string(LOWBIT_BINARY_DIR) + "/apps/lowbit/lowbit plan " + args + " >/dev/null 2>&1";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(PlanCli, ExitCodes) {
  ASSERT_TRUE(fs::exists(std::string(LOWBIT_BINARY_DIR) + "/apps/lowbit/lowbit"));
  EXPECT_EQ(run_cli("--preset llama-3-8b --ctx 8192 --concurrency 16 --device l4"), 0);
  EXPECT_EQ(run_cli("--preset llama-3-8b --ctx 2048,8k --budget 24GiB --json"), 0);
  EXPECT_EQ(run_cli("--preset llama-3-8 --ctx 8192"), 2);
  EXPECT_EQ(run_cli("--preset llama-3-8b --budget 0GiB"), 2);
  EXPECT_EQ(run_cli("--preset llama-3-8b --budget -5"), 2);
  EXPECT_EQ(run_cli("--preset llama-3-8b --budget abc"), 2);
  EXPECT_EQ(run_cli("--preset llama-3-8b --device tpu"), 2);
  EXPECT_EQ(run_cli("--preset llama-3-8b --ctx abc"), 2);
  EXPECT_EQ(run_cli("--ctx 1024"), 2);  // no model
  Scratch s;
  write_text(s.file("config.json"), R"({"model_type":"llama","num_hidden_layers":2})");
  EXPECT_EQ(run_cli("--model " + s.file("config.json")), 2);
  EXPECT_EQ(run_cli("--preset llama-3-8b --chart " + s.file("c.png")), 2);
  EXPECT_EQ(run_cli("--preset llama-3-8b --chart " + s.file("c.svg")), 0);
  EXPECT_TRUE(fs::exists(s.file("c.svg")));
}

}  // namespace
}  // namespace lowbit::plan
