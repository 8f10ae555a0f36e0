// The node list sources of a running serve (coordinator/cluster/membership_watcher.h).
#include "coordinator/cluster/membership_watcher.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace colibri::coordinator {
namespace {

std::string TempFile(const std::string& contents) {
  char path[] = "/tmp/colibri-nodes-XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << contents;
  return path;
}

// Records every list the watcher passes on.
class Recorder {
 public:
  absl::Status operator()(const std::vector<std::string>& addresses) {
    absl::MutexLock lock(&mu_);
    lists_.push_back(addresses);
    return absl::OkStatus();
  }
  std::vector<std::vector<std::string>> lists() {
    absl::MutexLock lock(&mu_);
    return lists_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::vector<std::string>> lists_ ABSL_GUARDED_BY(mu_);
};

template <typename F>
bool Eventually(F done) {
  for (int i = 0; i < 2000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

TEST(ReadNodesFileTest, OneAddressPerLineWithCommentsAndDuplicates) {
  const std::string path =
      TempFile("# the lab\n10.0.0.2:7100\n\n  10.0.0.3:7100  # under the desk\n10.0.0.2:7100\n");
  absl::StatusOr<std::vector<std::string>> nodes = ReadNodesFile(path);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_EQ(*nodes, (std::vector<std::string>{"10.0.0.2:7100", "10.0.0.3:7100"}));
  std::remove(path.c_str());
}

TEST(ReadNodesFileTest, BadEntriesAndEmptyFilesNameTheProblem) {
  const std::string bad = TempFile("10.0.0.2:7100\n\n10.0.0.3\n");
  absl::StatusOr<std::vector<std::string>> nodes = ReadNodesFile(bad);
  ASSERT_TRUE(absl::IsInvalidArgument(nodes.status())) << nodes.status();
  EXPECT_TRUE(absl::StrContains(nodes.status().message(), bad + ":3:")) << nodes.status();
  const std::string spaced = TempFile("10.0.0.2:7100 10.0.0.3:7100\n");
  EXPECT_TRUE(absl::IsInvalidArgument(ReadNodesFile(spaced).status()));
  const std::string empty = TempFile("# nobody\n");
  EXPECT_TRUE(absl::IsInvalidArgument(ReadNodesFile(empty).status()));
  EXPECT_TRUE(absl::IsNotFound(ReadNodesFile("/nonexistent/nodes").status()));
  for (const std::string& p : {bad, spaced, empty}) std::remove(p.c_str());
}

TEST(MembershipWatcherTest, ReloadPassesOnAChangedFileOnly) {
  const std::string path = TempFile("a:1\n");
  std::ostringstream log;
  Recorder recorder;
  MembershipWatcherOptions options;
  options.nodes_file = path;
  options.log = &log;
  absl::StatusOr<std::unique_ptr<MembershipWatcher>> watcher = MembershipWatcher::Start(
      options, {"a:1"}, [&](const std::vector<std::string>& a) { return recorder(a); });
  ASSERT_TRUE(watcher.ok()) << watcher.status();

  std::ofstream(path) << "b:1\na:1\n";
  (*watcher)->Reload();
  ASSERT_TRUE(Eventually([&] { return (*watcher)->changes() == 1; })) << log.str();
  EXPECT_EQ(recorder.lists().back(), (std::vector<std::string>{"a:1", "b:1"}));

  // The same list again, then a broken file: nothing passed on.
  (*watcher)->Reload();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::ofstream(path) << "b:1\nnot an address\n";
  (*watcher)->Reload();
  ASSERT_TRUE(Eventually([&] { return absl::StrContains(log.str(), ":2: expected"); }))
      << log.str();
  EXPECT_EQ(recorder.lists().size(), 1u);
  EXPECT_EQ((*watcher)->changes(), 1);
  std::remove(path.c_str());
}

TEST(MembershipWatcherTest, DnsIsResolvedAgainEveryInterval) {
  std::ostringstream log;
  Recorder recorder;
  MembershipWatcherOptions options;
  options.nodes_dns = "localhost:7100";
  options.dns_interval = absl::Milliseconds(10);
  options.log = &log;
  // Started with a list DNS does not give: the first resolution changes it.
  absl::StatusOr<std::unique_ptr<MembershipWatcher>> watcher = MembershipWatcher::Start(
      options, {"192.0.2.1:7100"}, [&](const std::vector<std::string>& a) { return recorder(a); });
  ASSERT_TRUE(watcher.ok()) << watcher.status();
  ASSERT_TRUE(Eventually([&] { return (*watcher)->changes() >= 1; })) << log.str();
  const std::vector<std::string> first = recorder.lists().front();
  ASSERT_FALSE(first.empty());
  for (const std::string& a : first) EXPECT_TRUE(absl::EndsWith(a, ":7100")) << a;
  // Later resolutions give the same list: not passed on again.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ((*watcher)->changes(), 1);

  options.dns_interval = absl::ZeroDuration();
  EXPECT_TRUE(absl::IsInvalidArgument(
      MembershipWatcher::Start(options, {}, [](const std::vector<std::string>&) {
        return absl::OkStatus();
      }).status()));
}

}  // namespace
}  // namespace colibri::coordinator
