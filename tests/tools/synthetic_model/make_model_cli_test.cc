// Runs the colibri-make-model binary the way docs/demo-model.md and the wrapper script do.
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/gguf/gguf_file.h"

namespace colibri::synthetic {
namespace {

// Exit status of the generator run with `args`, output discarded.
int RunGenerator(const std::string& args) {
  const std::string command =
      absl::StrCat("'", COLIBRI_MAKE_MODEL_PATH, "' ", args, " > /dev/null 2>&1");
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(MakeModelCliTest, WritesTheRequestedModel) {
  const std::string out = ::testing::TempDir() + "/cli-olmoe.gguf";
  ASSERT_EQ(
      RunGenerator(absl::StrCat("--preset demo --arch olmoe --layers 1 --hidden 64 --heads 4 ",
                                "--kv-heads 4 --head-dim 16 --experts 4 --top-k 2 --expert-ffn 64 ",
                                "--context 512 --vocab-size 300 --type q8_0 --seed 0x2a --quiet ",
                                "--out '", out, "'")),
      0);
  absl::StatusOr<std::unique_ptr<gguf::GgufFile>> file = gguf::GgufFile::Open(out);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*(*file)->GetString("general.architecture"), "olmoe");
  EXPECT_EQ(*(*file)->GetUint("olmoe.block_count"), 1u);
  EXPECT_EQ(*(*file)->GetUint("olmoe.context_length"), 512u);
  EXPECT_EQ(*(*file)->GetUint("general.file_type"), 7u);
  ASSERT_NE((*file)->FindTensor("blk.0.ffn_down_exps.weight"), nullptr);
  EXPECT_EQ((*file)->FindTensor("blk.0.ffn_down_exps.weight")->dims,
            (std::vector<int64_t>{64, 64, 4}));
  EXPECT_EQ((*file)->FindTensor("token_embd.weight")->dims, (std::vector<int64_t>{64, 300}));
}

TEST(MakeModelCliTest, Qwen2MoeGetsADefaultSharedExpert) {
  const std::string out = ::testing::TempDir() + "/cli-qwen2.gguf";
  ASSERT_EQ(RunGenerator(absl::StrCat(
                "--arch qwen2moe --layers 1 --hidden 64 --heads 4 --kv-heads 4 ",
                "--head-dim 16 --experts 4 --top-k 2 --expert-ffn 32 --vocab-size 260 ",
                "--type f32 -q -o '", out, "'")),
            0);
  absl::StatusOr<std::unique_ptr<gguf::GgufFile>> file = gguf::GgufFile::Open(out);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*(*file)->GetUint("qwen2moe.expert_shared_feed_forward_length"), 64u);
}

TEST(MakeModelCliTest, RejectsBadFlags) {
  const std::string out = ::testing::TempDir() + "/cli-bad.gguf";
  EXPECT_NE(RunGenerator("--arch gpt5 -q -o " + out), 0);
  EXPECT_NE(RunGenerator("--preset nope -q -o " + out), 0);
  EXPECT_NE(RunGenerator("--type q9_9 -q -o " + out), 0);
  EXPECT_NE(RunGenerator("--shared-ffn 64 -q -o " + out), 0);  // demo is qwen3moe
  EXPECT_NE(RunGenerator("--layers x -q -o " + out), 0);
  EXPECT_NE(RunGenerator("--no-such-flag"), 0);
  EXPECT_EQ(RunGenerator("--list-presets"), 0);
}

}  // namespace
}  // namespace colibri::synthetic
