// Kernel ISA selection. The ISA tier is chosen once at start-up from cpu_features() (which honours the
// LOWBIT_ISA=generic|avx2|avx512|avx512bf16|amx mask), and can be lowered at run time (tests, benchmarks)
// with set_kernel_isa.
//   Generic: portable C++ (no intrinsics)         Avx2: AVX2 + FMA + F16C float dot products
//   Avx512:  AVX-512 F/BW/VL/DQ + VNNI: fused dequantize-and-multiply kernels, VNNI integer products
//   Avx512Bf16: Avx512 + AVX512_BF16 + AVX512_VBMI: as Avx512, and the 4-bit weight-only decode kernel takes
//            BF16 activations (vpmultishiftqb + vpermw decode, vdpbf16ps products; matmul_avx512bf16.cpp)
//   Amx:     Avx512Bf16 + AMX-TILE + AMX-INT8 + AMX-BF16 with the OS granting tile state (Sapphire Rapids
//            and later): as Avx512Bf16, and prefill from kAmxTokens tokens on AMX tiles: INT8 (W8A8, INT4 /
//            INT8 codes with INT8 activations, the GGUF types on a load-time or per-call pack) and BF16 (the
//            weight-only formats of the BF16 tile) (matmul_amx.cpp)
// Tiers are ordered: a higher tier runs every kernel of the lower ones.
// The AMX kernels are tested on CPUs without AMX through a scalar emulation of the tile unit
// (set_amx_emulation, kernels/amx_emu.h); the development machine (AMD EPYC) has no AMX, so they have not run
// on hardware there.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace lowbit {

enum class Isa : uint8_t { Generic, Avx2, Avx512, Avx512Bf16, Amx };

const char* isa_name(Isa isa);            // "generic", "avx2", "avx512", "avx512bf16", "amx"
Isa isa_from_string(std::string_view s);  // UsageError for unknown names
Isa best_isa();                           // the best tier this CPU (masked by LOWBIT_ISA) supports
Isa kernel_isa();                         // the tier matmul() uses now (default best_isa())
// Selects the tier for subsequent calls (process-wide; clamped to best_isa()). Not for use while another
// thread is inside matmul().
void set_kernel_isa(Isa isa);
std::vector<Isa> available_isas();  // Generic .. best_isa()

}  // namespace lowbit
