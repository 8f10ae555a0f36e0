#include "tools/synthetic_model/synthetic_model.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/gguf/gguf_file.h"
#include "model/ops/quantize.h"
#include "model/ops/tensor_type.h"
#include "model/tokenizer/tokenizer.h"
#include "tools/synthetic_model/byte_level_bpe.h"
#include "tools/synthetic_model/model_spec.h"

namespace colibri::synthetic {
namespace {

using ::colibri::ops::TensorType;
using ::testing::HasSubstr;

// Tiny shapes, one per architecture, small enough to generate in milliseconds.
struct Case {
  const char* label;
  ModelSpec spec;
  TensorType type;
};

ModelSpec Tiny(Architecture arch) {
  ModelSpec s;
  s.arch = arch;
  s.n_layer = 2;
  s.n_embd = 64;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 16;
  s.n_expert = 4;
  s.n_expert_used = 2;
  s.n_ff_exp = 32;
  s.n_ctx = 256;
  s.vocab_size = 320;
  return s;
}

std::vector<Case> Cases() {
  // qwen3moe, Q4_K: rows of 256 throughout, and q dim (512) != n_embd (256).
  ModelSpec qwen3 = Tiny(Architecture::kQwen3Moe);
  qwen3.n_embd = 256;
  qwen3.n_head = 8;
  qwen3.head_dim = 64;
  qwen3.n_ff_exp = 256;
  // qwen2moe, Q8_0, with the shared expert.
  ModelSpec qwen2 = Tiny(Architecture::kQwen2Moe);
  qwen2.n_head_kv = 4;
  qwen2.n_ff_shexp = 96;
  // llama (Mixtral layout), F16, tied embeddings.
  ModelSpec llama = Tiny(Architecture::kLlama);
  llama.n_ff_exp = 96;
  llama.tied_embeddings = true;
  // olmoe, Q4_K requested for rows of 64 and 48: falls back to Q8_0 and F32.
  ModelSpec olmoe = Tiny(Architecture::kOlmoe);
  olmoe.n_head_kv = 4;
  olmoe.n_ff_exp = 48;
  return {{"qwen3moe", qwen3, TensorType::kQ4_K},
          {"qwen2moe", qwen2, TensorType::kQ8_0},
          {"llama", llama, TensorType::kF16},
          {"olmoe", olmoe, TensorType::kQ4_K}};
}

std::string TempPath(const std::string& name) { return ::testing::TempDir() + "/" + name; }

std::vector<char> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

GenerateOptions Options(TensorType type, uint64_t seed = 7) {
  GenerateOptions options;
  options.type = type;
  options.seed = seed;
  options.num_threads = 2;
  return options;
}

struct Generated {
  GenerateReport report;
  std::unique_ptr<gguf::GgufFile> file;
};

Generated GenerateAndOpen(const Case& c, const std::string& file_name) {
  Generated g;
  const std::string path = TempPath(file_name);
  absl::StatusOr<GenerateReport> report = GenerateModel(c.spec, Options(c.type), path);
  EXPECT_TRUE(report.ok()) << report.status();
  if (!report.ok()) return g;
  g.report = *report;
  absl::StatusOr<std::unique_ptr<gguf::GgufFile>> file = gguf::GgufFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  if (file.ok()) g.file = std::move(file).value();
  return g;
}

uint64_t Uint(const gguf::GgufFile& file, const std::string& key) {
  absl::StatusOr<uint64_t> v = file.GetUint(key);
  EXPECT_TRUE(v.ok()) << key << ": " << v.status();
  const gguf::Value* value = file.FindValue(key);
  if (value != nullptr) {
    EXPECT_EQ(value->type, gguf::ValueType::kUint32) << key;
  }
  return v.ok() ? *v : 0;
}

// The tensor table written out from the GGUF conventions (independently of
// PlanTensors): name -> dims.
std::vector<std::pair<std::string, std::vector<int64_t>>> ExpectedTensors(const ModelSpec& s,
                                                                          int64_t n_vocab) {
  const int64_t d = s.n_embd, q = s.n_head * s.head_dim, kv = s.n_head_kv * s.head_dim;
  const int64_t ff = s.n_ff_exp, ne = s.n_expert, sh = s.n_ff_shexp;
  std::vector<std::pair<std::string, std::vector<int64_t>>> t = {
      {"token_embd.weight", {d, n_vocab}}, {"output_norm.weight", {d}}};
  if (!s.tied_embeddings) t.push_back({"output.weight", {d, n_vocab}});
  for (int i = 0; i < s.n_layer; ++i) {
    const std::string p = absl::StrCat("blk.", i, ".");
    t.push_back({p + "attn_norm.weight", {d}});
    t.push_back({p + "attn_q.weight", {d, q}});
    t.push_back({p + "attn_k.weight", {d, kv}});
    t.push_back({p + "attn_v.weight", {d, kv}});
    t.push_back({p + "attn_output.weight", {q, d}});
    if (s.arch == Architecture::kQwen2Moe) {
      t.push_back({p + "attn_q.bias", {q}});
      t.push_back({p + "attn_k.bias", {kv}});
      t.push_back({p + "attn_v.bias", {kv}});
    }
    if (s.arch == Architecture::kQwen3Moe) {
      t.push_back({p + "attn_q_norm.weight", {s.head_dim}});
      t.push_back({p + "attn_k_norm.weight", {s.head_dim}});
    }
    if (s.arch == Architecture::kOlmoe) {
      t.push_back({p + "attn_q_norm.weight", {q}});
      t.push_back({p + "attn_k_norm.weight", {kv}});
    }
    t.push_back({p + "ffn_norm.weight", {d}});
    t.push_back({p + "ffn_gate_inp.weight", {d, ne}});
    t.push_back({p + "ffn_gate_exps.weight", {d, ff, ne}});
    t.push_back({p + "ffn_up_exps.weight", {d, ff, ne}});
    t.push_back({p + "ffn_down_exps.weight", {ff, d, ne}});
    if (s.arch == Architecture::kQwen2Moe) {
      t.push_back({p + "ffn_gate_inp_shexp.weight", {d}});
      t.push_back({p + "ffn_gate_shexp.weight", {d, sh}});
      t.push_back({p + "ffn_up_shexp.weight", {d, sh}});
      t.push_back({p + "ffn_down_shexp.weight", {sh, d}});
    }
  }
  return t;
}

bool IsF32ByRule(const std::string& name) {
  return name.find("norm") != std::string::npos || name.find(".bias") != std::string::npos ||
         name.find("ffn_gate_inp") != std::string::npos;
}

class SyntheticModelTest : public ::testing::TestWithParam<Case> {};

TEST_P(SyntheticModelTest, MetadataFollowsGgufConventions) {
  const Case& c = GetParam();
  Generated g = GenerateAndOpen(c, absl::StrCat(c.label, "-meta.gguf"));
  ASSERT_NE(g.file, nullptr);
  const gguf::GgufFile& f = *g.file;
  const ModelSpec& s = c.spec;
  const std::string a = c.label;
  EXPECT_EQ(*f.GetString("general.architecture"), a);
  EXPECT_EQ(*f.GetString("general.name"), "colibri-synthetic-" + a);
  EXPECT_EQ(Uint(f, "general.file_type"), LlamaFileType(c.type));
  EXPECT_EQ(Uint(f, "general.quantization_version"), 2u);
  EXPECT_EQ(Uint(f, a + ".context_length"), 256u);
  EXPECT_EQ(Uint(f, a + ".embedding_length"), static_cast<uint64_t>(s.n_embd));
  EXPECT_EQ(Uint(f, a + ".block_count"), 2u);
  EXPECT_EQ(Uint(f, a + ".attention.head_count"), static_cast<uint64_t>(s.n_head));
  EXPECT_EQ(Uint(f, a + ".attention.head_count_kv"), static_cast<uint64_t>(s.n_head_kv));
  EXPECT_EQ(Uint(f, a + ".expert_count"), 4u);
  EXPECT_EQ(Uint(f, a + ".expert_used_count"), 2u);
  EXPECT_EQ(f.FindValue(a + ".attention.layer_norm_rms_epsilon")->type, gguf::ValueType::kFloat32);
  EXPECT_FLOAT_EQ(static_cast<float>(*f.GetFloat(a + ".attention.layer_norm_rms_epsilon")), 1e-6f);
  EXPECT_EQ(f.FindValue(a + ".rope.freq_base")->type, gguf::ValueType::kFloat32);
  EXPECT_FLOAT_EQ(static_cast<float>(*f.GetFloat(a + ".rope.freq_base")), 1e6f);

  const bool qwen = s.arch == Architecture::kQwen3Moe || s.arch == Architecture::kQwen2Moe;
  EXPECT_EQ(Uint(f, a + ".feed_forward_length"),
            static_cast<uint64_t>(qwen ? 2 * s.n_ff_exp : s.n_ff_exp));
  EXPECT_EQ(f.FindValue(a + ".expert_feed_forward_length") != nullptr, qwen);
  if (qwen) {
    EXPECT_EQ(Uint(f, a + ".expert_feed_forward_length"), static_cast<uint64_t>(s.n_ff_exp));
  }
  EXPECT_EQ(f.FindValue(a + ".expert_shared_feed_forward_length") != nullptr,
            s.arch == Architecture::kQwen2Moe);
  if (s.arch == Architecture::kQwen2Moe) {
    EXPECT_EQ(Uint(f, a + ".expert_shared_feed_forward_length"), 96u);
  }
  const bool head_dim_differs = s.n_head * s.head_dim != s.n_embd;
  EXPECT_EQ(f.FindValue(a + ".attention.key_length") != nullptr, head_dim_differs);
  if (head_dim_differs) {
    EXPECT_EQ(Uint(f, a + ".attention.key_length"), static_cast<uint64_t>(s.head_dim));
    EXPECT_EQ(Uint(f, a + ".attention.value_length"), static_cast<uint64_t>(s.head_dim));
  }
  EXPECT_EQ(f.FindValue(a + ".rope.dimension_count") != nullptr, s.arch == Architecture::kLlama);
  if (s.arch == Architecture::kLlama) {
    EXPECT_EQ(Uint(f, a + ".rope.dimension_count"), static_cast<uint64_t>(s.head_dim));
  }
}

TEST_P(SyntheticModelTest, EveryTensorHasTheConventionalNameDimsAndType) {
  const Case& c = GetParam();
  Generated g = GenerateAndOpen(c, absl::StrCat(c.label, "-tensors.gguf"));
  ASSERT_NE(g.file, nullptr);
  const int64_t n_vocab = g.report.n_vocab;
  EXPECT_EQ(n_vocab, 320);
  const auto expected = ExpectedTensors(c.spec, n_vocab);
  EXPECT_EQ(g.file->tensors().size(), expected.size());
  EXPECT_EQ(g.report.n_tensors, static_cast<int>(expected.size()));
  for (const auto& [name, dims] : expected) {
    const gguf::TensorInfo* t = g.file->FindTensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dims, dims) << name;
    if (IsF32ByRule(name)) {
      EXPECT_EQ(t->type, TensorType::kF32) << name;
    } else {
      EXPECT_EQ(t->type, StorageType(c.type, dims[0])) << name;
    }
  }
  if (c.spec.tied_embeddings) {
    EXPECT_EQ(g.file->FindTensor("output.weight"), nullptr);
  }
}

TEST_P(SyntheticModelTest, TensorsDecodeToTheIntendedValues) {
  const Case& c = GetParam();
  Generated g = GenerateAndOpen(c, absl::StrCat(c.label, "-values.gguf"));
  ASSERT_NE(g.file, nullptr);
  for (const TensorPlan& plan : PlanTensors(c.spec, g.report.n_vocab, c.type, nullptr)) {
    const gguf::TensorInfo* t = g.file->FindTensor(plan.name);
    ASSERT_NE(t, nullptr) << plan.name;
    ASSERT_EQ(t->type, plan.type);
    const int64_t row_length = t->row_length();
    const uint64_t row_bytes = ops::RowBytesUnchecked(t->type, row_length);
    std::vector<float> decoded(static_cast<size_t>(t->n_elements));
    for (int64_t r = 0; r < t->rows(); ++r) {
      ops::DequantizeRow(t->type, t->data + static_cast<uint64_t>(r) * row_bytes,
                         decoded.data() + r * row_length, row_length);
    }
    const std::vector<float> intended = GenerateValues(plan, 7);
    ASSERT_EQ(intended.size(), decoded.size());
    double sum = 0, sum_sq = 0, err_sq = 0;
    for (size_t i = 0; i < decoded.size(); ++i) {
      ASSERT_TRUE(std::isfinite(decoded[i])) << plan.name << "[" << i << "]";
      sum += intended[i];
      sum_sq += static_cast<double>(intended[i]) * intended[i];
      err_sq += (decoded[i] - intended[i]) * static_cast<double>(decoded[i] - intended[i]);
    }
    const double n = static_cast<double>(decoded.size());
    const double mean = sum / n;
    const double stddev = std::sqrt(std::max(0.0, sum_sq / n - mean * mean));
    // The intended distribution, within sampling error.
    EXPECT_NEAR(mean, plan.mean, 5 * plan.stddev / std::sqrt(n)) << plan.name;
    EXPECT_NEAR(stddev, plan.stddev, 0.3 * plan.stddev) << plan.name;
    // The bytes hold those values, within the type's rounding.
    const double rms_error = std::sqrt(err_sq / n);
    const double scale = std::sqrt(sum_sq / n);
    const double tolerance = plan.type == TensorType::kF32    ? 0.0
                             : plan.type == TensorType::kF16  ? 1e-3 * scale
                             : plan.type == TensorType::kQ8_0 ? 0.01 * scale
                                                              : 0.15 * scale;
    EXPECT_LE(rms_error, tolerance) << plan.name << " " << ops::TypeName(plan.type);
  }
}

TEST_P(SyntheticModelTest, TokenizerIsAConsistentGpt2Bpe) {
  const Case& c = GetParam();
  Generated g = GenerateAndOpen(c, absl::StrCat(c.label, "-tok.gguf"));
  ASSERT_NE(g.file, nullptr);
  const gguf::GgufFile& f = *g.file;
  EXPECT_EQ(*f.GetString("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(*f.GetString("tokenizer.ggml.pre"), "gpt-2");
  EXPECT_EQ(*f.GetBool("tokenizer.ggml.add_bos_token"), false);
  const std::vector<std::string>& tokens = **f.GetStringArray("tokenizer.ggml.tokens");
  const std::vector<std::string>& merges = **f.GetStringArray("tokenizer.ggml.merges");
  const std::vector<int64_t> types = *f.GetIntArray("tokenizer.ggml.token_type");
  EXPECT_EQ(f.FindValue("tokenizer.ggml.token_type")->array_type, gguf::ValueType::kInt32);
  ASSERT_EQ(tokens.size(), 320u);
  ASSERT_EQ(types.size(), tokens.size());
  EXPECT_EQ(static_cast<int64_t>(tokens.size()), f.FindTensor("token_embd.weight")->dims[1]);
  EXPECT_EQ(merges.size(), tokens.size() - 257);

  for (int i = 0; i < 256; ++i) {
    EXPECT_EQ(tokens[static_cast<size_t>(i)],
              ByteToUnicode(Gpt2ByteOrder()[static_cast<size_t>(i)]));
  }
  EXPECT_EQ(tokens.back(), "<|endoftext|>");
  EXPECT_EQ(types.back(), 3);
  for (size_t i = 0; i + 1 < types.size(); ++i) EXPECT_EQ(types[i], 1) << i;
  EXPECT_EQ(Uint(f, "tokenizer.ggml.bos_token_id"), tokens.size() - 1);
  EXPECT_EQ(Uint(f, "tokenizer.ggml.eos_token_id"), tokens.size() - 1);

  const absl::flat_hash_set<std::string> token_set(tokens.begin(), tokens.end());
  EXPECT_EQ(token_set.size(), tokens.size());
  for (const std::string& merge : merges) {
    const size_t space = merge.find(' ');
    ASSERT_NE(space, std::string::npos) << merge;
    const std::string left = merge.substr(0, space), right = merge.substr(space + 1);
    EXPECT_TRUE(token_set.contains(left)) << merge;
    EXPECT_TRUE(token_set.contains(right)) << merge;
    EXPECT_TRUE(token_set.contains(left + right)) << merge;
  }
}

// A vocabulary larger than the built-in text can train (real models have 150k+
// rows) is padded with unused tokens after <|endoftext|>, which the tokenizer
// never produces.
TEST(SyntheticModelPaddingTest, ALargeVocabularyIsPaddedWithUnusedTokens) {
  Case c = Cases()[0];
  c.spec.vocab_size = 6000;  // above what the training text supports
  Generated g = GenerateAndOpen(c, "padded-vocab.gguf");
  ASSERT_NE(g.file, nullptr);
  const gguf::GgufFile& f = *g.file;
  const std::vector<std::string>& tokens = **f.GetStringArray("tokenizer.ggml.tokens");
  const std::vector<int64_t> types = *f.GetIntArray("tokenizer.ggml.token_type");
  ASSERT_EQ(tokens.size(), 6000u);
  ASSERT_EQ(types.size(), tokens.size());
  EXPECT_EQ(f.FindTensor("token_embd.weight")->dims[1], 6000);
  EXPECT_EQ(f.FindTensor("output.weight")->dims[1], 6000);
  EXPECT_EQ(g.report.n_vocab, 6000);

  const uint64_t eot = Uint(f, "tokenizer.ggml.eos_token_id");
  ASSERT_LT(eot, 5000u);
  EXPECT_EQ(tokens[eot], "<|endoftext|>");
  EXPECT_EQ(types[eot], 3);
  EXPECT_EQ(tokens[eot + 1], "<|unused_0|>");
  EXPECT_EQ(tokens.back(), absl::StrCat("<|unused_", 6000 - eot - 2, "|>"));
  for (size_t i = 0; i < eot; ++i) EXPECT_EQ(types[i], 1) << i;
  for (size_t i = eot + 1; i < types.size(); ++i) EXPECT_EQ(types[i], 5) << i;
  EXPECT_THAT(g.report.notes, ::testing::Contains(HasSubstr("unused padding")));

  absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> tok = tokenizer::Tokenizer::FromGguf(f);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::string text = "In the beginning <|unused_3|> was the Word, and the Word was with God.";
  absl::StatusOr<std::vector<int32_t>> ids = (*tok)->Encode(text, tokenizer::EncodeOptions());
  ASSERT_TRUE(ids.ok()) << ids.status();
  for (int32_t id : *ids) EXPECT_LT(static_cast<uint64_t>(id), eot) << id;
  EXPECT_EQ((*tok)->Decode(*ids, /*render_special=*/false), text);
}

INSTANTIATE_TEST_SUITE_P(Architectures, SyntheticModelTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.label);
                         });

TEST(SyntheticModelDeterminismTest, SameSeedSameBytesAnyThreadCount) {
  const Case c = Cases()[0];
  GenerateOptions one = Options(c.type, 42);
  one.num_threads = 1;
  GenerateOptions two = Options(c.type, 42);
  GenerateOptions other_seed = Options(c.type, 43);
  ASSERT_TRUE(GenerateModel(c.spec, one, TempPath("det-a.gguf")).ok());
  ASSERT_TRUE(GenerateModel(c.spec, two, TempPath("det-b.gguf")).ok());
  ASSERT_TRUE(GenerateModel(c.spec, other_seed, TempPath("det-c.gguf")).ok());
  const std::vector<char> a = ReadBytes(TempPath("det-a.gguf"));
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == ReadBytes(TempPath("det-b.gguf")));
  const std::vector<char> c_bytes = ReadBytes(TempPath("det-c.gguf"));
  EXPECT_EQ(a.size(), c_bytes.size());
  EXPECT_FALSE(a == c_bytes);
}

