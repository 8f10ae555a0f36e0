#include "common/cpu_features.h"

#include <cstdlib>
#include <cstring>

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace colibri {
namespace {

CpuFeatures Detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
              __builtin_cpu_supports("avx512vl");
  f.avx512_vnni = f.avx512f && __builtin_cpu_supports("avx512vnni");
#if defined(__GNUC__) && __GNUC__ >= 12
  f.avx512_bf16 = f.avx512f && __builtin_cpu_supports("avx512bf16");
#endif
#elif defined(__aarch64__)
  f.neon = true;  // Advanced SIMD is part of every AArch64 CPU
#if defined(__linux__)
  // The kernel reports SDOT/UDOT (ARMv8.2 dot product) as a hardware
  // capability; HWCAP_ASIMDDP is bit 20 of AT_HWCAP.
  constexpr unsigned long kHwcapAsimdDp = 1ul << 20;
  f.neon_dotprod = (getauxval(AT_HWCAP) & kHwcapAsimdDp) != 0;
#endif
#endif
  const char* force = std::getenv("COLIBRI_CPU");
  if (force != nullptr) {
    if (std::strcmp(force, "portable") == 0) {
      f = CpuFeatures{};
    } else if (std::strcmp(force, "avx2") == 0) {
      f.avx512f = f.avx512_vnni = f.avx512_bf16 = false;
    } else if (std::strcmp(force, "neon") == 0) {
      f.neon_dotprod = false;
    }
  }
  return f;
}

}  // namespace

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures features = Detect();
  return features;
}

std::string DescribeCpuFeatures(const CpuFeatures& f) {
  std::string s;
  auto add = [&s](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.avx2, "avx2+fma");
  add(f.avx512f, "avx512");
  add(f.avx512_vnni, "avx512-vnni");
  add(f.avx512_bf16, "avx512-bf16");
  add(f.neon, "neon");
  add(f.neon_dotprod, "neon-dotprod");
  return s.empty() ? "portable" : s;
}

}  // namespace colibri
