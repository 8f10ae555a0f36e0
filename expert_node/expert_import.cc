#include "expert_node/expert_import.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "expert_node/event_log.h"
#include "expert_node/expert_key.h"
#include "model/arch/model.h"
#include "model/gguf/gguf_fingerprint.h"
#include "rpc/untrusted_text.h"

namespace colibri::expert_node {
namespace {

absl::Span<const uint8_t> BytesOf(const ops::WeightMatrix& m) {
  return absl::Span<const uint8_t>(m.data, static_cast<size_t>(m.rows) * m.row_bytes);
}

}  // namespace

ExpertImporter::ExpertImporter(const Options& options, ExpertStore* store, ModelRegistry* registry)
    : options_(options), store_(store), registry_(registry) {}

absl::Status ExpertImporter::Import(const v1::ImportRequest& request, v1::ImportReply* reply,
                                    const Progress& progress) {
  if (shutting_down_.load()) return absl::UnavailableError("node is shutting down");
  // The caller learns nothing about the path beyond "cannot import" (whether
  // it exists, is readable, is a GGUF): the details go to the node's log.
  const std::string shown_path = rpc::EscapeUntrusted(request.gguf_path());
  absl::StatusOr<std::unique_ptr<arch::Model>> opened = arch::Model::Open(request.gguf_path());
  if (!opened.ok()) {
    LogEvent(absl::StrCat("import of ", shown_path,
                          " failed: ", rpc::EscapeUntrusted(opened.status().message())));
    return absl::NotFoundError(absl::StrCat("cannot import ", shown_path));
  }
  std::unique_ptr<arch::Model> model = std::move(*opened);
  COLIBRI_ASSIGN_OR_RETURN(const std::string fingerprint, gguf::ModelFingerprint(model->file()));
  if (!request.model_fingerprint().empty() && request.model_fingerprint() != fingerprint) {
    return absl::InvalidArgumentError(absl::StrCat(shown_path, " has fingerprint ", fingerprint,
                                                   ", the request names ",
                                                   request.model_fingerprint()));
  }
  const arch::ModelConfig& config = model->config();
  const auto& experts = model->experts();
  std::vector<ExpertId> wanted;
  if (request.experts_size() == 0) {
    for (int l = 0; l < static_cast<int>(experts.size()); ++l) {
      for (int e = 0; e < static_cast<int>(experts[l].size()); ++e) {
        wanted.push_back(ExpertId{fingerprint, l, e});
      }
    }
  } else {
    for (const v1::ExpertKey& key : request.experts()) {
      COLIBRI_ASSIGN_OR_RETURN(ExpertId id, ParseExpertKey(key));
      if (id.fingerprint != fingerprint || id.layer >= static_cast<int>(experts.size()) ||
          id.expert >= static_cast<int>(experts[id.layer].size())) {
        return absl::InvalidArgumentError(
            absl::StrCat(ToString(id), " is not an expert of ", shown_path));
      }
      wanted.push_back(std::move(id));
    }
  }
  COLIBRI_RETURN_IF_ERROR(
      registry_->Register(fingerprint, ModelInfo{config.n_layer, config.n_expert, config.n_embd}));

  uint64_t total_bytes = 0;
  for (const ExpertId& id : wanted) total_bytes += experts[id.layer][id.expert].bytes();
  const absl::Time start = absl::Now();
  absl::Time last_log = start;
  absl::Time last_report = start;
  uint64_t done_bytes = 0;
  int32_t imported = 0;
  uint64_t stored_bytes = 0;
  const auto report = [&] {
    reply->set_imported(imported);
    reply->set_bytes_stored(stored_bytes);
    reply->set_bytes_done(done_bytes);
    reply->set_bytes_total(total_bytes);
    if (progress) progress(*reply);
  };
  report();
  for (const ExpertId& id : wanted) {
    if (shutting_down_.load()) {
      return absl::UnavailableError(absl::StrCat("node is shutting down: import of ", shown_path,
                                                 " stopped after ", imported,
                                                 " experts (they stay stored)"));
    }
    const moe::ExpertWeights& w = experts[id.layer][id.expert];
    COLIBRI_ASSIGN_OR_RETURN(const bool present, store_->Contains(id));
    if (!present) {
      ExpertLayout layout = LayoutOf(w);
      const std::string biases = BiasBytesOf(w);
      const absl::Span<const uint8_t> bias_span(reinterpret_cast<const uint8_t*>(biases.data()),
                                                biases.size());
      layout.xxh64 = PayloadChecksum(BytesOf(w.gate), BytesOf(w.up), BytesOf(w.down), bias_span);
      COLIBRI_RETURN_IF_ERROR(
          store_->Put(id, layout, BytesOf(w.gate), BytesOf(w.up), BytesOf(w.down), bias_span));
      ++imported;
      stored_bytes += w.bytes();
    }
    done_bytes += w.bytes();
    const absl::Time now = absl::Now();
    if (progress && now - last_report >= options_.report_interval) {
      last_report = now;
      report();
    }
    if (now - last_log >= options_.progress_interval) {
      last_log = now;
      const double seconds = absl::ToDoubleSeconds(now - start);
      const double rate = seconds > 0 ? done_bytes / seconds : 0;
      LogEvent(absl::StrFormat("import %s: %d / %d bytes (%.1f%%), %.1f MB/s, ETA %.0f s",
                               shown_path, done_bytes, total_bytes,
                               100.0 * done_bytes / std::max<uint64_t>(total_bytes, 1), rate / 1e6,
                               rate > 0 ? (total_bytes - done_bytes) / rate : 0.0));
    }
  }
  LogEvent(
      absl::StrFormat("import done: %s: %d experts written (%d bytes), %d already stored, "
                      "%.1f s",
                      shown_path, imported, stored_bytes, wanted.size() - imported,
                      absl::ToDoubleSeconds(absl::Now() - start)));
  reply->set_imported(imported);
  reply->set_bytes_stored(stored_bytes);
  reply->set_bytes_done(done_bytes);
  reply->set_bytes_total(total_bytes);
  return absl::OkStatus();
}

}  // namespace colibri::expert_node
