#include "kernels/dispatch.h"

#include <atomic>
#include <string>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/clip_search.h"
#include "tensor/clip_search.h"

namespace lowbit {
namespace {
Isa detect() {
  const CpuFeatures& f = cpu_features();
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni && f.fma && f.f16c) {
    if (!f.avx512bf16 || !f.avx512vbmi) return Isa::Avx512;
    // Tile data state must be granted by the kernel (Linux arch_prctl) before the first tile instruction.
    return f.amx_tile && f.amx_int8 && f.amx_bf16 && amx_request_permission() ? Isa::Amx : Isa::Avx512Bf16;
  }
  if (f.avx2 && f.fma && f.f16c) return Isa::Avx2;
  return Isa::Generic;
}
// Kernels that serve a lower rung through its hook: installed when the program starts, in every program that
// links the kernels (this file is in all of them: matmul reads the tier).
[[maybe_unused]] const bool kHooksInstalled = [] {
  set_int_cells_error(&int_cells_error_tiered);
  return true;
}();

std::atomic<int>& active() {
  static std::atomic<int> a{static_cast<int>(best_isa())};
  return a;
}
}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Generic:
      return "generic";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
    case Isa::Avx512Bf16:
      return "avx512bf16";
    case Isa::Amx:
      return "amx";
  }
  return "?";
}

Isa isa_from_string(std::string_view s) {
  if (s == "generic") return Isa::Generic;
  if (s == "avx2") return Isa::Avx2;
  if (s == "avx512") return Isa::Avx512;
  if (s == "avx512bf16") return Isa::Avx512Bf16;
  if (s == "amx") return Isa::Amx;
  throw UsageError("kernels",
                   "unknown ISA '" + std::string(s) + "'; use generic, avx2, avx512, avx512bf16 or amx");
}

Isa best_isa() {
  static const Isa b = detect();
  return b;
}

Isa kernel_isa() {
  return static_cast<Isa>(active().load(std::memory_order_relaxed));
}

void set_kernel_isa(Isa isa) {
  if (static_cast<int>(isa) > static_cast<int>(best_isa())) isa = best_isa();
  active().store(static_cast<int>(isa), std::memory_order_relaxed);
}

std::vector<Isa> available_isas() {
  std::vector<Isa> v;
  for (int i = 0; i <= static_cast<int>(best_isa()); ++i) v.push_back(static_cast<Isa>(i));
  return v;
}

}  // namespace lowbit
