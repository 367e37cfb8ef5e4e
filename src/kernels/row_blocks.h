// Internal to src/kernels: the load-time packers' walk over 16-row blocks and the pack they build (QBlkPack,
// KPack).
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>

#include "core/memory.h"
#include "core/parallel.h"

namespace lowbit::kern {

// pack(rows, nr, out + rb * region_bytes) for each 16-row block rb of a row-major matrix (rows[i]: the
// block's row i, nr <= 16 rows), in parallel over blocks of `grain`.
template <typename Pack>
void pack_row_blocks16(const uint8_t* data, int64_t row_bytes, int64_t rows, int64_t region_bytes,
                       uint8_t* out, int64_t grain, Pack&& pack) {
  parallel_for((rows + 15) / 16, grain, [&](int64_t rb0, int64_t rb1) {
    for (int64_t rb = rb0; rb < rb1; ++rb) {
      const uint8_t* rp[16];
      const int nr = static_cast<int>(std::min<int64_t>(16, rows - rb * 16));
      for (int i = 0; i < nr; ++i) rp[i] = data + (rb * 16 + i) * row_bytes;
      pack(rp, nr, out + rb * region_bytes);
    }
  });
}

// A load-time pack: `layout` (its bytes()) filled by pack_block(rows, nr, base) for each 16-row block of
// region_bytes (zero-initialised memory: padding stays zero), the buffer then owned by its `data`.
template <typename Pack, typename PackBlock>
std::shared_ptr<const Pack> build_row_pack(Pack layout, const uint8_t* data, int64_t row_bytes, int64_t rows,
                                           int64_t region_bytes, int64_t grain, PackBlock&& pack_block) {
  auto p = std::make_shared<Pack>(std::move(layout));
  auto buf = aligned_bytes(p->bytes());
  pack_row_blocks16(data, row_bytes, rows, region_bytes, buf.get(), grain,
                    [&](const uint8_t* const* rp, int nr, uint8_t* base) { pack_block(*p, rp, nr, base); });
  p->data = std::shared_ptr<uint8_t>(buf.release(), AlignedFree{});
  return p;
}

}  // namespace lowbit::kern
