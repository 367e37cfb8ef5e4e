#include "quant/train_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "core/error.h"
#include "kv/kv_rotation.h"

namespace lowbit::quant {

void* train_symbol(const char* symbol, const std::string& feature) {
  static std::mutex mu;
  static void* handle = nullptr;
  const std::lock_guard<std::mutex> lock(mu);
  const char* env = std::getenv("LOWBIT_TRAIN_LIBRARY");
  const std::string path = env && *env ? env : LOWBIT_TRAIN_LIBRARY;
  if (!handle) {
    if (path.empty())
      throw UsageError("quant", feature +
                                    " needs lowbit's train library (libtorch), and this build has none "
                                    "(configured with -DLOWBIT_BUILD_TRAIN=OFF); build with scripts/setup.sh "
                                    "or point LOWBIT_TRAIN_LIBRARY at liblowbit_train.so");
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle)
      throw UsageError(
          "quant", feature + " needs lowbit's train library (libtorch), which did not load: " + dlerror() +
                       "; build lowbit with scripts/setup.sh (libtorch-dev) or point "
                       "LOWBIT_TRAIN_LIBRARY at liblowbit_train.so");
  }
  void* f = dlsym(handle, symbol);
  if (!f) throw UsageError("quant", "'" + path + "' has no " + symbol + ": not this lowbit's train library");
  return f;
}

std::string fake_quant_kv_spec(const Recipe& r, const ModelConfig& c) {
  if (r.kv.format != FormatId::INT4 && r.kv.format != FormatId::INT8) return "";
  return std::string(r.kv.format == FormatId::INT4 ? "int4" : "int8") +
         (r.rotation.enabled() && kv_rotation_supported(c.head_dim) ? "+rot" : "");
}

}  // namespace lowbit::quant