TEST(SyntheticModelDeterminismTest, ValuesArePinned) {
  // The generator's output must not drift across platforms or library versions:
  // these are the first values of a fixed tensor and seed, exactly (computed
  // independently by a float32 emulation of the generator in Python).
  const TensorPlan plan{"blk.0.attn_q.weight", {4, 1}, TensorType::kF32, 0.0f, 1.0f};
  const std::vector<float> v = GenerateValues(plan, GenerateOptions::kDefaultSeed);
  ASSERT_EQ(v.size(), 4u);
  EXPECT_THAT(
      v, ::testing::ElementsAre(0x1.9c9288p-3f, 0x1.0998f6p+0f, 0x1.959580p-2f, 0x1.bb0524p-5f));
}

TEST(SyntheticModelReportTest, CountsExpertsAndNotesFallbacks) {
  const Case olmoe = Cases()[3];
  absl::StatusOr<GenerateReport> report =
      GenerateModel(olmoe.spec, Options(olmoe.type), TempPath("report.gguf"));
  ASSERT_TRUE(report.ok()) << report.status();
  // Q8_0 gate/up rows of 64: 2 blocks of 34 bytes; F32 down rows of 48.
  const uint64_t per_expert = 2 * 48 * 68 + 64 * 48 * 4;
  EXPECT_EQ(report->bytes_per_expert, per_expert);
  EXPECT_EQ(report->expert_bytes, per_expert * 4 * 2);
  EXPECT_GT(report->file_bytes, report->tensor_bytes);
  EXPECT_THAT(report->notes, ::testing::Contains(HasSubstr("blk.*.ffn_down_exps.weight")));
  EXPECT_THAT(report->notes, ::testing::Contains(HasSubstr("stored as F32")));
  EXPECT_THAT(report->notes, ::testing::Contains(HasSubstr("stored as Q8_0")));
}

