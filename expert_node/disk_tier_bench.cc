// Reads stored experts from the disk tier at queue depth and prints reads/s
// and GB/s per I/O engine and depth. scripts/bench-disk-tier.sh runs it
// interleaved with `dd iflag=direct bs=4M` over the same extent file and
// prints medians against dd's figure.
//
//   colibri_disk_tier_bench DIR [--experts=512] [--n-embd=512] [--n-ff=272]
//       [--depths=1,4,16,64] [--engines=io_uring,threads] [--direct=1]
//       [--rounds=1] [--raw=0]
//
// DIR must be on a real file system (O_DIRECT fails on tmpfs); the store is
// made there on the first run (experts of n_embd x n_ff F32: the defaults
// give 1.59 MiB, a Qwen3-30B-A3B expert's size at Q4_K_M-like density) and
// reused. One run per engine and depth reads every expert once in a random
// order through ExpertStore::Get from `depth` threads (so `depth` reads are
// in flight, each verified and copied into a recycled buffer as a RAM-tier
// miss is), with O_DIRECT
// (--direct=1) or after posix_fadvise(DONTNEED) on every file (--direct=0).
// --raw=1 reads the records' blocks straight from the extent file instead (the
// I/O alone, without the store's verification and copy). Prints one line per
// run:
//   run engine=E depth=D reads=N seconds=S reads_per_s=R gb_per_s=G
// and, once, the extent file's path (for dd) as `extent_file PATH`.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "expert_node/expert_store.h"

