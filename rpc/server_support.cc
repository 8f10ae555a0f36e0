#include "rpc/server_support.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/server_credentials.h"

namespace colibri::rpc {
namespace {

// a == b without an early exit on the first differing byte.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

int Millis(absl::Duration d) { return static_cast<int>(absl::ToInt64Milliseconds(d)); }

}  // namespace

std::string ListenHost(absl::string_view address) {
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    return std::string(close == absl::string_view::npos ? address : address.substr(0, close + 1));
  }
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || address.find(':') != colon) {
    return std::string(address);  // no port, or a bare IPv6 address
  }
  return std::string(address.substr(0, colon));
}

bool IsLoopbackListenAddress(absl::string_view address) {
  if (absl::StartsWith(address, "unix:") || absl::StartsWith(address, "unix-abstract:")) {
    return true;
  }
  absl::string_view rest = address;
  absl::ConsumePrefix(&rest, "ipv4:");
  absl::ConsumePrefix(&rest, "ipv6:");
  const std::string host = absl::AsciiStrToLower(ListenHost(rest));
  if (host == "localhost" || host == "[::1]" || host == "::1") return true;
  // 127.0.0.0/8: four decimal octets, the first 127.
  std::vector<std::string> octets;
  size_t start = 0;
  for (;;) {
    const size_t dot = host.find('.', start);
    octets.push_back(host.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (octets.size() != 4) return false;
  for (const std::string& o : octets) {
    int v = 0;
    if (o.empty() || o.size() > 3 || !absl::SimpleAtoi(o, &v) || v < 0 || v > 255) return false;
  }
  return octets[0] == "127";
}

absl::Status CheckListenAllowed(absl::string_view listen, bool has_token, bool insecure,
                                absl::string_view token_flag) {
  if (IsLoopbackListenAddress(listen) || has_token || insecure) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "refusing to listen on ", listen, " (beyond loopback) without an auth token; give ",
      token_flag, ", or --insecure to accept unauthenticated calls"));
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string BoundAddress(absl::string_view listen, int port) {
  if (absl::StartsWith(listen, "unix:") || absl::StartsWith(listen, "unix-abstract:")) {
    return std::string(listen);
  }
  return absl::StrCat(ListenHost(listen), ":", port);
}

absl::Status SplitHttpListen(absl::string_view listen, absl::string_view flag, std::string* host,
                             int* port) {
  const size_t colon = listen.rfind(':');
  if (colon == absl::string_view::npos || !absl::SimpleAtoi(listen.substr(colon + 1), port) ||
      *port < 0 || *port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": '", listen, "' is not HOST:PORT"));
  }
  *host = std::string(listen.substr(0, colon));
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  if (host->empty()) return absl::InvalidArgumentError(absl::StrCat(flag, ": the host is empty"));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsFiles& tls) {
  if (tls.cert_file.empty() && tls.key_file.empty()) {
    if (!tls.ca_file.empty()) {
      return absl::InvalidArgumentError("a TLS CA without a certificate and key");
    }
    return grpc::InsecureServerCredentials();
  }
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate and a key");
  }
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  COLIBRI_ASSIGN_OR_RETURN(pair.private_key, ReadWholeFile(tls.key_file));
  COLIBRI_ASSIGN_OR_RETURN(pair.cert_chain, ReadWholeFile(tls.cert_file));
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  if (!tls.ca_file.empty()) {
    COLIBRI_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadWholeFile(tls.ca_file));
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

void ConfigureServerBuilder(const ServerTransportOptions& options, grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(options.max_message_bytes);
  builder->SetMaxSendMessageSize(options.max_message_bytes);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, Millis(options.keepalive_time));
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Millis(options.keepalive_timeout));
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
}

bool BearerTokenMatches(const grpc::ServerContextBase& context, absl::string_view token) {
  if (token.empty()) return true;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return false;
  const absl::string_view got(it->second.data(), it->second.size());
  return ConstantTimeEquals(got, absl::StrCat("Bearer ", token));
}

bool AuthorizationMatches(absl::string_view authorization, absl::string_view token) {
  if (token.empty()) return true;
  return ConstantTimeEquals(authorization, absl::StrCat("Bearer ", token));
}

grpc::Status UnauthenticatedStatus() {
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or wrong authorization token");
}

}  // namespace colibri::rpc
