// `lowbit run`: generate text with any checkpoint and report load time, TTFT, prefill/decode speed, peak RSS
// and which kernels ran.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/lowbit/cli_common.h"
#include "apps/lowbit/command.h"
#include "core/error.h"
#include "core/json_text.h"
#include "core/memory.h"
#include "core/parallel.h"
#include "model/generate.h"
#include "model/model.h"
#include "quant/quantizer.h"
#include "quant/recipe.h"
#include "tokenizer/tokenizer.h"

namespace {

struct RunArgs {
  std::string model, prompt, tokenizer, dtype = "native", rope_scaling;
  lowbit::app::QuantizeFlags quant;
  lowbit::app::KvFlags kv;
  int n = 64, threads = 0;
  int64_t ctx = 0;
  float temp = 0.0f, top_p = 1.0f, min_p = 0.0f, repeat_penalty = 1.0f;
  int top_k = 0;
  uint64_t seed = 0;
  bool json = false, kernels = false, no_bos = false, ignore_eos = false, no_parse_special = false;
};

void setup(CLI::App& cmd) {
  static RunArgs a;
  cmd.add_option("-m,--model", a.model, "Model: a Hugging Face directory, a .gguf file or a llama2.c .bin")
      ->required();
  cmd.add_option("-p,--prompt", a.prompt, "Prompt text (BOS is prepended unless --no-bos)")->required();
  cmd.add_option("-n,--n-predict", a.n, "Number of tokens to generate")->check(CLI::Range(0, 1 << 20));
  cmd.add_option("--temp", a.temp, "Sampling temperature; 0 = greedy (default)");
  cmd.add_option("--top-k", a.top_k, "Keep the k most likely tokens (0 = off)");
  cmd.add_option("--top-p", a.top_p,
                 "Nucleus sampling: keep the smallest set with probability >= p (1 = off)");
  cmd.add_option("--min-p", a.min_p, "Keep tokens with p >= min_p * p_max (0 = off)");
  cmd.add_option("--repeat-penalty", a.repeat_penalty, "Penalise the last 64 tokens (1 = off)");
  cmd.add_option("--seed", a.seed, "Random seed for sampling (runs with the same seed are identical)");
  cmd.add_option("--ctx", a.ctx,
                 "KV cache capacity in tokens (default: prompt + n, up to the model's context)")
      ->check(CLI::Validator(
          [](std::string& v) { return v.rfind('-', 0) == 0 ? "must be >= 0 (0 = prompt + n)" : ""; }, "",
          "CTX"));
  lowbit::app::add_rope_scaling_option(&cmd, a.rope_scaling);
  lowbit::app::add_kv_options(&cmd, a.kv);
  cmd.add_option("--dtype", a.dtype, "Dense weights in memory: native (as stored, default), f32, f16, bf16");
  lowbit::app::add_quantize_options(&cmd, a.quant);
  cmd.add_option("--tokenizer", a.tokenizer, "llama2.c tokenizer.bin (default: found next to the model)");
  lowbit::app::add_threads_option(&cmd, a.threads);
  lowbit::app::add_gguf_acts_option(&cmd);
  cmd.add_flag("--no-bos", a.no_bos, "Do not prepend the BOS token");
  cmd.add_flag(
      "--no-parse-special", a.no_parse_special,
      "Tokenize special-token text in the prompt (\"<|im_end|>\", \"</s>\") as plain text instead of as "
      "the special token (the default, as lowbit serve, llama.cpp and Hugging Face tokenizers do)");
  cmd.add_flag("--ignore-eos", a.ignore_eos, "Keep generating after the end-of-sequence token");
  cmd.add_flag("--kernels", a.kernels, "List the kernel that served each weight matrix");
  cmd.add_flag("--json", a.json, "Print one JSON object (text, token ids, timings) instead of streaming");
  cmd.footer(
      "Example: lowbit run -m ../shared/models/stories260K/stories260K.bin -p \"Once upon a time\" -n 32\n"
      "Example: lowbit run -m ../shared/models/kjv-brown-6M/model.bin -p \"In the beginning\" --quantize "
      "W4A16,group=32\n"
      "Example: lowbit run -m ../shared/models/stories260K/stories260K.bin -p \"Once upon a time\" -n 300 "
      "--ctx 128 --kv-cache int4:window32+rot --kv-evict streaming:4+124");
  cmd.callback([] {
    using namespace lowbit;
    app::apply_threads(a.threads);
    LoadOptions lo;
    lo.dense = dense_mode_from_string(a.dtype);
    lo.tokenizer_path = a.tokenizer;
    auto m = load_model(a.model, lo);
    app::apply_rope_scaling(*m, a.rope_scaling, a.json);
    app::check_context(m->config, a.ctx, "--ctx", "run");  // negative values: refused by the flag
    const nlohmann::json online = app::apply_online_quantization(*m, a.quant, a.json);
    if (!m->tokenizer)
      throw UsageError("run",
                       "no tokenizer found for '" + a.model + "'; pass --tokenizer PATH (tokenizer.bin)");
    const Tokenizer& tok = *m->tokenizer;
    GenerateOptions go;
    go.max_new_tokens = a.n;
    go.sampler.temperature = a.temp;
    go.sampler.top_k = a.top_k;
    go.sampler.top_p = a.top_p;
    go.sampler.min_p = a.min_p;
    go.sampler.repeat_penalty = a.repeat_penalty;
    go.sampler.seed = a.seed;
    go.sampler.validate();
    go.ctx = a.ctx;
    go.kv_spec = a.kv.spec();
    if (!a.json) go.on_kv_cache = [](const KvCache& kv) { app::print_kv_cache(kv); };
    go.stop_at_eos = !a.ignore_eos;
    auto prompt = tok.encode(a.prompt, !a.no_bos && tok.bos_id() >= 0, !a.no_parse_special);
    auto kr = app::kernel_report(*m);
    if (!a.json) {
      std::fprintf(stderr, "model: %s (%s, %s, %lld params, weights %s), loaded in %.3f s\n", a.model.c_str(),
                   m->format.c_str(), m->config.arch.c_str(), (long long)m->config.n_params(),
                   app::human_bytes(static_cast<double>(m->weights.weight_bytes())).c_str(), m->load_seconds);
      kr.print(a.kernels);
    }
    TokenStreamDecoder sd(tok);
    sd.continue_from(prompt);  // "Once" + " upon", not "Onceupon"
    std::string text;
    GenerateStats st;
    if (!a.json) std::cout << a.prompt << std::flush;
    auto ids = generate(
        *m, prompt, go,
        [&](int32_t id) {
          std::string piece = sd.push(id);
          text += piece;
          if (!a.json) std::cout << piece << std::flush;
        },
        &st);
    std::string rest = sd.flush();
    text += rest;
    uint64_t peak = peak_rss_bytes();
    if (a.json) {
      nlohmann::json j = {{"model", a.model},
                          {"format", m->format},
                          {"config", m->config.to_json()},
                          {"prompt", a.prompt},
                          {"prompt_ids", prompt},
                          {"output_ids", ids},
                          {"text", text},
                          {"stop_reason", st.stop_reason},
                          {"load_seconds", m->load_seconds},
                          {"prompt_tokens", st.prompt_tokens},
                          {"generated_tokens", st.generated_tokens},
                          {"ttft_seconds", st.ttft_seconds},
                          {"prefill_tokens_per_second", st.prefill_tps()},
                          {"decode_tokens_per_second", st.decode_tps()},
                          {"kv_cache",
                           {{"format", a.kv.cache},
                            {"spec", st.kv_format},
                            {"evict", a.kv.evict},
                            {"bytes_per_token_exact", st.kv_bytes_per_token_exact},
                            {"bytes_per_token", st.kv_bytes_per_token},
                            {"capacity_tokens", st.kv_capacity_tokens},
                            {"bytes", st.kv_total_bytes}}},
                          {"weight_bytes", m->weights.weight_bytes()},
                          {"peak_rss_bytes", peak},
                          {"threads", num_threads()},
                          {"kernels", kr.to_json()},
                          {"online_quantization", online}};
      std::cout << lowbit::json_text(j, 2) << "\n";
      return;
    }
    std::cout << rest << "\n";
    std::fprintf(stderr,
                 "\nload %.3f s | prompt %lld tokens | TTFT %.1f ms | prefill %.1f tok/s | decode %.1f tok/s "
                 "(%lld tokens, stop: %s) | KV %s %lld B/token x %lld tokens | peak RSS %s | threads %d\n",
                 m->load_seconds, (long long)st.prompt_tokens, st.ttft_seconds * 1e3, st.prefill_tps(),
                 st.decode_tps(), (long long)st.generated_tokens, st.stop_reason.c_str(),
                 st.kv_format.c_str(), (long long)st.kv_bytes_per_token, (long long)st.kv_capacity_tokens,
                 app::human_bytes(static_cast<double>(peak)).c_str(), num_threads());
  });
}

}  // namespace

LOWBIT_COMMAND("run", 30, "Generate text with a model and report speed, memory and the kernels that ran.",
               setup);
