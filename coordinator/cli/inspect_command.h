// `colibri-coordinator inspect`: what is in a GGUF file and what serving it takes.
#ifndef COLIBRI_COORDINATOR_CLI_INSPECT_COMMAND_H_
#define COLIBRI_COORDINATOR_CLI_INSPECT_COMMAND_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"

namespace colibri::coordinator {

struct InspectOptions {
  std::string model_path;
  // Also list every metadata key and every tensor. Default: false.
  bool verbose = false;
};

// Prints architecture, hyper-parameters, tokenizer, tensor types and the
// cluster-planning numbers to `out`. A file whose architecture is not supported
// is still described (without the config section); a damaged file is an error.
absl::Status RunInspect(const InspectOptions& options, std::ostream& out);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLI_INSPECT_COMMAND_H_
