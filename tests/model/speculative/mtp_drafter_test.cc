// The NextN / MTP block against a plain-loop reference computed here from the
// tensor values of a tiny F32 deepseek2 model (tests/support/
// tiny_nextn_model.h), the hidden states the main session reports, and the
// drafter's proposals on a model whose block is built to echo the main model.
#include "model/speculative/mtp_drafter.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/arch/model.h"
#include "model/arch/session.h"
#include "model/moe/local_expert_backend.h"
#include "tests/support/tiny_nextn_model.h"

namespace colibri::speculative {
namespace {

using ::testing::HasSubstr;
using testing::TinyNextnModel;
using M = TinyNextnModel;

std::string WriteModel(const TinyNextnModel& m, const std::string& name) {
  const std::string path = ::testing::TempDir() + "/" + name + ".gguf";
  EXPECT_TRUE(m.WriteFile(path).ok());
  return path;
}

std::vector<float> RmsNorm(const std::vector<float>& x, const std::vector<float>& w) {
  double sum = 0;
  for (float v : x) sum += static_cast<double>(v) * v;
  const double scale = 1.0 / std::sqrt(sum / x.size() + M::kEps);
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = static_cast<float>(x[i] * scale * w[i]);
  return out;
}

// y = W x for W stored [rows][cols] from `offset`.
std::vector<float> MatVec(const std::vector<float>& w, size_t offset, int rows, int cols,
                          const std::vector<float>& x) {
  std::vector<float> y(rows, 0.0f);
  for (int r = 0; r < rows; ++r) {
    double acc = 0;
    for (int c = 0; c < cols; ++c) acc += static_cast<double>(w[offset + r * cols + c]) * x[c];
    y[r] = static_cast<float>(acc);
  }
  return y;
}

float Silu(float x) { return x / (1.0f + std::exp(-x)); }

// The MTP block of blk.<block>, one position at a time, from the tensors.
class ReferenceMtp {
 public:
  ReferenceMtp(const TinyNextnModel& m, int block) : m_(m), p_(absl::StrCat("blk.", block, ".")) {}

  // Logits [n_vocab] predicting the token after `next_token`, and the block
  // output in *out_hidden.
  std::vector<float> Step(const std::vector<float>& h, int next_token,
                          std::vector<float>* out_hidden) {
    const int d = M::kEmbd;
    const std::vector<float>& embd = m_.values("token_embd.weight");
    std::vector<float> e(embd.begin() + next_token * d, embd.begin() + (next_token + 1) * d);
    std::vector<float> concat = RmsNorm(e, V("nextn.enorm.weight"));
    const std::vector<float> hn = RmsNorm(h, V("nextn.hnorm.weight"));
    concat.insert(concat.end(), hn.begin(), hn.end());
    std::vector<float> x = MatVec(V("nextn.eh_proj.weight"), 0, d, 2 * d, concat);
    Attention(&x);
    Moe(&x);
    *out_hidden = x;
    const std::vector<float> xn = RmsNorm(x, V("nextn.shared_head_norm.weight"));
    return MatVec(m_.values("output.weight"), 0, M::kVocab, d, xn);
  }

 private:
  const std::vector<float>& V(const std::string& name) const { return m_.values(p_ + name); }

  // Plain RoPE of the pair (a, b) at position pos (n_rot 2: one frequency, 1).
  static void Rope(float* a, float* b, int pos) {
    const float c = std::cos(static_cast<float>(pos)), s = std::sin(static_cast<float>(pos));
    const float x0 = *a, x1 = *b;
    *a = x0 * c - x1 * s;
    *b = x0 * s + x1 * c;
  }

