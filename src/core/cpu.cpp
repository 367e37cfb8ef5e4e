#include "core/cpu.h"

#include "core/error.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace lowbit {
namespace {

unsigned long long xgetbv0() {
  unsigned int eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<unsigned long long>(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  f.sse42 = c & (1u << 20);
  f.fma = c & (1u << 12);
  f.f16c = c & (1u << 29);
  bool osxsave = c & (1u << 27);
  bool avx_hw = c & (1u << 28);
  unsigned long long xcr0 = osxsave ? xgetbv0() : 0;
  bool ymm_os = (xcr0 & 0x6) == 0x6;
  bool zmm_os = (xcr0 & 0xe6) == 0xe6;
  bool amx_os = (xcr0 & (3ull << 17)) == (3ull << 17);
  f.avx = avx_hw && ymm_os;
  if (!f.avx) f.fma = f.f16c = false;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = f.avx && (b & (1u << 5));
    f.avx512f = zmm_os && (b & (1u << 16));
    f.avx512dq = f.avx512f && (b & (1u << 17));
    f.avx512bw = f.avx512f && (b & (1u << 30));
    f.avx512vl = f.avx512f && (b & (1u << 31));
    f.avx512vnni = f.avx512f && (c & (1u << 11));
    f.avx512vbmi = f.avx512f && (c & (1u << 1));
    f.avx512fp16 = f.avx512f && (d & (1u << 23));
    f.amx_bf16 = amx_os && (d & (1u << 22));
    f.amx_tile = amx_os && (d & (1u << 24));
    f.amx_int8 = amx_os && (d & (1u << 25));
    unsigned a1, b1, c1, d1;
    if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) {
      f.avxvnni = f.avx && (a1 & (1u << 4));
      f.avx512bf16 = f.avx512f && (a1 & (1u << 5));
    }
  }
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) f.model_name = line.substr(pos + 2);
      break;
    }
  }
  f.logical_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return f;
}

CpuFeatures apply_mask(CpuFeatures f) {
  const char* isa = std::getenv("LOWBIT_ISA");
  if (!isa) return f;
  std::string s(isa);
  auto drop_amx = [&] { f.amx_tile = f.amx_int8 = f.amx_bf16 = false; };
  auto drop_512 = [&] {
    drop_amx();
    f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.avx512vnni = f.avx512bf16 = f.avx512fp16 = false;
    f.avx512vbmi = false;
  };
  if (s == "generic") {
    drop_512();
    f.avx = f.avx2 = f.fma = f.f16c = f.avxvnni = false;
  } else if (s == "avx2") {
    drop_512();
  } else if (s == "avx512") {
    drop_amx();
    f.avx512bf16 = f.avx512vbmi = f.avx512fp16 = false;  // the plain AVX-512 tier (dispatch.h)
  } else if (s == "avx512bf16") {
    drop_amx();
  } else if (s != "amx" && !s.empty()) {
    // A typo must not silently run the best tier (an A/B against LOWBIT_ISA=avx512 would compare a tier with
    // itself).
    throw UsageError("core", "LOWBIT_ISA=" + s +
                                 " is not an ISA tier; use generic, avx2, avx512, avx512bf16 or amx, "
                                 "or unset it");
  }
  return f;
}

}  // namespace

std::string CpuFeatures::summary() const {
  std::ostringstream os;
  auto add = [&](bool v, const char* n) {
    if (v) os << (os.tellp() > 0 ? " " : "") << n;
  };
  add(sse42, "sse4.2");
  add(avx, "avx");
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512dq, "avx512dq");
  add(avx512vnni, "avx512vnni");
  add(avx512bf16, "avx512bf16");
  add(avx512fp16, "avx512fp16");
  add(avx512vbmi, "avx512vbmi");
  add(avxvnni, "avxvnni");
  add(amx_tile, "amx_tile");
  add(amx_int8, "amx_int8");
  add(amx_bf16, "amx_bf16");
  return os.str();
}

const CpuFeatures& cpu_features_hw() {
  static const CpuFeatures f = detect();
  return f;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = apply_mask(cpu_features_hw());
  return f;
}

bool amx_request_permission() {
  static const bool ok = [] {
    if (!cpu_features_hw().amx_tile) return false;
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}

unsigned long long total_ram_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  unsigned long long kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemTotal:") return kb * 1024ull;
  }
  return 0;
}

}  // namespace lowbit
