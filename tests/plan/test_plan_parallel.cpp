// Multi-GPU hand-off: vLLM's tensor-parallel / pipeline-parallel split on presets (heads, KV heads with
// replication, vocab padding, layer partition), per-device bytes against the single-device plan, refusals of
// splits vLLM refuses, the launch lines' flags, and the CLI.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "plan/plan.h"
#include "tests/common/run_cli.h"

namespace lowbit::plan {
namespace {

const ModelConfig& preset(const std::string& id) {
  return model_preset(id).config;
}

int64_t sum_weights(const std::vector<StageBytes>& st, int tp) {
  int64_t n = 0;
  for (const auto& b : st) n += tp * b.weights.total();
  return n;
}

// The RMSNorm weights (2 per layer + the final one) are replicated on every tensor-parallel rank: bytes of
// the extra tp - 1 copies.
int64_t replicated_norms(const ModelConfig& c, int tp) {
  return 2 * int64_t(tp - 1) * (2 * c.n_layers * c.dim + c.dim);
}

PlanRequest gpu_request(int tp, int pp) {
  PlanRequest r;
  r.ctx = {4096};
  r.concurrency = 8;
  r.device = device_by_name("h100");
  r.tp = tp;
  r.pp = pp;
  return r;
}

TEST(PlanParallel, Llama3TensorParallelShares) {
  const ModelConfig& c = preset("llama-3-8b");  // 32 heads, 8 KV heads, vocab 128256 (a multiple of 64)
  const KvConfig& bf16 = kv_config("bf16");
  for (int tp : {1, 2, 4, 8}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    const ShardLayout s = shard_layout(c, tp, 1);
    EXPECT_EQ(s.heads_per_rank, 32 / tp);
    EXPECT_EQ(s.kv_heads_per_rank, 8 / tp);
    EXPECT_EQ(s.kv_head_replicas, 1);
    EXPECT_EQ(s.ffn_per_rank, 14336 / tp);
    EXPECT_EQ(s.vocab_per_rank, 128256 / tp);
    for (const char* scheme : {"", "int4:g128:sym:f16", "e4m3fn:channel:f32"}) {
      SCOPED_TRACE(scheme);
      const auto st = stage_weights(c, s, scheme);
      ASSERT_EQ(st.size(), 1u);
      // Every device's share together holds at least one copy of the model.
      EXPECT_GE(sum_weights(st, tp), weight_bytes(c, scheme).total());
    }
    // No vocab padding, no KV replication: 16-bit shards add up to one copy plus the replicated norms.
    EXPECT_EQ(sum_weights(stage_weights(c, s, ""), tp), 2 * c.n_params() + replicated_norms(c, tp));
    // KV heads divide: each rank holds total / tp of the KV cache.
    const ModelConfig rc = rank_config(c, s, 0);
    EXPECT_EQ(kv_bytes_per_token(rc, bf16) * tp, kv_bytes_per_token(c, bf16));
    const ParallelRow pr = parallel_row(c, s, stage_weights(c, s, ""), bf16, 4096, 8, gpu_request(tp, 1));
    EXPECT_EQ(pr.kv_all_devices, 8 * kv_bytes_per_sequence(c, bf16, 4096));
  }
}

TEST(PlanParallel, KvHeadsReplicateWhenTpExceedsThem) {
  const KvConfig& bf16 = kv_config("bf16");
  // llama-3-8b: 8 KV heads over 16 ranks -> one head per rank, each on 2 ranks; the cache doubles in total.
  const ModelConfig& c = preset("llama-3-8b");
  const ShardLayout s = shard_layout(c, 16, 1);
  EXPECT_EQ(s.kv_heads_per_rank, 1);
  EXPECT_EQ(s.kv_head_replicas, 2);
  const ModelConfig rc = rank_config(c, s, 0);
  EXPECT_EQ(kv_bytes_per_token(rc, bf16), kv_bytes_per_token(c, bf16) / 8);
  EXPECT_EQ(16 * kv_bytes_per_token(rc, bf16), 2 * kv_bytes_per_token(c, bf16));
  // k/v weights are replicated with their heads: 16-bit shards now hold more than one copy.
  EXPECT_GT(sum_weights(stage_weights(c, s, ""), 16), 2 * c.n_params());
  const int64_t kv_rows = c.n_layers * c.head_dim * c.dim * 2;  // k_proj + v_proj rows of one head
  EXPECT_EQ(sum_weights(stage_weights(c, s, ""), 16) - 2 * c.n_params() - replicated_norms(c, 16),
            2 * kv_rows * (16 - 8));
  // gemma-2b: one KV head (MQA), 8 query heads: tp 8 keeps a full copy of the KV head on every rank.
  const ModelConfig& g = preset("gemma-2b");
  const ShardLayout gs = shard_layout(g, 8, 1);
  EXPECT_EQ(gs.kv_heads_per_rank, 1);
  EXPECT_EQ(gs.kv_head_replicas, 8);
  EXPECT_EQ(kv_bytes_per_token(rank_config(g, gs, 0), bf16), kv_bytes_per_token(g, bf16));
}

TEST(PlanParallel, VocabIsPaddedTo64AndSplit) {
  ModelConfig c = preset("llama-3-8b");
  c.vocab_size = 1000;  // -> 1024 padded rows
  const ShardLayout s = shard_layout(c, 4, 1);
  EXPECT_EQ(s.vocab_padded, 1024);
  EXPECT_EQ(s.vocab_per_rank, 256);
  const auto st = stage_weights(c, s, "");
  // Embedding and lm_head slices of 256 padded rows each.
  EXPECT_EQ(st[0].embed_bytes, 2 * 256 * c.dim);
  EXPECT_EQ(st[0].lm_head_bytes, 2 * 256 * c.dim);
  // 24 padding rows in the embedding and in lm_head.
  EXPECT_EQ(sum_weights(st, 4) - 2 * c.n_params() - replicated_norms(c, 4), 2 * 2 * 24 * c.dim);
}

TEST(PlanParallel, PipelineSplitFollowsVllmPartition) {
  // floor(L / pp) per stage; the remainder one each from the second-to-last stage backwards.
  EXPECT_EQ(pp_layer_split(32, 2), (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(pp_layer_split(32, 3), (std::vector<int64_t>{11, 11, 10}));
  EXPECT_EQ(pp_layer_split(10, 4), (std::vector<int64_t>{2, 3, 3, 2}));
  EXPECT_EQ(pp_layer_split(5, 2), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(pp_layer_split(80, 3), (std::vector<int64_t>{27, 27, 26}));

  const ModelConfig& c = preset("llama-3-8b");
  const ShardLayout s = shard_layout(c, 2, 3);
  const auto st = stage_weights(c, s, "");
  ASSERT_EQ(st.size(), 3u);
  EXPECT_EQ(st[0].layer_begin, 0);
  EXPECT_EQ(st[0].layer_end, 11);
  EXPECT_EQ(st[2].layer_begin, 22);
  EXPECT_EQ(st[2].layer_end, 32);
  EXPECT_TRUE(st[0].embedding && !st[0].lm_head);
  EXPECT_TRUE(!st[1].embedding && !st[1].lm_head);
  EXPECT_TRUE(!st[2].embedding && st[2].lm_head);
  EXPECT_GT(st[0].embed_bytes, 0);
  EXPECT_EQ(st[1].embed_bytes + st[1].lm_head_bytes, 0);
  EXPECT_EQ(sum_weights(st, 2), 2 * c.n_params() + replicated_norms(c, 2));  // untied, no padding
  // KV per stage follows its layers.
  const KvConfig& bf16 = kv_config("bf16");
  EXPECT_EQ(kv_bytes_per_token(rank_config(c, s, 0), bf16), kv_bytes_per_token(c, bf16) / 2 * 11 / 32);

  // Tied embeddings: with pp > 1 the last stage holds its own copy for lm_head.
  const ModelConfig& t = preset("llama-3.2-1b");
  const auto one = stage_weights(t, shard_layout(t, 1, 1), "");
  EXPECT_EQ(one[0].weights.total(), 2 * t.n_params());
  EXPECT_EQ(one[0].lm_head_bytes, 0);
  const auto two = stage_weights(t, shard_layout(t, 1, 2), "");
  EXPECT_EQ(two[1].lm_head_bytes, 2 * t.vocab_size * t.dim);
  EXPECT_EQ(two[0].weights.total() + two[1].weights.total(), 2 * t.n_params() + 2 * t.vocab_size * t.dim);
}

TEST(PlanParallel, RefusesSplitsVllmRefuses) {
  const ModelConfig& c = preset("llama-3-8b");
  try {
    shard_layout(c, 3, 1);
    FAIL() << "tp 3 accepted";
  } catch (const UsageError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[plan]"), std::string::npos) << m;
    EXPECT_NE(m.find("--tp 3"), std::string::npos) << m;
    EXPECT_NE(m.find("32 attention heads"), std::string::npos) << m;
    EXPECT_NE(m.find("1, 2, 4, 8, 16, 32"), std::string::npos) << m;
  }
  // qwen2.5-7b: 28 heads, 4 KV heads: 7 divides the heads but neither divides the other KV-wise.
  EXPECT_THROW(shard_layout(preset("qwen2.5-7b"), 7, 1), UsageError);
  EXPECT_THROW(shard_layout(c, 0, 1), UsageError);
  EXPECT_THROW(shard_layout(c, 1, 33), UsageError);  // more stages than layers
  // The CPU is one machine.
  PlanRequest r;
  r.device = device_by_name("cpu");
  r.tp = 2;
  EXPECT_THROW(make_plan(load_plan_model("llama-3-8b", true), r), UsageError);
  r = gpu_request(2, 1);
  r.gpu_memory_utilization = 1.5;
  EXPECT_THROW(make_plan(load_plan_model("llama-3-8b", true), r), UsageError);
}

TEST(PlanParallel, PlanRowsArePerDevice) {
  const PlanModel m = load_plan_model("llama-3-70b", true);
  PlanRequest r = gpu_request(4, 2);
  r.weights = {"fp8-w"};
  r.kv = {"fp8"};
  const Plan p = make_plan(m, r);
  ASSERT_TRUE(p.shards.has_value());
  const Row* row = p.per_ctx[0].find("fp8-w", "fp8");
  ASSERT_NE(row, nullptr);
  ASSERT_TRUE(row->parallel.has_value());
  ASSERT_EQ(row->parallel->stages.size(), 2u);
  int64_t peak = 0;
  for (const auto& st : row->parallel->stages) {
    peak = std::max(peak, st.total);
    EXPECT_EQ(st.limit, r.device_limit());
    EXPECT_EQ(st.total, st.weights.total() + st.kv + st.workspace.total() + r.device.reserve_bytes);
  }
  EXPECT_EQ(row->total, peak);
  EXPECT_EQ(row->fits, peak <= r.device_limit());
  EXPECT_EQ(r.device_limit(), static_cast<int64_t>(0.9 * static_cast<double>(r.device.memory_bytes)));
  // The single-device baseline does not fit one H100; split over 8 it does.
  const Row* base = p.per_ctx[0].find("bf16", "bf16");
  EXPECT_TRUE(base->fits);
  EXPECT_GT(base->weights.total(), r.device.memory_bytes);
  // JSON carries the per-device numbers and the launch lines.
  const nlohmann::json j = plan_to_json(p);
  EXPECT_EQ(j["parallel"]["tp"], 4);
  EXPECT_EQ(j["parallel"]["stage_layers"], (std::vector<int64_t>{40, 40}));
  bool found = false;
  for (const auto& jr : j["contexts"][0]["rows"])
    if (jr["weights"] == "fp8-w" && jr["kv"] == "fp8") {
      found = true;
      ASSERT_EQ(jr["parallel"]["per_device"].size(), 2u);
      EXPECT_EQ(jr["parallel"]["per_device"][1]["total_bytes"], row->parallel->stages[1].total);
      EXPECT_EQ(jr["launch"][0]["engine"], "vllm");
    }
  EXPECT_TRUE(found);
  const std::string table = plan_table(p);
  EXPECT_NE(table.find("split:  tp 4 x pp 2 = 8 devices"), std::string::npos);
  EXPECT_NE(table.find("vllm serve"), std::string::npos);
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(PlanLaunch, Fp8WeightsAndFp8KvFlags) {
  const PlanModel m = load_plan_model("llama-3-8b", true);
  PlanRequest r = gpu_request(2, 1);
  r.concurrency = 8;
  r.output = 256;
  const auto ls = launch_lines(m, r, 4096, "w8a8-fp8", "fp8");
  ASSERT_EQ(ls.size(), 3u);
  const LaunchLine& v = ls[0];
  EXPECT_EQ(v.engine, "vllm");
  ASSERT_TRUE(v.available);
  for (const char* f :
       {"vllm serve meta-llama/Meta-Llama-3-8B", "--tensor-parallel-size 2", "--quantization fp8",
        "--kv-cache-dtype fp8", "--max-model-len 4352", "--max-num-seqs 8", "--gpu-memory-utilization 0.9"})
    EXPECT_TRUE(has(v.command, f)) << f << " in " << v.command;
  EXPECT_FALSE(has(v.command, "--pipeline-parallel-size"));
  const LaunchLine& s = ls[1];
  ASSERT_TRUE(s.available);
  for (const char* f : {"python -m sglang.launch_server --model-path meta-llama/Meta-Llama-3-8B",
                        "--tp-size 2", "--quantization fp8", "--kv-cache-dtype fp8_e4m3",
                        "--context-length 4352", "--max-running-requests 8"})
    EXPECT_TRUE(has(s.command, f)) << f << " in " << s.command;
  // llama.cpp has neither FP8 weights nor an FP8 KV cache: no line, and the notes say why.
  EXPECT_FALSE(ls[2].available);
  EXPECT_TRUE(ls[2].command.empty());
  EXPECT_FALSE(ls[2].notes.empty());

  r.pp = 2;
  EXPECT_TRUE(has(launch_lines(m, r, 4096, "bf16", "bf16")[0].command, "--pipeline-parallel-size 2"));
  EXPECT_TRUE(has(launch_lines(m, r, 4096, "bf16", "bf16")[1].command, "--pp-size 2"));
}

TEST(PlanLaunch, ConfigurationsWithoutAFlagGetNoLine) {
  const PlanModel m = load_plan_model("llama-3-8b", true);
  PlanRequest r = gpu_request(1, 1);
  r.concurrency = 4;
  // INT4 KV: vLLM and SGLang have no --kv-cache-dtype for it; llama.cpp serves q4_0 blocks.
  auto ls = launch_lines(m, r, 2048, "w4a16", "int4");
  EXPECT_FALSE(ls[0].available);
  EXPECT_TRUE(has(ls[0].notes.back(), "no --kv-cache-dtype"));
  EXPECT_FALSE(ls[1].available);
  ASSERT_TRUE(ls[2].available);
  for (const char* f : {"llama-server -m MODEL-Q4_0.gguf", "-c 8192", "--parallel 4", "-ctk q4_0",
                        "-ctv q4_0", "-fa", "-ngl 99"})
    EXPECT_TRUE(has(ls[2].command, f)) << f << " in " << ls[2].command;
  // INT8 KV -> q8_0 in llama.cpp.
  ls = launch_lines(m, r, 2048, "bf16", "int8");
  EXPECT_TRUE(has(ls[2].command, "-ctk q8_0 -ctv q8_0"));
  // W4A16 with BF16 KV: a compressed-tensors checkpoint, no --quantization flag.
  ls = launch_lines(m, r, 2048, "w4a16", "bf16");
  ASSERT_TRUE(ls[0].available);
  EXPECT_TRUE(has(ls[0].command, "vllm serve QUANTIZED_CHECKPOINT"));
  EXPECT_FALSE(has(ls[0].command, "--quantization"));
  // MXFP4 dense weights: no vLLM flag.
  EXPECT_FALSE(launch_lines(m, r, 2048, "mxfp4", "bf16")[0].available);
}

TEST(PlanLaunch, NonHfModelsGetAPlaceholderForVllmAndSglang) {
  PlanModel m;
  m.name = m.compare_model = "/models/x.bin";
  m.source = "llama2c";
  PlanRequest r = gpu_request(1, 1);
  const auto ls = launch_lines(m, r, 1024, "bf16", "fp8");
  ASSERT_TRUE(ls[0].available);
  EXPECT_TRUE(has(ls[0].command, "vllm serve HF_CHECKPOINT "));
  EXPECT_TRUE(has(ls[1].command, "--model-path HF_CHECKPOINT "));
  EXPECT_TRUE(has(ls[0].notes[0], "must be a Hugging Face directory"));
}

TEST(PlanParallelCli, TpFlagsAndExitCodes) {
  using lowbit::testing_cli::run_cli;
  auto ok = run_cli("plan --preset llama-3-70b --ctx 8192 --concurrency 32 --device h100 --tp 4 --pp 2");
  EXPECT_EQ(ok.rc, 0);
  EXPECT_TRUE(has(ok.out, "per device"));
  EXPECT_TRUE(has(
      ok.out, "vllm serve meta-llama/Meta-Llama-3-70B --tensor-parallel-size 4 --pipeline-parallel-size 2"));
  auto js = run_cli("plan --preset llama-3-8b --device l4 --tp 2 --gpu-memory-utilization 0.8 --json");
  ASSERT_EQ(js.rc, 0);
  const auto j = nlohmann::json::parse(js.out);
  EXPECT_DOUBLE_EQ(j["request"]["gpu_memory_utilization"].get<double>(), 0.8);
  EXPECT_TRUE(j["contexts"][0]["rows"][0].contains("parallel"));
  auto bad = run_cli("plan --preset llama-3-8b --device h100 --tp 3", /*merge_stderr=*/true);
  EXPECT_EQ(bad.rc, 2);
  EXPECT_TRUE(has(bad.out, "[plan] --tp 3 does not divide")) << bad.out;
  EXPECT_EQ(run_cli("plan --preset llama-3-8b --tp 2").rc, 2);  // default device: the CPU
  EXPECT_EQ(run_cli("plan --preset llama-3-8b --device h100 --gpu-memory-utilization 0").rc, 2);
}

}  // namespace
}  // namespace lowbit::plan
