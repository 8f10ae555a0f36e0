// What the processor this program runs on can execute, read once at start-up.
#ifndef COLIBRI_COMMON_CPU_FEATURES_H_
#define COLIBRI_COMMON_CPU_FEATURES_H_

#include <string>

#include "absl/status/status.h"

namespace colibri {

struct CpuFeatures {
  bool avx2 = false;     // with FMA and F16C (the AVX2 kernels need all three)
  bool avx512f = false;  // AVX-512 F + BW + VL
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  bool neon = false;          // AArch64 Advanced SIMD
  bool neon_dotprod = false;  // with the ARMv8.2 SDOT/UDOT instructions
};

// A cap on the features GetCpuFeatures reports, so that the kernels use no
// more than it allows (programs take it from COLIBRI_CPU in main:
// common/process_knobs.h).
enum class CpuCap {
  kNone,      // every feature of the machine
  kPortable,  // no SIMD feature: the portable kernels
  kAvx2,      // nothing above AVX2 (no AVX-512)
  kNeon,      // no ARM dot-product instructions
};

// "none", "portable", "avx2", "neon".
const char* CpuCapName(CpuCap cap);

// Sets the cap GetCpuFeatures applies. Process-wide; call it from main before
// anything calls GetCpuFeatures (the kernels do on their first use, e.g. the
// first MatMul). Returns FailedPrecondition, changing nothing, once the
// features have been computed (a cap set later would not reach the kernels
// already chosen). Thread-safe. Default: CpuCap::kNone.
absl::Status SetCpuCap(CpuCap cap);

// The cap in force (CpuCap::kNone unless SetCpuCap set another). Thread-safe.
CpuCap GetCpuCap();

// Features of this machine under the cap of SetCpuCap; computed on the first
// call, the same afterwards. Thread-safe.
const CpuFeatures& GetCpuFeatures();

// "avx2 fma f16c" style summary for logs.
std::string DescribeCpuFeatures(const CpuFeatures& f);

}  // namespace colibri

#endif  // COLIBRI_COMMON_CPU_FEATURES_H_
