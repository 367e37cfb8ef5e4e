// Hadamard constructions and the generic tier of the transform (see hadamard.h).
#include "kernels/hadamard.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/parallel.h"
#include "kernels/hadamard_simd.h"

namespace lowbit {
namespace {

// The dense part costs m additions per element: beyond this order a factorisation is not worth it (11008
// would otherwise find 5504 = 5503 + 1 by Paley I).
constexpr int64_t kMaxHadamardFactor = 256;

bool is_prime(int64_t q) {
  if (q < 2) return false;
  for (int64_t d = 2; d * d <= q; ++d)
    if (q % d == 0) return false;
  return true;
}

// Quadratic character of a mod q (q an odd prime): 0, 1 or -1.
int chi(int64_t a, int64_t q) {
  a = ((a % q) + q) % q;
  if (a == 0) return 0;
  int64_t r = 1, b = a, e = (q - 1) / 2;
  for (; e > 0; e >>= 1, b = b * b % q)
    if (e & 1) r = r * b % q;
  return r == 1 ? 1 : -1;
}

// Paley I: order q + 1, q prime = 3 mod 4. H = I + S with S = [[0, 1^T], [-1, Q]], Q the Jacobsthal matrix.
std::vector<float> paley1(int64_t q) {
  const int64_t n = q + 1;
  std::vector<float> h(static_cast<size_t>(n * n), 0.0f);
  for (int64_t j = 1; j < n; ++j) h[j] = 1, h[j * n] = -1;
  for (int64_t i = 1; i < n; ++i)
    for (int64_t j = 1; j < n; ++j) h[i * n + j] = static_cast<float>(chi(j - i, q));
  for (int64_t i = 0; i < n; ++i) h[i * n + i] += 1;
  return h;
}

// Paley II: order 2(q + 1), q prime = 1 mod 4. With the symmetric conference matrix C = [[0, 1^T], [1, Q]],
// H = C (x) [[1, 1], [1, -1]] + I (x) [[1, -1], [-1, -1]].
std::vector<float> paley2(int64_t q) {
  const int64_t c = q + 1, n = 2 * c;
  std::vector<float> h(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < c; ++i)
    for (int64_t j = 0; j < c; ++j) {
      const int cij = (i == j) ? 0 : (i == 0 || j == 0) ? 1 : chi(j - i, q);
      for (int a = 0; a < 2; ++a)
        for (int b = 0; b < 2; ++b) {
          float v = static_cast<float>(cij * ((a == 1 && b == 1) ? -1 : 1));
          if (i == j) v = (a == 0 && b == 0) ? 1.0f : -1.0f;
          h[(2 * i + a) * n + 2 * j + b] = v;
        }
    }
  return h;
}

float sylvester(int64_t i, int64_t j) {
  return (__builtin_popcountll(static_cast<uint64_t>(i & j)) & 1) ? -1.0f : 1.0f;
}

}  // namespace

bool is_hadamard_matrix(const float* h, int64_t m) {
  if (m < 1) return false;
  for (int64_t i = 0; i < m * m; ++i)
    if (h[i] != 1.0f && h[i] != -1.0f) return false;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = i; j < m; ++j) {
      int64_t s = 0;
      for (int64_t k = 0; k < m; ++k) s += static_cast<int64_t>(h[i * m + k] * h[j * m + k]);
      if (s != (i == j ? m : 0)) return false;
    }
  return true;
}

std::vector<float> construct_hadamard(int64_t m, std::string* how) {
  std::string name;
  std::vector<float> h;
  if (m >= 1 && (m & (m - 1)) == 0) {
    h.resize(static_cast<size_t>(m * m));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < m; ++j) h[i * m + j] = sylvester(i, j);
    name = "sylvester";
  } else if (m % 4 == 0 && is_prime(m - 1) && (m - 1) % 4 == 3) {
    h = paley1(m - 1), name = "paley1";
  } else if (m % 4 == 0 && is_prime(m / 2 - 1) && (m / 2 - 1) % 4 == 1) {
    h = paley2(m / 2 - 1), name = "paley2";
  }
  if (how) *how = name;
  return h;
}

std::optional<Hadamard> plan_hadamard(int64_t n, const HadamardFactors& given) {
  if (n < 1) return std::nullopt;
  int64_t odd = n, twos = 1;
  while (odd % 2 == 0) odd /= 2, twos *= 2;
  for (int64_t m = odd; m <= std::min(n, kMaxHadamardFactor); m *= 2) {
    Hadamard h;
    h.n = n, h.m = m, h.pow2 = n / m;
    if (m == 1) {
      h.construction = "sylvester";
      return h;
    }
    if (m == 2 || m % 4 != 0) continue;
    std::string how;
    h.hm = construct_hadamard(m, &how);
    if (!h.hm.empty()) {
      h.construction = how;
      return h;
    }
    auto it = given.find(m);
    if (it != given.end()) return hadamard_with_factor(n, it->second, "given");
  }
  return std::nullopt;
}

