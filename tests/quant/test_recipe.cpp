// Recipes: presets, the W/A/KV notation, JSON and shorthand parsing, validation against a model.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "quant/recipe.h"
#include "tests/common/usage_message.h"

namespace lowbit::quant {
namespace {

using nlohmann::json;

ModelConfig small_config(int64_t dim = 64, int64_t ffn = 172) {
  ModelConfig c;
  c.dim = dim;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 4;
  c.head_dim = dim / 4;
  c.ffn_dim = ffn;
  c.vocab_size = 100;
  return c;
}

using testing_util::usage_message;

bool has_note(const Recipe& r, const std::string& needle) {
  for (auto& n : r.notes)
    if (n.find(needle) != std::string::npos) return true;
  return false;
}

TEST(Recipe, PresetsFollowCompressedTensors) {
  auto w4 = preset_recipe("W4A16");
  ASSERT_TRUE(w4);
  EXPECT_EQ(to_string(w4->weights), to_string(parse_scheme("int4:g128:sym:f16")));
  EXPECT_FALSE(w4->act.enabled());
  EXPECT_FALSE(preset_recipe("W4A16_ASYM")->weights.symmetric);
  auto w8a8 = preset_recipe("w8a8");  // case-insensitive
  ASSERT_TRUE(w8a8);
  EXPECT_EQ(w8a8->weights.format, FormatId::INT8);
  EXPECT_EQ(w8a8->weights.gran, Granularity::Channel);
  EXPECT_EQ(w8a8->act.format, FormatId::INT8);
  EXPECT_TRUE(w8a8->act.dynamic);
  auto fp8 = preset_recipe("FP8");
  EXPECT_EQ(fp8->weights.gran, Granularity::Tensor);
  EXPECT_EQ(fp8->act.format, FormatId::E4M3FN);
  EXPECT_FALSE(fp8->act.dynamic);  // static per-tensor
  EXPECT_TRUE(fp8->needs_calibration());
  auto fpd = preset_recipe("FP8_DYNAMIC");
  EXPECT_EQ(fpd->weights.gran, Granularity::Channel);
  EXPECT_TRUE(fpd->act.dynamic);
  EXPECT_FALSE(fpd->needs_calibration());
  auto blk = preset_recipe("FP8_BLOCK");
  EXPECT_EQ(blk->weights.gran, Granularity::Block2D);
  EXPECT_EQ(blk->weights.block_rows, 128);
  EXPECT_EQ(preset_recipe("NF4")->weights.format, FormatId::NF4);
  EXPECT_EQ(preset_recipe("NVFP4")->weights.format, FormatId::NVFP4);
  EXPECT_EQ(preset_recipe("MXFP4")->weights.format, FormatId::MXFP4);
  EXPECT_EQ(preset_recipe("W4A8")->act.format, FormatId::INT8);
  EXPECT_FALSE(preset_recipe("W5A16_BOGUS"));
  // Default ignore: embeddings and lm_head, with a reason.
  ASSERT_EQ(w4->ignore.size(), 2u);
  EXPECT_NE(w4->ignore[1].reason.find("lm_head"), std::string::npos);
}

TEST(Recipe, WakvNotationReportsWhatItLeavesOpen) {
  auto a = parse_wakv("W4A16");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->weights.format, FormatId::INT4);
  EXPECT_FALSE(a->act.enabled());
  EXPECT_FALSE(a->kv.enabled());
  EXPECT_TRUE(has_note(*a, "KV format not stated: KV stays 16-bit"));
  auto b = parse_wakv("W8A8");
  EXPECT_EQ(b->weights.format, FormatId::INT8);
  EXPECT_EQ(b->act.format, FormatId::INT8);
  auto c = parse_wakv("W4A16KV8");
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->kv.enabled());
  EXPECT_EQ(c->kv.format, FormatId::E4M3FN);
  EXPECT_TRUE(has_note(*c, "KV8"));
  auto d = parse_wakv("w4a4kv4");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->act.format, FormatId::INT4);
  EXPECT_EQ(d->kv.format, FormatId::INT4);
  EXPECT_FALSE(parse_wakv("W4"));
  EXPECT_FALSE(parse_wakv("int4:g32"));
  EXPECT_NE(usage_message([] { parse_wakv("W5A16"); }).find("W5"), std::string::npos);
  EXPECT_NE(usage_message([] { parse_wakv("W999A16"); }).find("W999"), std::string::npos);
  // Found by fuzz_recipe: a width too long for int escaped std::stoi as std::out_of_range (not a UsageError).
  EXPECT_FALSE(parse_wakv("W4A155555555555555555KV8"));
  EXPECT_NE(usage_message([] { parse_recipe_arg("W99999999999A16"); }).find("unknown recipe"),
            std::string::npos);
}