TEST(SyntheticModelErrorsTest, RejectsBadSpecsAndTypes) {
  ModelSpec spec = Tiny(Architecture::kQwen3Moe);
  spec.n_ff_shexp = 64;
  EXPECT_THAT(spec.Validate().message(), HasSubstr("shared-ffn"));
  spec = Tiny(Architecture::kQwen2Moe);
  EXPECT_THAT(spec.Validate().message(), HasSubstr("shared-ffn"));  // required there
  spec = Tiny(Architecture::kLlama);
  spec.n_head_kv = 3;
  EXPECT_THAT(spec.Validate().message(), HasSubstr("kv-heads"));
  spec = Tiny(Architecture::kLlama);
  spec.n_expert_used = 5;
  EXPECT_THAT(spec.Validate().message(), HasSubstr("top-k"));
  spec = Tiny(Architecture::kLlama);
  spec.vocab_size = 100;
  EXPECT_EQ(spec.Validate().code(), absl::StatusCode::kInvalidArgument);

  absl::StatusOr<GenerateReport> report =
      GenerateModel(Tiny(Architecture::kLlama), Options(TensorType::kIQ2_XS), TempPath("bad.gguf"));
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(report.status().message(), HasSubstr("IQ2_XS"));
}

TEST(ModelSpecTest, PresetsValidateAndQwen3HasItsShape) {
  for (const Preset& preset : Presets()) {
    EXPECT_TRUE(preset.spec.Validate().ok()) << preset.name << ": " << preset.spec.Validate();
  }
  absl::StatusOr<ModelSpec> q = FindPreset("qwen3-30b-a3b");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->arch, Architecture::kQwen3Moe);
  EXPECT_EQ(q->n_embd, 2048);
  EXPECT_EQ(q->n_head, 32);
  EXPECT_EQ(q->n_head_kv, 4);
  EXPECT_EQ(q->head_dim, 128);
  EXPECT_EQ(q->n_expert, 128);
  EXPECT_EQ(q->n_expert_used, 8);
  EXPECT_EQ(q->n_ff_exp, 768);
  EXPECT_EQ(q->rope_freq_base, 1e6f);
  EXPECT_EQ(q->rms_eps, 1e-6f);
  EXPECT_EQ(q->n_ctx, 4096);
  absl::StatusOr<ModelSpec> demo = FindPreset("demo");
  ASSERT_TRUE(demo.ok());
  EXPECT_EQ(demo->n_embd, 256);
  EXPECT_EQ(demo->q_dim(), 512);
  EXPECT_EQ(FindPreset("nope").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseArchitecture("olmoe").value(), Architecture::kOlmoe);
  EXPECT_EQ(ParseArchitecture("mixtral").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ModelSpecTest, StorageTypeFallsBack) {
  EXPECT_EQ(StorageType(TensorType::kQ4_K, 512), TensorType::kQ4_K);
  EXPECT_EQ(StorageType(TensorType::kQ4_K, 1408), TensorType::kQ8_0);
  EXPECT_EQ(StorageType(TensorType::kQ4_K, 48), TensorType::kF32);
  EXPECT_EQ(StorageType(TensorType::kQ8_0, 48), TensorType::kF32);
  EXPECT_EQ(StorageType(TensorType::kF16, 7), TensorType::kF16);
}

