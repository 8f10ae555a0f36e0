#include "rpc/call_auth.h"

#include <utility>

#include "absl/strings/match.h"
#include "common/status_macros.h"
#include "grpc/grpc_security.h"
#include "grpcpp/security/auth_metadata_processor.h"
#include "grpcpp/security/server_credentials.h"

namespace colibri::rpc {
namespace {

constexpr char kRefused[] = "missing or wrong authorization token";

// What both processors share: the token and the open prefixes.
struct CallRule {
  std::string token;
  std::vector<std::string> open_prefixes;

  bool Allows(absl::string_view method, absl::string_view authorization) const {
    return CallAllowed(method, authorization, token, open_prefixes);
  }
};

absl::string_view View(const grpc_slice& s) {
  return absl::string_view(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(s)),
                           GRPC_SLICE_LENGTH(s));
}

// The C processor of the plaintext credentials; `state` is a CallRule.
void ProcessPlaintextCall(void* state, grpc_auth_context* /*context*/, const grpc_metadata* md,
                          size_t num_md, grpc_process_auth_metadata_done_cb done, void* user_data) {
  absl::string_view method, authorization;
  for (size_t i = 0; i < num_md; ++i) {
    const absl::string_view key = View(md[i].key);
    if (key == ":path") method = View(md[i].value);
    if (key == "authorization") authorization = View(md[i].value);
  }
  if (static_cast<const CallRule*>(state)->Allows(method, authorization)) {
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
  } else {
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_UNAUTHENTICATED, kRefused);
  }
}

void DestroyCallRule(void* state) { delete static_cast<CallRule*>(state); }

// grpc::InsecureServerCredentials() cannot take an auth metadata processor
// (it aborts), but gRPC core's insecure credentials can: these add the port
// through the core API with the processor set.
class TokenCheckedPlaintextCredentials final : public grpc::ServerCredentials {
 public:
  explicit TokenCheckedPlaintextCredentials(CallRule rule) : rule_(std::move(rule)) {}

  void SetAuthMetadataProcessor(
      const std::shared_ptr<grpc::AuthMetadataProcessor>& /*processor*/) override {
    // The token processor is built in; another one is never installed.
  }

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    grpc_server_credentials* creds = grpc_insecure_server_credentials_create();
    grpc_auth_metadata_processor processor;
    processor.process = &ProcessPlaintextCall;
    processor.destroy = &DestroyCallRule;
    processor.state = new CallRule(rule_);  // owned by creds from here on
    grpc_server_credentials_set_auth_metadata_processor(creds, processor);
    const int port = grpc_server_add_http2_port(server, addr.c_str(), creds);
    grpc_server_credentials_release(creds);
    return port;
  }
  bool IsInsecure() const override { return true; }

  const CallRule rule_;
};

// The processor of TLS credentials (the C++ API supports those).
class TokenProcessor final : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenProcessor(CallRule rule) : rule_(std::move(rule)) {}

  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext* /*context*/,
                       OutputMetadata* /*consumed*/, OutputMetadata* /*response*/) override {
    absl::string_view method, authorization;
    if (auto it = metadata.find(":path"); it != metadata.end()) {
      method = absl::string_view(it->second.data(), it->second.size());
    }
    if (auto it = metadata.find("authorization"); it != metadata.end()) {
      authorization = absl::string_view(it->second.data(), it->second.size());
    }
    if (rule_.Allows(method, authorization)) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, kRefused);
  }

 private:
  const CallRule rule_;
};

}  // namespace

std::vector<std::string> DefaultOpenMethodPrefixes() {
  return {"/grpc.health.v1.Health/", "/grpc.reflection.v1alpha.ServerReflection/",
          "/grpc.reflection.v1.ServerReflection/"};
}

bool CallAllowed(absl::string_view method, absl::string_view authorization, absl::string_view token,
                 const std::vector<std::string>& open_prefixes) {
  if (token.empty()) return true;
  for (const std::string& prefix : open_prefixes) {
    if (absl::StartsWith(method, prefix)) return true;
  }
  return AuthorizationMatches(authorization, token);
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeTokenCheckedServerCredentials(
    const ServerTlsFiles& tls, const std::string& token, std::vector<std::string> open_prefixes) {
  COLIBRI_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                           MakeServerCredentials(tls));
  if (token.empty()) return credentials;
  CallRule rule{token, std::move(open_prefixes)};
  if (tls.cert_file.empty()) {
    return std::shared_ptr<grpc::ServerCredentials>(
        new TokenCheckedPlaintextCredentials(std::move(rule)));
  }
  credentials->SetAuthMetadataProcessor(std::make_shared<TokenProcessor>(std::move(rule)));
  return credentials;
}

}  // namespace colibri::rpc
