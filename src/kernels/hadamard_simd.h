// The tiers of one Hadamard transform (hadamard.h): x [h.n] in place, tmp [h.n] scratch. The AVX2 and AVX-512
// versions live in their ISA's translation units and are only called after run-time detection; all three
// perform the same additions in the same order (bit-identical results).
#pragma once
#include <cstdint>

#include "kernels/hadamard.h"

namespace lowbit::kern {

void fwht_raw_generic(float* x, int64_t n);  // unnormalised, n = 2^k
void hadamard_one_generic(const Hadamard& h, float* x, float* tmp);
void hadamard_one_avx2(const Hadamard& h, float* x, float* tmp);
void hadamard_one_avx512(const Hadamard& h, float* x, float* tmp);

}  // namespace lowbit::kern