  void Attention(std::vector<float>* x) {
    const int d = M::kEmbd, hd = M::kNope + M::kRope, pos = static_cast<int>(latents_.size());
    const std::vector<float> xn = RmsNorm(*x, V("attn_norm.weight"));
    std::vector<float> q = MatVec(V("attn_q.weight"), 0, M::kHeads * hd, d, xn);
    std::vector<float> kv = MatVec(V("attn_kv_a_mqa.weight"), 0, M::kRank + M::kRope, d, xn);
    std::vector<float> latent(kv.begin(), kv.begin() + M::kRank);
    latent = RmsNorm(latent, V("attn_kv_a_norm.weight"));
    std::vector<float> k_pe(kv.begin() + M::kRank, kv.end());
    Rope(&k_pe[0], &k_pe[1], pos);
    latents_.push_back(latent);
    k_pes_.push_back(k_pe);
    const std::vector<float>& kb = V("attn_k_b.weight");  // [head][rank][nope]
    const std::vector<float>& vb = V("attn_v_b.weight");  // [head][v][rank]
    std::vector<float> attn;                              // [head][v]
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    for (int h = 0; h < M::kHeads; ++h) {
      float* qh = q.data() + h * hd;
      Rope(qh + M::kNope, qh + M::kNope + 1, pos);
      std::vector<double> scores;
      for (size_t s = 0; s < latents_.size(); ++s) {
        double score = 0;
        for (int j = 0; j < M::kNope; ++j) {
          double k = 0;
          for (int r = 0; r < M::kRank; ++r) {
            k += kb[(h * M::kRank + r) * M::kNope + j] * latents_[s][r];
          }
          score += qh[j] * k;
        }
        for (int j = 0; j < M::kRope; ++j) score += qh[M::kNope + j] * k_pes_[s][j];
        scores.push_back(score * scale);
      }
      const double top = *std::max_element(scores.begin(), scores.end());
      double total = 0;
      for (double& sc : scores) total += (sc = std::exp(sc - top));
      for (int c = 0; c < M::kV; ++c) {
        double out = 0;
        for (size_t s = 0; s < scores.size(); ++s) {
          double v = 0;
          for (int r = 0; r < M::kRank; ++r)
            v += vb[(h * M::kV + c) * M::kRank + r] * latents_[s][r];
          out += scores[s] / total * v;
        }
        attn.push_back(static_cast<float>(out));
      }
    }
    const std::vector<float> proj = MatVec(V("attn_output.weight"), 0, d, M::kHeads * M::kV, attn);
    for (int i = 0; i < d; ++i) (*x)[i] += proj[i];
  }

  // One SwiGLU FFN of width ff from matrices at the given offsets.
  std::vector<float> Ffn(const std::string& gate, const std::string& up, const std::string& down,
                         int expert, const std::vector<float>& xn) {
    const int d = M::kEmbd, ff = M::kFf;
    const size_t in_off = static_cast<size_t>(expert) * ff * d;
    const std::vector<float> g = MatVec(V(gate), in_off, ff, d, xn);
    const std::vector<float> u = MatVec(V(up), in_off, ff, d, xn);
    std::vector<float> a(ff);
    for (int i = 0; i < ff; ++i) a[i] = Silu(g[i]) * u[i];
    return MatVec(V(down), static_cast<size_t>(expert) * d * ff, d, ff, a);
  }

  void Moe(std::vector<float>* x) {
    const int d = M::kEmbd;
    const std::vector<float> xn = RmsNorm(*x, V("ffn_norm.weight"));
    const std::vector<float> logits = MatVec(V("ffn_gate_inp.weight"), 0, M::kExperts, d, xn);
    const std::vector<float>& bias = V("exp_probs_b.bias");
    std::vector<float> prob(M::kExperts);
    for (int e = 0; e < M::kExperts; ++e) prob[e] = 1.0f / (1.0f + std::exp(-logits[e]));
    std::vector<int> order(M::kExperts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return prob[a] + bias[a] > prob[b] + bias[b]; });
    double sum = 0;
    for (int k = 0; k < M::kUsed; ++k) sum += prob[order[k]];
    std::vector<float> out =
        Ffn("ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight", 0, xn);
    for (int k = 0; k < M::kUsed; ++k) {
      const int e = order[k];
      const float w = static_cast<float>(prob[e] / sum * M::kScale);
      const std::vector<float> y =
          Ffn("ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight", e, xn);
      for (int i = 0; i < d; ++i) out[i] += w * y[i];
    }
    for (int i = 0; i < d; ++i) (*x)[i] += out[i];
  }

