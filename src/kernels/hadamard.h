// Normalised Hadamard transforms of order n = m * 2^k: y = (H_m (x) H_{2^k}) x / sqrt(n), with H_{2^k} the
// Sylvester (Walsh-Hadamard) matrix and H_m a Hadamard matrix of order m (m = 1 for powers of two). The
// transform is orthonormal; rotations of weights and activations (QuaRot R1/R2/R4, quant/rotate.h) and the KV
// cache's per-head rotation (kv/kv_rotation.h) use it.
//
// With x held as an [m, 2^k] row-major matrix X, the transform is H_m X H_{2^k} / sqrt(n): a fast
// Walsh-Hadamard transform of every row (n log 2^k additions), then the dense m x m product with +-1 entries
// along the columns (m^2 2^k additions). Every tier (generic, AVX2, AVX-512; kernels/dispatch.h) performs
// the same additions in the same order, so the tiers agree bit for bit.
//
// Where H_m comes from: constructed in code (Sylvester 2^k; Paley I: q + 1 for a prime q = 3 mod 4; Paley II:
// 2(q + 1) for a prime q = 1 mod 4), or given by the caller (a factor file in the layout of
// ../shared/data/hadamard/hadamards.safetensors, read above this rung), e.g. 172 for 11008 = 172 * 64.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kernels/dispatch.h"

namespace lowbit {

struct Hadamard {
  int64_t n = 0;             // order of the transform; 0 = none
  int64_t m = 1;             // order of the non-power-of-two factor H_m
  int64_t pow2 = 1;          // 2^k, n = m * pow2
  std::vector<float> hm;     // [m, m] entries +-1 (empty when m == 1)
  std::string construction;  // how H_m was made: "sylvester" (m = 1), "paley1", "paley2", "given"
  bool valid() const { return n > 0; }
};

// Hadamard matrices of extra orders by order: [m, m] entries +-1 (a user's factor file, a checkpoint's).
using HadamardFactors = std::map<int64_t, std::vector<float>>;

// True when h [m, m] has entries +-1 and H H^T = m I.
bool is_hadamard_matrix(const float* h, int64_t m);
// A Hadamard matrix of order m from the constructions above (Sylvester for powers of two); empty when none
// gives this order. `how` (optional) receives the construction's name.
std::vector<float> construct_hadamard(int64_t m, std::string* how = nullptr);
// The transform of order n with the smallest factor m = n / 2^j (m <= 256) that is 1, constructible or in
// `given` (constructions first); nullopt when no factorisation has a known H_m.
std::optional<Hadamard> plan_hadamard(int64_t n, const HadamardFactors& given = {});
// The transform of order n with a stored factor hm [m, m] (a checkpoint's): Error("kernels") when hm is not a
// Hadamard matrix or n / m is not a power of two.
Hadamard hadamard_with_factor(int64_t n, std::vector<float> hm, const std::string& construction);

// In place: each of `rows` consecutive vectors of h.n floats becomes its transform (parallel over rows,
// kernel_isa() tier). hadamard_transform_isa runs one given tier (tests); clamped to best_isa().
void hadamard_transform(const Hadamard& h, float* x, int64_t rows);
void hadamard_transform_isa(Isa isa, const Hadamard& h, float* x, int64_t rows);
// Reference: the dense product with the n x n matrix (entries formed on the fly), in double. The oracle of
// the fast path; O(n^2).
void hadamard_reference(const Hadamard& h, const float* x, double* y);

// In-place normalised fast Walsh-Hadamard transform of n = 2^k floats (the generic tier).
void fwht_normalized(float* x, int64_t n);

}  // namespace lowbit
