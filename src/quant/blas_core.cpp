// The OpenBLAS kernel set in use (see blas_core.h).
#include "quant/blas_core.h"

#include "quant/blas.h"

namespace lowbit::quant {

std::string blas_core() {
  const char* c = openblas_get_corename();
  return c ? c : "";
}

}  // namespace lowbit::quant
