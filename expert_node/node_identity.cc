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
#include "rpc/untrusted_text.h"

namespace colibri::expert_node {
namespace {

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

bool IdChar(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' ||
         c == '_' || c == '-';
}

// The host name cut to leave room for "-XXXXXXXX", other characters as '-'.
std::string HostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "expert-node";
  std::string name(host);
  if (name.size() > kMaxNodeIdBytes - 9) name.resize(kMaxNodeIdBytes - 9);
  for (char& c : name) {
    if (!IdChar(c)) c = '-';
  }
  return name;
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

absl::Status ValidateNodeId(absl::string_view id) {
  if (id.empty() || id.size() > kMaxNodeIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a node id has 1..", kMaxNodeIdBytes, " characters, this one ", id.size()));
  }
  for (char c : id) {
    if (!IdChar(c)) {
      return absl::InvalidArgumentError(absl::StrCat("node id '", rpc::EscapeUntrusted(id),
                                                     "' has characters outside [A-Za-z0-9._-]"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> LoadOrCreateNodeId(const std::string& data_dir) {
  if (::mkdir(data_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoError("cannot create data folder", data_dir);
  }
  const std::string path = data_dir + "/NODE_ID";
  std::ifstream in(path);
  if (in) {
    // Read a little more than the longest id: a huge file is damage, not an id.
    std::string contents(kMaxNodeIdBytes + 64, '\0');
    in.read(contents.data(), static_cast<std::streamsize>(contents.size()));
    contents.resize(static_cast<size_t>(in.gcount()));
    const std::string id(absl::StripAsciiWhitespace(contents));
    absl::Status valid = ValidateNodeId(id);
    if (!valid.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, " is damaged: ", valid.message(),
          ". Restore it (the coordinator knows this node by it), or delete it to get a new id, "
          "or pass --node-id"));
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
