// exp over four floats at a time for arguments <= 0, the same bits on every
// target: the sampler's probabilities (model/sampling/sampler.cc) and
// attention's softmax (ops::SoftmaxInPlace) take it. GCC and Clang vector
// extensions, which compile to SSE2 on x86-64 and NEON on ARM; the
// operations are IEEE single precision with no contraction, so a translation
// unit that includes this must be built with -ffp-contract=off (the whole
// project is: the top-level CMakeLists.txt).
#ifndef COLIBRI_MODEL_OPS_EXP_LANES_H_
#define COLIBRI_MODEL_OPS_EXP_LANES_H_

#include <cstdint>
#include <cstring>

namespace colibri::ops::lanes {

typedef float F4 __attribute__((vector_size(16)));
typedef int32_t I4 __attribute__((vector_size(16)));
typedef uint32_t U4 __attribute__((vector_size(16)));

inline constexpr int kLanes = 4;

inline F4 LoadF4(const float* p) {
  F4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline F4 SplatF4(float x) { return F4{x, x, x, x}; }

// Elements of `a` where mask is set, of `b` elsewhere (mask lanes are 0 or -1).
inline F4 Select(I4 mask, F4 a, F4 b) { return (F4)((mask & (I4)a) | (~mask & (I4)b)); }

// Below it ExpLanes gives 0. At -86 (exp = 4.4e-38) the result is still a
// normal float (>= 1.2e-38), so no lane computes with subnormals, whose
// handling a flush-to-zero mode elsewhere in the process would change.
inline constexpr float kMinExpArgument = -86.0f;

// exp(x) lane by lane for x <= 0: 0 below kMinExpArgument, for -inf and for
// NaN; otherwise 2^n e^r with x = n ln 2 + r, n rounded to nearest, ln 2 in
// two parts so that r is nearly exact, and e^r = 1 + r + r^2 P(r) with
// Cephes' single-precision coefficients for the degree-5 P. exp(0) = 1
// exactly; within 1 ulp of exp over [-86, 0] (sampler_test).
inline F4 ExpLanes(F4 x) {
  const F4 kRound = SplatF4(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const F4 t = x * SplatF4(1.44269504088896341f) + kRound;
  const F4 n = t - kRound;
  const F4 r = (x - n * SplatF4(0.693359375f)) - n * SplatF4(-2.12194440e-4f);
  F4 p = SplatF4(1.9875691500e-4f);
  p = p * r + SplatF4(1.3981999507e-3f);
  p = p * r + SplatF4(8.3334519073e-3f);
  p = p * r + SplatF4(4.1665795894e-2f);
  p = p * r + SplatF4(1.6666665459e-1f);
  p = p * r + SplatF4(5.0000001201e-1f);
  p = p * (r * r) + r + SplatF4(1.0f);
  // 2^n from its exponent bits: t - kRound's bits are n's (an integer in
  // [-125, 0] where the result is kept; unsigned, so lanes that are not wrap
  // without undefined behaviour).
  const U4 biased = ((U4)t - (U4)kRound + 127u) << 23;
  const F4 result = p * (F4)biased;
  return Select(x >= SplatF4(kMinExpArgument), result, SplatF4(0.0f));
}

}  // namespace colibri::ops::lanes

#endif  // COLIBRI_MODEL_OPS_EXP_LANES_H_
