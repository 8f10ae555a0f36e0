// Sample and Accept must not allocate: this binary counts every operator new.
#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "gtest/gtest.h"
#include "model/sampling/sampler.h"

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

// GCC 12 at -O1 (tests' own sources) inlines these replacements and takes
// their free() for a mismatch with operator new: false for a replaced pair.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace colibri::sampling {
namespace {

TEST(SamplerAllocationTest, SampleAndAcceptDoNotAllocate) {
  constexpr int32_t kVocab = 4096;
  std::vector<float> logits(kVocab);
  for (int32_t i = 0; i < kVocab; ++i)
    logits[static_cast<size_t>(i)] = static_cast<float>(i % 97) * 0.05f;

  SamplingOptions full;
  full.temperature = 0.9f;
  full.top_k = 40;
  full.top_p = 0.9f;
  full.min_p = 0.05f;
  full.repeat_penalty = 1.1f;
  full.presence_penalty = 0.2f;
  full.frequency_penalty = 0.1f;
  SamplingOptions nucleus_only;
  nucleus_only.top_p = 0.8f;
  nucleus_only.penalty_last_n = -1;
  nucleus_only.frequency_penalty = 0.1f;
  SamplingOptions greedy;
  greedy.temperature = 0.0f;
  greedy.repeat_penalty = 1.3f;

  for (const SamplingOptions& options : {full, nucleus_only, greedy}) {
    std::unique_ptr<Sampler> sampler = Sampler::Create(options, kVocab).value();
    const long before = g_allocations.load();
    for (int step = 0; step < 300; ++step) {
      sampler->Accept(sampler->Sample(logits));
    }
    sampler->Reset();
    EXPECT_EQ(g_allocations.load() - before, 0);
  }
}

}  // namespace
}  // namespace colibri::sampling
