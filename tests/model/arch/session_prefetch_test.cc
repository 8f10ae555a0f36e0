// Next-layer expert prediction in arch::Session: it never changes the logits,
// its hints are the top of the next layers' routers (the first MoE layer's
// from the step's token embeddings; checked against a reference computed
// here from the model's tensors), they reach the backend
// before the layer that predicted them is submitted, and the recall/precision
// counters agree with the routes the backend saw.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "model/arch/model.h"
#include "model/arch/session.h"
#include "model/moe/local_expert_backend.h"
#include "tests/support/golden.h"

namespace colibri {
namespace {

testing::GoldenCase LoadCase(const std::string& model, const std::string& prompt) {
  testing::GoldenCase c;
  std::string error;
  EXPECT_TRUE(testing::LoadGoldenCase(model, prompt, &c, &error)) << error;
  return c;
}

// Every logit of the prompt (all positions) and of 4 decode steps.
std::vector<float> RunLogits(const arch::Model& model, const testing::GoldenCase& c,
                             ops::NumericPath path, const arch::PrefetchOptions& prefetch,
                             ThreadPool* pool) {
  moe::LocalExpertBackend backend(&model.experts(), model.config().n_expert, path, pool);
  arch::SessionOptions options;
  options.path = path;
  options.n_batch = 64;  // the long prompt runs in several chunks
  options.prefetch = prefetch;
  auto session = arch::Session::Create(model, &backend, pool, options);
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return {};
  std::vector<float> all, logits;
  EXPECT_TRUE((*session)->Evaluate(c.prompt_tokens, true, &logits).ok());
  all.insert(all.end(), logits.begin(), logits.end());
  for (int g = 0; g < 4; ++g) {
    EXPECT_TRUE((*session)->Evaluate({&c.greedy_tokens[g], 1}, false, &logits).ok());
    all.insert(all.end(), logits.begin(), logits.end());
  }
  if (prefetch.depth > 0) {
    EXPECT_GT((*session)->stats().predictor[0].layers, 0);
  }
  return all;
}

TEST(SessionPrefetchTest, LogitsAreBitwiseTheSameWithPredictionOnAndOff) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  ThreadPool pool(2);
  // The new families through deepseek2-tiny (sigmoid, bias, groups, dense
  // layer, MLA): all of them would double the run time.
  std::vector<std::string> models = testing::GoldenModels();
  models.push_back("deepseek2-tiny-q8_0");
  for (const std::string& name : models) {
    auto model = arch::Model::Open(testing::FixturesDir() + "/models/" + name + ".gguf");
    ASSERT_TRUE(model.ok()) << model.status();
    const int k = (*model)->config().n_expert_used;
    arch::PrefetchOptions next;
    next.depth = 1;
    arch::PrefetchOptions two;  // wider than top-k, with a union cap that bites
    two.depth = 2;
    two.count = k + 1;
    two.max_union = 3;
    for (ops::NumericPath path : {ops::NumericPath::kExact, ops::NumericPath::kFast}) {
      for (const char* prompt : {"english", "long"}) {
        SCOPED_TRACE(name + " " + std::string(prompt) +
                     (path == ops::NumericPath::kExact ? " exact" : " fast"));
        const testing::GoldenCase c = LoadCase(name, prompt);
        const std::vector<float> off = RunLogits(**model, c, path, {}, &pool);
        ASSERT_FALSE(off.empty());
        for (const arch::PrefetchOptions& on : {next, two}) {
          const std::vector<float> with = RunLogits(**model, c, path, on, &pool);
          ASSERT_EQ(off.size(), with.size());
          EXPECT_EQ(0, std::memcmp(off.data(), with.data(), off.size() * sizeof(float)))
              << "depth " << on.depth;
        }
      }
    }
  }
}

// A local backend that records what the session submits and hints, in order.
class RecordingBackend : public moe::ExpertBackend {
 public:
  struct Submitted {
    int layer = 0;
    int n_tokens = 0;
    std::vector<float> x;          // [n_tokens][n_embd]
    std::vector<int32_t> experts;  // [n_tokens][k]
    // Hints given since the previous Submit: layer -> experts, in order.
    std::map<int, std::vector<int32_t>> hints_before;
  };

  RecordingBackend(const arch::Model& model, ops::NumericPath path)
      : local_(&model.experts(), model.config().n_expert, path, nullptr) {}

