// The NEON kernel set for every AArch64 CPU: int8 products by widening
// multiplies (SMULL) summed pairwise into int32 lanes (SADALP). The kernels
// themselves are in neon_kernels.h.
#include "model/ops/neon_kernels.h"

namespace colibri::ops::internal {
namespace {

struct WideningMul {
  // Each int8 product fits int16 (at most 128 * 128).
  static int32x4_t Dot(int32x4_t acc, int8x16_t a, int8x16_t b) {
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpadalq_s16(acc, vmull_high_s8(a, b));
  }
};

}  // namespace

const KernelSet& NeonKernelsUnchecked() {
  static const KernelSet kernels = MakeNeonKernelSet<WideningMul>("neon");
  return kernels;
}

}  // namespace colibri::ops::internal
