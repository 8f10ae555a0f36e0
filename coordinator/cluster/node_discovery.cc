#include "coordinator/cluster/node_discovery.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace colibri::coordinator {

absl::StatusOr<std::vector<std::string>> ResolveNodeAddresses(absl::string_view name_port) {
  const size_t colon = name_port.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nodes-dns '", name_port, "': expected NAME:PORT"));
  }
  std::string name(name_port.substr(0, colon));
  if (name.size() > 2 && name.front() == '[' && name.back() == ']') {
    name = name.substr(1, name.size() - 2);
  }
  int port = 0;
  if (!absl::SimpleAtoi(name_port.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nodes-dns '", name_port, "': the port must be in [1, 65535]"));
  }
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(name.c_str(), nullptr, &hints, &found);
  if (rc == EAI_NONAME || rc == EAI_NODATA) {
    return absl::NotFoundError(absl::StrCat("--nodes-dns: '", name, "' has no addresses"));
  }
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("--nodes-dns: resolving '", name, "' failed: ", ::gai_strerror(rc)));
  }
  std::set<std::string> addresses;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
      addresses.insert(absl::StrCat(text, ":", port));
    } else if (a->ai_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
      addresses.insert(absl::StrCat("[", text, "]:", port));
    }
  }
  ::freeaddrinfo(found);
  if (addresses.empty()) {
    return absl::NotFoundError(absl::StrCat("--nodes-dns: '", name, "' has no IP addresses"));
  }
  return std::vector<std::string>(addresses.begin(), addresses.end());
}

}  // namespace colibri::coordinator
