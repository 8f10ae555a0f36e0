// TLS between the coordinator and expert nodes, end to end: certificates made
// with the openssl command line, nodes serving TLS (and requiring client
// certificates), `colibri-coordinator run --nodes --tls-*` giving the same
// tokens as the local run, and clear failures when one side lacks TLS.
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "colibri/v1/expert.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rpc/client_support.h"
#include "tests/integration/node_process.h"
#include "tests/support/auth_token.h"
#include "tests/support/golden.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

using testing::CommandResult;
using testing::NodeProcess;

std::string Coordinator() { return testing::BinaryPath("coordinator/colibri-coordinator"); }

// A CA, a node certificate for 127.0.0.1 / localhost and a client certificate,
// all signed by the CA, as PEM files in `dir`. False when openssl fails.
bool MakeCertificates(const std::string& dir) {
  std::ofstream(dir + "/node.ext") << "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                      "extendedKeyUsage=serverAuth\n";
  std::ofstream(dir + "/client.ext") << "extendedKeyUsage=clientAuth\n";
  const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string q = " >/dev/null 2>&1";
  const std::vector<std::string> steps = {
      "openssl req -x509 " + key + " -keyout " + dir + "/ca.key -out " + dir +
          "/ca.pem -days 2 -subj /CN=colibri-test-ca" + q,
      "openssl req " + key + " -keyout " + dir + "/node.key -out " + dir +
          "/node.csr -subj /CN=localhost" + q,
      "openssl x509 -req -in " + dir + "/node.csr -CA " + dir + "/ca.pem -CAkey " + dir +
          "/ca.key -CAcreateserial -days 2 -extfile " + dir + "/node.ext -out " + dir +
          "/node.pem" + q,
      "openssl req " + key + " -keyout " + dir + "/client.key -out " + dir +
          "/client.csr -subj /CN=coordinator" + q,
      "openssl x509 -req -in " + dir + "/client.csr -CA " + dir + "/ca.pem -CAkey " + dir +
          "/ca.key -CAcreateserial -days 2 -extfile " + dir + "/client.ext -out " + dir +
          "/client.pem" + q,
  };
  for (const std::string& step : steps) {
    if (std::system(step.c_str()) != 0) return false;
  }
  return true;
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
    certs_ = testing::MakeTempDir("certs");
    ASSERT_TRUE(MakeCertificates(certs_)) << "openssl could not make test certificates in "
                                          << certs_ << " (is the openssl package installed?)";
    ASSERT_TRUE(testing::LoadGoldenCase("qwen2moe-tiny-q8_0", "english", &case_, &error_))
        << error_;
  }

  // Two nodes serving TLS; with mutual, they also require a client certificate.
  void StartNodes(bool mutual, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> tls = {"--tls-cert", certs_ + "/node.pem", "--tls-key",
                                    certs_ + "/node.key"};
    if (mutual) tls.insert(tls.end(), {"--tls-ca", certs_ + "/ca.pem"});
    tls.insert(tls.end(), extra.begin(), extra.end());
    for (int i = 0; i < 2; ++i) {
      nodes_.push_back(std::make_unique<NodeProcess>(testing::MakeTempDir("tls-node"),
                                                     "tls-" + std::to_string(i), tls));
      ASSERT_TRUE(nodes_.back()->Start(0, &error_)) << error_;
    }
  }

  std::vector<std::string> Run(const std::vector<std::string>& extra) const {
    std::vector<int> ids(case_.prompt_tokens.begin(), case_.prompt_tokens.end());
    std::vector<std::string> argv = {Coordinator(), "run", "--model", case_.model_path,
                                     "--prompt-tokens", testing::JoinIds(ids), "--n-predict",
                                     "8", "--temp", "0", "--threads", "2", "--print-token-ids"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }

  std::string Addresses() const {
    return nodes_[0]->address() + "," + nodes_[1]->address();
  }

  std::string certs_;
  std::string error_;
  testing::GoldenCase case_;
  std::vector<std::unique_ptr<NodeProcess>> nodes_;
};

TEST_F(TlsTest, MutualTlsGivesTheLocalTokens) {
  StartNodes(/*mutual=*/true);
  const CommandResult local = testing::RunCommand(Run({}));
  ASSERT_EQ(local.exit_code, 0) << local.err;
  const CommandResult remote = testing::RunCommand(
      Run({"--nodes", Addresses(), "--tls-ca", certs_ + "/ca.pem", "--tls-cert",
           certs_ + "/client.pem", "--tls-key", certs_ + "/client.key"}));
  ASSERT_EQ(remote.exit_code, 0) << remote.err;
  EXPECT_EQ(remote.out, local.out);
  EXPECT_NE(remote.err.find("ingest: "), std::string::npos) << remote.err;
}

// Over TLS the node's token is checked by the auth metadata processor of
// its TLS credentials (rpc/call_auth.h): the coordinator with the token gets
// the local tokens; a call without it is UNAUTHENTICATED; health needs none.
TEST_F(TlsTest, TheTokenIsCheckedOverTls) {
  const std::string token_file = certs_ + "/token";
  testing::WriteAuthTokenFile(token_file);
  StartNodes(/*mutual=*/false, {"--auth-token-file", token_file});
  const CommandResult local = testing::RunCommand(Run({}));
  ASSERT_EQ(local.exit_code, 0) << local.err;
  const CommandResult remote = testing::RunCommand(Run(
      {"--nodes", Addresses(), "--tls-ca", certs_ + "/ca.pem", "--auth-token-file", token_file}));
  ASSERT_EQ(remote.exit_code, 0) << remote.err;
  EXPECT_EQ(remote.out, local.out);
  EXPECT_NE(remote.err.find("ingest: "), std::string::npos) << remote.err;

  std::ifstream ca_in(certs_ + "/ca.pem");
  std::stringstream ca;
  ca << ca_in.rdbuf();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ca.str();
  auto channel = grpc::CreateChannel(nodes_[0]->address(), grpc::SslCredentials(ssl));
  auto stub = v1::ExpertService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::NodeStatsReply stats;
  EXPECT_EQ(stub->NodeStats(&context, v1::NodeStatsRequest(), &stats).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  grpc::GenericStub generic(channel);
  grpc::ClientContext health_context;
  health_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  absl::StatusOr<bool> serving = rpc::CheckHealth(&generic, &health_context, "", "node 0");
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);
}

TEST_F(TlsTest, WithoutAClientCertificateTheNodeRefuses) {
  StartNodes(/*mutual=*/true);
  const CommandResult r =
      testing::RunCommand(Run({"--nodes", Addresses(), "--tls-ca", certs_ + "/ca.pem"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("does not answer"), std::string::npos) << r.err;
}

TEST_F(TlsTest, PlaintextCoordinatorCannotTalkToATlsNode) {
  StartNodes(/*mutual=*/false);
  const CommandResult plain = testing::RunCommand(Run({"--nodes", Addresses()}));
  EXPECT_NE(plain.exit_code, 0);
  EXPECT_NE(plain.err.find("does not answer"), std::string::npos) << plain.err;
  // Server-side TLS only: the CA alone is enough.
  const CommandResult tls =
      testing::RunCommand(Run({"--nodes", Addresses(), "--tls-ca", certs_ + "/ca.pem"}));
  EXPECT_EQ(tls.exit_code, 0) << tls.err;
}

}  // namespace
}  // namespace colibri
