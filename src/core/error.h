// Errors: exceptions that name the module, say what went wrong, where, and what to do.
// Validate at the boundary (files, flags, recipes, requests), trust inside.
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>

namespace lowbit {

class Error : public std::runtime_error {
 public:
  // module: "io", "model", "formats", ... ; message: what, where, what to do.
  Error(std::string_view module, std::string_view message)
      : std::runtime_error(compose(module, message)), module_(module) {}
  const std::string& module() const { return module_; }

 private:
  static std::string compose(std::string_view module, std::string_view message) {
    std::string s;
    s.reserve(module.size() + message.size() + 3);
    s.append("[").append(module).append("] ").append(message);
    return s;
  }
  std::string module_;
};

// Thrown for bad user input (flags, recipes, requests): the CLI maps it to exit code 2, the server to 4xx.
class UsageError : public Error {
 public:
  using Error::Error;
};

[[noreturn]] inline void fail(std::string_view module, std::string_view message) {
  throw Error(module, message);
}

}  // namespace lowbit

// LB_CHECK(cond, module, msg): throw lowbit::Error when cond is false. Use at boundaries, not in kernels.
#define LB_CHECK(cond, module, msg)               \
  do {                                            \
    if (!(cond)) ::lowbit::fail((module), (msg)); \
  } while (0)
