#include "core/version.h"

#include "git_commit.h"  // generated at build time (cmake/git_commit.cmake)

namespace lowbit {
std::string version() {
  return LOWBIT_VERSION;
}
std::string git_commit() {
  return LOWBIT_GIT_COMMIT;
}
std::string compiler_id() {
#if defined(__clang__)
  return "Clang " __clang_version__;
#elif defined(__GNUC__)
  return "GCC " __VERSION__;
#else
  return "unknown";
#endif
}
}  // namespace lowbit
