// `colibri-coordinator schema-check --vocab V.gguf CASE.json...`: the
// constrained-decoding engine's test and bench bed. A CASE file holds
// {"schema": <JSON Schema>, "tests": [{"valid": bool, "data": <value>}, ...]}
// (MaskBench's format). For each case one JSON line:
//   {"case": "<file basename>", "compiled": bool, "error": "<message>"|null,
//    "tests": [{"valid": bool, "accepted": bool}, ...],
//    "compile_ms": x, "mask_us_mean": x|null, "mask_us_p99": x|null}
// A test's instance is its data serialized compactly in the file's key order;
// "accepted": every token of the vocabulary's tokenization of that text was in
// the mask at its step and the grammar accepts at the end. Masks are timed on
// one thread (every step's mask, including the one after the last token), on
// the wall clock or (SchemaCheckOptions::cpu_time) the thread's CPU clock.
#ifndef COLIBRI_COORDINATOR_CLI_SCHEMA_CHECK_COMMAND_H_
#define COLIBRI_COORDINATOR_CLI_SCHEMA_CHECK_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/grammar/json_schema_compiler.h"

namespace colibri::coordinator {

struct SchemaCheckOptions {
  // GGUF file with the vocabulary (vocab-only is fine).
  std::string vocab_path;
  std::vector<std::string> case_files;
  grammar::SchemaCompileOptions compile;
  // Time masks as the thread's CPU time instead of the wall clock: without
  // the time spent waiting for a core on a loaded machine. Default: false.
  bool cpu_time = false;
  // A refused valid instance's test also gets "refused_at": the byte offset
  // of the first token the mask refused (the text's length when the grammar
  // did not accept its end), and "near": the text around it. Default: false.
  bool explain = false;
};

// One line per case on `out`; a summary (cases compiled, valid and invalid
// instances accepted, mask time over all steps) on `log`. A case file that
// cannot be read or parsed gives a line with "compiled": false and its error;
// the status fails only when the vocabulary cannot be loaded.
absl::Status RunSchemaCheck(const SchemaCheckOptions& options, std::ostream& out,
                            std::ostream& log);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLI_SCHEMA_CHECK_COMMAND_H_
