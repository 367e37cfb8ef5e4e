#include "kernels/requantize.h"

#include <memory>
#include <vector>

#include "core/parallel.h"
#include "kernels/matmul.h"
#include "tensor/qtensor.h"

namespace lowbit {

WeightMatrix requantize_weight_rtn(const WeightMatrix& w, const QuantScheme& s) {
  validate(s, w.rows, w.cols);
  std::vector<float> f(static_cast<size_t>(w.rows * w.cols));
  parallel_for(w.rows, 16, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) weight_row_f32(w, r, f.data() + r * w.cols);
  });
  WeightMatrix out =
      make_quant_weight(std::make_shared<QuantizedMatrix>(quantize_matrix(f.data(), w.rows, w.cols, s)));
  out.act_format = w.act_format;
  out.act_static_scale = w.act_static_scale;
  out.act_clip = w.act_clip;
  out.act_scale = w.act_scale;
  return out;
}

}  // namespace lowbit
