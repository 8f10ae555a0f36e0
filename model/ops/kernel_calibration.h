// Chooses MatMul's kernel set by measuring it on this CPU. Internal to model/ops.
//
// Which SIMD set is fastest depends on the micro-architecture, not only on what
// it supports (the AVX-512 set has beaten AVX2 on AMD Zen 4 and lost to it on
// Intel Sapphire Rapids). At first use, every set the CPU can run times the
// decode-shaped (one token) quantized tile on a small weight tile that stays in
// cache, for the type families that dominate decode (Q4_K, Q6_K, Q8_0; each
// in the interleaved layout of weight_layout.h on a set with a tile for it,
// as MatMul runs it on weights kept in RAM); the set with the lowest total, each
// type's time relative to the fastest set's, wins.
// The choice is cached per CPU model in
//   CACHE/kernels-v5-<cpu model>.txt
// (CACHE: KernelChoiceOptions::cache_dir of model/ops/matmul.h, which
// programs take from the environment, common/process_knobs.h) so later
// processes start without measuring. All sets give bitwise identical
// results (model/ops/vec_dot.h), so the choice only changes speed.
//
// A CPU cap (common/cpu_features.h) skips the calibration: MatMul then uses
// the widest set it allows.
#ifndef COLIBRI_MODEL_OPS_KERNEL_CALIBRATION_H_
#define COLIBRI_MODEL_OPS_KERNEL_CALIBRATION_H_

#include <iosfwd>
#include <string>
#include <vector>

#include "model/ops/vec_dot.h"

namespace colibri::ops::internal {

// The kernel sets this build and CPU can run, slowest-featured first
// (portable, then AVX2, then AVX-512).
std::vector<const KernelSet*> RunnableKernelSets();

struct Calibration {
  const KernelSet* set = nullptr;  // never null
  bool from_cache = false;         // read from the cache file, not measured
  std::string cache_path;          // empty: no cache directory could be found
};

// Reads `cache_dir`/kernels-v5-<cpu_model>.txt if it names one of `candidates`,
// else times the candidates (about a millisecond) and writes the file (creating
// cache_dir; a failure to write only loses the cache). cache_dir empty: no
// cache. Thread-compatible; touches no global state.
Calibration CalibrateKernels(const std::vector<const KernelSet*>& candidates,
                             const std::string& cache_dir, const std::string& cpu_model);

// The set MatMul uses by default: DefaultKernels() under a CPU cap or when
// only one set can run; else CalibrateKernels over RunnableKernelSets() with
// the cache directory of ConfigureKernelChoice and this CPU's model name.
// Computed once; thread-safe.
const KernelSet& CalibratedKernels();

// "AMD EPYC 9R14 96-Core Processor" from /proc/cpuinfo, reduced to
// [A-Za-z0-9._-] ("AMD_EPYC_9R14_96-Core_Processor"); "unknown-cpu" if absent.
std::string CpuModelForCache();
// The same from the text of a /proc/cpuinfo. ARM kernels print no "model
// name" but the core's "CPU implementer" and "CPU part" codes:
// "arm-0x41-0xd0b" (the first core's; a big.LITTLE system calibrates for it).
std::string CpuModelFromCpuinfo(std::istream& cpuinfo);

}  // namespace colibri::ops::internal

#endif  // COLIBRI_MODEL_OPS_KERNEL_CALIBRATION_H_
