// `colibri-coordinator serve` and colibri-client against real processes on
// loopback: the same tokens as the local `run` (experts on 3 nodes and
// local), auth, malformed requests, finish reasons, cancellation, concurrent
// sessions and ClusterStatus. Expected tokens always come from `run`.
#include <signal.h>

#include <condition_variable>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "client/client.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/node_process.h"
#include "tests/support/auth_token.h"
#include "tests/support/golden.h"
#include "tests/support/raw_call.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

using client::Client;
using testing::CallRaw;
using client::ClientOptions;
using client::GenerateResult;
using testing::CommandResult;
using testing::NodeProcess;
using testing::ServerProcess;

constexpr int kTokens = 12;

std::string Coordinator() { return testing::BinaryPath("coordinator/colibri-coordinator"); }
std::string ClientBinary() { return testing::BinaryPath("client/colibri-client"); }

std::vector<int32_t> ParseIds(const std::string& line) {
  std::vector<int32_t> ids;
  for (absl::string_view piece : absl::StrSplit(line, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    ids.push_back(std::stoi(std::string(piece)));
  }
  return ids;
}

std::string IdList(const std::vector<int32_t>& ids) {
  return testing::JoinIds(std::vector<int>(ids.begin(), ids.end()));
}

std::string ModelPath(const std::string& model) {
  return testing::FixturesDir() + "/models/" + model + ".gguf";
}

// The local reference: `run --temp 0 --ignore-eos --print-token-ids`.
std::vector<int32_t> LocalRun(const std::string& model, const std::vector<int32_t>& prompt,
                              bool exact, int n = kTokens) {
  std::vector<std::string> args = {Coordinator(), "run",      "--model",    ModelPath(model),
                                   "--prompt-tokens", IdList(prompt), "--n-predict",
                                   std::to_string(n), "--temp", "0", "--threads", "1",
                                   "--ignore-eos", "--print-token-ids"};
  if (exact) args.push_back("--exact");
  const CommandResult r = testing::RunCommand(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return ParseIds(r.out);
}

v1::GenerateRequest GreedyRequest(const std::vector<int32_t>& prompt, bool exact,
                                  int n = kTokens) {
  v1::GenerateRequest request;
  for (int32_t id : prompt) request.mutable_tokens()->add_ids(id);
  request.set_max_tokens(n);
  request.set_ignore_eos(true);
  request.set_exact(exact);
  request.mutable_sampling()->set_temperature(0);
  return request;
}

std::unique_ptr<Client> Connect(const std::string& address, const std::string& token = "") {
  ClientOptions options;
  options.address = address;
  options.auth_token = token;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

std::string WriteFile(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

class ServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
    dir_ = testing::MakeTempDir("serve");
  }

  void StartNodes(int n) {
    std::string error;
    ASSERT_TRUE(testing::StartNodes(n, "node", nullptr, &nodes_, &error)) << error;
  }
  std::string Addresses() const { return testing::JoinAddresses(nodes_); }

  // Starts serve on 127.0.0.1:0 with `extra` flags; its address is returned.
  std::string StartServe(const std::string& model, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {Coordinator(), "serve", "--model", ModelPath(model),
                                     "--listen", "127.0.0.1:0", "--threads", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    serve_ = std::make_unique<ServerProcess>();
    std::string error;
    EXPECT_TRUE(serve_->Start(args, &error)) << error;
    return serve_->address();
  }

  static std::vector<int32_t> Prompt(const std::string& model) {
    testing::GoldenCase c;
    std::string error;
    EXPECT_TRUE(testing::LoadGoldenCase(model, "english", &c, &error)) << error;
    return c.prompt_tokens;
  }

  std::string dir_;
  std::vector<std::unique_ptr<NodeProcess>> nodes_;
  std::unique_ptr<ServerProcess> serve_;
};

TEST_F(ServeTest, SameTokensAsTheLocalRunWithExpertsOnThreeNodes) {
  StartNodes(3);
  for (const std::string& model : testing::GoldenModels()) {
    SCOPED_TRACE(model);
    const std::vector<int32_t> prompt = Prompt(model);
    const std::string address = StartServe(model, {"--nodes", Addresses()});
    ASSERT_FALSE(address.empty());
    std::unique_ptr<Client> client = Connect(address);
    ASSERT_NE(client, nullptr);
    for (bool exact : {false, true}) {
      SCOPED_TRACE(exact ? "exact" : "fast");
      const std::vector<int32_t> expected = LocalRun(model, prompt, exact);
      ASSERT_EQ(expected.size(), static_cast<size_t>(kTokens));

      absl::StatusOr<GenerateResult> result = client->Generate(GreedyRequest(prompt, exact));
      ASSERT_TRUE(result.ok()) << result.status();
      EXPECT_EQ(result->tokens, expected);
      EXPECT_EQ(result->finish_reason, v1::FINISH_REASON_LENGTH);
      EXPECT_EQ(result->stats.generated_tokens(), kTokens);
      EXPECT_EQ(result->stats.prompt_tokens(), static_cast<int>(prompt.size()));
      EXPECT_GT(result->stats.expert_round_trips(), 0);
      EXPECT_GT(result->stats.expert_bytes_sent(), 0);
      EXPECT_EQ(result->stats.fallback_routes(), 0);

      std::vector<std::string> cli = {ClientBinary(), "--coordinator", address, "generate",
                                      "--prompt-tokens", IdList(prompt), "-n",
                                      std::to_string(kTokens), "--temp", "0", "--ignore-eos",
                                      "--print-token-ids"};
      if (exact) cli.push_back("--exact");
      const CommandResult r = testing::RunCommand(cli);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(ParseIds(r.out), expected);
    }
    serve_->Stop(SIGTERM);
  }
}

TEST_F(ServeTest, SameTokensAndTextAsTheLocalRunWithoutNodes) {
  const std::string model = "olmoe-tiny-f16";
  const std::string address = StartServe(model);
  ASSERT_FALSE(address.empty());
  const std::string text = "The small birds of the valley";
  const std::vector<std::string> common = {"-n", "10", "--temp", "0.7", "--seed", "3"};
  std::vector<std::string> run = {Coordinator(), "run", "--model", ModelPath(model), "--prompt",
                                  text, "--threads", "1"};
  run.insert(run.end(), common.begin(), common.end());
  std::vector<std::string> gen = {ClientBinary(), "--coordinator", address, "generate", text};
  gen.insert(gen.end(), common.begin(), common.end());
  for (bool ids : {true, false}) {
    std::vector<std::string> a = run, b = gen;
    if (ids) {
      a.push_back("--print-token-ids");
      b.push_back("--print-token-ids");
    }
    const CommandResult local = testing::RunCommand(a);
    ASSERT_EQ(local.exit_code, 0) << local.err;
    const CommandResult served = testing::RunCommand(b);
    ASSERT_EQ(served.exit_code, 0) << served.err;
    EXPECT_FALSE(local.out.empty());
    EXPECT_EQ(served.out, local.out);
  }
  std::unique_ptr<Client> client = Connect(address);
  const std::vector<int32_t> prompt = Prompt(model);
  absl::StatusOr<GenerateResult> result = client->Generate(GreedyRequest(prompt, true));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->tokens, LocalRun(model, prompt, true));
  EXPECT_EQ(result->stats.expert_round_trips(), 0);
}

TEST_F(ServeTest, TokensAreCheckedOnEveryCall) {
  const std::string token = testing::RandomAuthToken();
  const std::string token_file = WriteFile(dir_, "token", "  " + token + "\n");
  const std::string address = StartServe("qwen3moe-tiny-f32", {"--auth-token-file", token_file});
  ASSERT_FALSE(address.empty());
  const v1::GenerateRequest request = GreedyRequest(Prompt("qwen3moe-tiny-f32"), false, 3);
  for (const std::string& token : {std::string(), std::string("wrong")}) {
    std::unique_ptr<Client> client = Connect(address, token);
    absl::StatusOr<GenerateResult> result = client->Generate(request);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kUnauthenticated) << result.status();
    EXPECT_NE(result.status().message().find(address), std::string::npos) << result.status();
    EXPECT_EQ(client->ModelInfo().status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(client->ClusterStatus().status().code(), absl::StatusCode::kUnauthenticated);
    v1::TokenizeRequest tokenize;
    tokenize.set_text("hello");
    EXPECT_EQ(client->Tokenize(tokenize).status().code(), absl::StatusCode::kUnauthenticated);
  }
  std::unique_ptr<Client> client = Connect(address, token);
  absl::StatusOr<GenerateResult> result = client->Generate(request);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->tokens.size(), 3u);
  EXPECT_TRUE(client->ModelInfo().ok());

  const CommandResult without = testing::RunCommand(
      {ClientBinary(), "--coordinator", address, "generate", "hello", "-n", "2"});
  EXPECT_EQ(without.exit_code, 1);
  EXPECT_NE(without.err.find(address), std::string::npos) << without.err;
  const CommandResult with = testing::RunCommand({ClientBinary(), "--coordinator", address,
                                                  "--auth-token-file", token_file, "generate",
                                                  "hello", "-n", "2"});
  EXPECT_EQ(with.exit_code, 0) << with.err;
}

TEST_F(ServeTest, RefusesToListenBeyondLoopbackWithoutATokenUnlessInsecure) {
  const std::string model = ModelPath("qwen3moe-tiny-f32");
  const CommandResult refused = testing::RunCommand(
      {Coordinator(), "serve", "--model", model, "--listen", "0.0.0.0:0", "--threads", "1"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find("refusing to listen on 0.0.0.0:0"), std::string::npos)
      << refused.err;
  EXPECT_EQ(refused.out.find("listening on"), std::string::npos);

  ServerProcess insecure;
  std::string error;
  ASSERT_TRUE(insecure.Start({Coordinator(), "serve", "--model", model, "--listen", "0.0.0.0:0",
                              "--threads", "1", "--insecure"},
                             &error))
      << error;
  EXPECT_EQ(insecure.Stop(SIGTERM), 0);
}

TEST_F(ServeTest, MalformedRequestsAreInvalidArgumentAndTheServerKeepsServing) {
  const std::string model = "qwen2moe-tiny-q8_0";
  const std::string address = StartServe(model, {"--ctx-size", "32"});
  ASSERT_FALSE(address.empty());
  std::unique_ptr<Client> client = Connect(address);
  const std::vector<int32_t> prompt = Prompt(model);
  absl::StatusOr<v1::ModelInfoReply> info = client->ModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->n_ctx(), 32);

  struct Case {
    std::string name;
    v1::GenerateRequest request;
    std::string message;  // part of the expected message
  };
  std::vector<Case> cases;
  cases.push_back({"no prompt", v1::GenerateRequest(), "empty prompt"});
  {
    v1::GenerateRequest r;
    r.set_text("");
    cases.push_back({"empty text", r, "empty"});
  }
  {
    v1::GenerateRequest r = GreedyRequest(prompt, false);
    r.mutable_tokens()->set_ids(1, info->n_vocab());
    cases.push_back({"id beyond the vocabulary", r, "outside the vocabulary"});
    r.mutable_tokens()->set_ids(1, -1);
    cases.push_back({"negative id", r, "outside the vocabulary"});
  }
  {
    v1::GenerateRequest r = GreedyRequest(prompt, false);
    r.set_max_tokens(-2);
    cases.push_back({"negative max_tokens", r, "max_tokens"});
  }
  {
    v1::GenerateRequest r = GreedyRequest(prompt, false);
    r.mutable_sampling()->set_temperature(-1);
    cases.push_back({"negative temperature", r, "temperature"});
    r = GreedyRequest(prompt, false);
    r.mutable_sampling()->set_top_p(1.5f);
    cases.push_back({"top_p above 1", r, "top_p"});
    r = GreedyRequest(prompt, false);
    r.mutable_sampling()->set_top_k(-3);
    cases.push_back({"negative top_k", r, "top_k"});
  }
  {
    v1::GenerateRequest r = GreedyRequest(std::vector<int32_t>(40, prompt[0]), false);
    cases.push_back({"prompt longer than the context", r, "context"});
    v1::GenerateRequest text;
    std::string long_text;
    for (int i = 0; i < 60; ++i) long_text += "word" + std::to_string(i) + " ";
    text.set_text(long_text);
    cases.push_back({"text longer than the context", text, "context"});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<GenerateResult> result = client->Generate(c.request);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
    EXPECT_NE(result.status().message().find(c.message), std::string::npos) << result.status();
  }
  absl::StatusOr<GenerateResult> good = client->Generate(GreedyRequest(prompt, false, 4));
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->tokens, LocalRun(model, prompt, false, 4));
}

