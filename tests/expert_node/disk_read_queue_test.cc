#include "expert_node/disk_read_queue.h"

#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/expert_node/expert_test_util.h"

namespace colibri::expert_node {
namespace {

using Engine = DiskReadQueue::Engine;
using testing::TempDir;

constexpr uint64_t kFileBytes = (uint64_t{8} << 20) + 1000;  // not a whole block

struct AlignedBytes {
  explicit AlignedBytes(uint64_t n)
      : data(static_cast<uint8_t*>(std::aligned_alloc(kDirectIoAlignment, n))), size(n) {}
  ~AlignedBytes() { std::free(data); }
  AlignedBytes(const AlignedBytes&) = delete;
  AlignedBytes& operator=(const AlignedBytes&) = delete;
  uint8_t* data;
  uint64_t size;
};

std::string WriteRandomFile(const std::string& dir, std::vector<uint8_t>* truth) {
  std::mt19937_64 rng(46);
  truth->resize(kFileBytes);
  for (uint8_t& b : *truth) b = static_cast<uint8_t>(rng());
  const std::string path = dir + "/data.bin";
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(truth->data()), static_cast<std::streamsize>(kFileBytes));
  return path;
}

std::unique_ptr<DiskReadQueue> MakeQueue(Engine engine, int depth) {
  DiskReadQueue::Options options;
  options.engine = engine;
  options.depth = depth;
  absl::StatusOr<std::unique_ptr<DiskReadQueue>> q = DiskReadQueue::Create(options);
  if (!q.ok()) {
    ADD_FAILURE() << q.status();
    return nullptr;
  }
  return std::move(*q);
}

// Whether this process may use io_uring (containers' seccomp may refuse it).
bool UringAvailable() {
  DiskReadQueue::Options options;
  options.engine = Engine::kUring;
  return DiskReadQueue::Create(options).ok();
}

class DiskReadQueueTest : public ::testing::TestWithParam<std::tuple<Engine, bool, int>> {};

// Random aligned reads, many per call, demand and background mixed (the
// priority order), read exactly the file's bytes with either engine,
// buffered or O_DIRECT, at every depth.
TEST_P(DiskReadQueueTest, ReadsExactlyTheFilesBytes) {
  const auto [engine, direct, depth] = GetParam();
  if (engine == Engine::kUring && !UringAvailable()) GTEST_SKIP() << "io_uring is unavailable";
  TempDir dir;
  std::vector<uint8_t> truth;
  const std::string path = WriteRandomFile(dir.path(), &truth);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
  if (fd < 0 && direct) GTEST_SKIP() << "the file system refuses O_DIRECT";
  ASSERT_GE(fd, 0);
  std::unique_ptr<DiskReadQueue> q = MakeQueue(engine, depth);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->engine(), engine);

  std::mt19937 rng(depth);
  const uint64_t blocks = kFileBytes / kDirectIoAlignment;
  std::vector<DiskReadQueue::Request> requests;
  std::vector<std::unique_ptr<AlignedBytes>> buffers;
  ReadControl background;
  for (int i = 0; i < 150; ++i) {
    const uint64_t first = rng() % blocks;
    const uint64_t n = 1 + rng() % 64;
    buffers.push_back(std::make_unique<AlignedBytes>(n * kDirectIoAlignment));
    requests.push_back({fd, first * kDirectIoAlignment, n * kDirectIoAlignment,
                        buffers.back()->data, i % 3 == 0 ? nullptr : &background});
  }
  // The last block: a short read that ends at the end of the file.
  buffers.push_back(std::make_unique<AlignedBytes>(2 * kDirectIoAlignment));
  requests.push_back({fd, blocks * kDirectIoAlignment, 2 * kDirectIoAlignment, buffers.back()->data});

