// After warm-up, decoding a token allocates no memory: every buffer of the
// session (with and without expert prediction), the expert backend, the
// kernels and the sampler is reused.
#include <atomic>
#include <cstdlib>
#include <new>

#include "gtest/gtest.h"
#include "model/arch/model.h"
#include "model/arch/session.h"
#include "model/moe/local_expert_backend.h"
#include "model/sampling/sampler.h"
#include "tests/support/golden.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};
}  // namespace

// GCC 12 at -O1 (tests' own sources) inlines these replacements and takes
// their free() for a mismatch with operator new: false for a replaced pair.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

void* operator new(std::size_t size) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace colibri {
namespace {

TEST(DecodeAllocationTest, DecodeStepsAllocateNothing) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  for (const std::string& name : testing::AllGoldenModels()) {
    for (int depth : {0, 2}) {
      for (ops::NumericPath path : {ops::NumericPath::kExact, ops::NumericPath::kFast}) {
        auto model = arch::Model::Open(testing::FixturesDir() + "/models/" + name + ".gguf");
        ASSERT_TRUE(model.ok()) << model.status();
        ThreadPool pool(2);
        moe::LocalExpertBackend backend(&(*model)->experts(), (*model)->config().n_expert, path,
                                        &pool);
        arch::SessionOptions options;
        options.path = path;
        options.n_ctx = 64;
        options.prefetch.depth = depth;
        auto session = arch::Session::Create(**model, &backend, &pool, options);
        ASSERT_TRUE(session.ok());
        sampling::SamplingOptions sampling;
        sampling.temperature = 0.7f;
        sampling.top_k = 40;
        sampling.top_p = 0.9f;
        sampling.repeat_penalty = 1.1f;
        auto sampler = sampling::Sampler::Create(sampling, (*model)->config().n_vocab);
        ASSERT_TRUE(sampler.ok());

        std::vector<float> logits;
        std::vector<int32_t> prompt = {1, 2, 3, 4};
        ASSERT_TRUE((*session)->Evaluate(prompt, false, &logits).ok());
        int32_t token = (*sampler)->Sample(logits);
        for (int warm = 0; warm < 3; ++warm) {  // lets every expert buffer reach its size
          ASSERT_TRUE((*session)->Evaluate({&token, 1}, false, &logits).ok());
          token = (*sampler)->Sample(logits);
          (*sampler)->Accept(token);
        }
        g_allocations = 0;
        g_counting = true;
        for (int step = 0; step < 20; ++step) {
          ASSERT_TRUE((*session)->Evaluate({&token, 1}, false, &logits).ok());
          token = (*sampler)->Sample(logits);
          (*sampler)->Accept(token);
        }
        g_counting = false;
        EXPECT_EQ(g_allocations.load(), 0) << name << " prefetch depth " << depth;
      }
    }
  }
}

}  // namespace
}  // namespace colibri
