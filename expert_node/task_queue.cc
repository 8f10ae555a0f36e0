#include "expert_node/task_queue.h"

#include <utility>

namespace colibri::expert_node {

TaskQueue::TaskQueue(int num_threads, size_t max_pending) : max_pending_(max_pending) {
  if (num_threads < 1) num_threads = 1;
  workers_.reserve(num_threads);
  for (int i = 0; i < num_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

TaskQueue::~TaskQueue() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : workers_) t.join();
}

bool TaskQueue::Post(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  if (stop_ || (max_pending_ > 0 && tasks_.size() >= max_pending_)) return false;
  tasks_.push_back(std::move(task));
  return true;
}

size_t TaskQueue::pending() const {
  absl::MutexLock lock(&mu_);
  return tasks_.size();
}

bool TaskQueue::HasWorkOrStop() const { return stop_ || !tasks_.empty(); }

void TaskQueue::WorkerLoop() {
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &TaskQueue::HasWorkOrStop));
      if (tasks_.empty()) return;  // stopping and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace colibri::expert_node
