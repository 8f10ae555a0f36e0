#include "coordinator/generation/step_timeline.h"

#include <algorithm>

namespace colibri::coordinator {

StepTimeline::StepTimeline(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

void StepTimeline::Add(const StepRecord& step) {
  absl::MutexLock lock(&mu_);
  ++total_;
  if (ring_.size() < capacity_) {
    ring_.push_back(step);
    return;
  }
  ring_[next_] = step;
  next_ = (next_ + 1) % capacity_;
}

std::vector<StepRecord> StepTimeline::Recent() const {
  absl::MutexLock lock(&mu_);
  std::vector<StepRecord> out;
  out.reserve(ring_.size());
  for (size_t i = 0; i < ring_.size(); ++i) out.push_back(ring_[(next_ + i) % ring_.size()]);
  return out;
}

int64_t StepTimeline::total() const {
  absl::MutexLock lock(&mu_);
  return total_;
}

}  // namespace colibri::coordinator