namespace {

using colibri::expert_node::DiskReadQueue;
using colibri::expert_node::ExpertId;
using colibri::expert_node::ExpertLayout;
using colibri::expert_node::ExpertStore;

void DropPageCache(const std::string& dir) {
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    const int fd = ::open(entry.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

std::vector<uint8_t> RandomF32(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = std::uniform_real_distribution<float>(-1, 1)(rng);
  std::vector<uint8_t> out(n * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

struct Args {
  std::string dir;
  int experts = 512;
  int64_t n_embd = 512;
  int64_t n_ff = 272;
  std::vector<int> depths = {1, 4, 16, 64};
  std::vector<DiskReadQueue::Engine> engines = {DiskReadQueue::Engine::kUring,
                                                DiskReadQueue::Engine::kThreads};
  bool direct = true;
  int rounds = 1;
  bool raw = false;
};

bool ParseArgs(int argc, char** argv, Args* args) {
  if (argc < 2) return false;
  args->dir = argv[1];
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) != 0 || eq == std::string::npos) return false;
    const std::string key = a.substr(2, eq - 2), value = a.substr(eq + 1);
    int64_t n = 0;
    if (key == "depths" || key == "engines") {
      if (key == "depths") args->depths.clear();
      if (key == "engines") args->engines.clear();
      for (absl::string_view part : absl::StrSplit(value, ',')) {
        if (key == "depths") {
          if (!absl::SimpleAtoi(part, &n) || n < 1) return false;
          args->depths.push_back(static_cast<int>(n));
        } else {
          auto engine = colibri::expert_node::ParseEngine(std::string(part));
          if (!engine.ok()) return false;
          args->engines.push_back(*engine);
        }
      }
      continue;
    }
    if (!absl::SimpleAtoi(value, &n) || n < 0) return false;
    if (key == "experts") {
      args->experts = static_cast<int>(n);
    } else if (key == "n-embd") {
      args->n_embd = n;
    } else if (key == "n-ff") {
      args->n_ff = n;
    } else if (key == "direct") {
      args->direct = n != 0;
    } else if (key == "raw") {
      args->raw = n != 0;
    } else if (key == "rounds") {
      args->rounds = static_cast<int>(n);
    } else {
      return false;
    }
  }
  return args->experts > 0 && args->rounds > 0;
}

// Calls read(expert, reader) for every expert once, in a random order, from
// `depth` reader threads (reader: 0..depth-1); returns the seconds it took
// and sets *failures to the reads that returned false.
template <typename Read>
double ReadAllExperts(int experts, int depth, std::mt19937* rng, int* failures, Read read) {
  std::vector<int> order(experts);
  for (int e = 0; e < experts; ++e) order[e] = e;
  std::shuffle(order.begin(), order.end(), *rng);
  std::atomic<size_t> next{0};
  std::atomic<int> failed{0};
  const absl::Time start = absl::Now();
  std::vector<std::thread> readers;
  for (int t = 0; t < depth; ++t) {
    readers.emplace_back([&, t] {
      for (size_t i = next.fetch_add(1); i < order.size(); i = next.fetch_add(1)) {
        if (!read(order[i], t)) failed.fetch_add(1);
      }
    });
  }
  for (std::thread& t : readers) t.join();
  *failures = failed.load();
  return absl::ToDoubleSeconds(absl::Now() - start);
}

// Reads every record's blocks (records are laid out back to back, each
// rounded up to the alignment) from `depth` threads sharing one queue.
void RunRaw(const Args& args, DiskReadQueue::Engine engine, int depth, uint64_t payload,
            std::mt19937* rng) {
  using colibri::expert_node::kDirectIoAlignment;
  DiskReadQueue::Options options;
  options.engine = engine;
  options.depth = depth;
  options.max_threads = depth;
  auto queue = DiskReadQueue::Create(options);
  if (!queue.ok()) {
    std::fprintf(stderr, "%s\n", queue.status().ToString().c_str());
    return;
  }
  const std::string path = args.dir + "/extents/000000.ext";
  const int fd = ::open(path.c_str(), O_RDONLY | (args.direct ? O_DIRECT : 0));
  if (fd < 0) {
    std::perror(path.c_str());
    return;
  }
  const uint64_t record = colibri::expert_node::kHeaderBytes + payload;
  const uint64_t span = (record + kDirectIoAlignment - 1) / kDirectIoAlignment * kDirectIoAlignment;
  std::vector<std::unique_ptr<uint8_t, decltype(&std::free)>> buffers;
  for (int t = 0; t < depth; ++t) {
    buffers.emplace_back(static_cast<uint8_t*>(std::aligned_alloc(kDirectIoAlignment, span)),
                         &std::free);
  }
  int failures = 0;
  const double seconds =
      ReadAllExperts(args.experts, depth, rng, &failures, [&](int expert, int reader) {
        auto n = (*queue)->Read({fd, expert * span, span, buffers[reader].get()});
        return n.ok() && *n >= record;
      });
  ::close(fd);
  std::printf("run engine=%s depth=%d reads=%d seconds=%.4f reads_per_s=%.1f gb_per_s=%.3f raw%s\n",
              colibri::expert_node::EngineName((*queue)->engine()), depth, args.experts, seconds,
              args.experts / seconds, args.experts * payload / seconds / 1e9,
              failures > 0 ? " FAILED" : "");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) {
    std::fprintf(stderr,
                 "usage: %s DIR [--experts=N] [--n-embd=N] [--n-ff=N] [--depths=1,4,16,64] "
                 "[--engines=io_uring,threads] [--direct=0|1] [--rounds=N]\n",
                 argv[0]);
    return 2;
  }
  const std::string fp = "bench";
  uint64_t payload = 0;
  {
    ExpertStore::Options options;
    options.data_dir = args.dir;
    options.sync_writes = false;
    auto store = ExpertStore::Open(options);
    if (!store.ok()) {
      std::fprintf(stderr, "%s\n", std::string(store.status().message()).c_str());
      return 1;
    }
    const auto gate = RandomF32(args.n_ff * args.n_embd, 1);
    const auto up = RandomF32(args.n_ff * args.n_embd, 2);
    const auto down = RandomF32(args.n_embd * args.n_ff, 3);
    ExpertLayout layout;
    layout.gate = {colibri::ops::TensorType::kF32, args.n_ff, args.n_embd, gate.size()};
    layout.up = {colibri::ops::TensorType::kF32, args.n_ff, args.n_embd, up.size()};
    layout.down = {colibri::ops::TensorType::kF32, args.n_embd, args.n_ff, down.size()};
    layout.xxh64 = colibri::expert_node::PayloadChecksum(gate, up, down);
    payload = layout.payload_bytes();
    for (int e = 0; e < args.experts; ++e) {
      if (!(*store)->Contains(ExpertId{fp, 0, e}).value_or(false)) {
        absl::Status s = (*store)->Put(ExpertId{fp, 0, e}, layout, gate, up, down);
        if (!s.ok()) {
          std::fprintf(stderr, "%s\n", s.ToString().c_str());
          return 1;
        }
      }
    }
  }
  DropPageCache(args.dir);
  std::printf("experts %d of %.2f MiB (%.1f MiB) in %s, %s\n", args.experts, payload / 1048576.0,
              args.experts * payload / 1048576.0, args.dir.c_str(),
              args.direct ? "O_DIRECT" : "buffered, page cache dropped before each run");
  std::printf("extent_file %s/extents/000000.ext\n", args.dir.c_str());
  std::mt19937 rng(46);
  for (int round = 0; round < args.rounds; ++round) {
    for (const DiskReadQueue::Engine engine : args.engines) {
      for (const int depth : args.depths) {
        ExpertStore::Options options;
        options.data_dir = args.dir;
        options.direct_reads = args.direct;
        options.read_queue.engine = engine;
        options.read_queue.depth = depth;
        options.read_queue.max_threads = depth;
        // As the node: blob buffers recycled (BlobBufferPool's default bound).
        options.buffer_pool = colibri::expert_node::BlobBufferPool::Create({});
        auto store = ExpertStore::Open(options);
        if (!store.ok()) {
          std::fprintf(stderr, "%s: %s\n", colibri::expert_node::EngineName(engine),
                       std::string(store.status().message()).c_str());
          continue;
        }
        if (!args.direct) DropPageCache(args.dir);
        if (args.raw) {
          // The I/O alone: each record's aligned blocks straight from the
          // extent file through a DiskReadQueue, no verification or copy.
          RunRaw(args, engine, depth, payload, &rng);
          continue;
        }
        int failures = 0;
        const double seconds =
            ReadAllExperts(args.experts, depth, &rng, &failures, [&](int expert, int) {
              return (*store)->Get(ExpertId{fp, 0, expert}).ok();
            });
        if (failures > 0) {
          std::fprintf(stderr, "%d reads failed\n", failures);
          return 1;
        }
        std::printf(
            "run engine=%s depth=%d reads=%d seconds=%.4f reads_per_s=%.1f gb_per_s=%.3f\n",
            colibri::expert_node::EngineName((*store)->read_engine()), depth, args.experts,
            seconds, args.experts / seconds, args.experts * payload / seconds / 1e9);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
