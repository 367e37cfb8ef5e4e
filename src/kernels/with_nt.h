// Internal to src/kernels: compile-time token-count dispatch for the register tiles.
#pragma once
#include <cstdint>
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

// The 16-row x 8-token tile walk of the packed kernels: f(r, mask, t0, nt) for rows [r, r + 16) of [r0, r1)
// (r0 a multiple of 16; mask has one bit per row that exists) and tokens [t0, t0 + nt) of [0, T), nt a
// compile-time std::integral_constant in [1, 8].
template <typename F>
inline void for_tiles16x8(int64_t r0, int64_t r1, int64_t T, F&& f) {
  for (int64_t r = r0; r < r1; r += 16) {
    const int64_t nr = r1 - r < 16 ? r1 - r : 16;
    const auto mask = static_cast<uint16_t>((1u << nr) - 1);
    for (int64_t t0 = 0; t0 < T; t0 += 8)
      with_nt(static_cast<int>(T - t0 < 8 ? T - t0 : 8), [&](auto n) { f(r, mask, t0, n); });
  }
}

}  // namespace lowbit::kern
