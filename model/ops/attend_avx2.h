// Internal to model/ops: the AVX2 attention products (attend_avx2.cc).
#ifndef COLIBRI_MODEL_OPS_ATTEND_AVX2_H_
#define COLIBRI_MODEL_OPS_ATTEND_AVX2_H_

#include "model/ops/vec_dot.h"

namespace colibri::ops::internal::avx2 {

// Sets k->attend_dots, k->attend_values and their q8_0 forms.
void InstallAvx2AttendKernels(KernelSet* k);

}  // namespace colibri::ops::internal::avx2

#endif  // COLIBRI_MODEL_OPS_ATTEND_AVX2_H_
