// A FIFO of closures run by a fixed set of worker threads: the executor gRPC
// callbacks hand their work to, so that they never block.
//
// Thread-safety: Post may be called from any thread, including a worker.
#ifndef COLIBRI_EXPERT_NODE_TASK_QUEUE_H_
#define COLIBRI_EXPERT_NODE_TASK_QUEUE_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace colibri::expert_node {

class TaskQueue {
 public:
  // Starts `num_threads` (>= 1) workers. max_pending bounds the tasks waiting
  // (not running); 0 means unbounded.
  TaskQueue(int num_threads, size_t max_pending);
  // Runs every task already posted, then joins the workers.
  ~TaskQueue();
  TaskQueue(const TaskQueue&) = delete;
  TaskQueue& operator=(const TaskQueue&) = delete;

  // Queues `task`; false (task dropped, not run) when the queue is full or
  // shutting down.
  bool Post(std::function<void()> task);
  size_t pending() const;

 private:
  void WorkerLoop();
  bool HasWorkOrStop() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_pending_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_TASK_QUEUE_H_
