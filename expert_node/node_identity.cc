#include "expert_node/node_identity.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace colibri::expert_node {
namespace {

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

std::string HostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "expert-node";
  return host;
}

absl::Status WriteDurably(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", tmp);
  const bool ok = ::write(fd, contents.data(), contents.size()) ==
                      static_cast<ssize_t>(contents.size()) &&
                  ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) return ErrnoError("cannot write", tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoError("cannot rename", tmp);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> LoadOrCreateNodeId(const std::string& data_dir) {
  if (::mkdir(data_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoError("cannot create data folder", data_dir);
  }
  const std::string path = data_dir + "/NODE_ID";
  std::ifstream in(path);
  if (in) {
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::string id(absl::StripAsciiWhitespace(ss.str()));
    if (id.empty() || id.find_first_of(" \t\r\n") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " does not hold a node id (one word expected)"));
    }
    return id;
  }
  std::random_device random;
  const std::string id =
      absl::StrCat(HostName(), "-", absl::StrFormat("%08x", static_cast<uint32_t>(random())));
  absl::Status written = WriteDurably(path, id + "\n");
  if (!written.ok()) return written;
  return id;
}

}  // namespace colibri::expert_node