  std::vector<absl::StatusOr<uint64_t>> done = q->ReadMany(requests);
  ASSERT_EQ(done.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(done[i].ok()) << i << ": " << done[i].status();
    const uint64_t want = std::min(requests[i].length, kFileBytes - requests[i].offset);
    ASSERT_EQ(*done[i], want) << i;
    EXPECT_EQ(std::memcmp(requests[i].dest, truth.data() + requests[i].offset, want), 0) << i;
  }
  ::close(fd);
}

INSTANTIATE_TEST_SUITE_P(
    EnginesDirectDepths, DiskReadQueueTest,
    ::testing::Combine(::testing::Values(Engine::kUring, Engine::kThreads),
                       ::testing::Bool(), ::testing::Values(1, 4, 64)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) == Engine::kUring ? "Uring" : "Threads") +
             (std::get<1>(info.param) ? "Direct" : "Buffered") + "Depth" +
             std::to_string(std::get<2>(info.param));
    });

// Several threads' batches share one queue; each gets its own bytes.
TEST(DiskReadQueueTest, ConcurrentCallersShareTheDepth) {
  TempDir dir;
  std::vector<uint8_t> truth;
  const std::string path = WriteRandomFile(dir.path(), &truth);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  for (Engine engine : {Engine::kAuto, Engine::kThreads}) {
    std::unique_ptr<DiskReadQueue> q = MakeQueue(engine, 8);
    ASSERT_NE(q, nullptr);
    std::vector<std::thread> threads;
    std::atomic<int> bad{0};
    for (int t = 0; t < 6; ++t) {
      threads.emplace_back([&, t] {
        for (int round = 0; round < 20; ++round) {
          std::vector<std::vector<uint8_t>> bufs(5, std::vector<uint8_t>(10000));
          std::vector<DiskReadQueue::Request> rs;
          for (int i = 0; i < 5; ++i) {
            rs.push_back({fd, static_cast<uint64_t>((t * 7919 + round * 104729 + i * 13) % 8000000),
                          10000, bufs[i].data()});
          }
          std::vector<absl::StatusOr<uint64_t>> done = q->ReadMany(rs);
          for (int i = 0; i < 5; ++i) {
            if (!done[i].ok() || *done[i] != 10000 ||
                std::memcmp(bufs[i].data(), truth.data() + rs[i].offset, 10000) != 0) {
              bad.fetch_add(1);
            }
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(bad.load(), 0) << EngineName(q->engine());
  }
  ::close(fd);
}

TEST(DiskReadQueueTest, ErrorsNameTheReadAndTheReason) {
  for (Engine engine : {Engine::kAuto, Engine::kThreads}) {
    std::unique_ptr<DiskReadQueue> q = MakeQueue(engine, 4);
    ASSERT_NE(q, nullptr);
    std::vector<uint8_t> buf(4096);
    absl::StatusOr<uint64_t> r = q->Read({12345, 8192, 4096, buf.data()});
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal) << EngineName(q->engine());
    EXPECT_NE(r.status().message().find("offset 8192"), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find("Bad file descriptor"), std::string::npos) << r.status();
  }
  DiskReadQueue::Options bad;
  bad.depth = 0;
  EXPECT_EQ(DiskReadQueue::Create(bad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseEngine("uring").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseEngine("io_uring"), Engine::kUring);
}

// Where seccomp refuses io_uring_setup (as container runtimes' default
// profiles do), kAuto falls back to threads and reads the same bytes; kUring
// says why it cannot run. Run in a child: the filter cannot be removed.
TEST(DiskReadQueueTest, FallsBackToThreadsWhenSeccompRefusesIoUring) {
  TempDir dir;
  std::vector<uint8_t> truth;
  const std::string path = WriteRandomFile(dir.path(), &truth);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])),
                              filter};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
      std::fprintf(stderr, "cannot install the seccomp filter\n");
      ::_exit(3);
    }
    DiskReadQueue::Options options;
    options.engine = Engine::kUring;
    absl::StatusOr<std::unique_ptr<DiskReadQueue>> uring = DiskReadQueue::Create(options);
    if (uring.ok() || !absl::IsUnavailable(uring.status()) ||
        uring.status().message().find("io_uring") == std::string::npos) {
      std::fprintf(stderr, "kUring under seccomp: %s\n", uring.status().ToString().c_str());
      ::_exit(4);
    }
    options.engine = Engine::kAuto;
    absl::StatusOr<std::unique_ptr<DiskReadQueue>> q = DiskReadQueue::Create(options);
    if (!q.ok() || (*q)->engine() != Engine::kThreads) ::_exit(5);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    std::vector<uint8_t> buf(300000);
    absl::StatusOr<uint64_t> r = (*q)->Read({fd, 4096 * 7, buf.size(), buf.data()});
    if (!r.ok() || *r != buf.size() ||
        std::memcmp(buf.data(), truth.data() + 4096 * 7, buf.size()) != 0) {
      ::_exit(6);
    }
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  // qemu-user (scripts/test-arm64.sh) refuses seccomp filters.
  if (WEXITSTATUS(status) == 3) GTEST_SKIP() << "seccomp filters are refused here";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// A disk for the queue's priority: records the offsets it is asked to read in
// order, and holds the read at `hold_offset` until Release (the disk is busy
// with it). Reads succeed with `length` bytes, no data.
class ScriptedDisk {
 public:
  explicit ScriptedDisk(uint64_t hold_offset) : hold_offset_(hold_offset) {}

  DiskReadQueue::ReadFn reader() {
    return [this](int, uint8_t*, uint64_t length, uint64_t offset) -> ssize_t {
      {
        absl::MutexLock lock(&mu_);
        order_.push_back(offset);
      }
      if (offset == hold_offset_) {
        held_.Notify();
        release_.WaitForNotification();
      }
      return static_cast<ssize_t>(length);
    };
  }
  void WaitHeld() { held_.WaitForNotification(); }
  void Release() { release_.Notify(); }
  std::vector<uint64_t> order() {
    absl::MutexLock lock(&mu_);
    return order_;
  }

 private:
  const uint64_t hold_offset_;
  absl::Notification held_;
  absl::Notification release_;
  absl::Mutex mu_;
  std::vector<uint64_t> order_ ABSL_GUARDED_BY(mu_);
};

std::unique_ptr<DiskReadQueue> ScriptedQueue(ScriptedDisk* disk, int threads,
                                             int background_depth) {
  DiskReadQueue::Options options;
  options.depth = threads;
  options.max_threads = threads;
  options.background_depth = background_depth;
  absl::StatusOr<std::unique_ptr<DiskReadQueue>> q =
      DiskReadQueue::CreateWithReader(options, disk->reader());
  EXPECT_TRUE(q.ok()) << q.status();
  return q.ok() ? std::move(*q) : nullptr;
}

// Waits (bounded) until `n` reads wait in the queue.
void WaitForWaiting(const DiskReadQueue& q, size_t n) {
  for (int i = 0; i < 1000 && q.waiting() < n; ++i) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_EQ(q.waiting(), n);
}

// Reads `offsets` (one ReadMany, background when `control` is set) on a thread
// of its own; `results` gets their outcomes.
std::thread ReadOnThread(DiskReadQueue* q, std::vector<uint64_t> offsets,
                         const ReadControl* control,
                         std::vector<absl::StatusOr<uint64_t>>* results) {
  return std::thread([q, offsets, control, results] {
    std::vector<uint8_t> sink(4096);
    std::vector<DiskReadQueue::Request> rs;
    for (uint64_t off : offsets) rs.push_back({3, off, 4096, sink.data(), control});
    *results = q->ReadMany(rs);
  });
}

// The disk serves one read at a time: a demand read queued after two
// background reads is read before them.
TEST(DiskReadQueuePriorityTest, DemandReadsStartBeforeQueuedBackgroundReads) {
  ScriptedDisk disk(/*hold_offset=*/0);
  std::unique_ptr<DiskReadQueue> q = ScriptedQueue(&disk, /*threads=*/1, /*background_depth=*/1);
  ASSERT_NE(q, nullptr);
  ReadControl first, later;
  std::vector<absl::StatusOr<uint64_t>> r0, r1, r2;
  std::thread t0 = ReadOnThread(q.get(), {0}, &first, &r0);
  disk.WaitHeld();
  std::thread t1 = ReadOnThread(q.get(), {4096, 8192}, &later, &r1);
  WaitForWaiting(*q, 2);
  std::thread t2 = ReadOnThread(q.get(), {12288}, /*control=*/nullptr, &r2);
  WaitForWaiting(*q, 3);
  disk.Release();
  t0.join();
  t1.join();
  t2.join();
  EXPECT_EQ(disk.order(), (std::vector<uint64_t>{0, 12288, 4096, 8192}));
  for (const auto* r : {&r0, &r1, &r2}) {
    for (const absl::StatusOr<uint64_t>& x : *r) EXPECT_TRUE(x.ok()) << x.status();
  }
}

// With idle readers, background reads still keep to background_depth in
// flight, while a demand read starts at once.
TEST(DiskReadQueuePriorityTest, BackgroundReadsKeepToTheirDepthDemandReadsDoNot) {
  ScriptedDisk disk(/*hold_offset=*/0);
  std::unique_ptr<DiskReadQueue> q = ScriptedQueue(&disk, /*threads=*/4, /*background_depth=*/1);
  ASSERT_NE(q, nullptr);
  ReadControl control;
  std::vector<absl::StatusOr<uint64_t>> background, demand;
  std::thread t0 = ReadOnThread(q.get(), {0, 4096}, &control, &background);
  disk.WaitHeld();
  WaitForWaiting(*q, 1);  // 4096 waits although three readers are idle
  std::thread t1 = ReadOnThread(q.get(), {8192}, /*control=*/nullptr, &demand);
  t1.join();  // completes while the background read at 0 is still held
  EXPECT_EQ(disk.order(), (std::vector<uint64_t>{0, 8192}));
  disk.Release();
  t0.join();
  EXPECT_EQ(disk.order(), (std::vector<uint64_t>{0, 8192, 4096}));
}

// A promoted background read goes before older background reads; a cancelled
// one is never read and reports Cancelled.
TEST(DiskReadQueuePriorityTest, PromotedReadsGoFirstCancelledOnesAreNotRead) {
  ScriptedDisk disk(/*hold_offset=*/0);
  std::unique_ptr<DiskReadQueue> q = ScriptedQueue(&disk, /*threads=*/1, /*background_depth=*/1);
  ASSERT_NE(q, nullptr);
  ReadControl held, stale, old, promoted;
  std::vector<absl::StatusOr<uint64_t>> r0, r_stale, r_old, r_promoted;
  std::thread t0 = ReadOnThread(q.get(), {0}, &held, &r0);
  disk.WaitHeld();
  std::thread t1 = ReadOnThread(q.get(), {4096}, &stale, &r_stale);
  WaitForWaiting(*q, 1);
  std::thread t2 = ReadOnThread(q.get(), {8192}, &old, &r_old);
  WaitForWaiting(*q, 2);
  std::thread t3 = ReadOnThread(q.get(), {12288}, &promoted, &r_promoted);
  WaitForWaiting(*q, 3);
  EXPECT_TRUE(stale.Cancel());
  promoted.Promote();
  EXPECT_FALSE(promoted.Cancel());  // promoted: no longer a background read
  disk.Release();
  for (std::thread* t : {&t0, &t1, &t2, &t3}) t->join();
  EXPECT_EQ(disk.order(), (std::vector<uint64_t>{0, 12288, 8192}));
  ASSERT_EQ(r_stale.size(), 1u);
  EXPECT_TRUE(absl::IsCancelled(r_stale[0].status())) << r_stale[0].status();
  ASSERT_EQ(r_promoted.size(), 1u);
  EXPECT_TRUE(r_promoted[0].ok());
  ASSERT_EQ(r_old.size(), 1u);
  EXPECT_TRUE(r_old[0].ok());
}

}  // namespace
}  // namespace colibri::expert_node
