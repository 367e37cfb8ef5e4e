#include "kernels/reduce.h"

#include <algorithm>
#include <cstring>

#include "kernels/dispatch.h"

namespace lowbit {

namespace kern {

double sum_squares_f64_generic(const float* x, int64_t n) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += static_cast<double>(x[i + j]) * x[i + j];
  double r = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
  for (; i < n; ++i) r += static_cast<double>(x[i]) * x[i];
  return r;
}

bool all_finite_f32_generic(const float* x, int64_t n) {
  // On the bits, without a branch per element (the compiler vectorizes this): exponent all ones = NaN / Inf.
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, x + i, 4);
    bad |= static_cast<uint32_t>((b & 0x7F800000u) == 0x7F800000u);
  }
  return bad == 0;
}

int64_t argmax_f32_generic(const float* x, int64_t n) {
  return std::max_element(x, x + n) - x;
}

}  // namespace kern

double sum_squares_f64(const float* x, int64_t n) {
  const Isa isa = kernel_isa();
  if (isa >= Isa::Avx512) return kern::sum_squares_f64_avx512(x, n);
  if (isa >= Isa::Avx2) return kern::sum_squares_f64_avx2(x, n);
  return kern::sum_squares_f64_generic(x, n);
}

bool all_finite_f32(const float* x, int64_t n) {
  const Isa isa = kernel_isa();
  if (isa >= Isa::Avx512) return kern::all_finite_f32_avx512(x, n);
  if (isa >= Isa::Avx2) return kern::all_finite_f32_avx2(x, n);
  return kern::all_finite_f32_generic(x, n);
}

int64_t argmax_f32(const float* x, int64_t n) {
  const Isa isa = kernel_isa();
  if (isa >= Isa::Avx512) return kern::argmax_f32_avx512(x, n);
  if (isa >= Isa::Avx2) return kern::argmax_f32_avx2(x, n);
  return kern::argmax_f32_generic(x, n);
}

}  // namespace lowbit