  const TinyNextnModel& m_;
  const std::string p_;
  std::vector<std::vector<float>> latents_;  // [pos][rank]
  std::vector<std::vector<float>> k_pes_;    // [pos][rope], rotated
};

void ExpectNear(const std::vector<float>& want, const std::vector<float>& got, const char* what,
                int pos) {
  ASSERT_EQ(want.size(), got.size()) << what;
  float scale = 1e-3f;
  for (float v : want) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(want[i], got[i], 2e-4f * scale) << what << " position " << pos << " index " << i;
  }
}

MtpOptions Exact() {
  MtpOptions o;
  o.n_ctx = M::kCtx;
  o.path = ops::NumericPath::kExact;
  return o;
}

TEST(MtpModuleTest, MatchesAPlainLoopReferenceOverSeveralPositions) {
  const TinyNextnModel m;
  const std::string path = WriteModel(m, "mtp_reference");
  auto mtp = MtpModule::Open(path, nullptr, Exact());
  ASSERT_TRUE(mtp.ok()) << mtp.status();
  ReferenceMtp reference(m, M::kMainLayers);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const std::vector<int32_t> tokens = {5, 17, 3, 30, 0, 9};
  std::vector<float> logits, hidden, all_logits;
  // Positions 0-2 one at a time, then 3-5 in one call with every row's logits.
  std::vector<std::vector<float>> want_logits;
  std::vector<float> batch_h;
  for (size_t pos = 0; pos < tokens.size(); ++pos) {
    std::vector<float> h(M::kEmbd);
    for (float& v : h) v = normal(rng);
    std::vector<float> want_hidden;
    want_logits.push_back(reference.Step(h, tokens[pos], &want_hidden));
    if (pos < 3) {
      ASSERT_TRUE((*mtp)->Evaluate(h, {&tokens[pos], 1}, false, &logits, &hidden).ok());
      ExpectNear(want_logits.back(), logits, "logits", static_cast<int>(pos));
      ExpectNear(want_hidden, hidden, "hidden", static_cast<int>(pos));
    } else {
      batch_h.insert(batch_h.end(), h.begin(), h.end());
      if (pos + 1 == tokens.size()) {
        ASSERT_TRUE((*mtp)
                        ->Evaluate(batch_h, absl::MakeConstSpan(tokens).subspan(3), true,
                                   &all_logits, &hidden)
                        .ok());
        ExpectNear(want_hidden, hidden, "hidden", static_cast<int>(pos));
      }
    }
  }
  ASSERT_EQ(all_logits.size(), 3u * M::kVocab);
  for (int i = 0; i < 3; ++i) {
    ExpectNear(want_logits[3 + i],
               std::vector<float>(all_logits.begin() + i * M::kVocab,
                                  all_logits.begin() + (i + 1) * M::kVocab),
               "batched logits", 3 + i);
  }
  EXPECT_EQ((*mtp)->n_past(), 6);
}

TEST(MtpModuleTest, RefusesAModelWithoutNextnAndBadInput) {
  testing::TinyNextnOptions plain;
  plain.n_nextn = 0;
  const std::string path = WriteModel(TinyNextnModel(plain), "mtp_plain");
  auto none = MtpModule::Open(path, nullptr, Exact());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(none.status().message(), HasSubstr("nextn_predict_layers is 0"));

  auto mtp = MtpModule::Open(WriteModel(TinyNextnModel(), "mtp_bad"), nullptr, Exact());
  ASSERT_TRUE(mtp.ok()) << mtp.status();
  std::vector<float> logits;
  const int32_t token = 1, outside = M::kVocab;
  EXPECT_EQ((*mtp)->Evaluate(std::vector<float>(3), {&token, 1}, false, &logits, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      (*mtp)->Evaluate(std::vector<float>(M::kEmbd), {&outside, 1}, false, &logits, nullptr).code(),
      absl::StatusCode::kInvalidArgument);
}

// The main model keeps running its 2 layers; the NextN block is no layer of it.
TEST(MtpModuleTest, MainModelRunsItsMainLayersOnly) {
  auto model = arch::Model::Open(WriteModel(TinyNextnModel(), "mtp_main"));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->config().n_layer, M::kMainLayers);
  EXPECT_EQ((*model)->config().n_nextn_layer, 1);
}