  void Submit(const moe::ExpertBatch& batch, float* out) override {
    Submitted s;
    s.layer = batch.layer;
    s.n_tokens = static_cast<int>(batch.n_tokens);
    s.x.assign(batch.x, batch.x + batch.n_tokens * batch.n_embd);
    s.experts.assign(batch.experts, batch.experts + batch.n_tokens * batch.k);
    s.hints_before = std::move(pending_);
    pending_.clear();
    submitted.push_back(std::move(s));
    local_.Submit(batch, out);
  }
  absl::Status Wait() override { return local_.Wait(); }
  void Prefetch(int layer, absl::Span<const int32_t> experts) override {
    EXPECT_EQ(pending_.count(layer), 0u) << "layer " << layer << " hinted twice";
    pending_[layer].assign(experts.begin(), experts.end());
  }

  std::vector<Submitted> submitted;

 private:
  moe::LocalExpertBackend local_;
  std::map<int, std::vector<int32_t>> pending_;
};

// The top `count` experts of layer `target`'s router for each token whose
// layer-`from` MoE input is x, computed in double from the tensors: the
// residual stream is x / ffn_norm[from] (RMSNorm's scale is the same for
// both layers), normed again with ffn_norm[target]. With from = -1, x is the
// token's input row (its embedding), RMS-normed here. Returns false for a
// token whose count-th and next logits are too close to call.
bool ReferenceTop(const arch::Model& model, int from, int target, const float* x, int count,
                  std::vector<int>* top) {
  const arch::ModelConfig& c = model.config();
  const arch::LayerWeights& T = model.layer(target);
  EXPECT_EQ(T.router.type, ops::TensorType::kF32);
  const float* router = reinterpret_cast<const float*>(T.router.data);  // [n_expert][n_embd]
  std::vector<double> normed(c.n_embd);
  double squares = 0.0;
  for (int i = 0; i < c.n_embd; ++i) squares += static_cast<double>(x[i]) * x[i];
  const double rms = std::sqrt(squares / c.n_embd + c.rms_eps);
  for (int i = 0; i < c.n_embd; ++i) {
    normed[i] = from < 0 ? x[i] / rms : static_cast<double>(x[i]) / model.layer(from).ffn_norm[i];
  }
  std::vector<double> logits(c.n_expert);
  for (int e = 0; e < c.n_expert; ++e) {
    double sum = 0.0;
    for (int i = 0; i < c.n_embd; ++i) {
      const double in = normed[i] * T.ffn_norm[i];
      sum += in * router[static_cast<int64_t>(e) * c.n_embd + i];
    }
    logits[e] = sum;
  }
  // The family's selection score: softmax is monotonic (the logits rank the
  // same); sigmoid plus the selection bias and the group limit do not.
  if (T.router_bias != nullptr) {  // gpt-oss: the bias is part of the logits
    for (int e = 0; e < c.n_expert; ++e) logits[e] += T.router_bias[e];
  }
  std::vector<double> score = logits;
  bool clear = true;
  if (c.gating == arch::Gating::kSigmoid || T.selection_bias != nullptr) {
    double max = *std::max_element(logits.begin(), logits.end()), sum = 0.0;
    for (double l : logits) sum += std::exp(l - max);
    for (int e = 0; e < c.n_expert; ++e) {
      score[e] = c.gating == arch::Gating::kSigmoid ? 1.0 / (1.0 + std::exp(-logits[e]))
                                                    : std::exp(logits[e] - max) / sum;
      if (T.selection_bias != nullptr) score[e] += T.selection_bias[e];
    }
  }
  if (c.n_expert_groups > 1) {
    const int size = c.n_expert / c.n_expert_groups;
    std::vector<std::pair<double, int>> groups;
    for (int g = 0; g < c.n_expert_groups; ++g) {
      std::vector<double> s(score.begin() + g * size, score.begin() + (g + 1) * size);
      std::sort(s.rbegin(), s.rend());
      groups.push_back({-(s[0] + (size > 1 ? s[1] : 0.0)), g});
    }
    std::sort(groups.begin(), groups.end());
    const double gap = groups[c.n_group_used].first - groups[c.n_group_used - 1].first;
    clear = gap > 1e-4;
    for (int j = c.n_group_used; j < c.n_expert_groups; ++j) {
      const int g = groups[j].second;
      for (int e = g * size; e < (g + 1) * size; ++e) score[e] = -1e300;
    }
  }
  std::vector<int> order(c.n_expert);
  for (int e = 0; e < c.n_expert; ++e) order[e] = e;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score[a] > score[b]; });
  top->assign(order.begin(), order.begin() + count);
  if (count == c.n_expert) return clear;
  const double gap = score[order[count - 1]] - score[order[count]];
  return clear && gap > 1e-4 * (1.0 + std::fabs(score[order[0]]));
}

