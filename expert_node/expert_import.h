// Import: a node stores experts from a local copy of the model's GGUF file
// instead of receiving them over the network (the Import method, and
// --import-gguf at start-up).
//
// Experts already stored are skipped, so an import interrupted (by a crash or
// BeginShutdown) is finished by running it again. Every expert is written
// durably (ExpertStore::Put) with its checksum, exactly as an ingested one.
// Progress is logged every Options::progress_interval.
//
// Paths come from callers the node does not trust: only regular files are
// opened (never a FIFO or a device), and any failure to open or parse the
// file is NotFound "cannot import PATH", the details going to the node's log
// only, so that a caller cannot probe which paths exist.
//
// Thread-safety: every method is thread-safe; imports may run concurrently.
#ifndef COLIBRI_EXPERT_NODE_EXPERT_IMPORT_H_
#define COLIBRI_EXPERT_NODE_EXPERT_IMPORT_H_

#include <atomic>
#include <functional>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "colibri/v1/expert.pb.h"
#include "expert_node/expert_store.h"
#include "expert_node/model_registry.h"

namespace colibri::expert_node {

class ExpertImporter {
 public:
  struct Options {
    // How often an import logs its progress. Default: 5 s.
    absl::Duration progress_interval = absl::Seconds(5);
    // How often an import calls its Progress callback. Default: 0.5 s.
    absl::Duration report_interval = absl::Milliseconds(500);
  };

  // Called on the importing thread with the counts so far (ImportReply's
  // fields), at most once per Options::report_interval; it must not block.
  using Progress = std::function<void(const v1::ImportReply& so_far)>;

  // store and registry are borrowed and must outlive the importer.
  ExpertImporter(const Options& options, ExpertStore* store, ModelRegistry* registry);
  ExpertImporter(const ExpertImporter&) = delete;
  ExpertImporter& operator=(const ExpertImporter&) = delete;

  // Stores the experts `request` names (all of the file's when it names
  // none) from request.gguf_path, registering the model's shape; sets the
  // experts written and their bytes in *reply. NotFound "cannot import PATH"
  // for a file that cannot be opened or parsed; InvalidArgument when
  // request.model_fingerprint is set and differs from the file's, or a key
  // is malformed or not an expert of the file; Unavailable after
  // BeginShutdown (what was imported stays stored); store errors pass
  // through. `progress`, when set, hears how far the import is (first once
  // the experts are known, with nothing done).
  absl::Status Import(const v1::ImportRequest& request, v1::ImportReply* reply,
                      const Progress& progress = nullptr);

  // Makes an import in progress stop before its next expert, and later ones
  // fail at once, with Unavailable.
  void BeginShutdown() { shutting_down_.store(true); }

 private:
  const Options options_;
  ExpertStore* const store_;
  ModelRegistry* const registry_;
  std::atomic<bool> shutting_down_{false};
};

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_EXPERT_IMPORT_H_