// Hidden states reported by the main session are those its logits come from:
// output · (output_norm ⊙ rmsnorm(h)), computed here.
TEST(HiddenStateObserverTest, ReportsTheStateBeforeTheOutputNorm) {
  const TinyNextnModel m;
  auto model = arch::Model::Open(WriteModel(m, "mtp_hidden"));
  ASSERT_TRUE(model.ok()) << model.status();
  moe::LocalExpertBackend backend(&(*model)->experts(), M::kExperts, ops::NumericPath::kExact,
                                  nullptr);
  arch::SessionOptions options;
  options.path = ops::NumericPath::kExact;
  options.n_batch = 3;  // the prompt in chunks
  auto session = arch::Session::Create(**model, &backend, nullptr, options);
  ASSERT_TRUE(session.ok()) << session.status();
  struct Recorder : arch::HiddenStateObserver {
    void OnHiddenStates(int first_pos, int n, const float* rows) override {
      EXPECT_EQ(first_pos, static_cast<int>(this->rows.size() / M::kEmbd));
      this->rows.insert(this->rows.end(), rows, rows + n * M::kEmbd);
    }
    std::vector<float> rows;
  } recorder;
  (*session)->set_hidden_observer(&recorder);
  const std::vector<int32_t> tokens = {1, 4, 9, 16, 25, 2, 7};
  std::vector<float> logits;
  ASSERT_TRUE((*session)->Evaluate(tokens, true, &logits).ok());
  ASSERT_EQ(recorder.rows.size(), tokens.size() * M::kEmbd);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::vector<float> h(recorder.rows.begin() + i * M::kEmbd,
                               recorder.rows.begin() + (i + 1) * M::kEmbd);
    const std::vector<float> want = MatVec(m.values("output.weight"), 0, M::kVocab, M::kEmbd,
                                           RmsNorm(h, m.values("output_norm.weight")));
    ExpectNear(
        want,
        std::vector<float>(logits.begin() + i * M::kVocab, logits.begin() + (i + 1) * M::kVocab),
        "logits", static_cast<int>(i));
  }
}

// On the echo model with quiet main layers (main_scale 0) the main model's
// next token is f(t) and the block computes f of its input token, so every
// draft, chained ones included, is the greedy continuation.
TEST(MtpDrafterTest, EchoModelDraftsTheGreedyContinuation) {
  testing::TinyNextnOptions echo;
  echo.echo = true;
  echo.main_scale = 0.0f;
  const std::string path = WriteModel(TinyNextnModel(echo), "mtp_echo");
  auto model = arch::Model::Open(path);
  ASSERT_TRUE(model.ok()) << model.status();
  moe::LocalExpertBackend backend(&(*model)->experts(), M::kExperts, ops::NumericPath::kExact,
                                  nullptr);
  arch::SessionOptions options;
  options.path = ops::NumericPath::kExact;
  auto argmax = [](const std::vector<float>& v) {
    return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
  };
  const std::vector<int32_t> prompt = {3, 11, 20};
  constexpr int kSteps = 12, kDraft = 3;
  // Plain greedy decoding: prompt + kSteps + kDraft tokens.
  std::vector<int32_t> greedy = prompt;
  {
    auto plain = arch::Session::Create(**model, &backend, nullptr, options);
    ASSERT_TRUE(plain.ok()) << plain.status();
    std::vector<float> logits;
    ASSERT_TRUE((*plain)->Evaluate(prompt, false, &logits).ok());
    for (int i = 0; i < kSteps + kDraft; ++i) {
      greedy.push_back(argmax(logits));
      ASSERT_TRUE((*plain)->Evaluate({&greedy.back(), 1}, false, &logits).ok());
    }
  }
  auto session = arch::Session::Create(**model, &backend, nullptr, options);
  ASSERT_TRUE(session.ok()) << session.status();
  auto mtp = MtpModule::Open(path, nullptr, Exact());
  ASSERT_TRUE(mtp.ok()) << mtp.status();
  MtpDrafter drafter(**session, **mtp);
  std::vector<float> logits;
  ASSERT_TRUE((*session)->Evaluate(prompt, false, &logits).ok());
  drafter.Accept(prompt);
  std::vector<int32_t> draft;
  for (int step = 0; step < kSteps; ++step) {
    const size_t n = prompt.size() + step;  // tokens accepted after this one
    drafter.Accept({&greedy[n], 1});
    drafter.Propose(kDraft, &draft);
    const std::vector<int32_t> want(greedy.begin() + n + 1, greedy.begin() + n + 1 + kDraft);
    EXPECT_EQ(draft, want) << "step " << step;
    ASSERT_TRUE((*session)->Evaluate({&greedy[n], 1}, false, &logits).ok());
    // The block keeps only positions computed from the main hidden states.
    EXPECT_EQ((*mtp)->n_past(), (*session)->n_past() - 1);
  }
}

