// BLAS and LAPACK for the dense linear algebra of calibration and GPTQ (Gram matrices, Cholesky factors,
// triangular inverses, large products): Debian's OpenBLAS, which picks AVX-512 / AVX2 kernels for the CPU at
// run time and runs on all cores, where Eigen compiled for the portable baseline uses SSE2. Eigen stays for
// small and element-wise work.
#pragma once
#include <cblas.h>
#include <lapacke.h>
