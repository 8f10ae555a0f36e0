// What the processor this program runs on can execute, read once at start-up.
#ifndef COLIBRI_COMMON_CPU_FEATURES_H_
#define COLIBRI_COMMON_CPU_FEATURES_H_

#include <string>

namespace colibri {

struct CpuFeatures {
  bool avx2 = false;     // with FMA and F16C (the AVX2 kernels need all three)
  bool avx512f = false;  // AVX-512 F + BW + VL
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  bool neon = false;          // AArch64 Advanced SIMD
  bool neon_dotprod = false;  // with the ARMv8.2 SDOT/UDOT instructions
};

// Features of this machine; computed on first call. The environment variable
// COLIBRI_CPU=portable hides every SIMD feature (forces the portable kernels),
// COLIBRI_CPU=avx2 hides everything above AVX2, COLIBRI_CPU=neon the ARM dot
// product instructions.
const CpuFeatures& GetCpuFeatures();

// "avx2 fma f16c" style summary for logs.
std::string DescribeCpuFeatures(const CpuFeatures& f);

}  // namespace colibri

#endif  // COLIBRI_COMMON_CPU_FEATURES_H_
