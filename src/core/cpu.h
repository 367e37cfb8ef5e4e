// CPU feature detection (cpuid + OS support via xgetbv) and AMX tile permission.
#pragma once
#include <string>

namespace lowbit {

struct CpuFeatures {
  bool sse42 = false, avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512bf16 = false, avx512fp16 = false, avx512vbmi = false, avxvnni = false;
  bool amx_tile = false, amx_int8 = false, amx_bf16 = false;
  std::string model_name;  // e.g. "Intel(R) Xeon(R) Platinum 8480+"
  int logical_cores = 1;

  // Space-separated list of the flags above that are set, e.g. "avx2 fma avx512f avx512vnni amx_int8".
  std::string summary() const;
};

// Detected once, cached. Honors LOWBIT_ISA (generic|avx2|avx512|avx512bf16|amx) to mask features for testing;
// any other non-empty value throws UsageError.
const CpuFeatures& cpu_features();
// Unmasked hardware features (ignores LOWBIT_ISA).
const CpuFeatures& cpu_features_hw();

// Asks the kernel for the AMX tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, feature 18).
// Returns true when AMX can be used by this process. Safe to call many times.
bool amx_request_permission();

// Physical memory in bytes (from /proc/meminfo MemTotal).
unsigned long long total_ram_bytes();

}  // namespace lowbit
