// lowbit: measure, quantize and run LLMs in low precision. Entry point: parses the command line with CLI11,
// dispatches to the registered subcommands, and maps errors to exit codes
// (0 ok, 1 runtime failure, 2 bad usage / bad input, 3 a check or threshold failed).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "apps/lowbit/command.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/version.h"

namespace lowbit::app {
std::vector<CommandDef>& command_registry() {
  static std::vector<CommandDef> r;
  return r;
}
namespace {
int g_exit = 0;
}
void set_exit_code(int code) {
  g_exit = code;
}
int exit_code() {
  return g_exit;
}
}  // namespace lowbit::app

namespace {
// Re-executes this program once with glibc's malloc advising transparent huge pages (see huge_page_tunables):
// decoded tokens stream every weight from memory, and on this project's test machine huge pages raised a
// 2-thread read of 512 MiB from ~29 to ~33 GB/s (1 thread: ~22 -> ~28) and 1-thread decode of the 0.5B INT4
// model by ~15 % (2 threads: within the machine's noise; docs/kernels.md). LOWBIT_HUGEPAGES=0 opts out; if
// the exec fails the program simply runs on.
void reexec_with_huge_pages(char** argv) {
  const std::string t = lowbit::huge_page_tunables(std::getenv("LOWBIT_HUGEPAGES"),
                                                   std::getenv("GLIBC_TUNABLES"), lowbit::thp_mode());
  if (t.empty()) return;
  const char* old = std::getenv("GLIBC_TUNABLES");
  const std::string saved = old ? old : "";
  setenv("GLIBC_TUNABLES", t.c_str(), 1);
  execv("/proc/self/exe", argv);
  if (old)
    setenv("GLIBC_TUNABLES", saved.c_str(), 1);
  else
    unsetenv("GLIBC_TUNABLES");
}
}  // namespace

int main(int argc, char** argv) {
  using namespace lowbit;
  try {
    reexec_with_huge_pages(argv);
  } catch (const UsageError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  CLI::App app{
      "lowbit: put an LLM in low precision and measure what it costs.\n"
      "Plan memory, quantize (RTN/GPTQ/AWQ/SmoothQuant), run, evaluate and compare variants\n"
      "on one CPU engine.\n"
      "Example: lowbit formats   |   lowbit run --model ../shared/models/stories260K/stories260K.bin "
      "--prompt \"Once\""};
  app.require_subcommand(0, 1);
  bool show_version = false;
  app.add_flag("--version", show_version, "Print version, git commit, compiler and detected CPU features");
  auto& reg = app::command_registry();
  std::sort(reg.begin(), reg.end(), [](auto& a, auto& b) { return a.order < b.order; });
  for (auto& c : reg) {
    CLI::App* sub = app.add_subcommand(c.name, c.description);
    c.setup(*sub);
  }
  try {
    cpu_features();  // validates LOWBIT_ISA here, on the main thread, before any command runs
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // CLI11's message names the flag; add where to look.
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "[cli] " << e.what() << "; run 'lowbit --help' or 'lowbit <command> --help' for usage\n";
    return 2;
  } catch (const UsageError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  } catch (const Error& e) {
    std::cerr << e.what() << "\n";
    return e.module() == "cli" ? 2 : 1;
  } catch (const std::exception& e) {
    std::cerr << "[lowbit] unexpected error: " << e.what() << "\n";
    return 1;
  }
  if (show_version) {
    const auto& f = cpu_features_hw();
    std::printf("lowbit %s (commit %s)\ncompiler: %s\ncpu: %s (%d logical cores)\nfeatures: %s\n",
                version().c_str(), git_commit().c_str(), compiler_id().c_str(), f.model_name.c_str(),
                f.logical_cores, f.summary().c_str());
    return 0;
  }
  if (app.get_subcommands().empty()) {
    std::cout << app.help();
    return 0;
  }
  return app::exit_code();
}
