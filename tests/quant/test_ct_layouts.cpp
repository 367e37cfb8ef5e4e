// compressed-tensors' floating-point layouts and quantization_config, checked against the specification:
//  - an independent NumPy decoder (tests/reference/dequant_ct_float.py, written from compressed-tensors'
//    float-quantized / nvfp4-pack-quantized / mxfp4-pack-quantized compressors and the OCP FP8 / MX specs)
//    dequantizes lowbit's FP8 (per tensor, channel, group, 2-D block), NVFP4 and MXFP4 checkpoints to
//    lowbit's own dequantized weights, bit for bit;
//  - quantization_config holds only fields compressed-tensors' pydantic models accept (QuantizationScheme and
//    QuantizationArgs forbid extra keys, so vLLM / transformers refuse a group with a lowbit key); lowbit's
//    exact scheme and INT4 activation clip travel in quantization_config.lowbit_groups and round-trip;
//  - KV-cache scales carry the names vLLM's maybe_remap_kv_scale_name maps (model.layers.i.self_attn.k_scale)
//    and kv_cache_scheme the fields vLLM validates;
//  - E5M2 weights, which compressed-tensors' args cannot tell from E4M3, are written lowbit-packed; an
//    unquantized lm_head (tied or not) is in the ignore list;
//  - checkpoints written before lowbit_groups (lowbit_scheme in the group, lowbit_clip / lowbit_format in the
//    activation args, E5M2 weights as float-quantized) still load to the same matrices.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "io/safetensors.h"
#include "kernels/matmul.h"
#include "model/quantized_checkpoint.h"
#include "quant/checkpoint_writer.h"
#include "quant/export.h"
#include "quant/quantizer.h"
#include "tests/quant/quant_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace lowbit::quant {
namespace {

using testing::make_random_model;
using testing::temp_path;

struct Written {
  std::unique_ptr<Model> model;  // the quantized model in memory
  std::string dir;
};

Written write(const Recipe& r, const std::string& name, bool tied = false) {
  Written w;
  w.model = make_random_model(11, true, 96);  // dim 64, kv 32, ffn 96: every 32x32 block whole
  w.model->config.rope_style = RopeStyle::Half;
  if (tied) {
    w.model->weights.lm_head = w.model->weights.tok_embed;
    w.model->config.tie_embeddings = true;
  }
  auto calib = testing::random_calib(*w.model, 4, 32, 1);
  QuantizeOptions o;
  o.progress = false;
  o.calib = r.needs_calibration() ? &calib : nullptr;
  QuantReport rep = quantize_model(*w.model, r, o);
  w.dir = temp_path("ct_" + name);
  write_quantized_checkpoint(*w.model, rep, w.dir);
  return w;
}

Written write(const std::string& recipe, const std::string& name, bool tied = false) {
  return write(parse_recipe_arg(recipe), name, tied);
}

std::vector<float> dequantized(const WeightMatrix& w) {
  std::vector<float> f(static_cast<size_t>(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) weight_row_f32(w, r, f.data() + r * w.cols);
  return f;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

void write_json(const std::string& path, const json& j) {
  std::ofstream(path) << j.dump(2);
}

// compressed-tensors 0.12 QuantizationArgs fields (0.18 adds scale_dtype / zp_dtype, torch dtype names,
// which lowbit does not write); QuantizationScheme fields.
const std::set<std::string> kArgsFields = {
    "num_bits",        "type",    "symmetric", "group_size", "strategy",
    "block_structure", "dynamic", "actorder",  "observer",   "observer_kwargs"};
const std::set<std::string> kSchemeFields = {"targets", "weights", "input_activations", "output_activations",
                                             "format"};

void expect_ct_args(const json& a, bool activation, const std::string& what) {
  ASSERT_TRUE(a.is_object()) << what;
  for (auto it = a.begin(); it != a.end(); ++it)
    EXPECT_TRUE(kArgsFields.count(it.key()))
        << what << ": '" << it.key() << "' is not a QuantizationArgs field";
  EXPECT_TRUE(a.at("type") == "int" || a.at("type") == "float") << what;
  const std::string st = a.at("strategy");
  static const std::set<std::string> strategies = {"tensor", "channel",      "group",    "block",
                                                   "token",  "tensor_group", "attn_head"};
  EXPECT_TRUE(strategies.count(st)) << what << ": strategy " << st;
  const bool grouped = st == "group" || st == "tensor_group";
  EXPECT_EQ(grouped, a.contains("group_size") && a["group_size"].is_number_integer() && a["group_size"] > 0)
      << what << ": group_size goes with (and only with) a group strategy";
  EXPECT_EQ(st == "block", a.contains("block_structure")) << what;
  if (st == "token") {
    EXPECT_EQ(a.at("dynamic"), true) << what << ": token strategy must be dynamic";
  }
  if (activation) {
    static const std::set<std::string> act = {"token", "tensor", "group", "tensor_group", "attn_head"};
    EXPECT_TRUE(act.count(st)) << what << ": activation strategy " << st;
    EXPECT_TRUE(!a.contains("actorder") || a["actorder"].is_null()) << what;
  }
}

void expect_ct_config(const json& qc, const std::string& what) {
  EXPECT_EQ(qc.at("quant_method"), "compressed-tensors") << what;
  EXPECT_EQ(qc.at("quantization_status"), "compressed") << what;
  EXPECT_TRUE(qc.at("ignore").is_array()) << what;
  static const std::set<std::string> formats = {"float-quantized", "nvfp4-pack-quantized",
                                                "mxfp4-pack-quantized", "pack-quantized", "mixed-precision"};
  EXPECT_TRUE(formats.count(qc.at("format"))) << what << ": format " << qc["format"];
  ASSERT_TRUE(qc.at("config_groups").is_object()) << what;
  for (auto it = qc["config_groups"].begin(); it != qc["config_groups"].end(); ++it) {
    const json& g = it.value();
    const std::string w = what + " " + it.key();
    for (auto k = g.begin(); k != g.end(); ++k)
      EXPECT_TRUE(kSchemeFields.count(k.key()))
          << w << ": '" << k.key() << "' is not a QuantizationScheme field";
    EXPECT_TRUE(g.at("targets").is_array()) << w;
    EXPECT_NE(g.at("format"), "mixed-precision") << w;
    expect_ct_args(g.at("weights"), false, w + " weights");
    if (!g.at("input_activations").is_null()) expect_ct_args(g["input_activations"], true, w + " input");
    ASSERT_TRUE(qc.at("lowbit_groups").contains(it.key())) << w;
    EXPECT_NO_THROW(parse_scheme(qc["lowbit_groups"][it.key()].at("scheme").get<std::string>())) << w;
  }
  if (!qc.at("kv_cache_scheme").is_null())
    expect_ct_args(qc["kv_cache_scheme"], true, what + " kv_cache_scheme");
}

void expect_same_model(Model& a, Model& b, const std::string& what) {
  auto na = a.weights.named_matrices(), nb = b.weights.named_matrices();
  ASSERT_EQ(na.size(), nb.size()) << what;
  for (size_t i = 0; i < na.size(); ++i) {
    const WeightMatrix &x = *na[i].second, &y = *nb[i].second;
    ASSERT_EQ(x.kind, y.kind) << what << " " << na[i].first;
    if (x.kind != WeightKind::Quant) continue;
    EXPECT_EQ(to_string(x.q->scheme), to_string(y.q->scheme)) << what << " " << na[i].first;
    EXPECT_EQ(x.q->codes, y.q->codes) << what << " " << na[i].first;
    EXPECT_EQ(x.q->scales, y.q->scales) << what << " " << na[i].first;
    EXPECT_EQ(x.q->global_scale, y.q->global_scale) << what << " " << na[i].first;
    EXPECT_EQ(x.act_format, y.act_format) << what << " " << na[i].first;
    EXPECT_EQ(x.act_static_scale, y.act_static_scale) << what << " " << na[i].first;
    EXPECT_EQ(x.act_clip, y.act_clip) << what << " " << na[i].first;
  }
  for (size_t l = 0; l < a.weights.layers.size(); ++l) {
    EXPECT_EQ(a.weights.layers[l].k_scale, b.weights.layers[l].k_scale) << what << " layer " << l;
    EXPECT_EQ(a.weights.layers[l].v_scale, b.weights.layers[l].v_scale) << what << " layer " << l;
  }
}

struct Case {
  const char* recipe;
  const char* layout;  // the format every quantized group must have
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.recipe;
}

class CtFloatLayouts : public ::testing::TestWithParam<Case> {};

TEST_P(CtFloatLayouts, SpecDecoderAgreesAndConfigIsCompressedTensors) {
  const Case c = GetParam();
  std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::replace(name.begin(), name.end(), '/', '_');
  Written w = write(c.recipe, name);
  const json qc = read_json(w.dir + "/config.json").at("quantization_config");
  expect_ct_config(qc, c.recipe);
  EXPECT_EQ(qc.at("format"), c.layout) << c.recipe;
  auto loaded = load_model(w.dir);
  expect_same_model(*w.model, *loaded, c.recipe);
  auto ref = testing::reference_decoder_modules("dequant_ct_float.py", w.dir);
  int n = 0;
  for (auto& [name, m] : loaded->weights.named_matrices()) {
    if (m->kind != WeightKind::Quant) continue;
    auto it = ref.find(hf_module_name(name));
    ASSERT_NE(it, ref.end()) << c.recipe << ": the reference decoded no " << hf_module_name(name);
    EXPECT_EQ(it->second, dequantized(*m)) << c.recipe << " " << name;
    ++n;
  }
  EXPECT_GE(n, 14) << c.recipe;
  fs::remove_all(w.dir);
}

INSTANTIATE_TEST_SUITE_P(
    Recipes, CtFloatLayouts,
    ::testing::Values(Case{"e4m3:tensor:f32", "float-quantized"}, Case{"e4m3:channel:f32", "float-quantized"},
                      Case{"e4m3:channel:bf16", "float-quantized"}, Case{"e4m3:g32:f32", "float-quantized"},
                      Case{"FP8", "float-quantized"},          // static per-tensor e4m3 activations
                      Case{"FP8_DYNAMIC", "float-quantized"},  // per-token dynamic e4m3 activations
                      Case{"FP8_BLOCK,scheme=e4m3:block32x32:f32", "float-quantized"},
                      Case{"FP8_DYNAMIC,kv=e4m3", "float-quantized"},
                      // E5M2 activations: compressed-tensors' args say float/8 bits; lowbit_groups says E5M2
                      Case{"e4m3:channel:f32,act=e5m2", "float-quantized"},
                      Case{"NVFP4", "nvfp4-pack-quantized"}, Case{"MXFP4", "mxfp4-pack-quantized"}));

// vLLM maps "model.layers.i.self_attn.k_scale" to its attention layer's k_scale (maybe_remap_kv_scale_name
// inserts ".attn"), and takes kv_cache_scheme {type float, num_bits 8, strategy tensor, symmetric}.
TEST(CtKvCache, ScaleNamesAndSchemeAsVllmReadsThem) {
  for (const bool per_head : {false, true}) {
    const std::string recipe = std::string("FP8_DYNAMIC,kv=e4m3") + (per_head ? ",kv_strategy=head" : "");
    Written w = write(recipe, per_head ? "kv_head" : "kv_tensor");
    const json qc = read_json(w.dir + "/config.json").at("quantization_config");
    const json& kv = qc.at("kv_cache_scheme");
    EXPECT_EQ(kv.at("type"), "float");
    EXPECT_EQ(kv.at("num_bits"), 8);
    EXPECT_EQ(kv.at("symmetric"), true);
    EXPECT_EQ(kv.at("dynamic"), false);
    EXPECT_EQ(kv.at("strategy"), per_head ? "attn_head" : "tensor");
    EXPECT_EQ(qc.at("lowbit_kv_format"), "e4m3fn");
    auto sf = io::SafetensorsFile::open(w.dir + "/model.safetensors");
    const int64_t n = per_head ? w.model->config.n_kv_heads : 1;
    for (int64_t l = 0; l < w.model->config.n_layers; ++l)
      for (const char* kvn : {"k_scale", "v_scale"}) {
        const std::string name = "model.layers." + std::to_string(l) + ".self_attn." + kvn;
        auto it = sf.tensors.find(name);
        ASSERT_NE(it, sf.tensors.end()) << name;
        EXPECT_EQ(it->second.dtype, DType::F32) << name;
        EXPECT_EQ(it->second.shape, std::vector<int64_t>{n}) << name;
      }
    auto loaded = load_model(w.dir);
    expect_same_model(*w.model, *loaded, recipe);
    fs::remove_all(w.dir);
  }
}

// Checkpoints written before lowbit_groups kept lowbit's scheme in the group ("lowbit_scheme"), the scale
// dtype in the weights args and the INT4 clip in the activation args: they load to the same matrices.
TEST(CtConfig, CheckpointsWithTheEarlierLowbitKeysStillLoad) {
  for (const char* recipe : {"int4:g32:sym,act=int4,act_clip=0.9", "NVFP4", "e4m3:channel:bf16,act=e4m3"}) {
    Written w = write(recipe, "old_keys");
    json cfg = read_json(w.dir + "/config.json");
    json& qc = cfg["quantization_config"];
    for (auto it = qc["config_groups"].begin(); it != qc["config_groups"].end(); ++it) {
      const json& lg = qc["lowbit_groups"][it.key()];
      const QuantScheme s = parse_scheme(lg["scheme"].get<std::string>());
      it.value()["lowbit_scheme"] = lg["scheme"];
      it.value()["weights"]["scale_dtype"] = scale_type_name(s.scale_type);
      if (lg.contains("act_clip")) it.value()["input_activations"]["lowbit_clip"] = lg["act_clip"];
    }
    qc.erase("lowbit_groups");
    write_json(w.dir + "/config.json", cfg);
    auto loaded = load_model(w.dir);
    expect_same_model(*w.model, *loaded, std::string(recipe) + " (earlier keys)");
    fs::remove_all(w.dir);
  }
}

// compressed-tensors' float-quantized means E4M3FN weights (vLLM loads them into a float8_e4m3fn
// parameter): E5M2 weights are written lowbit-packed, and checkpoints that held them as float-quantized
// (M.weight F8_E5M2) still load.
TEST(CtConfig, E5m2WeightsAreLowbitPackedAndTheEarlierLayoutLoads) {
  Written w = write("e5m2:channel:bf16,act=e5m2", "e5m2");
  json cfg = read_json(w.dir + "/config.json");
  EXPECT_EQ(cfg["quantization_config"]["format"], "lowbit-packed");
  auto loaded = load_model(w.dir);
  expect_same_model(*w.model, *loaded, "e5m2");
  // The earlier layout: M.weight F8_E5M2 [rows, cols] + M.weight_scale, format float-quantized, the scheme in
  // the group and the activation format in the activation args.
  auto sf = io::SafetensorsFile::open(w.dir + "/model.safetensors");
  std::vector<io::TensorToWrite> out;
  for (auto& [name, v] : sf.tensors) {
    const std::string suffix = ".weight_packed";
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      const std::string m = name.substr(0, name.size() - suffix.size());
      out.push_back({m + ".weight", DType::F8_E5M2, v.shape, v.data, v.nbytes});
    } else if (name.find(".weight_shape") == std::string::npos) {
      out.push_back({name, v.dtype, v.shape, v.data, v.nbytes});
    }
  }
  const std::string old = w.dir + "-old";
  fs::create_directories(old);
  io::write_safetensors(old + "/model.safetensors", out, {{"format", "pt"}});
  json& qc = cfg["quantization_config"];
  qc["format"] = "float-quantized";
  for (auto it = qc["config_groups"].begin(); it != qc["config_groups"].end(); ++it) {
    it.value()["format"] = "float-quantized";
    it.value()["lowbit_scheme"] = qc["lowbit_groups"][it.key()]["scheme"];
    it.value()["input_activations"]["lowbit_format"] = qc["lowbit_groups"][it.key()]["act"];
  }
  qc.erase("lowbit_groups");
  write_json(old + "/config.json", cfg);
  auto earlier = load_model(old);
  expect_same_model(*w.model, *earlier, "e5m2 (earlier float-quantized layout)");
  fs::remove_all(w.dir);
  fs::remove_all(old);
}

// A head tied to an unquantized embedding is not written; compressed-tensors' "Linear" target would match the
// model's lm_head, so it is in the ignore list (llm-compressor writes the same). An untied unquantized head
// is listed too; a quantized one is not.
TEST(CtConfig, UnquantizedHeadIsIgnoredTiedOrNot) {
  for (const bool tied : {true, false}) {
    Written w = write("FP8_DYNAMIC", tied ? "head_tied" : "head_untied", tied);
    ASSERT_EQ(w.model->weights.tied(), tied);
    const json qc = read_json(w.dir + "/config.json").at("quantization_config");
    const json& ig = qc.at("ignore");
    EXPECT_EQ(std::count(ig.begin(), ig.end(), json("lm_head")), 1) << ig.dump();
    EXPECT_EQ(qc.at("config_groups").at("group_0").at("targets"), json::array({"Linear"}));
    auto loaded = load_model(w.dir);
    expect_same_model(*w.model, *loaded, tied ? "tied" : "untied");
    fs::remove_all(w.dir);
  }
  Written q = write(recipe_from_json(json::parse(R"({"scheme": "e4m3:channel:f32", "ignore": []})")),
                    "head_quantized");
  const json qc = read_json(q.dir + "/config.json").at("quantization_config");
  const json& ig = qc.at("ignore");
  EXPECT_EQ(std::count(ig.begin(), ig.end(), json("lm_head")), 0) << ig.dump();
  fs::remove_all(q.dir);
}

// The INT4 / NVFP4 activation clip comes back from lowbit_groups (not from the activation args); NVFP4
// activations are written as compressed-tensors' dynamic float groups of 16.
TEST(CtConfig, Int4ActivationClipTravelsInLowbitGroups) {
  for (const char* act : {"int4", "nvfp4"}) {
    Written w = write(std::string("int4:g32:sym,act=") + act + ",act_clip=0.9", "clip");
    const json qc = read_json(w.dir + "/config.json").at("quantization_config");
    expect_ct_config(qc, std::string(act) + " act clip");
    EXPECT_EQ(qc["lowbit_groups"]["group_0"].at("act_clip"), 0.9) << act;
    const json& ia = qc["config_groups"]["group_0"].at("input_activations");
    EXPECT_EQ(ia.at("strategy"), std::string(act) == "nvfp4" ? "group" : "token") << act;
    auto loaded = load_model(w.dir);
    for (auto& [name, m] : loaded->weights.named_matrices()) {
      if (m->kind == WeightKind::Quant) {
        EXPECT_FLOAT_EQ(m->act_clip, 0.9f) << name;
        EXPECT_EQ(m->act_format, std::string(act) == "nvfp4" ? FormatId::NVFP4 : FormatId::INT4) << name;
      }
    }
    fs::remove_all(w.dir);
  }
}

// The NVFP4 block-scale rule (act_scale=mse) travels in lowbit_groups and comes back on every matrix; an
// unknown rule, or one on a group whose activations are not NVFP4, is refused with a [model] message.
TEST(CtConfig, Nvfp4BlockScaleRuleTravelsInLowbitGroupsAndBadOnesAreRefused) {
  Written w = write("int4:g32:sym,act=nvfp4,act_scale=mse", "act_scale");
  json cfg = read_json(w.dir + "/config.json");
  expect_ct_config(cfg.at("quantization_config"), "act_scale=mse");
  EXPECT_EQ(cfg["quantization_config"]["lowbit_groups"]["group_0"].at("act_scale"), "mse");
  auto loaded = load_model(w.dir);
  int n = 0;
  for (auto& [name, m] : loaded->weights.named_matrices())
    if (m->kind == WeightKind::Quant) {
      EXPECT_EQ(m->act_scale, ActScale::Mse) << name;
      ++n;
    }
  EXPECT_GT(n, 0);
  const auto refused = [&](const json& value, const char* act, const char* says) {
    json c = cfg;
    c["quantization_config"]["lowbit_groups"]["group_0"]["act_scale"] = value;
    if (act) c["quantization_config"]["lowbit_groups"]["group_0"]["act"] = act;
    write_json(w.dir + "/config.json", c);
    try {
      load_model(w.dir);
      ADD_FAILURE() << value.dump() << " loaded";
    } catch (const lowbit::Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("[model] ", 0), 0u) << msg;
      EXPECT_NE(msg.find(says), std::string::npos) << msg;
    }
  };
  refused("best", nullptr, "\"best\" is not \"amax\" or \"mse\"");
  refused(3, nullptr, "3 is not");
  refused("mse", "int4", "applies to nvfp4 activations");
  fs::remove_all(w.dir);
}

}  // namespace
}  // namespace lowbit::quant

