// Reads N stored experts from the disk tier, cold and warm, with and without
// direct I/O, and prints time, throughput and the bytes the kernel actually
// fetched from the device (/proc/self/io read_bytes).
//
//   colibri_disk_tier_bench DIR [N_EXPERTS=64] [N_EMBD=1024] [N_FF=512]
//
// DIR must be on a real file system (O_DIRECT fails on tmpfs). "Cold" without
// direct I/O means after posix_fadvise(DONTNEED) on every file of the store,
// which evicts it from the page cache without root.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "expert_node/expert_store.h"

namespace {

using colibri::expert_node::ExpertId;
using colibri::expert_node::ExpertLayout;
using colibri::expert_node::ExpertStore;

uint64_t ProcReadBytes() {
  std::ifstream io("/proc/self/io");
  std::string key;
  uint64_t value = 0;
  while (io >> key >> value) {
    if (key == "read_bytes:") return value;
  }
  return 0;
}

void DropPageCache(const std::string& dir) {
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
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

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [N_EXPERTS] [N_EMBD] [N_FF]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const int n = argc > 2 ? std::atoi(argv[2]) : 64;
  const int64_t n_embd = argc > 3 ? std::atoll(argv[3]) : 1024;
  const int64_t n_ff = argc > 4 ? std::atoll(argv[4]) : 512;
  const std::string fp = "bench";
  uint64_t payload = 0;
  {
    ExpertStore::Options options;
    options.data_dir = dir;
    options.sync_writes = false;
    auto store = ExpertStore::Open(options);
    if (!store.ok()) {
      std::fprintf(stderr, "%s\n", std::string(store.status().message()).c_str());
      return 1;
    }
    const auto gate = RandomF32(n_ff * n_embd, 1), up = RandomF32(n_ff * n_embd, 2),
               down = RandomF32(n_embd * n_ff, 3);
    ExpertLayout layout;
    layout.gate = {colibri::ops::TensorType::kF32, n_ff, n_embd, gate.size()};
    layout.up = {colibri::ops::TensorType::kF32, n_ff, n_embd, up.size()};
    layout.down = {colibri::ops::TensorType::kF32, n_embd, n_ff, down.size()};
    layout.xxh64 = colibri::expert_node::PayloadChecksum(gate, up, down);
    payload = layout.payload_bytes();
    for (int e = 0; e < n; ++e) {
      if (!(*store)->Contains(ExpertId{fp, 0, e}).value_or(false)) {
        if (!(*store)->Put(ExpertId{fp, 0, e}, layout, gate, up, down).ok()) return 1;
      }
    }
  }
  std::printf("%d experts of %.2f MiB (%.1f MiB) in %s\n", n, payload / 1048576.0,
              n * payload / 1048576.0, dir.c_str());
  std::printf("%-10s %-5s %10s %10s %14s\n", "mode", "pass", "ms", "MiB/s", "device MiB");
  for (const bool direct : {false, true}) {
    DropPageCache(dir);
    ExpertStore::Options options;
    options.data_dir = dir;
    options.direct_reads = direct;
    auto store = ExpertStore::Open(options);
    if (!store.ok()) {
      std::fprintf(stderr, "%s\n", std::string(store.status().message()).c_str());
      return 1;
    }
    for (const char* pass : {"cold", "warm"}) {
      const uint64_t io_before = ProcReadBytes();
      const absl::Time start = absl::Now();
      for (int e = 0; e < n; ++e) {
        if (!(*store)->Get(ExpertId{fp, 0, e}).ok()) return 1;
      }
      const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
      std::printf("%-10s %-5s %10.1f %10.1f %14.1f\n", direct ? "direct-io" : "buffered", pass,
                  seconds * 1e3, n * payload / 1048576.0 / seconds,
                  (ProcReadBytes() - io_before) / 1048576.0);
    }
  }
  return 0;
}
