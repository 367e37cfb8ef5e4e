// The AMX prefill kernels of INT4 / INT8 codes with INT8 activations (amx_tiles.h), the GGUF QBlkPack types
// (amx_qblk.h) and the k-quants (amx_kpack.h) on the scalar model of the tile unit (amx_emu.h). Compiled for
// AVX-512 like matmul_amx.cpp, so the layout, the unpack and the epilogue are the hardware kernels' own code;
// reached only through set_amx_emulation, from the Avx512 tier on.
#include "kernels/amx_emu.h"
#include "kernels/amx_kpack.h"
#include "kernels/amx_qblk.h"
#include "kernels/amx_tiles.h"
#include "kernels/kernel_plan.h"

namespace lowbit::kern {

void amx_qblk_emulated(const QBlkPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                       const int32_t* xs, int64_t T, float* y, const uint8_t* block) {
  amx_qblk_rows<AmxEmu>(p, r0, r1, q, dx, xs, T, y, block);
}

void amx_kpack_emulated(const KPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                        const int32_t* s, int64_t T, float* y, const uint8_t* block) {
  amx_kpack_rows<AmxEmu>(p, r0, r1, q, dx, s, T, y, block);
}

void amx_block_emulated(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                        int bits, int zoff, int64_t cols, int64_t group, const int8_t* xq, int64_t xstride,
                        const int32_t* xg, int64_t ng, const float* sx, int T, float* y, int64_t ystride) {
  amx_block16<AmxEmu>(nr, rows, s, z, bits, zoff, cols, group, xq, xstride, xg, ng, sx, T, y, ystride);
}

void amx_bf16_emulated(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                       int64_t cols, int64_t group, const Nib16Lut* nib, const Byte16Lut* byte,
                       const uint16_t* xb, int64_t xstride, const float* gsum, int T, float* y,
                       int64_t ystride) {
  amx_bf16_block16<AmxEmu>(nr, rows, s, z, cols, group, nib, byte, xb, xstride, gsum, T, y, ystride);
}

}  // namespace lowbit::kern
