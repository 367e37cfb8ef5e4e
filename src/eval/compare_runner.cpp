#include "eval/compare_runner.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/cpu.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/json_text.h"
#include "core/timer.h"
#include "core/version.h"
#include "io/mapped_file.h"

extern char** environ;

namespace fs = std::filesystem;
using nlohmann::json;

namespace lowbit::compare {

json StepRecord::to_json() const {
  return {
      {"variant", variant},     {"step", step},       {"argv", argv},     {"command", shell_join(argv)},
      {"exit_code", exit_code}, {"seconds", seconds}, {"reused", reused}, {"inputs_sha256", inputs_sha256},
      {"output", output},       {"error", error}};
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) {
    bool plain = !a.empty() && a.find_first_not_of(
                                   "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                   "-_./:=,+%@") == std::string::npos;
    if (!s.empty()) s += ' ';
    if (plain) {
      s += a;
    } else {
      s += '\'';
      for (char c : a) s += c == '\'' ? std::string("'\\''") : std::string(1, c);
      s += '\'';
    }
  }
  return s;
}

namespace {

std::string read_file(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_json_atomic(const std::string& path, const json& j) {
  std::string s = json_text(j, 2);
  io::write_file_atomic(path, s.data(), s.size());
}

// Runs argv (posix_spawn, no shell) with stdout captured and stderr written to DIR/STEP.stderr.
StepRecord run_step(const std::string& variant, const std::string& step, const std::vector<std::string>& argv,
                    const std::string& dir) {
  StepRecord r;
  r.variant = variant;
  r.step = step;
  r.argv = argv;
  const std::string err_path = dir + "/" + step + ".stderr";
  std::fprintf(stderr, "compare: [%s] %s\n", variant.c_str(), step.c_str());
  Timer t;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    fail("compare", std::string("cannot create a pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, argv[0].c_str(), &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    fail("compare", "cannot start '" + argv[0] + "': " + std::strerror(rc));
  }
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n > 0)
      out.append(buf, static_cast<size_t>(n));
    else if (n == 0 || errno != EINTR)
      break;
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.seconds = t.seconds();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  // Exit code 3 is a failed check that still measured (e.g. eval batch over its tolerance): keep its JSON.
  bool measured_failure = false;
  if (r.exit_code == 3 && !out.empty()) {
    try {
      r.output = json::parse(out);
      measured_failure = true;
      r.error = "check failed (exit 3); the measurement is kept";
    } catch (const std::exception&) {
    }
  }
  if (r.exit_code == 0) {
    try {
      r.output = json::parse(out);
    } catch (const std::exception&) {
      r.exit_code = 1;
      r.error = "the command did not print valid JSON";
    }
  } else if (!measured_failure) {
    std::string e = read_file(err_path);
    // Keep the last few lines: the [module] error is at the end.
    size_t pos = e.size();
    for (int lines = 0; lines < 4 && pos > 0; ++lines) {
      pos = e.rfind('\n', pos > 1 ? pos - 2 : 0);
      if (pos == std::string::npos) {
        pos = 0;
        break;
      }
    }
    r.error = e.substr(pos);
    while (!r.error.empty() && (r.error.back() == '\n' || r.error.back() == '\r')) r.error.pop_back();
    std::fprintf(stderr, "compare: [%s] %s failed (exit %d): %s\n", variant.c_str(), step.c_str(),
                 r.exit_code, r.error.c_str());
  }
  return r;
}

std::string model_hash(const std::string& model) {
  // Hash of what defines the weights: config + tensor files (or the single checkpoint file).
  std::vector<std::string> files;
  if (fs::is_directory(model)) {
    for (auto& e : fs::directory_iterator(model)) {
      auto n = e.path().filename().string();
      if (n == "config.json" || e.path().extension() == ".safetensors") files.push_back(e.path().string());
    }
  } else {
    files.push_back(model);
  }
  std::sort(files.begin(), files.end());
  std::string acc;
  for (auto& f : files) acc += fs::path(f).filename().string() + ":" + sha256_file_hex(f) + ";";
  return sha256_hex(acc);
}

// What the experiment ran on: every input's hash, the hardware, the tool and the OS.
struct InputHashes {
  std::string model, text, calib, binary;
};
json experiment_manifest(const Experiment& e, const InputHashes& h, const std::string& baseline_file,
                         const std::string& cache_dir) {
  const auto& cpu = cpu_features_hw();
  json manifest = {{"model", e.model},
                   {"model_sha256", h.model},
                   {"eval_text", e.eval_text},
                   {"eval_text_sha256", h.text},
                   {"calib_text", e.calib_text},
                   {"calib_text_sha256", h.calib},
                   {"prompts", e.prompts},
                   {"prompts_sha256", sha256_hex(json_text(json(e.prompts)))},
                   {"sampling", {{"temperature", 0}, {"method", "greedy"}}},
                   {"ctx", e.ctx},
                   {"concurrency", e.concurrency},
                   {"output_cap", e.gen_tokens},
                   {"hardware",
                    {{"cpu", cpu.model_name},
                     {"features", cpu.summary()},
                     {"cores", cpu.logical_cores},
                     {"ram_bytes", total_ram_bytes()}}},
                   {"tool",
                    {{"version", version()},
                     {"commit", git_commit()},
                     {"compiler", compiler_id()},
                     {"binary_sha256", h.binary}}},
                   {"baseline_file", baseline_file},
                   {"cache_dir", cache_dir}};
  std::ifstream osr("/etc/os-release");
  std::string line;
  while (std::getline(osr, line))
    if (line.rfind("PRETTY_NAME=", 0) == 0) manifest["os"] = line.substr(13, line.size() - 14);
  return manifest;
}

}  // namespace

json run_experiment(const Experiment& e, const RunnerOptions& o) {
  fs::create_directories(o.out_dir + "/results");
  fs::create_directories(o.cache_dir);
  const std::string mhash = model_hash(e.model);
  const std::string text_hash = sha256_file_hex(e.eval_text);
  const std::string calib_hash = e.calib_text.empty() ? "" : sha256_file_hex(e.calib_text);
  // The binary's bytes stand for its build: a rebuilt lowbit may compute different numbers.
  const std::string exe_hash = sha256_file_hex(o.exe);
  const std::string inputs_hash = sha256_hex(mhash + "|" + text_hash + "|" + calib_hash + "|" + exe_hash);
  const std::string baseline_file =
      fs::absolute(o.out_dir + "/results/" + e.baseline.name + "/baseline.lbb").string();
  std::vector<std::string> threads;
  if (o.threads > 0) threads = {"--threads", std::to_string(o.threads)};

  json variants = json::array();
  std::vector<const VariantSpec*> all = {&e.baseline};
  for (auto& v : e.variants) all.push_back(&v);
  for (const VariantSpec* vp : all) {
    const VariantSpec& v = *vp;
    const bool is_base = vp == &e.baseline;
    const std::string dir = o.out_dir + "/results/" + v.name;
    fs::create_directories(dir);
    json steps = json::object();
    // extra_input: a file the step reads beyond the experiment's inputs (the baseline a variant is scored
    // against); its bytes join the reuse key.
    auto step = [&](const std::string& name, std::vector<std::string> argv,
                    const std::string& extra_input = "") -> const json& {
      const std::string path = dir + "/" + name + ".json";
      std::error_code ec;
      const std::string key =
          extra_input.empty()
              ? inputs_hash
              : sha256_hex(inputs_hash + "|" +
                           (fs::exists(extra_input, ec) ? sha256_file_hex(extra_input) : "none"));
      if (!o.fresh && fs::exists(path)) {
        try {
          json prev = json::parse(read_file(path));
          // Reused: the same command that finished, either cleanly or with a failed check (exit code 3, e.g.
          // a batch-consistency FAIL) whose JSON result is the measurement. Crashes and usage errors rerun.
          const int rc = prev.value("exit_code", 1);
          const bool measured = rc == 0 || (rc == 3 && prev.contains("output") && !prev["output"].is_null());
          if (prev.value("argv", std::vector<std::string>{}) == argv &&
              prev.value("inputs_sha256", "") == key && measured) {
            prev["reused"] = true;
            steps[name] = prev;
            return steps[name];
          }
        } catch (const std::exception&) {
          // A damaged result is recomputed.
        }
      }
      StepRecord r = run_step(v.name, name, argv, dir);
      r.inputs_sha256 = key;
      write_json_atomic(path, r.to_json());
      steps[name] = r.to_json();
      return steps[name];
    };

    // 1. The weights this variant runs with: an offline checkpoint (cached) or the source model.
    std::string model = e.model;
    std::vector<std::string> wflags = {"--dtype", v.dtype};
    if (!v.recipe.empty() && !v.online) {
      std::string key =
          sha256_hex(mhash + "|" + v.recipe + "|" + v.budget + "|" + calib_hash + "|" + exe_hash)
              .substr(0, 16);
      std::string ck = fs::absolute(o.cache_dir + "/ck-" + key).string();
      std::vector<std::string> q = {o.exe, "quantize", "-m", e.model, "-r", v.recipe, "-o", ck};
      if (!v.budget.empty()) q.insert(q.end(), {"--budget", v.budget});
      if (!e.calib_text.empty()) q.insert(q.end(), {"-c", e.calib_text});
      q.insert(q.end(), threads.begin(), threads.end());
      if (fs::exists(ck + "/config.json")) {
        steps["quantize"] = {{"step", "quantize"}, {"argv", q},      {"command", shell_join(q)},
                             {"exit_code", 0},     {"reused", true}, {"checkpoint", ck},
                             {"cached", true}};
      } else {
        // quantize prints a table, not JSON: run it and then read the checkpoint with inspect.
        StepRecord r = run_step(v.name, "quantize", q, dir);
        json rec = r.to_json();
        if (r.error == "the command did not print valid JSON") rec["exit_code"] = 0, rec["error"] = "";
        rec["checkpoint"] = ck;
        steps["quantize"] = rec;
      }
      if (steps["quantize"].value("exit_code", 1) == 0) step("inspect", {o.exe, "inspect", ck, "--json"});
      model = ck;
      // --dtype stays: the checkpoint's unquantized tensors (embeddings, lm_head, norms) are held in memory
      // as the baseline holds them, so the variant changes only the quantized matrices.
    } else if (!v.recipe.empty()) {
      wflags.insert(wflags.end(), {"--quantize", v.recipe});
    } else {
      // The source file itself: its whole-file bytes are the variant's (online quantization has no file).
      step("inspect", {o.exe, "inspect", e.model, "--json"});
    }
    std::vector<std::string> kvflags = {"--kv-cache", v.kv_cache};
    if (!v.kv_evict.empty()) kvflags.insert(kvflags.end(), {"--kv-evict", v.kv_evict});
    auto with = [&](std::vector<std::string> a, bool kv) {
      a.insert(a.end(), {"-m", model});
      a.insert(a.end(), wflags.begin(), wflags.end());
      if (kv) a.insert(a.end(), kvflags.begin(), kvflags.end());
      a.insert(a.end(), threads.begin(), threads.end());
      return a;
    };
    const bool model_ok = !steps.contains("quantize") || steps["quantize"].value("exit_code", 1) == 0;
    if (model_ok) {
      std::vector<std::string> text = {"--text", e.eval_text, "--chunks", std::to_string(e.chunks),
                                       "--no-progress"};
      if (e.ctx > 0) text.insert(text.end(), {"--ctx", std::to_string(e.ctx)});
      // 2. Quality: the baseline saves its distributions; variants are scored against them.
      if (is_base) {
        auto a = with({o.exe, "eval", "ppl", "--position-curve", "--save-baseline", baseline_file, "--json"},
                      true);
        a.insert(a.end(), text.begin(), text.end());
        step("quality", a);
      } else {
        auto a = with({o.exe, "eval", "kld", "--baseline", baseline_file, "--json"}, true);
        a.insert(a.end(), {"--no-progress"});
        step("quality", a, baseline_file);
        auto p = with({o.exe, "eval", "ppl", "--position-curve", "--json"}, true);
        p.insert(p.end(), text.begin(), text.end());
        step("positions", p);
      }
      // 3. Speed and memory.
      step("bench", with({o.exe, "bench", "-p", std::to_string(e.bench_prompt), "-n",
                          std::to_string(e.bench_gen), "-r", std::to_string(e.bench_reps), "--json"},
                         true));
      std::string levels;
      for (int c : e.concurrency) levels += (levels.empty() ? "" : ",") + std::to_string(c);
      step("throughput", with({o.exe, "throughput", "-c", levels, "-p", std::to_string(e.tp_prompt), "-n",
                               std::to_string(e.tp_gen), "--json"},
                              true));
      // 4. Greedy outputs on the fixed prompts, and batch consistency.
      for (size_t i = 0; i < e.prompts.size(); ++i)
        step("generate-" + std::to_string(i), with({o.exe, "run", "-p", e.prompts[i], "-n",
                                                    std::to_string(e.gen_tokens), "--ignore-eos", "--json"},
                                                   true));
      step("batch", with({o.exe, "eval", "batch", "--text", e.eval_text, "--json"}, true));
    }
    variants.push_back({{"name", v.name},
                        {"spec", v.to_json()},
                        {"baseline", is_base},
                        {"model", model},
                        {"changed", is_base ? json::array() : json(changed_variables(e.baseline, v))},
                        {"steps", steps}});
  }
  const json manifest = experiment_manifest(e, {mhash, text_hash, calib_hash, exe_hash}, baseline_file,
                                            fs::absolute(o.cache_dir).string());
  return {{"experiment", e.to_json()}, {"variants", variants}, {"manifest", manifest}};
}

}  // namespace lowbit::compare
