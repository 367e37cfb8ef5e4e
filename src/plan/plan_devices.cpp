// Device presets for `lowbit plan --device`, memory budgets (`--budget 24GiB`) and which formats each device
// runs natively. GPU memory is nvidia-smi's memory.total; a GPU preset holds back 1 GiB for the CUDA context
// and library workspaces (cuBLAS, attention), which no serving stack can give to weights or KV.
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "core/cpu.h"
#include "core/error.h"
#include "core/parallel.h"
#include "plan/plan.h"

namespace lowbit::plan {
namespace {

constexpr int64_t kMiB = int64_t(1) << 20;
constexpr int64_t kGiB = int64_t(1) << 30;

Device gpu(const char* id, const char* name, int64_t mib, double cc) {
  Device d;
  d.id = id;
  d.name = name;
  d.memory_bytes = mib * kMiB;
  d.reserve_bytes = kGiB;
  d.compute_capability = cc;
  d.bf16 = cc >= 8.0;
  d.int8 = cc >= 7.5;  // INT8 tensor cores since Turing
  d.fp8 = cc >= 8.9;   // Ada and Hopper
  d.fp4 = cc >= 10.0;  // Blackwell
  char buf[16];
  std::snprintf(buf, sizeof buf, "sm_%d", static_cast<int>(std::lround(cc * 10)));
  d.features = buf;
  return d;
}

std::string lower_alnum(std::string_view s) {
  std::string o;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c)))
      o += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

}  // namespace

const std::vector<Device>& device_presets() {
  static const std::vector<Device> v = {
      gpu("l4", "NVIDIA L4 24 GB", 23034, 8.9),
      gpu("rtx4090", "NVIDIA GeForce RTX 4090 24 GB", 24564, 8.9),
      gpu("a100-40gb", "NVIDIA A100 40 GB", 40960, 8.0),
      gpu("a100-80gb", "NVIDIA A100 80 GB", 81920, 8.0),
      gpu("h100", "NVIDIA H100 80 GB", 81559, 9.0),
      gpu("h200", "NVIDIA H200 141 GB", 143771, 9.0),
      gpu("b200", "NVIDIA B200 180 GB", 183359, 10.0),
  };
  return v;
}

Device device_by_name(std::string_view name) {
  const std::string n = lower_alnum(name);
  if (n == "cpu" || n == "host") {
    Device d;
    d.id = "cpu";
    const auto& f = cpu_features();
    d.name = "this machine's CPU (" + f.model_name + ")";
    d.memory_bytes = static_cast<int64_t>(total_ram_bytes());
    d.reserve_bytes = 0;
    d.is_cpu = true;
    d.bf16 = f.avx512bf16 || f.amx_bf16;
    d.int8 = f.avx512vnni || f.avxvnni || f.amx_int8;
    d.fp8 = false;  // no FP8 arithmetic on x86: FP8 codes are widened in registers
    d.fp4 = false;
    d.attn_workers = num_threads();
    d.features = f.summary();
    return d;
  }
  // Aliases: what people type for each preset.
  struct Alias {
    const char* alias;
    const char* id;
  };
  static const Alias aliases[] = {
      {"l4", "l4"},
      {"nvidial4", "l4"},
      {"4090", "rtx4090"},
      {"rtx4090", "rtx4090"},
      {"a100", "a100-80gb"},
      {"a10040gb", "a100-40gb"},
      {"a10040", "a100-40gb"},
      {"a10080gb", "a100-80gb"},
      {"a10080", "a100-80gb"},
      {"h100", "h100"},
      {"h10080gb", "h100"},
      {"h200", "h200"},
      {"b200", "b200"},
  };
  for (const auto& a : aliases)
    if (n == a.alias)
      for (const auto& d : device_presets())
        if (d.id == a.id) return d;
  std::vector<std::string> ids{"cpu"};
  for (const auto& d : device_presets()) ids.push_back(d.id);
  std::string msg = "unknown device '" + std::string(name) + "'";
  auto s = suggest_names(name, ids);
  if (!s.empty()) {
    msg += "; did you mean ";
    for (size_t i = 0; i < s.size(); ++i) msg += (i ? ", '" : "'") + s[i] + "'";
    msg += "?";
  }
  msg += " Known devices:";
  for (auto& id : ids) msg += " " + id;
  msg += " (or pass --budget SIZE, e.g. --budget 24GiB)";
  throw UsageError("plan", msg);
}

Device budget_device(int64_t bytes) {
  Device d;
  d.id = "budget";
  d.name = "memory budget " + fmt_bytes(static_cast<double>(bytes));
  d.memory_bytes = bytes;
  d.reserve_bytes = 0;
  d.is_budget = true;
  d.bf16 = d.int8 = true;
  d.fp8 = d.fp4 = false;
  d.features = "unknown (pass --device for format support)";
  return d;
}

Support weight_support(const Device& d, const WeightConfig& w) {
  const std::string& id = w.id;
  if (id == "bf16") {
    if (d.bf16) return {"native", "BF16 matmul"};
    return {d.is_cpu ? "emulated" : "dequant", d.is_cpu
                                                   ? "no AVX512-BF16/AMX: BF16 widened to FP32 in registers"
                                                   : "no BF16 tensor cores (pre-Ampere): use FP16"};
  }
  if (id == "stored") return {"native", "as stored in the checkpoint"};
  if (id == "w8a8-int8") {
    if (d.int8) return {"native", d.is_cpu ? "INT8 dot products (VNNI/AMX)" : "INT8 tensor cores"};
    return {"emulated", d.is_cpu ? "no VNNI/AMX-INT8: INT8 dot products in AVX2/AVX-512 integer ops"
                                 : "no INT8 tensor cores"};
  }
  if (id == "w8a8-fp8") {
    if (d.fp8) return {"native", "FP8 tensor cores (compute capability >= 8.9)"};
    if (d.is_cpu) return {"emulated", "no FP8 arithmetic on this CPU: codes widened in registers"};
    return {"dequant", "no FP8 tensor cores (needs compute capability >= 8.9): runs as FP8 weight-only"};
  }
  if (w.family == "fp4") {
    if (d.fp4) return {"native", "FP4 tensor cores (Blackwell)"};
    return {"dequant",
            "no FP4 tensor cores (needs Blackwell): weight-only, widened to 16-bit for the matmul"};
  }
  // Weight-only formats: the matmul runs in 16 bits after widening the weights.
  if (id == "fp8-w" && d.fp8) return {"native", "FP8 weights; FP8 tensor cores available"};
  return {"dequant", "weight-only: widened to 16-bit inside the matmul kernel"};
}

Support kv_support(const Device& d, const KvConfig& kv) {
  if (kv.id == "bf16") return {"native", ""};
  if (kv.id == "fp8") {
    if (d.fp8) return {"native", "FP8 attention possible (compute capability >= 8.9)"};
    return {"dequant", "stored FP8, widened inside attention"};
  }
  if (kv.id == "int4")
    return {"dequant", "widened inside attention; without a fused kernel it can be slower"};
  return {"dequant", "stored 8-bit, widened inside attention"};
}

}  // namespace lowbit::plan
