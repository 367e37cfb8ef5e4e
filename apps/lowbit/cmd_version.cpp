// `lowbit info`: version, build and this machine's CPU features (also `lowbit --version`).
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "apps/lowbit/command.h"
#include "core/cpu.h"
#include "core/json_text.h"
#include "core/memory.h"
#include "core/parallel.h"
#include "core/version.h"
#include "kernels/dispatch.h"
#include "quant/blas_core.h"

namespace {
void setup(CLI::App& cmd) {
  static bool json = false;
  cmd.add_flag("--json", json, "Machine-readable output");
  cmd.callback([] {
    using namespace lowbit;
    const auto& f = cpu_features_hw();
    const auto& m = cpu_features();
    nlohmann::json j = {{"version", version()},
                        {"commit", git_commit()},
                        {"compiler", compiler_id()},
                        {"cpu", f.model_name},
                        {"logical_cores", f.logical_cores},
                        {"threads", num_threads()},
                        {"features", f.summary()},
                        {"features_enabled", m.summary()},
                        {"ram_bytes", total_ram_bytes()},
                        {"kernel_isa", isa_name(best_isa())}};
    // Whether weights can land in transparent huge pages (main.cpp re-executes with glibc.malloc.hugetlb=1).
    const bool huge = malloc_huge_pages();
    j["thp_mode"] = thp_mode();
    j["malloc_huge_pages"] = huge;
    // OpenBLAS's kernels (calibration, GPTQ, AWQ): its own choice for the CPU unless OPENBLAS_CORETYPE names
    // one.
    const char* env_core = std::getenv("OPENBLAS_CORETYPE");
    const std::string blas = quant::blas_core();
    j["blas_core"] = blas;
    j["blas_coretype_env"] = env_core ? env_core : "";
    if (json) {
      std::cout << lowbit::json_text(j, 2) << "\n";
      return;
    }
    std::printf("lowbit %s (commit %s), %s\n", version().c_str(), git_commit().c_str(),
                compiler_id().c_str());
    std::printf("cpu:      %s, %d logical cores, %.1f GiB RAM\n", f.model_name.c_str(), f.logical_cores,
                total_ram_bytes() / 1073741824.0);
    std::printf("features: %s\n", f.summary().c_str());
    if (m.summary() != f.summary()) std::printf("enabled:  %s (LOWBIT_ISA)\n", m.summary().c_str());
    std::printf(
        "kernels:  %s tier (kernels/dispatch.h; LOWBIT_ISA=generic|avx2|avx512|avx512bf16|amx lowers it)\n",
        isa_name(best_isa()));
    std::printf("threads:  %d (LOWBIT_THREADS or --threads to change)\n", num_threads());
    std::printf(
        "memory:   transparent huge pages %s; weights in them: %s (LOWBIT_HUGEPAGES=0 turns it off)\n",
        thp_mode().empty() ? "unknown" : thp_mode().c_str(), huge ? "yes (glibc.malloc.hugetlb=1)" : "no");
    std::printf("blas:     OpenBLAS, %s kernels%s\n", blas.c_str(),
                env_core ? (std::string(" (OPENBLAS_CORETYPE=") + env_core + ")").c_str() : "");
  });
}
}  // namespace
LOWBIT_COMMAND("info", 100, "Version, build and CPU features of this machine.\nExample: lowbit info --json",
               setup);
