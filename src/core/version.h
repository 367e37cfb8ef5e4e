#pragma once
#include <string>

namespace lowbit {
std::string version();      // "0.1.0"
std::string git_commit();   // short commit hash at configure time
std::string compiler_id();  // e.g. "GCC 12.2.0"
}  // namespace lowbit
