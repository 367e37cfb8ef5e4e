// NVFP4 (NVIDIA; compressed-tensors nvfp4-pack-quantized): see the diagram in row_nvfp4 below.
#include "formats/format_rows.h"

namespace lowbit::formats_detail {
FormatInfo row_nvfp4() {
  // NVFP4 (NVIDIA; compressed-tensors nvfp4-pack-quantized): E2M1 elements, blocks of 16, one UE4M3 block
  // scale per block and one FP32 per-tensor global scale (two-level):
  //   global_scale = 448 * 6 / amax(tensor)
  //   block_scale  = E4M3(amax(block) / 6 * global_scale)      (RNE, saturating; sign bit 0)
  //   code         = E2M1(x * global_scale / block_scale)      (RNE, saturating)
  //   x_hat        = e2m1(code) * block_scale / global_scale
  //   block:  [UE4M3 scale: 8 bits] [16 x E2M1: 64 bits]  -> 4.5 bpw (+ 32 bits per tensor)
  FormatInfo r = format_info_elem_copy(FormatId::E2M1);
  r.id = FormatId::NVFP4;
  r.name = "nvfp4";
  r.kind = FormatKind::Microscaled;
  r.block_elems = 16;
  r.native_scale = ScaleType::E4M3;
  r.routes = kRouteWeights | kRouteActivations;
  r.elem = FormatId::E2M1;
  r.description = "NVIDIA NVFP4: 16 x E2M1 + UE4M3 block scale + FP32 tensor scale (4.5 bpw)";
  return r;
}
}  // namespace lowbit::formats_detail
