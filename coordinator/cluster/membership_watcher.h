// Where a running `serve` learns its expert nodes from: --nodes-dns
// re-resolved every interval, and a --nodes-file re-read on SIGHUP. Each new
// list goes to a callback (Cluster::SetMembers), which takes nodes in and
// retires them in the background.
//
// Thread-safety: Reload and the destructor may be called from any thread; the
// callback runs on the watcher's own thread.
#ifndef COLIBRI_COORDINATOR_CLUSTER_MEMBERSHIP_WATCHER_H_
#define COLIBRI_COORDINATOR_CLUSTER_MEMBERSHIP_WATCHER_H_

#include <signal.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace colibri::coordinator {

// The node addresses of a nodes file: one HOST:PORT per line; blank lines and
// text after '#' are ignored; duplicates count once. NotFound when it cannot
// be read; InvalidArgument naming the line for an entry without :PORT or
// with spaces inside, or a file listing no node.
absl::StatusOr<std::vector<std::string>> ReadNodesFile(const std::string& path);

// Blocks SIGHUP in the calling thread (and in the threads it starts later);
// call it before any thread starts when the watcher is to reload on SIGHUP.
void BlockReloadSignal();

struct MembershipWatcherOptions {
  // NAME:PORT whose addresses are the nodes. Default: empty (no DNS).
  std::string nodes_dns;
  // How often nodes_dns is resolved again. Default: 30 s.
  absl::Duration dns_interval = absl::Seconds(30);
  // Re-read on Reload. Default: empty (no file).
  std::string nodes_file;
  // Reload when the process receives SIGHUP; BlockReloadSignal must have run
  // before any thread started. Default: false.
  bool reload_on_sighup = false;
  // One line per change or failure. Default: null, meaning std::cerr.
  std::ostream* log = nullptr;
};

class MembershipWatcher {
 public:
  // Receives each new list; an error is logged and the list is offered again
  // at the next resolution or reload.
  using SetMembers = std::function<absl::Status(const std::vector<std::string>& addresses)>;

  // Starts the watcher thread. `initial` is the list the cluster started with
  // (a new list is passed on only when it differs). InvalidArgument when
  // neither nodes_dns nor nodes_file is set or dns_interval is not positive.
  static absl::StatusOr<std::unique_ptr<MembershipWatcher>> Start(
      const MembershipWatcherOptions& options, std::vector<std::string> initial,
      SetMembers set_members);
  // Stops and joins the thread.
  ~MembershipWatcher();
  MembershipWatcher(const MembershipWatcher&) = delete;
  MembershipWatcher& operator=(const MembershipWatcher&) = delete;

  // Asks for the nodes file to be read again now; returns at once.
  void Reload();
  // Lists passed to set_members so far.
  int changes() const;

 private:
  MembershipWatcher(const MembershipWatcherOptions& options, std::vector<std::string> initial,
                    SetMembers set_members);
  void Loop();
  // Passes `addresses` on when they differ from the last list.
  void Offer(std::vector<std::string> addresses, const std::string& source);
  void Log(const std::string& line) const;

  const MembershipWatcherOptions options_;
  const SetMembers set_members_;
  std::vector<std::string> last_;  // watcher thread only

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool reload_ ABSL_GUARDED_BY(mu_) = false;
  int changes_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLUSTER_MEMBERSHIP_WATCHER_H_