TEST(Recipe, W4A4PlansAndWarnsAboutRotation) {
  auto r = *parse_wakv("W4A4KV4");
  EXPECT_EQ(r.act.format, FormatId::INT4);
  EXPECT_TRUE(r.act.dynamic);
  EXPECT_EQ(r.act.clip, 1.0f);
  r.weights.group_size = 32;
  std::vector<std::string> warn;
  const auto plans = plan_recipe(r, small_config(64, 128), &warn);
  bool rot_warned = false;
  for (auto& w : warn) rot_warned |= w.find("W4A4 without rotation") != std::string::npos;
  EXPECT_TRUE(rot_warned);
  for (auto& p : plans)
    if (p.quantize && p.name != "tok_embed") EXPECT_EQ(p.act.format, FormatId::INT4) << p.name;
  // With a rotation the warning goes.
  r.rotation.method = "quarot";
  warn.clear();
  plan_recipe(r, small_config(64, 128), &warn);
  for (auto& w : warn) EXPECT_EQ(w.find("W4A4 without rotation"), std::string::npos) << w;
  // Int8 activations with 4-bit weights are fine; the rotation warning is for 4-bit activations only.
  Recipe ok = *preset_recipe("W4A8");
  ok.weights.group_size = 32;
  warn.clear();
  EXPECT_NO_THROW(plan_recipe(ok, small_config(64, 128), &warn));
  for (auto& w : warn) EXPECT_EQ(w.find("rotation"), std::string::npos);
}

TEST(Recipe, JsonRecipeAndUnknownKeysAreNamed) {
  json j = json::parse(R"({"name": "mine", "scheme": "int4:g32:asym", "algorithm": "gptq",
    "overrides": [{"pattern": "*.w_down", "scheme": "int8:channel"}],
    "ignore": ["lm_head", {"pattern": "re:.*embed.*", "reason": "gather"}],
    "calibration": {"file": "x.txt", "samples": 8, "length": 64, "seed": 3},
    "gptq": {"act_order": false}, "kv_cache": {"format": "e4m3", "strategy": "head"}})");
  Recipe r = recipe_from_json(j);
  EXPECT_EQ(r.name, "mine");
  EXPECT_EQ(r.algorithm, Algorithm::Gptq);
  EXPECT_FALSE(r.weights.symmetric);
  EXPECT_EQ(r.weights.group_size, 32);
  ASSERT_EQ(r.overrides.size(), 1u);
  ASSERT_EQ(r.ignore.size(), 2u);
  EXPECT_EQ(r.ignore[1].reason, "gather");
  EXPECT_EQ(r.calib.samples, 8);
  EXPECT_EQ(r.calib.seed, 3u);
  EXPECT_FALSE(r.gptq_act_order);
  EXPECT_TRUE(r.kv.per_head);
  // Round trip through the normalised form.
  Recipe r2 = recipe_from_json(r.to_json());
  EXPECT_EQ(r2.to_json().dump(), r.to_json().dump());

  std::string m1 =
      usage_message([] { recipe_from_json(json::parse(R"({"scheme": "int4", "algoritm": "gptq"})")); });
  EXPECT_NE(m1.find("'algoritm'"), std::string::npos) << m1;
  std::string m2 = usage_message(
      [] { recipe_from_json(json::parse(R"({"scheme": "int4", "calibration": {"sample": 3}})")); });
  EXPECT_NE(m2.find("'sample'"), std::string::npos) << m2;
  EXPECT_NE(m2.find("calibration"), std::string::npos) << m2;
}