// Random weights: drafts are valid tokens but carry no knowledge of the main
// model; the drafter must keep working across rejected drafts (positions
// evaluated, truncated and evaluated again in the main session).
TEST(MtpDrafterTest, FollowsTruncationsOfTheMainSession) {
  const std::string path = WriteModel(TinyNextnModel(), "mtp_truncate");
  auto model = arch::Model::Open(path);
  ASSERT_TRUE(model.ok()) << model.status();
  moe::LocalExpertBackend backend(&(*model)->experts(), M::kExperts, ops::NumericPath::kExact,
                                  nullptr);
  arch::SessionOptions options;
  options.path = ops::NumericPath::kExact;
  auto session = arch::Session::Create(**model, &backend, nullptr, options);
  ASSERT_TRUE(session.ok()) << session.status();
  auto mtp = MtpModule::Open(path, nullptr, Exact());
  ASSERT_TRUE(mtp.ok()) << mtp.status();
  MtpDrafter drafter(**session, **mtp);
  std::vector<int32_t> tokens = {1, 2, 3, 4};
  std::vector<float> logits;
  ASSERT_TRUE((*session)->Evaluate(tokens, false, &logits).ok());
  drafter.Accept(tokens);
  std::vector<int32_t> draft, first_drafts;
  for (int step = 0; step < 8; ++step) {
    const int32_t token = static_cast<int32_t>(5 + step);
    drafter.Accept({&token, 1});
    drafter.Propose(4, &draft);
    ASSERT_EQ(draft.size(), 4u) << "step " << step;
    for (int32_t t : draft) EXPECT_TRUE(t >= 0 && t < M::kVocab);
    first_drafts.push_back(draft[0]);
    // Verify the token and its drafts, then reject them all.
    std::vector<int32_t> batch = {token};
    batch.insert(batch.end(), draft.begin(), draft.end());
    const int keep = (*session)->n_past() + 1;
    ASSERT_TRUE((*session)->Evaluate(batch, true, &logits).ok());
    (*session)->Truncate(keep);
  }
  // The same sequence drafted afresh, without the rejected evaluations,
  // gives the same drafts: nothing stale was used.
  auto session2 = arch::Session::Create(**model, &backend, nullptr, options);
  ASSERT_TRUE(session2.ok());
  auto mtp2 = MtpModule::Open(path, nullptr, Exact());
  ASSERT_TRUE(mtp2.ok());
  MtpDrafter fresh(**session2, **mtp2);
  ASSERT_TRUE((*session2)->Evaluate(tokens, false, &logits).ok());
  fresh.Accept(tokens);
  for (int step = 0; step < 8; ++step) {
    const int32_t token = static_cast<int32_t>(5 + step);
    fresh.Accept({&token, 1});
    fresh.Propose(1, &draft);
    ASSERT_EQ(draft.size(), 1u);
    EXPECT_EQ(draft[0], first_drafts[step]) << "step " << step;
    ASSERT_TRUE((*session2)->Evaluate({&token, 1}, false, &logits).ok());
  }
}

