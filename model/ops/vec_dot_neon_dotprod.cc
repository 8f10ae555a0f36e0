// The NEON kernel set for ARMv8.2 CPUs with the dot-product extension
// (Cortex-A55/A76 and later, Neoverse, Apple M): SDOT sums four int8 products
// into each int32 lane in one instruction. Built with
// -march=armv8.2-a+dotprod (model/ops/CMakeLists.txt): call
// NeonDotprodKernelsUnchecked() only once the CPU is known to have it. The
// kernels themselves are in neon_kernels.h.
#include "model/ops/neon_kernels.h"

namespace colibri::ops::internal {
namespace {

struct SdotMul {
  static int32x4_t Dot(int32x4_t acc, int8x16_t a, int8x16_t b) { return vdotq_s32(acc, a, b); }
};

}  // namespace

const KernelSet& NeonDotprodKernelsUnchecked() {
  static const KernelSet kernels = MakeNeonKernelSet<SdotMul>("neon-dotprod");
  return kernels;
}

}  // namespace colibri::ops::internal