TEST(PortableMathTest, LogMatchesStdLog) {
  for (uint32_t k = 1; k <= (1u << 24); k += 997) {
    const float x = static_cast<float>(k) * 0x1.0p-24f;
    const double exact = std::log(static_cast<double>(x));
    ASSERT_NEAR(PortableLog(x), exact, 1e-6 * std::max(1.0, std::fabs(exact))) << x;
  }
}

TEST(PortableMathTest, SinCosMatchStd) {
  for (uint64_t turn = 0; turn < (uint64_t{1} << 32); turn += 65537 * 97) {
    float s, c;
    PortableSinCos2Pi(static_cast<uint32_t>(turn), &s, &c);
    // The function uses the top 26 bits of the turn.
    const double angle = 6.283185307179586 * static_cast<double>(turn & ~uint64_t{63}) * 0x1.0p-32;
    ASSERT_NEAR(s, std::sin(angle), 1e-6) << turn;
    ASSERT_NEAR(c, std::cos(angle), 1e-6) << turn;
  }
}

TEST(PortableMathTest, GeneratedValuesAreNormal) {
  const TensorPlan plan{"normals", {1000, 200}, TensorType::kF32, 0.0f, 1.0f};
  const std::vector<float> v = GenerateValues(plan, 1);
  double sum = 0, sum_sq = 0, within_1 = 0, within_2 = 0;
  for (float x : v) {
    sum += x;
    sum_sq += static_cast<double>(x) * x;
    within_1 += std::fabs(x) < 1 ? 1 : 0;
    within_2 += std::fabs(x) < 2 ? 1 : 0;
  }
  const double n = static_cast<double>(v.size());
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum_sq / n, 1.0, 0.01);
  EXPECT_NEAR(within_1 / n, 0.6827, 0.005);
  EXPECT_NEAR(within_2 / n, 0.9545, 0.003);
}

}  // namespace
}  // namespace colibri::synthetic