TEST(Recipe, BadRecipesExplainThemselves) {
  auto msg = [&](const char* s) { return usage_message([&] { recipe_from_json(json::parse(s)); }); };
  EXPECT_NE(msg(R"({"scheme": "int5:g32"})").find("int5"), std::string::npos);
  EXPECT_NE(msg(R"({"scheme": "int4", "algorithm": "magic"})").find("magic"), std::string::npos);
  EXPECT_NE(msg(R"({"algorithm": "gptq"})").find("no weight scheme"), std::string::npos);
  EXPECT_NE(msg(R"({"scheme": "int4", "calibration": {"samples": 0}})").find("samples"), std::string::npos);
  EXPECT_NE(msg(R"({"scheme": "int4", "smoothquant": {"alpha": 2}})").find("alpha"), std::string::npos);
  EXPECT_NE(msg(R"({"scheme": "int4", "activations": {"format": "int7"}})").find("int7"), std::string::npos);
  EXPECT_NE(msg(R"({"scheme": 4})").find("wrong type"), std::string::npos);
  EXPECT_NE(msg(R"({"scheme": "int4", "overrides": [{"pattern": "x"}]})").find("scheme"), std::string::npos);
  EXPECT_NE(msg(R"({"scheme": "int4", "algorithm": "smoothquant+awq"})").find("smoothquant+awq"),
            std::string::npos);
  EXPECT_NE(usage_message([] { parse_recipe_arg("W4A16,grup=32"); }).find("grup"), std::string::npos);
  EXPECT_NE(usage_message([] { parse_recipe_arg("NOPE"); }).find("unknown recipe"), std::string::npos);
  EXPECT_NE(usage_message([] { parse_recipe_arg("/nonexistent/r.json"); }).find("cannot open"),
            std::string::npos);
}

TEST(Recipe, ShorthandRefinements) {
  Recipe r = parse_recipe_arg("W4A16,group=32,algo=gptq,samples=4,seed=7");
  EXPECT_EQ(r.weights.group_size, 32);
  EXPECT_EQ(r.algorithm, Algorithm::Gptq);
  EXPECT_EQ(r.calib.samples, 4);
  EXPECT_EQ(r.calib.seed, 7u);
  Recipe s = parse_recipe_arg("int3:g32:sym,algo=smoothquant+rtn,act=int8");
  EXPECT_EQ(s.weights.format, FormatId::INT3);
  EXPECT_TRUE(s.smoothquant);
  EXPECT_EQ(s.act.format, FormatId::INT8);
  Recipe n = parse_recipe_arg("nf4");
  EXPECT_EQ(n.weights.format, FormatId::NF4);
  EXPECT_NE(usage_message([] { parse_recipe_arg("W8A8,group=32"); }).find("not per-group"),
            std::string::npos);
}