struct Main {
  std::unique_ptr<arch::Model> model;
  std::unique_ptr<moe::LocalExpertBackend> backend;
  std::unique_ptr<arch::Session> session;
};

Main OpenMain(const std::string& path, int n_seq = 1) {
  Main m;
  auto model = arch::Model::Open(path);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return m;
  m.model = std::move(*model);
  m.backend = std::make_unique<moe::LocalExpertBackend>(&m.model->experts(), M::kExperts,
                                                        ops::NumericPath::kExact, nullptr);
  arch::SessionOptions options;
  options.path = ops::NumericPath::kExact;
  options.n_seq = n_seq;
  auto session = arch::Session::Create(*m.model, m.backend.get(), nullptr, options);
  EXPECT_TRUE(session.ok()) << session.status();
  if (session.ok()) m.session = std::move(*session);
  return m;
}

// A conversation continued in the same session: the second generation's
// prompt starts where the first one's fed tokens end (its last token, sampled
// but never fed, is replaced). The drafter must catch up from that position:
// its first proposal equals that of a drafter that saw the whole sequence as
// one prompt, bitwise in the block's logits.
TEST(MtpDrafterTest, ContinuesAConversationFromTheRightPosition) {
  const std::string path = WriteModel(TinyNextnModel(), "mtp_continue");
  Main main = OpenMain(path);
  ASSERT_NE(main.session, nullptr);
  auto mtp = MtpModule::Open(path, nullptr, Exact());
  ASSERT_TRUE(mtp.ok()) << mtp.status();
  MtpDrafter drafter(*main.session, **mtp);
  const std::vector<int32_t> prompt1 = {1, 2, 3, 4}, fed = {5, 6, 7, 8}, prompt2 = {9, 10, 11};
  const int32_t unfed = 29, next = 12;
  std::vector<float> logits;
  std::vector<int32_t> draft;
  ASSERT_TRUE(main.session->Evaluate(prompt1, false, &logits).ok());
  drafter.Restart();
  drafter.Accept(prompt1);
  for (int32_t token : fed) {
    drafter.Accept({&token, 1});
    drafter.Propose(2, &draft);
    ASSERT_EQ(draft.size(), 2u);
    ASSERT_TRUE(main.session->Evaluate({&token, 1}, false, &logits).ok());
  }
  // The first generation ends with a token sampled and never fed; the
  // drafter ran the block with it.
  drafter.Accept({&unfed, 1});
  drafter.Propose(2, &draft);
  ASSERT_EQ(draft.size(), 2u);
  // The second generation continues at position 8.
  ASSERT_EQ(main.session->n_past(), 8);
  ASSERT_TRUE(main.session->Evaluate(prompt2, false, &logits).ok());
  drafter.Restart();
  drafter.Accept(prompt2);
  drafter.Accept({&next, 1});
  drafter.Propose(3, &draft);
  ASSERT_EQ(draft.size(), 3u);
  const std::vector<float> continued = drafter.first_draft_logits();

  // Afresh: the whole sequence as one prompt at position 0.
  Main fresh_main = OpenMain(path);
  ASSERT_NE(fresh_main.session, nullptr);
  auto fresh_mtp = MtpModule::Open(path, nullptr, Exact());
  ASSERT_TRUE(fresh_mtp.ok()) << fresh_mtp.status();
  MtpDrafter fresh(*fresh_main.session, **fresh_mtp);
  std::vector<int32_t> whole = prompt1;
  whole.insert(whole.end(), fed.begin(), fed.end());
  whole.insert(whole.end(), prompt2.begin(), prompt2.end());
  ASSERT_TRUE(fresh_main.session->Evaluate(whole, false, &logits).ok());
  fresh.Accept(whole);
  fresh.Accept({&next, 1});
  std::vector<int32_t> fresh_draft;
  fresh.Propose(3, &fresh_draft);
  EXPECT_EQ(draft, fresh_draft);
  ASSERT_EQ(continued.size(), static_cast<size_t>(M::kVocab));
  EXPECT_EQ(continued, fresh.first_draft_logits());
  EXPECT_EQ((*mtp)->n_past(), (*fresh_mtp)->n_past());
}