// Bytes that are not the method's request got
// UNIMPLEMENTED; every Inference method answers INVALID_ARGUMENT and the
// server keeps serving.
TEST_F(ServeTest, GarbageOnEveryMethodIsInvalidArgument) {
  const std::string model = "qwen2moe-tiny-q8_0";
  const std::string address = StartServe(model);
  ASSERT_FALSE(address.empty());
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  const std::string garbage("\x0a\x7f\x01\x02", 4);
  for (const char* method : {"Generate", "Tokenize", "ModelInfo", "ClusterStatus"}) {
    const grpc::Status s =
        CallRaw(&generic, std::string("/colibri.v1.Inference/") + method, garbage);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << method << ": " << s.error_code() << " " << s.error_message();
    EXPECT_NE(s.error_message().find(method), std::string::npos) << s.error_message();
  }
  std::unique_ptr<Client> client = Connect(address);
  const std::vector<int32_t> prompt = Prompt(model);
  absl::StatusOr<GenerateResult> good = client->Generate(GreedyRequest(prompt, false, 4));
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->tokens, LocalRun(model, prompt, false, 4));
  absl::StatusOr<v1::ModelInfoReply> info = client->ModelInfo();
  EXPECT_TRUE(info.ok()) << info.status();
}

// Each request whose text is not UTF-8 makes libprotobuf log a line: 200
// of them leave at most the rate limit's lines in serve's log (10 a minute
// and one line counting the rest), not 200.
TEST_F(ServeTest, InvalidUtf8RequestsDoNotFloodTheLog) {
  const std::string log = ::testing::TempDir() + "/serve-utf8.log";
  const std::vector<std::string> argv = {
      "/bin/sh", "-c", "exec \"$@\" 2>" + log, "sh", Coordinator(), "serve", "--model",
      ModelPath("qwen2moe-tiny-q8_0"), "--listen", "127.0.0.1:0", "--threads", "1"};
  serve_ = std::make_unique<ServerProcess>();
  std::string error;
  ASSERT_TRUE(serve_->Start(argv, &error)) << error;
  auto channel = grpc::CreateChannel(serve_->address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  const std::string bad_text("\x0a\x02\xff\xfe", 4);  // text = 1: two bytes, not UTF-8
  for (int i = 0; i < 200; ++i) {
    const grpc::Status s = CallRaw(&generic, "/colibri.v1.Inference/Generate", bad_text);
    ASSERT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  }
  serve_->Stop(SIGTERM);
  std::ifstream in(log);
  std::string line;
  int utf8_lines = 0;
  while (std::getline(in, line)) {
    if (line.find("UTF-8") != std::string::npos) ++utf8_lines;
  }
  EXPECT_GT(utf8_lines, 0);
  EXPECT_LE(utf8_lines, 11);
}

TEST_F(ServeTest, FinishReasonsStopStringsAndContext) {
  const std::string model = "mixtral-tiny-q4_k_m";
  const std::string address = StartServe(model, {"--ctx-size", "64"});
  ASSERT_FALSE(address.empty());
  std::unique_ptr<Client> client = Connect(address);
  const std::vector<int32_t> prompt = Prompt(model);

  absl::StatusOr<GenerateResult> length = client->Generate(GreedyRequest(prompt, false, 5));
  ASSERT_TRUE(length.ok()) << length.status();
  EXPECT_EQ(length->finish_reason, v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(length->tokens.size(), 5u);

  // A stop string from the middle of the local run's text.
  const CommandResult local = testing::RunCommand(
      {Coordinator(), "run", "--model", ModelPath(model), "--prompt-tokens", IdList(prompt),
       "-n", "16", "--temp", "0", "--ignore-eos", "--threads", "1"});
  ASSERT_EQ(local.exit_code, 0) << local.err;
  const std::string text = local.out.substr(0, local.out.size() - 1);  // without the newline
  ASSERT_GE(text.size(), 12u) << text;
  const std::string stop = text.substr(text.size() / 2, 3);
  v1::GenerateRequest request = GreedyRequest(prompt, false, 16);
  request.add_stop(stop);
  absl::StatusOr<GenerateResult> stopped = client->Generate(request);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(stopped->finish_reason, v1::FINISH_REASON_STOP);
  EXPECT_LT(stopped->tokens.size(), 16u);
  // The text ends just before the stop string, which never appears.
  EXPECT_EQ(stopped->text, text.substr(0, text.find(stop)));

  // 64 positions: the prompt and the fed-back tokens fill it.
  absl::StatusOr<GenerateResult> full = client->Generate(GreedyRequest(prompt, false, 200));
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->finish_reason, v1::FINISH_REASON_CONTEXT);
  EXPECT_EQ(full->tokens.size() + prompt.size(), 65u);
}

// Generate's response_format constrains the output as HTTP's does: at
// temperature 1.0 and several seeds, a bounded schema's text is an instance
// (checked by hand) ending with FINISH_REASON_STOP; json_object gives an
// object; a schema that is not JSON or cannot be enforced is
// INVALID_ARGUMENT naming what is wrong.
TEST_F(ServeTest, ResponseFormatConstrainsGenerate) {
  const std::string model = "qwen3moe-tiny-f32";
  const std::string address = StartServe(model);
  ASSERT_FALSE(address.empty());
  std::unique_ptr<Client> client = Connect(address);
  const std::string schema = R"({"type": "object",
      "properties": {"answer": {"enum": ["yes", "no"]},
                     "score": {"type": "integer", "minimum": 0, "maximum": 9}},
      "required": ["answer", "score"], "additionalProperties": false})";
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    v1::GenerateRequest request;
    request.set_text("Is the valley green? Answer as JSON:");
    request.set_max_tokens(100);
    request.mutable_sampling()->set_temperature(1.0f);
    request.mutable_sampling()->set_seed(seed);
    request.mutable_sampling()->set_has_seed(true);
    request.mutable_response_format()->set_json_schema(schema);
    absl::StatusOr<GenerateResult> result = client->Generate(request);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->finish_reason, v1::FINISH_REASON_STOP) << result->text;
    const nlohmann::json v = nlohmann::json::parse(result->text, nullptr, false);
    ASSERT_TRUE(v.is_object()) << result->text;
    EXPECT_EQ(v.size(), 2u) << result->text;
    EXPECT_TRUE(v["answer"] == "yes" || v["answer"] == "no") << result->text;
    EXPECT_TRUE(v["score"].is_number_integer() && v["score"] >= 0 && v["score"] <= 9)
        << result->text;

    request.mutable_response_format()->set_json_object(true);
    request.set_max_tokens(400);
    absl::StatusOr<GenerateResult> object = client->Generate(request);
    ASSERT_TRUE(object.ok()) << object.status();
    ASSERT_FALSE(object->text.empty());
    EXPECT_EQ(object->text[0], '{') << object->text;
    if (object->finish_reason == v1::FINISH_REASON_STOP) {
      EXPECT_TRUE(nlohmann::json::parse(object->text, nullptr, false).is_object()) << object->text;
    }
  }
  v1::GenerateRequest bad;
  bad.set_text("x");
  bad.mutable_response_format()->set_json_schema("{not json");
  absl::StatusOr<GenerateResult> not_json = client->Generate(bad);
  EXPECT_EQ(not_json.status().code(), absl::StatusCode::kInvalidArgument) << not_json.status();
  EXPECT_NE(not_json.status().message().find("json_schema"), std::string::npos)
      << not_json.status();
  bad.mutable_response_format()->set_json_schema(R"js({"type": "string", "pattern": "(?=x)"})js");
  absl::StatusOr<GenerateResult> lookaround = client->Generate(bad);
  EXPECT_EQ(lookaround.status().code(), absl::StatusCode::kInvalidArgument) << lookaround.status();
  EXPECT_NE(lookaround.status().message().find("pattern"), std::string::npos)
      << lookaround.status();
}

