// Internal to model/ops: the AVX-512 attention products (attend_avx512.cc).
#ifndef COLIBRI_MODEL_OPS_ATTEND_AVX512_H_
#define COLIBRI_MODEL_OPS_ATTEND_AVX512_H_

#include "model/ops/vec_dot.h"

namespace colibri::ops::internal::avx512 {

// Sets k->attend_dots and k->attend_values.
void InstallAvx512AttendKernels(KernelSet* k);

}  // namespace colibri::ops::internal::avx512

#endif  // COLIBRI_MODEL_OPS_ATTEND_AVX512_H_
