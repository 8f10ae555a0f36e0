// Where the weights a coordinator computes with live while it runs: copied
// into RAM on huge pages (the default), or read through the file's mapping.
#ifndef COLIBRI_COORDINATOR_CLI_RESIDENT_WEIGHTS_H_
#define COLIBRI_COORDINATOR_CLI_RESIDENT_WEIGHTS_H_

#include <memory>
#include <optional>
#include <ostream>

#include "common/thread_pool.h"
#include "model/arch/model.h"

namespace colibri::coordinator {

// Before the first session: with `experts_here` (no nodes: every expert is
// computed in this process) all matrices, else the dense ones, are copied
// into RAM, unless `keep_mapped` (--mmap) or they take more than half of the
// memory this process may use: with `interleave`, those the kernels read
// faster in the interleaved layout in that layout (Model::InterleaveWeights,
// which changes the model's views: call before anything copies them), the
// others by Model::CopyWeightsToRam. Weights that stay mapped are paged in now
// when every expert is computed here and the files fit
// (Model::PopulateIfItFits). Says on `err` what it did, in one line (and
// one more when interleaving failed); a failure to copy is reported there
// and is not an error: the weights then stay mapped, and compute the same.
void MakeWeightsResident(arch::Model* model, bool experts_here, bool keep_mapped, bool interleave,
                         std::ostream& err);

// The thread pool `run` and `serve` compute with: `threads` threads (0: the
// physical cores); with expert nodes its jobs come between waits on them
// (ThreadPool::ForIntermittentJobs); spin_us, when set, replaces every spin
// (COLIBRI_SPIN_US).
std::unique_ptr<ThreadPool> MakeCommandPool(int threads, bool with_nodes,
                                            std::optional<int> spin_us);

// Says on `err`, as `command`, that --ctx-size is above the model's context
// length and that the latter is used; nothing when it is not.
void WarnIfContextCapped(const char* command, int ctx_size, const arch::ModelConfig& config,
                         std::ostream& err);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLI_RESIDENT_WEIGHTS_H_