Hadamard hadamard_with_factor(int64_t n, std::vector<float> hm, const std::string& construction) {
  const int64_t m = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(hm.size()))));
  if (m < 1 || m * m != static_cast<int64_t>(hm.size()) || n % m != 0 || ((n / m) & (n / m - 1)) != 0)
    fail("kernels", "a Hadamard factor of " + std::to_string(hm.size()) + " entries cannot make order " +
                        std::to_string(n) + " (needs [m, m] with n / m a power of two)");
  if (!is_hadamard_matrix(hm.data(), m))
    fail("kernels", "the given factor of order " + std::to_string(m) +
                        " is not a Hadamard matrix (entries +-1, H H^T = m I); check the factor file");
  Hadamard h;
  h.n = n, h.m = m, h.pow2 = n / m, h.construction = construction;
  if (m > 1) h.hm = std::move(hm);
  return h;
}

namespace kern {

void fwht_raw_generic(float* x, int64_t n) {
  for (int64_t len = 1; len < n; len <<= 1)
    for (int64_t i = 0; i < n; i += 2 * len)
      for (int64_t j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
}

void hadamard_one_generic(const Hadamard& h, float* x, float* tmp) {
  const int64_t P = h.pow2, m = h.m;
  const float s = static_cast<float>(1.0 / std::sqrt(static_cast<double>(h.n)));
  for (int64_t a = 0; a < m; ++a) fwht_raw_generic(x + a * P, P);
  if (m == 1) {
    for (int64_t i = 0; i < P; ++i) x[i] *= s;
    return;
  }
  for (int64_t a = 0; a < m; ++a) {
    float* y = tmp + a * P;
    for (int64_t i = 0; i < P; ++i) y[i] = 0.0f;
    for (int64_t b = 0; b < m; ++b) {
      const float* xb = x + b * P;
      if (h.hm[a * m + b] > 0)
        for (int64_t i = 0; i < P; ++i) y[i] += xb[i];
      else
        for (int64_t i = 0; i < P; ++i) y[i] -= xb[i];
    }
  }
  for (int64_t i = 0; i < h.n; ++i) x[i] = tmp[i] * s;
}

}  // namespace kern

void fwht_normalized(float* x, int64_t n) {
  kern::fwht_raw_generic(x, n);
  const float s = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void hadamard_transform_isa(Isa isa, const Hadamard& h, float* x, int64_t rows) {
  if (!h.valid() || rows <= 0) return;
  if (static_cast<int>(isa) > static_cast<int>(best_isa())) isa = best_isa();
  auto run = [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> tmp;
    if (tmp.size() < static_cast<size_t>(h.n)) tmp.resize(static_cast<size_t>(h.n));
    for (int64_t r = r0; r < r1; ++r) {
      float* xr = x + r * h.n;
      if (isa >= Isa::Avx512)
        kern::hadamard_one_avx512(h, xr, tmp.data());
      else if (isa == Isa::Avx2)
        kern::hadamard_one_avx2(h, xr, tmp.data());
      else
        kern::hadamard_one_generic(h, xr, tmp.data());
    }
  };
  // Work per row ~ n (log2 pow2 + m) additions; a parallel_for costs ~0.3 us, so small batches stay serial.
  const int64_t per_row = h.n * (h.m + 16);
  if (rows * per_row < (int64_t{1} << 17) || num_threads() <= 1) return run(0, rows);
  parallel_for(rows, std::max<int64_t>(1, (int64_t{1} << 16) / per_row), run);
}

void hadamard_transform(const Hadamard& h, float* x, int64_t rows) {
  hadamard_transform_isa(kernel_isa(), h, x, rows);
}

void hadamard_reference(const Hadamard& h, const float* x, double* y) {
  const int64_t n = h.n, P = h.pow2;
  const double s = 1.0 / std::sqrt(static_cast<double>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t a = i / P, b = i % P;
    double acc = 0;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t a2 = j / P, b2 = j % P;
      const double hm = h.m == 1 ? 1.0 : h.hm[a * h.m + a2];
      acc += hm * sylvester(b, b2) * x[j];
    }
    y[i] = acc * s;
  }
}

}  // namespace lowbit
