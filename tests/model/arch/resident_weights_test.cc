// Model::CopyWeightsToRam: the weights a step reads move from the file's
// mapping into anonymous memory (checked in /proc/self/maps) at the same
// addresses, the routed experts only when asked, the token embedding never;
// and the model computes bitwise the same logits before and after.
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "model/arch/model.h"
#include "model/arch/session.h"
#include "model/gguf/gguf_file.h"
#include "model/moe/local_expert_backend.h"
#include "tools/synthetic_model/synthetic_model.h"
#include "tests/support/proc_self.h"

namespace colibri {
namespace {

// Whether the mapping holding `p` is backed by a file (else anonymous).
// Fails the test when no mapping holds it.
bool FileBacked(const void* p) {
  bool found = false;
  const bool file = testing::FileBacked(p, &found);
  EXPECT_TRUE(found) << "no mapping holds " << p;
  return file;
}

// The middle byte of a matrix.
const void* Middle(const ops::WeightMatrix& m) {
  return m.data + static_cast<uint64_t>(m.rows) * m.row_bytes / 2;
}

// A 2-layer model: routed expert tensors of 16 experts of 256 x 1024 (~4.4 MB
// in Q8_0), more than a huge page apart from the dense tensors around them.
synthetic::ModelSpec SmallSpec() {
  synthetic::ModelSpec spec;
  spec.n_layer = 2;
  spec.n_embd = 256;
  spec.n_head = 4;
  spec.n_head_kv = 2;
  spec.head_dim = 64;
  spec.n_expert = 16;
  spec.n_expert_used = 2;
  spec.n_ff_exp = 1024;
  spec.n_ctx = 128;
  spec.vocab_size = 320;
  return spec;
}

// A model of `spec` with matrices of `type` in the test's temporary directory.
std::string* MakeModel(ops::TensorType type, const std::string& tag,
                       const synthetic::ModelSpec& spec = SmallSpec()) {
  synthetic::GenerateOptions options;
  options.type = type;
  options.num_threads = 2;
  // One file per process: ctest runs each test of the suite in its own
  // process, at the same time as the others.
  auto* path = new std::string(::testing::TempDir() + "/" + tag + "-" + std::to_string(::getpid()) +
                               ".gguf");
  absl::StatusOr<synthetic::GenerateReport> report = synthetic::GenerateModel(spec, options, *path);
  EXPECT_TRUE(report.ok()) << report.status();
  return path;
}

class ResidentWeightsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { path_ = MakeModel(ops::TensorType::kQ8_0, "resident-weights"); }
  static void TearDownTestSuite() {
    std::remove(path_->c_str());
    delete path_;
  }

  static std::unique_ptr<arch::Model> Open() { return OpenModel(*path_); }

  static std::unique_ptr<arch::Model> OpenModel(const std::string& path) {
    absl::StatusOr<std::unique_ptr<arch::Model>> model = arch::Model::Open(path);
    EXPECT_TRUE(model.ok()) << model.status();
    return model.ok() ? std::move(model).value() : nullptr;
  }

  // The logits after a short prompt and two decode steps, concatenated.
  static std::vector<float> Logits(const arch::Model& model,
                                   ops::NumericPath path = ops::NumericPath::kFast) {
    ThreadPool pool(2);
    moe::LocalExpertBackend backend(&model.experts(), model.config().n_expert, path, &pool);
    arch::SessionOptions options;
    options.n_ctx = 64;
    options.path = path;
    absl::StatusOr<std::unique_ptr<arch::Session>> session =
        arch::Session::Create(model, &backend, &pool, options);
    EXPECT_TRUE(session.ok()) << session.status();
    if (!session.ok()) return {};
    std::vector<float> all;
    std::vector<float> step;
    const std::vector<int32_t> prompt = {5, 17, 260, 3, 99};
    EXPECT_TRUE((*session)->Evaluate(prompt, false, &step).ok());
    all.insert(all.end(), step.begin(), step.end());
    for (int32_t token : {42, 7}) {
      EXPECT_TRUE((*session)->Evaluate({&token, 1}, false, &step).ok());
      all.insert(all.end(), step.begin(), step.end());
    }
    return all;
  }

