// A test fixture holding the demo model (demo_model.h), its tokenizer and a
// pool of 2 threads, for tests that generate with it in-process.
#ifndef COLIBRI_TESTS_SUPPORT_DEMO_MODEL_FIXTURE_H_
#define COLIBRI_TESTS_SUPPORT_DEMO_MODEL_FIXTURE_H_

#include <memory>
#include <utility>

#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "model/arch/model.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/support/demo_model.h"

namespace colibri::testing {

class DemoModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = arch::Model::Open(kDemoModel);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    auto tok = tokenizer::Tokenizer::FromGguf(model_->file());
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok);
    pool_ = std::make_unique<ThreadPool>(2);
  }

  std::unique_ptr<arch::Model> model_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace colibri::testing

#endif  // COLIBRI_TESTS_SUPPORT_DEMO_MODEL_FIXTURE_H_
