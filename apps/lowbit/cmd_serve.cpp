// `lowbit serve`: an OpenAI-compatible HTTP server over the serving engine (continuous batching on a paged KV
// cache). Start-up prints the memory plan, the kernels, the load time and the chat template it runs with,
// then `listening on http://HOST:PORT` on stdout. SIGINT / SIGTERM drain the engine and exit 0. See
// docs/serve.md.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "apps/lowbit/cli_common.h"
#include "apps/lowbit/command.h"
#include "core/error.h"
#include "core/parallel.h"
#include "engine/engine.h"
#include "model/model.h"
#include "plan/plan.h"
#include "serve/chat_template.h"
#include "serve/http_server.h"
#include "tokenizer/tokenizer.h"

namespace {

struct ServeArgs {
  std::string model, tokenizer, dtype = "native", rope_scaling;
  lowbit::app::QuantizeFlags quant;
  lowbit::app::KvFlags kv;
  int threads = 0;
  std::string host = "127.0.0.1";
  int port = 8080;
  int max_num_seqs = 16, max_queue = 1024, step_tokens = 512, prefill_chunk = 64, max_http_threads = 2048;
  int64_t max_model_len = 0;
  std::string kv_budget, max_body = "8MiB", api_key, chat_template, served_name;
  double shutdown_deadline = 10;
  bool no_prefix_cache = false;
};

std::string default_served_name(const std::string& path) {
  std::filesystem::path p(path);
  if (!p.has_filename()) p = p.parent_path();  // "dir/" -> "dir"
  return p.filename().string();
}

void print_memory_plan(const lowbit::Model& m, const lowbit::Engine& e) {
  using lowbit::app::human_bytes;
  const lowbit::EngineStats st = e.stats();
  const auto& o = e.options();
  // Weights and KV are what was allocated; the workspace is the planner's arithmetic for this engine shape.
  const auto ws = lowbit::plan::workspace_bytes(m.config, e.max_model_len(), o.max_num_seqs, o.step_tokens,
                                                lowbit::num_threads());
  const int64_t w = m.weights.weight_bytes(), kv = e.kv().total_bytes();
  std::fprintf(stderr, "memory plan: weights %s + KV cache %s + workspace %s = %s\n",
               human_bytes(static_cast<double>(w)).c_str(), human_bytes(static_cast<double>(kv)).c_str(),
               human_bytes(static_cast<double>(ws.total())).c_str(),
               human_bytes(static_cast<double>(w + kv + ws.total())).c_str());
  std::fprintf(
      stderr,
      "  KV: %lld pages x %lld tokens (%lld tokens shared by %d sequence slots, max model length %lld; "
      "%.2f bytes/token)\n",
      (long long)st.kv_pages_total, (long long)st.kv_block_tokens,
      (long long)(st.kv_pages_total * st.kv_block_tokens), o.max_num_seqs, (long long)e.max_model_len(),
      e.kv().bytes_per_token_exact());
  std::fprintf(stderr, "  workspace: hidden %s + attention %s + logits %s (batch of %lld tokens)\n",
               human_bytes(static_cast<double>(ws.hidden)).c_str(),
               human_bytes(static_cast<double>(ws.attention)).c_str(),
               human_bytes(static_cast<double>(ws.logits)).c_str(), (long long)ws.batch_tokens);
}

// Without --kv-budget every slot gets pages for --max-model-len tokens: for a long-context model that is more
// memory than the machine has, and allocating it takes minutes before failing. Refuse it up front.
void refuse_oversized_kv(const lowbit::Model& m, const lowbit::EngineOptions& eo) {
  if (eo.kv.budget_bytes > 0 || eo.kv.budget_tokens > 0) return;
  const int64_t len = eo.max_model_len > 0 ? eo.max_model_len : m.config.max_seq_len;
  const int64_t need = lowbit::kv_footprint(m.config, eo.kv).bytes(eo.max_num_seqs, len);
  const int64_t ram = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  if (ram > 0 && need > ram / 2)
    throw lowbit::UsageError(
        "serve",
        "the KV cache for " + std::to_string(eo.max_num_seqs) + " sequences of " + std::to_string(len) +
            " tokens needs " + lowbit::app::human_bytes(static_cast<double>(need)) +
            ", more than half of this machine's memory (" +
            lowbit::app::human_bytes(static_cast<double>(ram)) +
            "); give the pages a budget shared by all sequences with --kv-budget (e.g. --kv-budget 1GiB), "
            "or lower --max-num-seqs / --max-model-len");
}

// Signals are taken by one thread with sigtimedwait, so the drain (which locks and joins) runs outside
// async-signal context. Every thread started after block_signals() inherits the mask; threads a library
// started before main (OpenBLAS starts its pool when it is loaded) do not, and the kernel may deliver the
// signal to one of them: the handler only records it for the waiting thread (otherwise the default action
// would kill the process).
volatile sig_atomic_t g_signal = 0;
extern "C" void record_signal(int sig) {
  g_signal = sig;
}

sigset_t block_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  struct sigaction sa {};
  sa.sa_handler = record_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

// Loads the model, builds the engine and the server, serves until SIGINT / SIGTERM.
void run_serve(const ServeArgs& a) {
  using namespace lowbit;
  const sigset_t sigs = block_signals();
  // Every open connection is a descriptor: take the hard limit (often 1024 soft) for idle keep-alive
  // clients.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  app::apply_threads(a.threads);
  EngineOptions eo;
  eo.max_num_seqs = a.max_num_seqs;
  eo.max_model_len = a.max_model_len;
  eo.max_queue = a.max_queue;
  eo.step_tokens = a.step_tokens;
  eo.prefill_chunk = a.prefill_chunk;
  eo.prefix_cache = !a.no_prefix_cache;
  eo.kv = a.kv.spec();
  eo.kv.force_paged = true;  // the engine's scheduler hands out pages
  if (!a.kv_budget.empty()) eo.kv.budget_bytes = plan::parse_bytes(a.kv_budget);
  serve::ServerOptions so;
  so.max_body = plan::parse_bytes(a.max_body);
  so.host = a.host;
  so.port = a.port;
  so.api_key = a.api_key;
  if (so.api_key.empty())
    if (const char* k = std::getenv("LOWBIT_API_KEY")) so.api_key = k;
  so.served_name = a.served_name.empty() ? default_served_name(a.model) : a.served_name;
  so.min_threads = std::min(2 * a.max_num_seqs + 8, a.max_http_threads);
  so.max_threads = a.max_http_threads;
  const auto chat = serve::choose_chat_template(serve::read_model_chat_template(a.model), a.chat_template);
  so.chat = chat.format;
  so.chat_jinja = chat.jinja;

  LoadOptions lo;
  lo.dense = dense_mode_from_string(a.dtype);
  lo.tokenizer_path = a.tokenizer;
  auto m = load_model(a.model, lo);
  app::apply_rope_scaling(*m, a.rope_scaling, false);
  app::check_context(m->config, a.max_model_len, "--max-model-len", "serve");
  app::apply_online_quantization(*m, a.quant, false);
  if (!m->tokenizer)
    throw UsageError("serve",
                     "no tokenizer found for '" + a.model + "'; pass --tokenizer PATH (tokenizer.bin)");
  std::fprintf(stderr, "model: %s (%s, %s, %lld params, weights %s), loaded in %.3f s, served as '%s'\n",
               a.model.c_str(), m->format.c_str(), m->config.arch.c_str(), (long long)m->config.n_params(),
               app::human_bytes(static_cast<double>(m->weights.weight_bytes())).c_str(), m->load_seconds,
               so.served_name.c_str());
  app::kernel_report(*m).print(false);
  refuse_oversized_kv(*m, eo);
  Engine engine(*m, eo);
  app::print_kv_cache(engine.kv());
  print_memory_plan(*m, engine);
  std::fprintf(stderr, "%schat template: %s (%s)\n", chat.warn ? "WARNING: " : "", chat.name(),
               chat.reason.c_str());
  std::fprintf(stderr,
               "engine: %d sequence slots, max model length %lld, %d tokens per step, prefill chunks of %d, "
               "queue %d, prefix cache %s, %d threads%s\n",
               eo.max_num_seqs, (long long)engine.max_model_len(), eo.step_tokens, eo.prefill_chunk,
               eo.max_queue, eo.prefix_cache ? "on" : "off", num_threads(),
               so.api_key.empty() ? "" : ", API key required");

  serve::HttpServer server(engine, *m, so);
  const int port = server.bind();
  engine.start();
  std::atomic<bool> done{false};
  std::thread sig_thread([&] {
    const timespec poll{0, 200 * 1000 * 1000};
    while (!done) {
      int s = sigtimedwait(&sigs, nullptr, &poll);
      if (s < 0 && g_signal != 0) s = g_signal;
      if (s == SIGINT || s == SIGTERM) {
        std::fprintf(stderr, "[serve] %s: refusing new requests, draining for up to %g s\n",
                     s == SIGINT ? "SIGINT" : "SIGTERM", a.shutdown_deadline);
        server.shutdown(a.shutdown_deadline);
        return;
      }
    }
  });
  std::cout << "listening on http://" << a.host << ":" << port << std::endl;
  server.serve();
  done = true;
  sig_thread.join();
  engine.stop(0);
  std::fprintf(stderr, "[serve] stopped\n");
}

void setup(CLI::App& cmd) {
  static ServeArgs a;
  cmd.add_option("-m,--model", a.model, "Model: a Hugging Face directory, a .gguf file or a llama2.c .bin")
      ->required();
  cmd.add_option("--host", a.host, "Address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)");
  cmd.add_option("--port", a.port, "TCP port (default 8080; 0 = any free port, printed at start-up)")
      ->check(CLI::Range(0, 65535));
  cmd.add_option("--max-num-seqs", a.max_num_seqs, "Sequences decoded together (default 16)")
      ->check(CLI::Range(1, 4096));
  cmd.add_option("--max-model-len", a.max_model_len,
                 "Tokens per sequence, prompt + output (default: the model's context)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd.add_option("--kv-budget", a.kv_budget,
                 "Bytes of KV pages shared by all sequences, e.g. 64M or 2GiB (default: every slot can hold "
                 "--max-model-len tokens)");
  cmd.add_option("--max-queue", a.max_queue,
                 "Requests waiting beyond the running ones; more get 429 (default 1024)")
      ->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--step-tokens", a.step_tokens,
                 "Tokens per forward batch (decode + prefill chunks; default 512)")
      ->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--prefill-chunk", a.prefill_chunk,
                 "Prompts are cut into chunks of this many tokens at fixed offsets; shared prompt prefixes "
                 "are reused in whole chunks (default 64)")
      ->check(CLI::Range(1, 1 << 20));
  cmd.add_flag("--no-prefix-cache", a.no_prefix_cache, "Do not reuse the KV of shared prompt prefixes");
  cmd.add_option(
      "--api-key", a.api_key,
      "Require 'Authorization: Bearer KEY' on /v1/*, /tokenize, /detokenize (default: $LOWBIT_API_KEY; "
      "none when unset)");
  cmd.add_option("--max-body", a.max_body, "Largest request body, e.g. 8MiB (default); larger ones get 413");
  cmd.add_option(
      "--chat-template", a.chat_template,
      "chatml, llama3, llama2, plain or jinja:FILE (default: the model's own chat_template, interpreted; "
      "plain when it has none)");
  cmd.add_option(
      "--served-model-name", a.served_name,
      "Model name clients send and /v1/models lists (default: the model's file or directory name)");
  cmd.add_option("--shutdown-deadline", a.shutdown_deadline,
                 "Seconds running requests may take to finish after SIGINT/SIGTERM (default 10)")
      ->check(CLI::Range(0.0, 86400.0));
  cmd.add_option("--max-http-threads", a.max_http_threads,
                 "Connection threads at most (each open connection holds one; default 2048)")
      ->check(CLI::Range(8, 65536));
  lowbit::app::add_kv_options(&cmd, a.kv);
  lowbit::app::add_quantize_options(&cmd, a.quant);
  lowbit::app::add_rope_scaling_option(&cmd, a.rope_scaling);
  cmd.add_option("--dtype", a.dtype, "Dense weights in memory: native (as stored, default), f32, f16, bf16");
  cmd.add_option("--tokenizer", a.tokenizer, "llama2.c tokenizer.bin (default: found next to the model)");
  lowbit::app::add_threads_option(&cmd, a.threads);
  lowbit::app::add_gguf_acts_option(&cmd);
  cmd.footer(
      "Example: lowbit serve -m ../shared/models/stories260K/stories260K.bin --port 8080\n"
      "  curl http://127.0.0.1:8080/v1/completions -H 'Content-Type: application/json' \\\n"
      "    -d '{\"model\": \"stories260K.bin\", \"prompt\": \"Once upon a time\", \"max_tokens\": 32}'\n"
      "Example: lowbit serve -m ../shared/models/tinystories-656K --quantize W4A16,group=32 --kv-cache int8 "
      "--kv-budget 64M --max-num-seqs 32 --api-key secret");
  cmd.callback([] { run_serve(a); });
}

}  // namespace

LOWBIT_COMMAND("serve", 47,
               "OpenAI-compatible HTTP server (completions, chat, streaming, metrics) over the engine.",
               setup);
