// Online RTN quantization of an already-loaded weight (for `lowbit bench --quantize` until the quant module's
// own entry point is wired in): widens the matrix row by row to float and quantizes it with quantize_matrix.
#pragma once
#include "formats/scheme.h"
#include "kernels/weight.h"

namespace lowbit {

// Returns a WeightKind::Quant weight (kernel side tables built). The activation route of `w` is kept.
// Throws UsageError when the scheme does not fit the matrix shape.
WeightMatrix requantize_weight_rtn(const WeightMatrix& w, const QuantScheme& s);

}  // namespace lowbit
