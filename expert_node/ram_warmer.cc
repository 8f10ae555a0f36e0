#include "expert_node/ram_warmer.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "expert_node/event_log.h"
#include "expert_node/expert_store.h"
#include "expert_node/ram_tier.h"
#include "expert_node/usage_counts.h"

namespace colibri::expert_node {

RamWarmer::RamWarmer(ExpertStore* store, RamTier* tier, const UsageCounts* usage)
    : store_(store), tier_(tier), usage_(usage) {
  observer_id_ = store_->AddWriteObserver([this](const ExpertId& id) {
    absl::MutexLock lock(&mu_);
    if (!full_pass_due_) written_.push_back(id);
  });
  thread_ = std::thread([this] { Loop(); });
}

RamWarmer::~RamWarmer() { Stop(); }

void RamWarmer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (observer_id_ >= 0) {
    store_->RemoveWriteObserver(observer_id_);
    observer_id_ = -1;
  }
  if (thread_.joinable()) thread_.join();
}

RamWarmer::Counters RamWarmer::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

bool RamWarmer::stopping() const {
  absl::MutexLock lock(&mu_);
  return stop_;
}

void RamWarmer::Loop() {
  // Linux keeps a nice value and an I/O priority per thread: this one yields
  // the CPU to the compute threads and, under I/O schedulers with priorities
  // (BFQ), the disk to their misses. Lowering one's own priorities needs no
  // privilege; if it fails anyway the warm-up still runs, at normal priority.
  const auto tid = static_cast<id_t>(syscall(SYS_gettid));
  setpriority(PRIO_PROCESS, tid, 19);
  constexpr int kIoprioWhoProcess = 1;   // linux/ioprio.h IOPRIO_WHO_PROCESS
  constexpr int kIoprioClassIdle = 3;    // IOPRIO_CLASS_IDLE
  constexpr int kIoprioClassShift = 13;  // IOPRIO_CLASS_SHIFT
  syscall(SYS_ioprio_set, kIoprioWhoProcess, tid, kIoprioClassIdle << kIoprioClassShift);
  auto stop_or_stored = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || full_pass_due_ || !written_.empty();
  };
  // An ingest wakes the thread once per expert, so passes come in bursts:
  // one log line per burst (once no write has come for kQuiet), or every
  // kLogInterval during a long one.
  constexpr absl::Duration kQuiet = absl::Seconds(1);
  constexpr absl::Duration kLogInterval = absl::Seconds(10);
  Counters unlogged;
  absl::Time unlogged_since, unlogged_until;  // start of its first pass, end of its last
  auto log_unlogged = [&] {
    if (unlogged.experts > 0) {
      LogEvent(absl::StrFormat(
          "RAM warm-up: loaded %d experts (%.1f MiB) in %.2f s (%d passes); the RAM tier holds "
          "%.1f of %.1f MiB",
          unlogged.experts, unlogged.bytes / 1048576.0,
          absl::ToDoubleSeconds(unlogged_until - unlogged_since), unlogged.passes,
          tier_->used_bytes() / 1048576.0, tier_->budget_bytes() / 1048576.0));
    }
    unlogged = Counters();
  };
  while (true) {
    bool stored, full;
    std::vector<ExpertId> written;
    {
      absl::MutexLock lock(&mu_);
      if (unlogged.passes == 0) {
        mu_.Await(absl::Condition(&stop_or_stored));
      } else {
        mu_.AwaitWithTimeout(absl::Condition(&stop_or_stored), kQuiet);
      }
      stored = (full_pass_due_ || !written_.empty()) && !stop_;
      full = full_pass_due_;
      full_pass_due_ = false;
      written.swap(written_);
    }
    if (!stored) {
      log_unlogged();
      if (stopping()) return;
      continue;
    }
    if (unlogged.passes == 0) unlogged_since = absl::Now();
    const Counters pass = Pass(full ? AllStored() : written);
    unlogged.passes += pass.passes;
    unlogged.experts += pass.experts;
    unlogged.bytes += pass.bytes;
    unlogged_until = absl::Now();
    if (unlogged_until - unlogged_since >= kLogInterval) log_unlogged();
  }
}

std::vector<ExpertId> RamWarmer::AllStored() const {
  std::vector<ExpertId> order;
  if (usage_ != nullptr) {
    for (const auto& [id, score] : usage_->Hottest(absl::Now())) order.push_back(id);
  }
  absl::StatusOr<std::map<std::string, ExpertStore::Inventory>> listed = store_->List("");
  if (!listed.ok()) {
    LogEvent(
        absl::StrCat("RAM warm-up: cannot list the stored experts: ", listed.status().message()));
    return order;
  }
  for (const auto& [fingerprint, layers] : *listed) {
    for (const auto& [layer, experts] : layers) {
      for (const int32_t expert : experts) order.push_back(ExpertId{fingerprint, layer, expert});
    }
  }
  return order;
}

RamWarmer::Counters RamWarmer::Pass(const std::vector<ExpertId>& order) {
  const uint64_t budget = tier_->budget_bytes();
  uint64_t smallest = std::numeric_limits<uint64_t>::max();
  Counters pass;
  pass.passes = 1;
  for (const ExpertId& id : order) {
    if (stopping()) break;
    if (tier_->Contains(id)) continue;
    absl::StatusOr<uint64_t> size = store_->RamBytes(id);
    if (!size.ok()) continue;  // a usage record of an expert no longer stored
    smallest = std::min(smallest, *size);
    const uint64_t used = tier_->used_bytes();
    const uint64_t free = budget > used ? budget - used : 0;
    if (free < smallest) break;
    if (*size > free) continue;
    const uint64_t loaded_before = tier_->counters().warm_loaded;
    const absl::Status s = tier_->Warm(id, *size);
    if (s.ok()) {
      if (tier_->counters().warm_loaded > loaded_before) {
        ++pass.experts;
        pass.bytes += *size;
      }
    } else if (!absl::IsResourceExhausted(s)) {  // no room: a demand load took it
      ++pass.errors;
      LogEvent(absl::StrCat("RAM warm-up: skipped ", s.message()));
    }
  }
  absl::MutexLock lock(&mu_);
  ++counters_.passes;
  counters_.experts += pass.experts;
  counters_.bytes += pass.bytes;
  counters_.errors += pass.errors;
  return pass;
}

}  // namespace colibri::expert_node
