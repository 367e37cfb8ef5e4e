// Which OpenBLAS kernels run the dense algebra of calibration and GPTQ / AWQ (quant/blas.h): OpenBLAS picks
// them by CPU when it loads, unless OPENBLAS_CORETYPE names a set. `lowbit info` prints it. On a 2-core Zen
// 5, GPTQ of the 0.5B fixture took 127.0 s with OPENBLAS_CORETYPE=Haswell (AVX2) and 104.4 s with OpenBLAS's
// own AVX-512 choice, Cooperlake (docs/quant.md, "At 0.5B scale").
#pragma once
#include <string>

namespace lowbit::quant {

// The OpenBLAS kernel set in use, e.g. "Haswell", "SkylakeX", "Cooperlake" (openblas_get_corename).
std::string blas_core();

}  // namespace lowbit::quant