TEST(SessionPrefetchTest, HintsAreTheTopOfTheNextLayersRoutersAndCountersMatch) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  for (const std::string& name : testing::AllGoldenModels()) {
    SCOPED_TRACE(name);
    auto model = arch::Model::Open(testing::FixturesDir() + "/models/" + name + ".gguf");
    ASSERT_TRUE(model.ok()) << model.status();
    const arch::ModelConfig& c = (*model)->config();
    for (int l = 0; l < c.n_layer; ++l) {
      for (int i = 0; i < c.n_embd; ++i) ASSERT_NE((*model)->layer(l).ffn_norm[i], 0.0f);
    }
    const int count = std::min(c.n_expert, c.n_expert_used + 1);
    RecordingBackend backend(**model, ops::NumericPath::kExact);
    arch::SessionOptions options;
    options.path = ops::NumericPath::kExact;
    options.prefetch.depth = 2;
    options.prefetch.count = count;
    options.prefetch.max_union = c.n_expert;  // no cap: the hints are the whole union
    auto session = arch::Session::Create(**model, &backend, nullptr, options);
    ASSERT_TRUE(session.ok()) << session.status();
    const testing::GoldenCase gc = LoadCase(name, "english");
    std::vector<float> logits;
    ASSERT_TRUE((*session)->Evaluate(gc.prompt_tokens, false, &logits).ok());
    for (int g = 0; g < 4; ++g) {
      ASSERT_TRUE((*session)->Evaluate({&gc.greedy_tokens[g], 1}, false, &logits).ok());
    }

    arch::PredictorStats want[2];
    int checked = 0, ambiguous = 0;
    // The steps' tokens: the prompt, then one greedy token each.
    std::vector<std::vector<int32_t>> steps = {gc.prompt_tokens};
    for (int g = 0; g < 4; ++g) steps.push_back({gc.greedy_tokens[g]});
    int step = -1;
    std::vector<float> input;  // the step's rows, embedded
    // hinted[d - 1][layer]: the hints for `layer` made d layers before, this pass.
    std::map<int, std::set<int32_t>> hinted[2];
    for (const RecordingBackend::Submitted& s : backend.submitted) {
      const bool first_moe = s.layer == c.n_layer_dense_lead;
      if (first_moe) {
        hinted[0].clear();
        hinted[1].clear();
        ++step;
        ASSERT_LT(step, static_cast<int>(steps.size()));
        ASSERT_EQ(s.n_tokens, static_cast<int>(steps[step].size()));
        input.assign(steps[step].size() * c.n_embd, 0.0f);
        for (size_t t = 0; t < steps[step].size(); ++t) {
          ASSERT_TRUE((*model)->EmbedToken(steps[step][t], input.data() + t * c.n_embd).ok());
        }
      }
      // Hints come before the Submit of the layer they were predicted from;
      // the first MoE layer's, from the step's input, before its own.
      std::set<int> want_layers;
      if (first_moe) want_layers.insert(s.layer);
      for (int d = 1; d <= 2 && s.layer + d < c.n_layer; ++d) want_layers.insert(s.layer + d);
      std::set<int> got_layers;
      for (const auto& [layer, experts] : s.hints_before) got_layers.insert(layer);
      EXPECT_EQ(got_layers, want_layers) << "before layer " << s.layer;

      for (const auto& [layer, experts] : s.hints_before) {
        const bool from_input = layer == s.layer;
        std::map<int, int> votes;
        bool clear = true;
        for (int t = 0; t < s.n_tokens; ++t) {
          std::vector<int> top;
          const float* x = from_input ? input.data() + t * c.n_embd : s.x.data() + t * c.n_embd;
          clear = ReferenceTop(**model, from_input ? -1 : s.layer, layer, x, count, &top) && clear;
          for (int e : top) ++votes[e];
        }
        const std::set<int32_t> got(experts.begin(), experts.end());
        EXPECT_EQ(got.size(), experts.size()) << "duplicate hints";
        hinted[from_input ? 0 : layer - s.layer - 1][layer] = got;
        if (!clear) {
          ++ambiguous;
          continue;
        }
        ++checked;
        std::set<int32_t> ref;
        for (const auto& [e, n] : votes) ref.insert(e);
        EXPECT_EQ(got, ref) << "layer " << layer << " predicted at layer " << s.layer;
        // Most-voted first, ties to the lower id.
        for (size_t j = 1; j < experts.size(); ++j) {
          const int a = votes[experts[j - 1]], b = votes[experts[j]];
          EXPECT_TRUE(a > b || (a == b && experts[j - 1] < experts[j])) << "hint order";
        }
      }

      const std::set<int32_t> routed(s.experts.begin(), s.experts.end());
      for (int d = 1; d <= 2; ++d) {
        auto it = hinted[d - 1].find(s.layer);
        if (it == hinted[d - 1].end()) continue;
        ++want[d - 1].layers;
        want[d - 1].routed += static_cast<int64_t>(routed.size());
        want[d - 1].predicted += static_cast<int64_t>(it->second.size());
        for (int32_t e : routed) want[d - 1].hits += it->second.count(e);
      }
    }
    EXPECT_GE(checked, 4 * ambiguous) << "too few unambiguous predictions to check";
    EXPECT_GT(checked, 0);
    for (int d = 0; d < 2; ++d) {
      const arch::PredictorStats& got = (*session)->stats().predictor[d];
      EXPECT_EQ(got.layers, want[d].layers) << "depth " << d + 1;
      EXPECT_EQ(got.routed, want[d].routed) << "depth " << d + 1;
      EXPECT_EQ(got.predicted, want[d].predicted) << "depth " << d + 1;
      EXPECT_EQ(got.hits, want[d].hits) << "depth " << d + 1;
    }
    // 5 evaluations, each predicting every MoE layer at depth 1 (the first
    // from its input) and those after the second at depth 2 (dense layers
    // predict nothing).
    const int moe_layers = c.n_layer - c.n_layer_dense_lead;
    EXPECT_EQ(want[0].layers, 5 * moe_layers);
    EXPECT_EQ(want[1].layers, 5 * std::max(0, moe_layers - 2));
    std::printf("%s: L+1 recall %.3f precision %.3f; checked %d hint sets, %d ambiguous\n",
                name.c_str(), want[0].routed ? double(want[0].hits) / want[0].routed : 0.0,
                want[0].predicted ? double(want[0].hits) / want[0].predicted : 0.0, checked,
                ambiguous);
  }
}

