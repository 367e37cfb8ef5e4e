// Internal to src/kernels: compile-time token-count dispatch for the register tiles.
#pragma once
#include <type_traits>

namespace lowbit::kern {

// Calls f(std::integral_constant<int, nt>{}) for nt in [1, 8]: the tiles keep their accumulators in
// registers, so the token count must be a compile-time constant.
template <typename F>
inline void with_nt(int nt, F&& f) {
  switch (nt) {
    case 8:
      return f(std::integral_constant<int, 8>{});
    case 7:
      return f(std::integral_constant<int, 7>{});
    case 6:
      return f(std::integral_constant<int, 6>{});
    case 5:
      return f(std::integral_constant<int, 5>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    default:
      return f(std::integral_constant<int, 1>{});
  }
}

}  // namespace lowbit::kern