TEST(Recipe, PlanChecksShapesOverridesAndIgnores) {
  ModelConfig c = small_config(64, 172);
  // Group 128 does not fit dim 64: every offending matrix is named.
  Recipe big = *preset_recipe("W4A16");
  std::string msg = usage_message([&] { plan_recipe(big, c, nullptr); });
  EXPECT_NE(msg.find("layers.0.wq"), std::string::npos) << msg;
  EXPECT_NE(msg.find("group size 128"), std::string::npos) << msg;
  // Group 32 fits, but 172 columns leave a ragged last group: a warning, not an error.
  Recipe r = parse_recipe_arg("W4A16,group=32");
  r.overrides.push_back({"re:.*mlp\\.up_proj", parse_scheme("int8:channel"), ""});
  r.ignore.push_back({"layers.1.*", {}, "keep the last layer"});
  std::vector<std::string> warn;
  auto plans = plan_recipe(r, c, &warn);
  bool ragged = false;
  for (auto& w : warn) ragged = ragged || w.find("172") != std::string::npos;
  EXPECT_TRUE(ragged);
  int quantized = 0;
  for (auto& p : plans) {
    if (p.name == "layers.0.w_up") EXPECT_EQ(p.scheme.format, FormatId::INT8);
    if (p.name == "layers.0.wq") EXPECT_EQ(p.scheme.group_size, 32);
    if (p.name.rfind("layers.1.", 0) == 0) EXPECT_FALSE(p.quantize);
    if (p.name == "lm_head") {
      EXPECT_FALSE(p.quantize);
      EXPECT_NE(p.reason.find("lm_head"), std::string::npos);
    }
    quantized += p.quantize;
  }
  EXPECT_EQ(quantized, 7);
  EXPECT_TRUE(pattern_matches("*.w_down", "layers.3.w_down"));
  EXPECT_FALSE(pattern_matches("*.w_down", "layers.3.w_up"));
  EXPECT_TRUE(pattern_matches("re:model\\.layers\\.\\d+\\.mlp\\..*", "model.layers.12.mlp.down_proj"));

  // Globs match in linear time (a long run of stars was exponential as a std::regex); regular expressions
  // whose backtracking has no bound in libstdc++ are refused with the reason (found by fuzz_recipe:
  // "re:.?*embed.*").
  EXPECT_TRUE(pattern_matches(std::string(40, '*') + "w_down", "layers.10.w_down"));
  EXPECT_FALSE(
      pattern_matches(std::string(40, '*') + "x", "layers.10.w_downaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));
  EXPECT_TRUE(pattern_matches("layers.?.w_*", "layers.3.w_up"));
  EXPECT_FALSE(pattern_matches("layers.?.w_*", "layers.13.w_up"));
  EXPECT_TRUE(pattern_matches("*", ""));
  for (const char* bad : {"re:.?*embed.*", "re:(a+)*b", "re:(a|ab)*c", "re:a**", "re:(x{2,3})+", "re:[a-"})
    EXPECT_THROW(pattern_matches(bad, "layers.1.embed"), UsageError) << bad;
  for (const char* ok :
       {"re:.*(q|k|v)_proj", "re:layers\\.[0-9]+\\.w_(up|down)", "re:.*?embed.*", "re:a{2}b+?"})
    EXPECT_NO_THROW(pattern_matches(ok, "layers.1.w_up")) << ok;
  EXPECT_TRUE(pattern_matches("re:layers\\.[0-9]+\\.w_(up|down)", "layers.12.w_down"));
}

TEST(Recipe, ActivationAndKvFormatsAreChecked) {
  ModelConfig c = small_config(64, 128);
  Recipe r = parse_recipe_arg("int4:g32,act=nf4");
  std::string msg = usage_message([&] { plan_recipe(r, c, nullptr); });
  EXPECT_NE(msg.find("cannot serve activations"), std::string::npos) << msg;
  Recipe k = parse_recipe_arg("int4:g32,kv=nf4");
  msg = usage_message([&] { plan_recipe(k, c, nullptr); });
  EXPECT_NE(msg.find("KV"), std::string::npos) << msg;
}

TEST(Recipe, RotationShorthandJsonRoundTripAndErrors) {
  Recipe r =
      parse_recipe_arg("W4A16,rotate=quarot,rotate_seed=7,rotate_r2=0,rotate_factors=/x/h.safetensors");
  EXPECT_EQ(r.rotation.method, "quarot");
  EXPECT_EQ(r.rotation.seed, 7u);
  EXPECT_TRUE(r.rotation.r1 && !r.rotation.r2 && r.rotation.r4);
  EXPECT_EQ(r.rotation.factors, "/x/h.safetensors");
  const json j = r.to_json();
  EXPECT_EQ(j["rotation"]["method"], "quarot");
  Recipe back = recipe_from_json(j);
  EXPECT_EQ(back.to_json(), j);
  EXPECT_FALSE(parse_recipe_arg("W4A16").rotation.enabled());
  EXPECT_TRUE(parse_recipe_arg("W4A16").to_json()["rotation"].is_null());
  // JSON forms: a name, true, an object; unknown keys and unbuilt methods are named.
  EXPECT_EQ(recipe_from_json(json::parse(R"({"preset": "W4A16", "rotation": "quarot"})")).rotation.method,
            "quarot");
  EXPECT_EQ(recipe_from_json(json::parse(R"({"preset": "W4A16", "rotation": true})")).rotation.method,
            "quarot");
  Recipe o = recipe_from_json(json::parse(R"({"preset": "W8A8", "rotation": {"seed": 3, "r4": false}})"));
  EXPECT_EQ(o.rotation.method, "quarot");
  EXPECT_EQ(o.rotation.seed, 3u);
  EXPECT_FALSE(o.rotation.r4);
  auto msg = usage_message([] {
    recipe_from_json(json::parse(R"({"preset": "W4A16", "rotation": {"method": "quarot", "angle": 1}})"));
  });
  EXPECT_NE(msg.find("angle"), std::string::npos) << msg;
  msg = usage_message([] { parse_recipe_arg("W4A16,rotate=quarot,spin_steps=4"); });
  EXPECT_NE(msg.find("rotate=spinquant"), std::string::npos) << msg;
  msg = usage_message([] { parse_recipe_arg("W4A16,rotate=givens"); });
  EXPECT_NE(msg.find("unknown rotation"), std::string::npos) << msg;
  msg = usage_message([] { parse_recipe_arg("W4A16,rotate=quarot,rotate_r1=0,rotate_r2=0,rotate_r4=0"); });
  EXPECT_NE(msg.find("all off"), std::string::npos) << msg;
  msg = usage_message([] { parse_recipe_arg("W4A16,rotate_seed=-1"); });
  EXPECT_NE(msg.find("rotate_seed"), std::string::npos) << msg;
  // Rotation is implemented: the planner no longer warns that it is not.
  std::vector<std::string> warn;
  r.weights.group_size = 32;
  plan_recipe(r, small_config(64, 128), &warn);
  for (auto& w : warn) EXPECT_EQ(w.find("not implemented"), std::string::npos) << w;
}

TEST(Recipe, Int4ActivationsShorthandJsonRoundTripAndErrors) {
  Recipe r = parse_recipe_arg("int4:channel:sym,act=int4,act_clip=0.9");
  EXPECT_EQ(r.act.format, FormatId::INT4);
  EXPECT_EQ(r.act.clip, 0.9f);
  const json j = r.to_json();
  EXPECT_EQ(j["activations"]["format"], "int4");
  EXPECT_EQ(j["activations"]["dynamic"], true);
  EXPECT_NEAR(j["activations"]["clip"].get<double>(), 0.9, 1e-7);
  Recipe back = recipe_from_json(j);
  EXPECT_EQ(back.act.clip, 0.9f);
  EXPECT_EQ(back.to_json(), j);
  // The clip survives a later act= (order of refinements does not matter).
  // The preset's "weight format not stated" note goes once group= or scheme= states the weights.
  auto stated = [](const Recipe& r) {
    return std::any_of(r.notes.begin(), r.notes.end(),
                       [](const std::string& n) { return n.find("not stated: int4") != n.npos; });
  };
  EXPECT_TRUE(stated(parse_recipe_arg("W4A4KV4")));
  EXPECT_FALSE(stated(parse_recipe_arg("W4A4KV4,group=64")));
  EXPECT_FALSE(stated(parse_recipe_arg("W4A8,scheme=int4:channel:sym")));
  EXPECT_TRUE(stated(parse_recipe_arg("W4A4KV4,group=128")));
  EXPECT_EQ(parse_recipe_arg("W4A16,act_clip=0.8,act=int4").act.clip, 0.8f);
  Recipe o = recipe_from_json(json::parse(
      R"({"scheme": "int4:g32:sym", "activations": {"format": "int4", "dynamic": true, "clip": 0.9}})"));
  EXPECT_EQ(o.act.format, FormatId::INT4);
  EXPECT_EQ(o.act.clip, 0.9f);
  EXPECT_FALSE(parse_recipe_arg("W8A8").to_json()["activations"].contains("clip"));
  // Errors: unknown key, static int4, clip outside (0, 1], clip on another format or without activations.
  auto msg = usage_message([] {
    recipe_from_json(json::parse(R"({"scheme": "int4:g32", "activations": {"format": "int4", "clipp": 1}})"));
  });
  EXPECT_NE(msg.find("clipp"), std::string::npos) << msg;
  const ModelConfig c = small_config(64, 128);
  auto plan_error = [&](const std::string& arg) {
    Recipe x = parse_recipe_arg(arg);
    return usage_message([&] { plan_recipe(x, c, nullptr); });
  };
  EXPECT_NE(plan_error("int4:g32,act=int4,act_static=1").find("dynamic only"), std::string::npos);
  EXPECT_NE(plan_error("int4:g32,act=int4,act_clip=0").find("outside (0, 1]"), std::string::npos);
  EXPECT_NE(plan_error("int4:g32,act=int4,act_clip=1.5").find("outside (0, 1]"), std::string::npos);
  EXPECT_NE(plan_error("int4:g32,act=int8,act_clip=0.9").find("applies to int4"), std::string::npos);
  EXPECT_NE(plan_error("int4:g32,act_clip=0.9").find("without activation quantization"), std::string::npos);
  msg = usage_message([] { parse_recipe_arg("int4:g32,act=int4,act_clip=x"); });
  EXPECT_NE(msg.find("act_clip"), std::string::npos) << msg;
}

}  // namespace
}  // namespace lowbit::quant