namespace lowbit::quant {
namespace {

// vLLM fuses q/k/v and gate/up and keeps one NVFP4 global scale per fused matrix: lowbit's parts share the
// scale of their group's largest |w| (RTN and GPTQ), reload with it, and the fused group's scale is what each
// part's own max would give for the part that holds the group max.
TEST(CtNvfp4, FusedMatricesShareOneGlobalScale) {
  for (const char* recipe : {"NVFP4", "NVFP4,algo=gptq"}) {
    SCOPED_TRACE(recipe);
    Written w =
        write(recipe, std::string("nvfp4_fused_") + (std::string(recipe).size() > 5 ? "gptq" : "rtn"));
    auto back = load_model(w.dir);
    for (int64_t l = 0; l < w.model->config.n_layers; ++l) {
      const LayerWeights& L = back->weights.layers[l];
      for (const auto& group : {std::vector<const WeightMatrix*>{&L.wq, &L.wk, &L.wv},
                                std::vector<const WeightMatrix*>{&L.w_gate, &L.w_up}}) {
        ASSERT_TRUE(group[0]->q);
        const float g = group[0]->q->global_scale;
        float amax = 0;
        for (const WeightMatrix* m : group) {
          ASSERT_EQ(m->kind, WeightKind::Quant);
          EXPECT_EQ(m->q->global_scale, g) << "layer " << l;
          for (float x : dequantized(*m)) amax = std::max(amax, std::fabs(x));
        }
        // 448 * 6 / amax of the source group; the dequantized max is within NVFP4's rounding of it.
        EXPECT_GT(g, 0.0f);
        EXPECT_NEAR(448.0f * 6.0f / g, amax, 0.2f * amax) << "layer " << l;
      }
      // o_proj and down_proj are not fused: their own scale.
      EXPECT_NE(L.wo.q->global_scale, L.w_down.q->global_scale);
    }
    fs::remove_all(w.dir);
  }
}

// A GPTQ / AWQ checkpoint re-emitted as compressed-tensors carries the same compressed-tensors-only groups
// (lowbit's scheme in lowbit_groups), and loads back to the same model.
TEST(CtConfig, ExportFromGptqIsCompressedTensors) {
  Written w = write("int4:g32:asym", "export_src");
  ExportOptions o;
  o.to = "gptq";
  o.gptq_v2 = true;
  export_checkpoint(w.dir, w.dir + "-gptq", o);
  o.to = "compressed-tensors";
  export_checkpoint(w.dir + "-gptq", w.dir + "-ct", o);
  const json qc = read_json(w.dir + "-ct/config.json").at("quantization_config");
  expect_ct_config(qc, "gptq -> compressed-tensors");
  auto a = load_model(w.dir);
  auto b = load_model(w.dir + "-ct");
  expect_same_model(*a, *b, "gptq -> compressed-tensors");
  for (const char* d : {"", "-gptq", "-ct"}) fs::remove_all(w.dir + d);
}

}  // namespace
}  // namespace lowbit::quant
