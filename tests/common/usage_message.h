// The message of the lowbit::UsageError that f throws, or "" when it throws none: for tests that check what a
// refused recipe, flag or spec says.
#pragma once

#include <functional>
#include <string>

#include "core/error.h"

namespace testing_util {

inline std::string usage_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const lowbit::UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace testing_util
