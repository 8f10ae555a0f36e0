#include "coordinator/resident_weights.h"

#include <cstdint>

#include "absl/status/statusor.h"

namespace colibri::coordinator {

void MakeWeightsResident(const arch::Model& model, bool experts_here, bool keep_mapped,
                         std::ostream& err) {
  if (!keep_mapped) {
    const absl::StatusOr<uint64_t> copied = model.CopyWeightsToRam(
        experts_here ? arch::Model::RamWeights::kAll : arch::Model::RamWeights::kDense);
    if (copied.ok() && *copied > 0) {
      err << "weights: " << (*copied >> 20) << " MiB copied into RAM on huge pages"
          << (experts_here ? " (every expert runs here)" : " (the dense part)") << "\n";
      return;
    }
    if (copied.ok()) {
      err << "weights: left mapped from the file (more than half of the memory limit)\n";
    } else {
      err << "weights: not all copied into RAM, the rest stay mapped from the file: "
          << copied.status().message() << "\n";
    }
  }
  if (experts_here) model.PopulateIfItFits();
}

}  // namespace colibri::coordinator
