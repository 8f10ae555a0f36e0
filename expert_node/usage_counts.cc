#include "expert_node/usage_counts.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "expert_node/event_log.h"

namespace colibri::expert_node {
namespace {

constexpr size_t kUsageValueBytes = 16;
constexpr double kMinPinScore = 1.0 / (1 << 20);

std::string EncodeUsage(double score, absl::Time updated) {
  const int64_t micros = absl::ToUnixMicros(updated);
  std::string out(kUsageValueBytes, '\0');
  std::memcpy(out.data(), &score, 8);
  std::memcpy(out.data() + 8, &micros, 8);
  return out;
}

bool DecodeUsage(const std::string& value, double* score, absl::Time* updated) {
  if (value.size() != kUsageValueBytes) return false;
  int64_t micros = 0;
  std::memcpy(score, value.data(), 8);
  std::memcpy(&micros, value.data() + 8, 8);
  if (!std::isfinite(*score) || *score < 0) return false;
  *updated = absl::FromUnixMicros(micros);
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<UsageCounts>> UsageCounts::Open(const Options& options,
                                                               ExpertStore* store) {
  COLIBRI_ASSIGN_OR_RETURN(const auto records, store->ListUsageRecords());
  std::unique_ptr<UsageCounts> counts(new UsageCounts(options, store));
  {
    absl::MutexLock lock(&counts->mu_);
    for (const auto& [id, value] : records) {
      DecayedCount s;
      if (DecodeUsage(value, &s.score, &s.updated)) counts->scores_[id] = s;
    }
  }
  if (options.flush_interval > absl::ZeroDuration()) {
    counts->flusher_ = std::thread([c = counts.get()] { c->FlushLoop(); });
  }
  return counts;
}

UsageCounts::UsageCounts(const Options& options, ExpertStore* store)
    : options_(options), store_(store) {}

UsageCounts::~UsageCounts() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (flusher_.joinable()) flusher_.join();
  const absl::Status s = Flush();
  if (!s.ok()) LogEvent(absl::StrCat("usage counts not saved at shutdown: ", s.message()));
}

double UsageCounts::Decayed(const DecayedCount& s, absl::Time now) const {
  const double elapsed = absl::ToDoubleSeconds(now - s.updated);
  if (elapsed <= 0) return s.score;
  return s.score * std::exp2(-elapsed / absl::ToDoubleSeconds(options_.half_life));
}

void UsageCounts::Record(const ExpertId& id, absl::Time now) {
  absl::MutexLock lock(&mu_);
  DecayedCount& s = scores_[id];
  s.score = Decayed(s, now) + 1;
  s.updated = std::max(s.updated, now);
  dirty_.insert(id);
}

double UsageCounts::Score(const ExpertId& id, absl::Time now) const {
  absl::MutexLock lock(&mu_);
  auto it = scores_.find(id);
  return it == scores_.end() ? 0 : Decayed(it->second, now);
}

std::vector<std::pair<ExpertId, double>> UsageCounts::Hottest(absl::Time now) const {
  std::vector<std::pair<ExpertId, double>> out;
  {
    absl::MutexLock lock(&mu_);
    out.reserve(scores_.size());
    for (const auto& [id, s] : scores_) out.emplace_back(id, Decayed(s, now));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    if (a.second != b.second) return a.second > b.second;
    if (a.first.fingerprint != b.first.fingerprint) return a.first.fingerprint < b.first.fingerprint;
    if (a.first.layer != b.first.layer) return a.first.layer < b.first.layer;
    return a.first.expert < b.first.expert;
  });
  return out;
}

absl::Status UsageCounts::Flush() {
  absl::MutexLock flush_lock(&flush_mu_);
  std::vector<std::pair<ExpertId, std::string>> records;
  {
    absl::MutexLock lock(&mu_);
    records.reserve(dirty_.size());
    for (const ExpertId& id : dirty_) {
      const DecayedCount& s = scores_.at(id);
      records.emplace_back(id, EncodeUsage(s.score, s.updated));
    }
    dirty_.clear();
  }
  if (records.empty()) return absl::OkStatus();
  absl::Status s = store_->PutUsageRecords(records);
  if (!s.ok()) {
    absl::MutexLock lock(&mu_);
    ++flush_failures_;
    for (const auto& [id, value] : records) dirty_.insert(id);
  }
  return s;
}

uint64_t UsageCounts::flush_failures() const {
  absl::MutexLock lock(&mu_);
  return flush_failures_;
}

void UsageCounts::FlushLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stop_), options_.flush_interval);
      if (stop_) return;
    }
    const absl::Status s = Flush();
    if (!s.ok()) LogEvent(absl::StrCat("usage counts not saved (will retry): ", s.message()));
  }
}

PinReport PinHottestExperts(const UsageCounts& counts, ExpertStore* store, RamTier* tier,
                            uint64_t pin_budget_bytes) {
  PinReport report;
  for (const auto& [id, score] : counts.Hottest()) {
    if (report.bytes >= pin_budget_bytes || score < kMinPinScore) break;
    absl::StatusOr<uint64_t> bytes = store->RamBytes(id);
    if (!bytes.ok()) continue;  // no longer stored, or another model's count
    if (*bytes > pin_budget_bytes - report.bytes) continue;
    const absl::Status s = tier->PinResident(id);
    if (!s.ok()) {
      LogEvent(absl::StrCat("could not pin ", ToString(id), ": ", s.message()));
      continue;
    }
    ++report.experts;
    report.bytes += *bytes;
    report.pinned.push_back(id);
  }
  return report;
}

}  // namespace colibri::expert_node
