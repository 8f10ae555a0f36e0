#include "common/cpu_features.h"

#include <atomic>

#include "absl/base/const_init.h"
#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

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
  return f;
}

CpuFeatures Capped(CpuFeatures f, CpuCap cap) {
  switch (cap) {
    case CpuCap::kNone:
      break;
    case CpuCap::kPortable:
      f = CpuFeatures{};
      break;
    case CpuCap::kAvx2:
      f.avx512f = f.avx512_vnni = f.avx512_bf16 = false;
      break;
    case CpuCap::kNeon:
      f.neon_dotprod = false;
      break;
  }
  return f;
}

absl::Mutex cpu_mu(absl::kConstInit);
CpuCap cpu_cap ABSL_GUARDED_BY(cpu_mu) = CpuCap::kNone;
// Set once, under cpu_mu, to the features computed; read without the lock.
std::atomic<const CpuFeatures*> cpu_features{nullptr};

}  // namespace

const char* CpuCapName(CpuCap cap) {
  switch (cap) {
    case CpuCap::kNone:
      return "none";
    case CpuCap::kPortable:
      return "portable";
    case CpuCap::kAvx2:
      return "avx2";
    case CpuCap::kNeon:
      return "neon";
  }
  return "?";
}

absl::Status SetCpuCap(CpuCap cap) {
  absl::MutexLock lock(&cpu_mu);
  if (cpu_features.load(std::memory_order_relaxed) != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CPU cap ", CpuCapName(cap),
        " set after the CPU features were read (set it before the first kernel runs)"));
  }
  cpu_cap = cap;
  return absl::OkStatus();
}

CpuCap GetCpuCap() {
  absl::MutexLock lock(&cpu_mu);
  return cpu_cap;
}

const CpuFeatures& GetCpuFeatures() {
  if (const CpuFeatures* f = cpu_features.load(std::memory_order_acquire); f != nullptr) return *f;
  absl::MutexLock lock(&cpu_mu);
  if (cpu_features.load(std::memory_order_relaxed) == nullptr) {
    static CpuFeatures computed;
    computed = Capped(Detect(), cpu_cap);
    cpu_features.store(&computed, std::memory_order_release);
  }
  return *cpu_features.load(std::memory_order_relaxed);
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
