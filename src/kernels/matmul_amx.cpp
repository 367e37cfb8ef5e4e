// The AMX prefill kernels on the tile instructions: W8A8, INT4 / INT8 codes with INT8 activations and the
// weight-only BF16 tile (amx_tiles.h), the GGUF QBlkPack types (amx_qblk.h) and the k-quants (amx_kpack.h).
// Compiled with the AVX-512 flags (for the epilogues); the tile instructions are asm statements (AmxHw), so
// no -mamx-* flag is needed. Called only on the Amx tier, i.e. after cpuid, XCR0 and the kernel's grant of
// tile state (amx_request_permission, core/cpu.h). Tested through the scalar model of amx_emu.h.
#include "kernels/amx_kpack.h"
#include "kernels/amx_qblk.h"
#include "kernels/amx_tiles.h"
#include "kernels/kernel_plan.h"

namespace lowbit::kern {
namespace {

// The tile instructions as lowbit's own asm statements, whose operands tell the compiler what memory each
// one reads and writes. GCC 12's <amxtileintrin.h> does not: its LDTILECFG operand is 8 bytes wide, so the
// stores of the rest of the 64-byte configuration may be dropped as dead (the crash llama.cpp #26954 works
// around), and its TILELOADD reads no memory as far as the compiler knows, so stores into a buffer that the
// next tile load reads (the unpacked B tiles of amx_unit_rows, the BF16 blocks of amx_bf16_block16) may be
// moved past the load. clang's builtins are modelled correctly; one definition for both compilers keeps the
// code that was compiled and inspected (objdump) the code that ships. Tile numbers are immediates (%c).
// Tile state itself is invisible to the compiler: volatile asm statements keep their program order.
struct AmxHw {
  static void config(const AmxTileCfg& c) { asm volatile("ldtilecfg %0" : : "m"(c)); }
  static void release() { asm volatile("tilerelease" ::); }
  template <int I>
  static void zero() {
    asm volatile("tilezero %%tmm%c0" : : "i"(I));
  }
  // Reads 16 rows at p, stride bytes apart ("memory": the rows' extent is not a type).
  template <int I>
  static void load(const void* p, int64_t stride) {
    asm volatile("tileloadd (%0,%1,1), %%tmm%c2" : : "r"(p), "r"(stride), "i"(I) : "memory");
  }
  template <int I>
  static void store(void* p, int64_t stride) {
    asm volatile("tilestored %%tmm%c2, (%0,%1,1)" : : "r"(p), "r"(stride), "i"(I) : "memory");
  }
  // C += A x B: signed A x signed B bytes (the 2 x 2 blocking of amx_w8a8_rows, amx_qblk_rows' signed codes).
  template <int C, int A, int B>
  static void dpbssd() {
    asm volatile("tdpbssd %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "i"(C), "i"(A), "i"(B));
  }
  // Signed A x unsigned B (the QBlkPack types with a min keep their unsigned codes; amx_block16's stored
  // codes).
  template <int C, int A, int B>
  static void dpbsud() {
    asm volatile("tdpbsud %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "i"(C), "i"(A), "i"(B));
  }
  // BF16 pairs into FP32 (amx_bf16_block16).
  template <int C, int A, int B>
  static void dpbf16ps() {
    asm volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "i"(C), "i"(A), "i"(B));
  }
};

}  // namespace

void amx_w8a8_tiles(const AmxInt8Pack& pk, int64_t r0, int64_t r1, const int8_t* x, const float* sx,
                    const float* wscale, int64_t T, float* y) {
  amx_w8a8_rows<AmxHw>(pk, r0, r1, x, sx, wscale, T, y);
}

void amx_qblk_tiles(const QBlkPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                    const int32_t* xs, int64_t T, float* y, const uint8_t* block) {
  amx_qblk_rows<AmxHw>(p, r0, r1, q, dx, xs, T, y, block);
}

void amx_kpack_tiles(const KPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                     const int32_t* s, int64_t T, float* y, const uint8_t* block) {
  amx_kpack_rows<AmxHw>(p, r0, r1, q, dx, s, T, y, block);
}

void amx_block_tiles(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                     int bits, int zoff, int64_t cols, int64_t group, const int8_t* xq, int64_t xstride,
                     const int32_t* xg, int64_t ng, const float* sx, int T, float* y, int64_t ystride) {
  amx_block16<AmxHw>(nr, rows, s, z, bits, zoff, cols, group, xq, xstride, xg, ng, sx, T, y, ystride);
}

void amx_bf16_tiles(int nr, const uint8_t* const* rows, const float* const* s, const float* const* z,
                    int64_t cols, int64_t group, const Nib16Lut* nib, const Byte16Lut* byte,
                    const uint16_t* xb, int64_t xstride, const float* gsum, int T, float* y,
                    int64_t ystride) {
  amx_bf16_block16<AmxHw>(nr, rows, s, z, cols, group, nib, byte, xb, xstride, gsum, T, y, ystride);
}

}  // namespace lowbit::kern