TEST(SessionPrefetchTest, TheUnionCapKeepsTheMostPredictedExperts) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  auto model = arch::Model::Open(testing::FixturesDir() + "/models/olmoe-tiny-f16.gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  RecordingBackend backend(**model, ops::NumericPath::kExact);
  arch::SessionOptions options;
  options.path = ops::NumericPath::kExact;
  options.prefetch.depth = 1;
  options.prefetch.max_union = 3;
  auto session = arch::Session::Create(**model, &backend, nullptr, options);
  ASSERT_TRUE(session.ok()) << session.status();
  const testing::GoldenCase gc = LoadCase("olmoe-tiny-f16", "long");
  std::vector<float> logits;
  ASSERT_TRUE((*session)->Evaluate(gc.prompt_tokens, false, &logits).ok());
  int hinted = 0;
  for (const RecordingBackend::Submitted& s : backend.submitted) {
    for (const auto& [layer, experts] : s.hints_before) {
      ++hinted;
      EXPECT_EQ(experts.size(), 3u) << "a long prompt batch predicts more than the cap";
    }
  }
  EXPECT_GT(hinted, 0);
  EXPECT_EQ((*session)->stats().predictor[0].predicted,
            3 * (*session)->stats().predictor[0].layers);
}

TEST(SessionPrefetchTest, RejectsBadOptions) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  auto model = arch::Model::Open(testing::FixturesDir() + "/models/qwen3moe-tiny-f32.gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  moe::LocalExpertBackend backend(&(*model)->experts(), (*model)->config().n_expert,
                                  ops::NumericPath::kExact, nullptr);
  for (auto bad : {arch::PrefetchOptions{3, 0, 0}, arch::PrefetchOptions{1, -1, 0},
                   arch::PrefetchOptions{1, (*model)->config().n_expert + 1, 0},
                   arch::PrefetchOptions{1, 0, -1}}) {
    arch::SessionOptions options;
    options.prefetch = bad;
    EXPECT_EQ(arch::Session::Create(**model, &backend, nullptr, options).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace colibri