  static std::string* path_;
};

std::string* ResidentWeightsTest::path_ = nullptr;

bool Bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  return !a.empty() && a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_F(ResidentWeightsTest, TheDensePartMovesAndTheRoutedExpertsStayMapped) {
  std::unique_ptr<arch::Model> model = Open();
  ASSERT_NE(model, nullptr);
  const std::vector<float> before = Logits(*model);
  const arch::LayerWeights& l0 = model->layer(0);
  const ops::WeightMatrix& expert_up = model->experts()[0][8].up;
  ASSERT_TRUE(FileBacked(Middle(l0.wq)));
  ASSERT_TRUE(FileBacked(Middle(model->output())));
  ASSERT_TRUE(FileBacked(Middle(expert_up)));
  const uint8_t* wq = l0.wq.data;

  absl::StatusOr<uint64_t> copied = model->CopyWeightsToRam(arch::Model::RamWeights::kDense);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_GT(*copied, 0u);
  EXPECT_EQ(model->layer(0).wq.data, wq);  // the same addresses
  EXPECT_FALSE(FileBacked(Middle(l0.wq)));
  EXPECT_FALSE(FileBacked(Middle(l0.wo)));
  EXPECT_FALSE(FileBacked(Middle(l0.router)));
  EXPECT_FALSE(FileBacked(Middle(model->layer(1).wk)));
  EXPECT_FALSE(FileBacked(Middle(model->output())));
  EXPECT_TRUE(FileBacked(Middle(expert_up)));
  EXPECT_TRUE(Bitwise(Logits(*model), before));
}

TEST_F(ResidentWeightsTest, AllMovesTheRoutedExpertsToo) {
  std::unique_ptr<arch::Model> model = Open();
  ASSERT_NE(model, nullptr);
  const std::vector<float> before = Logits(*model);
  absl::StatusOr<uint64_t> copied = model->CopyWeightsToRam(arch::Model::RamWeights::kAll);
  ASSERT_TRUE(copied.ok()) << copied.status();
  for (int il = 0; il < model->config().n_layer; ++il) {
    for (const moe::ExpertWeights& e : model->experts()[il]) {
      EXPECT_FALSE(FileBacked(Middle(e.gate)));
      EXPECT_FALSE(FileBacked(Middle(e.down)));
    }
  }
  EXPECT_FALSE(FileBacked(Middle(model->layer(1).wv)));
  EXPECT_TRUE(Bitwise(Logits(*model), before));

  // Every routed expert's bytes are now in the copy: more than the dense part.
  std::unique_ptr<arch::Model> dense_only = Open();
  ASSERT_NE(dense_only, nullptr);
  absl::StatusOr<uint64_t> dense = dense_only->CopyWeightsToRam(arch::Model::RamWeights::kDense);
  ASSERT_TRUE(dense.ok()) << dense.status();
  EXPECT_GT(*copied, *dense);
}

TEST_F(ResidentWeightsTest, AModelWithoutAFileHasNothingToMove) {
  std::ifstream in(*path_, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  absl::StatusOr<std::unique_ptr<gguf::GgufFile>> file =
      gguf::GgufFile::FromBytes(bytes, "in-memory");
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<std::unique_ptr<arch::Model>> model = arch::Model::Load(std::move(file).value());
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<uint64_t> copied = (*model)->CopyWeightsToRam(arch::Model::RamWeights::kAll);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(*copied, 0u);
}

// Model::InterleaveWeights on a Q4_K model: the matrices the AVX2 kernels
// read faster interleaved move into the model's own RAM in that layout, the
// views follow, the token embedding and (with kDense) the routed experts stay
// in the file in GGUF order, CopyWeightsToRam copies only the rest, and the
// logits stay bitwise the same.
class InterleaveWeightsTest : public ResidentWeightsTest {
 protected:
  static void SetUpTestSuite() { q4k_path_ = MakeModel(ops::TensorType::kQ4_K, "interleave"); }
  static void TearDownTestSuite() {
    std::remove(q4k_path_->c_str());
    delete q4k_path_;
  }
  void SetUp() override {
    if (!ops::ForceKernelSetForTesting(ops::KernelSetChoice::kAvx2)) {
      GTEST_SKIP() << "no AVX2 kernels on this machine";
    }
  }
  void TearDown() override { ops::ForceKernelSetForTesting(ops::KernelSetChoice::kAuto); }

  static std::string* q4k_path_;
};

std::string* InterleaveWeightsTest::q4k_path_ = nullptr;

TEST_F(InterleaveWeightsTest, DenseMatricesMoveInterleavedAndTheRestStaysInGgufOrder) {
  std::unique_ptr<arch::Model> model = OpenModel(*q4k_path_);
  ASSERT_NE(model, nullptr);
  const std::vector<float> before = Logits(*model);
  const uint8_t* wq = model->layer(0).wq.data;
  const uint8_t* embd = model->token_embd().data;
  ASSERT_EQ(model->layer(0).wq.type, ops::TensorType::kQ4_K);

  absl::StatusOr<uint64_t> moved = model->InterleaveWeights(arch::Model::RamWeights::kDense);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_GT(*moved, 0u);
  for (int il = 0; il < model->config().n_layer; ++il) {
    const arch::LayerWeights& l = model->layer(il);
    for (const ops::WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo}) {
      EXPECT_EQ(m->layout, ops::WeightLayout::kInterleaved8) << "layer " << il;
      EXPECT_FALSE(FileBacked(Middle(*m))) << "layer " << il;
    }
    EXPECT_EQ(l.router.layout, ops::WeightLayout::kRows);  // F32
    for (const moe::ExpertWeights& e : model->experts()[il]) {
      EXPECT_EQ(e.gate.layout, ops::WeightLayout::kRows);
      EXPECT_TRUE(FileBacked(Middle(e.down)));
    }
    for (const moe::ExpertWeights& e : l.experts) EXPECT_EQ(e.up.layout, ops::WeightLayout::kRows);
  }
  EXPECT_NE(model->layer(0).wq.data, wq);
  EXPECT_EQ(model->token_embd().data, embd);
  EXPECT_EQ(model->token_embd().layout, ops::WeightLayout::kRows);
  EXPECT_TRUE(FileBacked(Middle(model->token_embd())));

  // The routers (F32) are what CopyWeightsToRam has left to move.
  ASSERT_TRUE(FileBacked(Middle(model->layer(0).router)));
  absl::StatusOr<uint64_t> copied = model->CopyWeightsToRam(arch::Model::RamWeights::kDense);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_GT(*copied, 0u);
  EXPECT_FALSE(FileBacked(Middle(model->layer(0).router)));
  EXPECT_TRUE(Bitwise(Logits(*model), before));
}

TEST_F(InterleaveWeightsTest, AllInterleavesTheRoutedExpertsToo) {
  std::unique_ptr<arch::Model> model = OpenModel(*q4k_path_);
  ASSERT_NE(model, nullptr);
  const std::vector<float> before = Logits(*model);
  absl::StatusOr<uint64_t> moved = model->InterleaveWeights(arch::Model::RamWeights::kAll);
  ASSERT_TRUE(moved.ok()) << moved.status();
  for (int il = 0; il < model->config().n_layer; ++il) {
    for (const moe::ExpertWeights& e : model->experts()[il]) {
      for (const ops::WeightMatrix* m : {&e.gate, &e.up, &e.down}) {
        EXPECT_EQ(m->layout, ops::WeightLayout::kInterleaved8);
        EXPECT_FALSE(FileBacked(Middle(*m)));
      }
    }
  }
  // Asking again finds nothing left to do.
  absl::StatusOr<uint64_t> again = model->InterleaveWeights(arch::Model::RamWeights::kAll);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, 0u);
  EXPECT_TRUE(Bitwise(Logits(*model), before));
}

