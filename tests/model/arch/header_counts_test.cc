// Fixture models whose header counts (layers, experts, heads, embedding width)
// exceed what their tensor tables hold: loading is refused with an error that
// names the count and what the file has, before anything is allocated by it.
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/arch/model.h"
#include "model/arch/model_config.h"
#include "model/gguf/gguf_file.h"
#include "tests/support/patched_gguf.h"
#include "tests/support/paths.h"

namespace colibri::arch {
namespace {

using ::testing::HasSubstr;

struct Case {
  const char* model;
  const char* arch;
  int blocks;  // layers the fixture has tensors for
};

class HeaderCountsTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  }

  // Model::Open of the fixture with `suffix` ("block_count") set to `value`.
  absl::Status OpenPatched(const std::string& suffix, uint32_t value) {
    const Case& c = GetParam();
    const std::string path = testing::PatchedFixture(
        c.model, absl::StrCat(c.arch, ".", suffix), value, absl::StrCat(c.arch, ".", suffix));
    if (path.empty()) return absl::InternalError("fixture could not be patched");
    return Model::Open(path).status();
  }
};

TEST_P(HeaderCountsTest, AbsurdBlockCountIsRefusedWithWhatTheFileHolds) {
  for (uint32_t n : {823558014u, 2147483647u, static_cast<uint32_t>(GetParam().blocks + 1)}) {
    const absl::Status s = OpenPatched("block_count", n);
    ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("block_count ", n, " but the file has tensors for ",
                                                    GetParam().blocks, " layers")));
  }
}

TEST_P(HeaderCountsTest, ExpertCountBeyondTheRouterIsRefused) {
  const absl::Status s = OpenPatched("expert_count", 1u << 30);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("expert_count ", 1 << 30, " but blk.")));
}

TEST_P(HeaderCountsTest, EmbeddingLengthBeyondTheEmbeddingIsRefused) {
  const absl::Status s = OpenPatched("embedding_length", 1u << 30);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("embedding_length ", 1 << 30,
                                                  " but token_embd.weight has rows of ")));
}

TEST_P(HeaderCountsTest, HeadCountBeyondTheAttentionIsRefused) {
  const absl::Status s = OpenPatched("attention.head_count", 1u << 20);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

INSTANTIATE_TEST_SUITE_P(Families, HeaderCountsTest,
                         ::testing::Values(Case{"mixtral-tiny-q4_k_m.gguf", "llama", 2},
                                           Case{"qwen2moe-tiny-q8_0.gguf", "qwen2moe", 3},
                                           Case{"glm4moe-tiny-q4_k_m.gguf", "glm4moe", 3},
                                           Case{"gpt-oss-tiny-mxfp4.gguf", "gpt-oss", 3},
                                           Case{"deepseek2-tiny-q8_0.gguf", "deepseek2", 3}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name = info.param.arch;
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace colibri::arch