// A drafter whose owner passes it the hidden states of one sequence of a
// batched session (SequenceChunk::hidden, as `serve` does) drafts exactly as
// one observing a plain session; its sequence of the block is allocated on
// use and freed with the drafter, the others untouched.
TEST(MtpDrafterTest, FedDrafterOfABatchedSequenceDraftsLikeAnObservingOne) {
  const std::string path = WriteModel(TinyNextnModel(), "mtp_fed");
  Main batched = OpenMain(path, /*n_seq=*/3);
  Main single = OpenMain(path);
  ASSERT_NE(batched.session, nullptr);
  ASSERT_NE(single.session, nullptr);
  MtpOptions shared = Exact();
  shared.n_seq = 3;
  auto mtp = MtpModule::Open(path, nullptr, shared);
  auto mtp1 = MtpModule::Open(path, nullptr, Exact());
  ASSERT_TRUE(mtp.ok()) << mtp.status();
  ASSERT_TRUE(mtp1.ok()) << mtp1.status();
  auto fed = std::make_unique<MtpDrafter>(**mtp, 2);
  MtpDrafter observing(*single.session, **mtp1);
  const std::vector<int32_t> prompt = {4, 8, 15, 16, 23};
  const std::vector<int32_t> other = {1, 1, 2, 3, 5, 8};
  std::vector<float> logits, other_logits, hidden;
  // Sequence 2 with sequence 0 beside it, in one batch.
  std::vector<arch::SequenceChunk> chunks = {{0, other, false, &other_logits, nullptr},
                                             {2, prompt, false, &logits, &hidden}};
  ASSERT_TRUE(batched.session->EvaluateBatch(chunks).ok());
  ASSERT_EQ(hidden.size(), prompt.size() * M::kEmbd);
  fed->OnHiddenStates(0, static_cast<int>(prompt.size()), hidden.data());
  fed->Accept(prompt);
  ASSERT_TRUE(single.session->Evaluate(prompt, false, &logits).ok());
  observing.Accept(prompt);
  std::vector<int32_t> a, b;
  for (int32_t token : {7, 30, 2, 11}) {
    fed->Accept({&token, 1});
    observing.Accept({&token, 1});
    fed->Propose(3, &a);
    observing.Propose(3, &b);
    ASSERT_EQ(a.size(), 3u);
    EXPECT_EQ(a, b) << "token " << token;
    EXPECT_EQ(fed->first_draft_logits(), observing.first_draft_logits()) << "token " << token;
    // The token and its drafts verified; only the token kept.
    std::vector<int32_t> batch = {token};
    batch.insert(batch.end(), a.begin(), a.end());
    const int at = batched.session->n_past(2);
    chunks = {{2, batch, true, &logits, &hidden}};
    ASSERT_TRUE(batched.session->EvaluateBatch(chunks).ok());
    fed->OnHiddenStates(at, static_cast<int>(batch.size()), hidden.data());
    batched.session->Truncate(2, at + 1);
    ASSERT_TRUE(single.session->Evaluate({&token, 1}, false, &logits).ok());
  }
  EXPECT_EQ((*mtp)->n_past(0), 0);
  EXPECT_GT((*mtp)->kv_bytes_allocated(), 0);
  fed.reset();
  EXPECT_EQ((*mtp)->kv_bytes_allocated(), 0);
  EXPECT_EQ((*mtp)->n_past(2), 0);
}

}  // namespace
}  // namespace colibri::speculative