// Rows longer than 3072 columns, as in the models people run: the exact
// path dequantizes fewer than 8 of them at a time, so its blocks of rows
// begin and end inside the interleaved groups. 32 heads of 128 make
// attn_output 256 x 4096, experts of 3328 make ffn_down 256 x 3328.
TEST_F(InterleaveWeightsTest, ExactPathOverLongInterleavedRowsGivesTheSameLogits) {
  synthetic::ModelSpec spec = SmallSpec();
  spec.n_head = 32;
  spec.n_head_kv = 4;
  spec.head_dim = 128;
  spec.n_expert = 4;
  spec.n_ff_exp = 13 * 256;
  std::unique_ptr<std::string> path(MakeModel(ops::TensorType::kQ4_K, "interleave-wide", spec));
  std::unique_ptr<arch::Model> model = OpenModel(*path);
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->layer(0).wo.cols, 4096);
  const std::vector<float> before = Logits(*model, ops::NumericPath::kExact);
  absl::StatusOr<uint64_t> moved = model->InterleaveWeights(arch::Model::RamWeights::kAll);
  ASSERT_TRUE(moved.ok()) << moved.status();
  ASSERT_EQ(model->layer(0).wo.layout, ops::WeightLayout::kInterleaved8);
  ASSERT_EQ(model->experts()[0][0].down.layout, ops::WeightLayout::kInterleaved8);
  EXPECT_TRUE(Bitwise(Logits(*model, ops::NumericPath::kExact), before));
  model.reset();
  std::remove(path->c_str());
}

TEST_F(InterleaveWeightsTest, KernelsWithoutTilesForTheLayoutGetNothingInterleaved) {
  ASSERT_TRUE(ops::ForceKernelSetForTesting(ops::KernelSetChoice::kPortable));
  std::unique_ptr<arch::Model> model = OpenModel(*q4k_path_);
  ASSERT_NE(model, nullptr);
  absl::StatusOr<uint64_t> moved = model->InterleaveWeights(arch::Model::RamWeights::kAll);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, 0u);
  EXPECT_EQ(model->layer(0).wq.layout, ops::WeightLayout::kRows);
  EXPECT_TRUE(FileBacked(Middle(model->layer(0).wq)));
}

}  // namespace
}  // namespace colibri
