// The AMX prefill kernels of the GGUF QBlkPack types (amx_qblk.h) and k-quants (amx_kpack.h) on the scalar
// model of the tile unit (amx_emu.h). Compiled for AVX-512 like matmul_amx.cpp, so the unpack and the
// epilogue are the hardware kernel's own code; reached only through set_amx_emulation, from the Avx512 tier
// on.
#include "kernels/amx_emu.h"
#include "kernels/amx_kpack.h"
#include "kernels/amx_qblk.h"
#include "kernels/kernel_plan.h"

namespace lowbit::kern {

void amx_qblk_emulated(const QBlkPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                       const int32_t* xs, int64_t T, float* y) {
  amx_qblk_rows<AmxEmu>(p, r0, r1, q, dx, xs, T, y);
}

void amx_kpack_emulated(const KPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                        const int32_t* s, int64_t T, float* y) {
  amx_kpack_rows<AmxEmu>(p, r0, r1, q, dx, s, T, y);
}

}  // namespace lowbit::kern
