#include "coordinator/cli/resident_weights.h"

#include <cstdint>

#include "absl/status/statusor.h"
#include "model/ops/matmul.h"

namespace colibri::coordinator {

void MakeWeightsResident(arch::Model* model, bool experts_here, bool keep_mapped, bool interleave,
                         std::ostream& err) {
  if (!keep_mapped) {
    const arch::Model::RamWeights which =
        experts_here ? arch::Model::RamWeights::kAll : arch::Model::RamWeights::kDense;
    uint64_t interleaved = 0;
    const absl::StatusOr<uint64_t> moved =
        interleave ? model->InterleaveWeights(which) : absl::StatusOr<uint64_t>(0);
    if (moved.ok()) {
      interleaved = *moved;
    } else {
      err << "weights: not all interleaved, the rest stay in file order: "
          << moved.status().message() << "\n";
    }
    const absl::StatusOr<uint64_t> copied = model->CopyWeightsToRam(which);
    if (copied.ok() && *copied + interleaved > 0) {
      err << "weights: " << ((*copied + interleaved) >> 20) << " MiB copied into RAM on huge pages"
          << (experts_here ? " (every expert runs here)" : " (the dense part)");
      if (interleaved > 0) {
        err << ", " << (interleaved >> 20) << " MiB of them interleaved for the "
            << ops::ActiveKernelSetName() << " kernels";
      }
      err << "\n";
      return;
    }
    if (copied.ok()) {
      err << "weights: left mapped from the file (more than half of the memory limit)\n";
    } else {
      err << "weights: not all copied into RAM, the rest stay mapped from the file: "
          << copied.status().message() << "\n";
    }
  }
  if (experts_here) model->PopulateIfItFits();
}

std::unique_ptr<ThreadPool> MakeCommandPool(int threads, bool with_nodes,
                                            std::optional<int> spin_us) {
  return std::make_unique<ThreadPool>(
      threads,
      ThreadPool::WithSpinOverride(
          with_nodes ? ThreadPool::ForIntermittentJobs() : ThreadPool::Options(), spin_us));
}

void WarnIfContextCapped(const char* command, int ctx_size, const arch::ModelConfig& config,
                         std::ostream& err) {
  if (ctx_size <= config.n_ctx_train) return;
  err << command << ": --ctx-size " << ctx_size << " is above the model's context length of "
      << config.n_ctx_train << "; using " << config.n_ctx_train << "\n";
}

}  // namespace colibri::coordinator
