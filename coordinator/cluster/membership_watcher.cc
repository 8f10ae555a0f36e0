#include "coordinator/cluster/membership_watcher.h"

#include <pthread.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/cluster/node_discovery.h"

namespace colibri::coordinator {
namespace {

// How often the watcher thread looks at stop, reload and the DNS clock.
constexpr absl::Duration kTick = absl::Milliseconds(100);

}  // namespace

absl::StatusOr<std::vector<std::string>> ReadNodesFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read nodes file ", path));
  std::set<std::string> seen;
  std::vector<std::string> out;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    const std::string entry(absl::StripAsciiWhitespace(line));
    if (entry.empty()) continue;
    const size_t colon = entry.rfind(':');
    if (entry.find_first_of(" \t") != std::string::npos || colon == std::string::npos ||
        colon == 0 || colon + 1 == entry.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", number, ": expected one HOST:PORT per line"));
    }
    if (seen.insert(entry).second) out.push_back(entry);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(path, " lists no node"));
  return out;
}

void BlockReloadSignal() {
  sigset_t hup;
  sigemptyset(&hup);
  sigaddset(&hup, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &hup, nullptr);
}

absl::StatusOr<std::unique_ptr<MembershipWatcher>> MembershipWatcher::Start(
    const MembershipWatcherOptions& options, std::vector<std::string> initial,
    SetMembers set_members) {
  if (options.nodes_dns.empty() && options.nodes_file.empty()) {
    return absl::InvalidArgumentError("a membership watcher needs --nodes-dns or --nodes-file");
  }
  if (!(options.dns_interval > absl::ZeroDuration())) {
    return absl::InvalidArgumentError("--nodes-dns-interval must be > 0");
  }
  return std::unique_ptr<MembershipWatcher>(
      new MembershipWatcher(options, std::move(initial), std::move(set_members)));
}

MembershipWatcher::MembershipWatcher(const MembershipWatcherOptions& options,
                                     std::vector<std::string> initial, SetMembers set_members)
    : options_(options), set_members_(std::move(set_members)), last_(std::move(initial)) {
  std::sort(last_.begin(), last_.end());
  thread_ = std::thread([this] { Loop(); });
}

MembershipWatcher::~MembershipWatcher() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void MembershipWatcher::Reload() {
  absl::MutexLock lock(&mu_);
  reload_ = true;
}

int MembershipWatcher::changes() const {
  absl::MutexLock lock(&mu_);
  return changes_;
}

void MembershipWatcher::Log(const std::string& line) const {
  std::ostream& out = options_.log != nullptr ? *options_.log : std::cerr;
  out << line << "\n" << std::flush;
}

void MembershipWatcher::Offer(std::vector<std::string> addresses, const std::string& source) {
  std::sort(addresses.begin(), addresses.end());
  if (addresses == last_) return;
  const absl::Status status = set_members_(addresses);
  if (!status.ok()) {
    Log(absl::StrCat("membership: ", source, ": ", status.message()));
    return;
  }
  Log(absl::StrCat("membership: ", source, ": nodes now ", absl::StrJoin(addresses, ", ")));
  last_ = std::move(addresses);
  absl::MutexLock lock(&mu_);
  ++changes_;
}

void MembershipWatcher::Loop() {
  sigset_t hup;
  sigemptyset(&hup);
  sigaddset(&hup, SIGHUP);
  absl::Time next_dns = absl::Now() + options_.dns_interval;
  while (true) {
    bool reload = false;
    if (options_.reload_on_sighup) {
      const timespec timeout = absl::ToTimespec(kTick);
      reload = sigtimedwait(&hup, nullptr, &timeout) == SIGHUP;
    }
    {
      absl::MutexLock lock(&mu_);
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || reload_; };
      if (!options_.reload_on_sighup) mu_.AwaitWithTimeout(absl::Condition(&woken), kTick);
      if (stop_) return;
      reload = reload || reload_;
      reload_ = false;
    }
    if (reload && !options_.nodes_file.empty()) {
      absl::StatusOr<std::vector<std::string>> listed = ReadNodesFile(options_.nodes_file);
      if (listed.ok()) {
        Offer(*std::move(listed), options_.nodes_file);
      } else {
        Log(absl::StrCat("membership: ", listed.status().message(),
                         "; the nodes stay as they are"));
      }
    }
    if (!options_.nodes_dns.empty() && absl::Now() >= next_dns) {
      next_dns = absl::Now() + options_.dns_interval;
      absl::StatusOr<std::vector<std::string>> resolved = ResolveNodeAddresses(options_.nodes_dns);
      if (resolved.ok()) {
        Offer(*std::move(resolved), options_.nodes_dns);
      } else {
        Log(absl::StrCat("membership: ", resolved.status().message(),
                         "; the nodes stay as they are"));
      }
    }
  }
}

}  // namespace colibri::coordinator