TEST_F(ServeTest, ClientCancellationEndsTheGenerationAndTheServerStaysUsable) {
  const std::string model = "qwen3moe-tiny-f32";
  const std::string address = StartServe(model);
  ASSERT_FALSE(address.empty());
  std::unique_ptr<Client> client = Connect(address);
  const std::vector<int32_t> prompt = Prompt(model);
  int seen = 0;
  absl::StatusOr<GenerateResult> cancelled =
      client->Generate(GreedyRequest(prompt, false, 400), [&](const v1::GenerateReply& reply) {
        EXPECT_FALSE(reply.done());
        return ++seen < 2;
      });
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_TRUE(cancelled->cancelled);
  EXPECT_EQ(cancelled->tokens.size(), 2u);

  absl::StatusOr<GenerateResult> next = client->Generate(GreedyRequest(prompt, false));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->tokens, LocalRun(model, prompt, false));
  absl::StatusOr<v1::ClusterStatusReply> status = client->ClusterStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->active_generations(), 0);
}

TEST_F(ServeTest, ConcurrentSessionsGiveTheSameTokens) {
  const std::string model = "qwen2moe-tiny-q8_0";
  const std::string address = StartServe(model, {"--sessions", "2"});
  ASSERT_FALSE(address.empty());
  const std::vector<int32_t> prompt = Prompt(model);
  const std::vector<int32_t> fast = LocalRun(model, prompt, false);
  const std::vector<int32_t> exact = LocalRun(model, prompt, true);
  std::vector<absl::StatusOr<GenerateResult>> results(4, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      std::unique_ptr<Client> client = Connect(address);
      results[i] = client->Generate(GreedyRequest(prompt, i % 2 == 1));
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].status();
    EXPECT_EQ(results[i]->tokens, i % 2 == 1 ? exact : fast) << i;
  }
}

