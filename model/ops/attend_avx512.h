// Internal to model/ops: the AVX-512 attention products (attend_avx512.cc).
#ifndef COLIBRI_MODEL_OPS_ATTEND_AVX512_H_
#define COLIBRI_MODEL_OPS_ATTEND_AVX512_H_

#include "model/ops/vec_dot.h"

namespace colibri::ops::internal::avx512 {

// Sets k->attend_dots, k->attend_values and their q8_0 forms.
void InstallAvx512AttendKernels(KernelSet* k);

}  // namespace colibri::ops::internal::avx512

#endif  // COLIBRI_MODEL_OPS_ATTEND_AVX512_H_
