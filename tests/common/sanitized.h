// Whether the test runs under AddressSanitizer (the CI sanitizer stage, scripts/ci_sanitize.sh), for the few
// draw-for-draw sweeps whose repetitions all take the same code paths: ASan checks memory, which the first
// repetitions already exercise, at ~20x the cost of each (the test code is built at -O0 there).
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define LOWBIT_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LOWBIT_TEST_ASAN 1
#endif
#endif

namespace lowbit::test {

#ifdef LOWBIT_TEST_ASAN
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

// `full` repetitions normally, `sanitized` under ASan.
constexpr int repetitions(int full, int sanitized) {
  return kSanitized ? sanitized : full;
}

}  // namespace lowbit::test