TEST_F(ServeTest, ClusterStatusListsTheNodesWithTheirExperts) {
  StartNodes(3);
  const std::string model = "olmoe-tiny-f16";
  const std::string address = StartServe(model, {"--nodes", Addresses()});
  ASSERT_FALSE(address.empty());
  std::unique_ptr<Client> client = Connect(address);
  absl::StatusOr<v1::ModelInfoReply> info = client->ModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  absl::StatusOr<GenerateResult> result = client->Generate(GreedyRequest(Prompt(model), false, 4));
  ASSERT_TRUE(result.ok()) << result.status();

  absl::StatusOr<v1::ClusterStatusReply> status = client->ClusterStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->nodes_size(), 3);
  EXPECT_EQ(status->replicas(), 1);
  int64_t assigned = 0, requests = 0;
  for (int i = 0; i < 3; ++i) {
    const v1::NodeStatus& n = status->nodes(i);
    SCOPED_TRACE(n.address());
    EXPECT_EQ(n.address(), nodes_[i]->address());
    EXPECT_EQ(n.node_id(), "node-" + std::to_string(i));
    EXPECT_TRUE(n.healthy());
    EXPECT_GT(n.experts_assigned(), 0);
    EXPECT_GE(n.experts_stored(), n.experts_assigned());
    EXPECT_GT(n.bytes_stored(), 0u);
    EXPECT_GT(n.ram_budget_bytes(), 0u);
    assigned += n.experts_assigned();
    requests += n.requests();
  }
  EXPECT_EQ(assigned, static_cast<int64_t>(info->n_layer()) * info->n_expert());
  EXPECT_EQ(requests, result->stats.expert_round_trips());

  const CommandResult table =
      testing::RunCommand({ClientBinary(), "--coordinator", address, "status"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  for (const auto& node : nodes_) {
    EXPECT_NE(table.out.find(node->address()), std::string::npos) << table.out;
  }
  EXPECT_NE(table.out.find("TOTAL"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("3/3"), std::string::npos) << table.out;

  const CommandResult health =
      testing::RunCommand({ClientBinary(), "--coordinator", address, "health"});
  EXPECT_EQ(health.exit_code, 0) << health.err;
  EXPECT_EQ(health.out, "SERVING\n");
  const CommandResult service = testing::RunCommand(
      {ClientBinary(), "--coordinator", address, "health", "--service", "colibri.v1.Inference"});
  EXPECT_EQ(service.exit_code, 0) << service.err;

  // A node that stops answering is shown unhealthy; the call still succeeds.
  nodes_[1]->Stop(SIGKILL);
  status = client->ClusterStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_FALSE(status->nodes(1).healthy());
  EXPECT_TRUE(status->nodes(0).healthy());

  serve_->Stop(SIGTERM);
  const CommandResult down =
      testing::RunCommand({ClientBinary(), "--coordinator", address, "health"});
  EXPECT_EQ(down.exit_code, 1);
  EXPECT_EQ(down.out, "NOT_SERVING\n");
  EXPECT_NE(down.err.find(address), std::string::npos) << down.err;
}

}  // namespace
}  // namespace colibri
