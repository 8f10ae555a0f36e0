#include "coordinator/cluster/cluster_setup.h"

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/mapped_file.h"
#include "common/progress_line.h"
#include "common/status_macros.h"
#include "coordinator/cluster/expert_checksums.h"

namespace colibri::coordinator {
namespace {

using Clock = std::chrono::steady_clock;

struct ExpertId {
  int layer;
  int expert;
  bool operator<(const ExpertId& o) const {
    return layer != o.layer ? layer < o.layer : expert < o.expert;
  }
};

uint64_t MatrixBytes(const ops::WeightMatrix& m) { return m.rows * m.row_bytes; }

std::string MiB(double bytes) { return absl::StrFormat("%.1f MiB", bytes / (1 << 20)); }

void FillTensor(const ops::WeightMatrix& m, v1::ExpertTensor* t) {
  t->set_ggml_type(static_cast<uint32_t>(m.type));
  t->add_dims(m.cols);  // GGML order: the row length first
  t->add_dims(m.rows);
}

absl::Status Released(const Cluster& cluster, int i) {
  return absl::UnavailableError(
      absl::StrCat("node ", cluster.node(i).address, " was retired from the cluster"));
}

// One contiguous region of an expert's ingest bytes.
struct ExpertPart {
  const uint8_t* data;
  uint64_t bytes;
};

// gate, up, down, then the biases that are present (float32, little-endian
// like the host), in the order of IngestChunk's data.
std::vector<ExpertPart> ExpertParts(const moe::ExpertWeights& w) {
  std::vector<ExpertPart> parts = {{w.gate.data, MatrixBytes(w.gate)},
                                   {w.up.data, MatrixBytes(w.up)},
                                   {w.down.data, MatrixBytes(w.down)}};
  auto bias = [&parts](const float* b, int64_t n) {
    if (b != nullptr) {
      parts.push_back({reinterpret_cast<const uint8_t*>(b), static_cast<uint64_t>(n) * 4});
    }
  };
  bias(w.gate_bias, w.gate.rows);
  bias(w.up_bias, w.up.rows);
  bias(w.down_bias, w.down.rows);
  return parts;
}

// The header fields of version 2 records: biases and activation.
void FillBiasesAndActivation(const moe::ExpertWeights& w, v1::IngestChunk* chunk) {
  auto bias = [](int64_t n, v1::ExpertTensor* t) {
    t->set_ggml_type(static_cast<uint32_t>(ops::TensorType::kF32));
    t->add_dims(n);
  };
  if (w.gate_bias != nullptr) bias(w.gate.rows, chunk->mutable_gate_bias());
  if (w.up_bias != nullptr) bias(w.up.rows, chunk->mutable_up_bias());
  if (w.down_bias != nullptr) bias(w.down.rows, chunk->mutable_down_bias());
  if (w.activation == moe::Activation::kSwigluOai) {
    v1::ExpertActivation* a = chunk->mutable_activation();
    a->set_kind(v1::ACTIVATION_SWIGLU_OAI);
    a->set_alpha(w.swiglu_alpha);
    a->set_limit(w.swiglu_limit);
  }
}

// The model's hash of expert (layer, expert): from the cache when one is given.
uint64_t ModelChecksum(const arch::Model& model, const ExpertSetupOptions& options, int layer,
                       int expert) {
  if (options.checksums != nullptr) return options.checksums->Get(layer, expert);
  return ExpertChecksum(model.experts()[layer][expert]);
}

// What `placement` assigns node `i` and its inventory does not list.
// DataLoss when the node holds an assigned expert with other bytes than
// `model`'s (its content hash differs): those must never be served.
absl::StatusOr<std::vector<ExpertId>> MissingExperts(const Cluster& cluster,
                                                     const Placement& placement, int i,
                                                     const arch::Model& model,
                                                     const ExpertSetupOptions& options) {
  const bool refresh_inventory = options.refresh_inventory;
  std::vector<std::pair<int, int>> assigned = placement.ExpertsOf(i);
  if (assigned.empty()) return std::vector<ExpertId>();
  v1::InventoryReply fresh;
  const v1::InventoryReply* inventory = &cluster.node(i).inventory;
  if (refresh_inventory) {
    v1::InventoryRequest request;
    request.set_model_fingerprint(cluster.fingerprint());
    std::shared_ptr<NodeClient> client = cluster.client(i);
    if (client == nullptr) return Released(cluster, i);
    COLIBRI_ASSIGN_OR_RETURN(fresh, client->Inventory(request));
    inventory = &fresh;
  }
  std::map<ExpertId, std::optional<uint64_t>> held;  // with the content hash when reported
  for (const v1::InventoryEntry& entry : inventory->entries()) {
    if (entry.model_fingerprint() != cluster.fingerprint()) continue;
    const bool hashed = entry.xxh64_size() == entry.experts_size();
    for (int j = 0; j < entry.experts_size(); ++j) {
      held[{entry.layer(), entry.experts(j)}] =
          hashed ? std::optional<uint64_t>(entry.xxh64(j)) : std::nullopt;
    }
  }
  const auto& experts = model.experts();
  std::vector<ExpertId> missing;
  std::string mismatched;
  int n_mismatched = 0;
  for (const auto& [layer, expert] : assigned) {
    auto it = held.find({layer, expert});
    if (it == held.end()) {
      missing.push_back({layer, expert});
      continue;
    }
    if (!it->second.has_value() || layer >= static_cast<int>(experts.size()) ||
        expert >= static_cast<int>(experts[layer].size())) {
      continue;
    }
    if (*it->second != ModelChecksum(model, options, layer, expert)) {
      if (++n_mismatched <= 4) absl::StrAppend(&mismatched, " L", layer, "E", expert);
    }
  }
  if (n_mismatched > 0) {
    return absl::DataLossError(absl::StrCat(
        cluster.node(i).address, " holds ", n_mismatched,
        " expert(s) whose bytes differ from this model's (content hash mismatch:", mismatched,
        n_mismatched > 4 ? " ..." : "",
        "); they are never served: restart that node with --reset-store to have them re-sent"));
  }
  return missing;
}

// The progress line of one node's ingest or import ("ingest ADDRESS: ..."),
// printed at most once per interval, and once more at the end.
class Progress {
 public:
  Progress(std::ostream* out, bool in_place, std::string verb, std::string address, uint64_t total,
           absl::Duration interval, absl::Mutex* out_mu)
      : line_(out, in_place),
        out_(out),
        verb_(std::move(verb)),
        address_(std::move(address)),
        total_(total),
        interval_(absl::ToChronoMilliseconds(interval)),
        out_mu_(out_mu),
        start_(Clock::now()),
        last_(start_) {}

  void Add(uint64_t bytes) { Set(done_ + bytes, total_); }
  void Set(uint64_t done, uint64_t total) {
    done_ = done;
    total_ = total;
    const auto now = Clock::now();
    if (now - last_ >= interval_) {
      last_ = now;
      Print(false);
    }
  }
  // The final line, at `done` of `total`, ended with `note`.
  void Done(uint64_t done, uint64_t total, const std::string& note) {
    done_ = done;
    total_ = total;
    Print(true, note);
  }
  void Print(bool final, const std::string& note = "") {
    if (out_ == nullptr) return;
    const double seconds =
        std::max(std::chrono::duration<double>(Clock::now() - start_).count(), 1e-9);
    const double rate = done_ / seconds;
    const double eta = rate > 0 ? (total_ - done_) / rate : 0;
    const std::string text =
        absl::StrFormat("%s %s: %s of %s (%.0f%%), %s/s", verb_, address_, MiB(done_), MiB(total_),
                        total_ ? 100.0 * done_ / total_ : 100.0, MiB(rate));
    absl::MutexLock lock(out_mu_);
    if (final) {
      line_.Finish(text + absl::StrFormat(", done in %.2f s", seconds) + note);
    } else {
      line_.Update(text + absl::StrFormat(", ETA %.1f s", eta));
    }
  }

 private:
  ProgressLine line_;  // under *out_mu_
  std::ostream* const out_;
  const std::string verb_;
  const std::string address_;
  uint64_t total_;
  const std::chrono::milliseconds interval_;
  absl::Mutex* const out_mu_;
  const Clock::time_point start_;
  Clock::time_point last_;
  uint64_t done_ = 0;
};

absl::Status StreamExperts(const Cluster& cluster, int i, const arch::Model& model,
                           const std::vector<ExpertId>& missing, const ExpertSetupOptions& options,
                           absl::Mutex* out_mu, ExpertSetupResult* result) {
  const auto& experts = model.experts();
  uint64_t total = 0;
  for (const ExpertId& id : missing) total += ExpertBytes(experts[id.layer][id.expert]);
  Progress progress(options.progress, options.progress_in_place, "ingest", cluster.node(i).address,
                    total, options.progress_interval, out_mu);
  std::shared_ptr<NodeClient> client = cluster.client(i);
  if (client == nullptr) return Released(cluster, i);
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<IngestStream> stream, client->StartIngest());
  const uint64_t chunk_bytes = std::max<uint64_t>(options.chunk_bytes, 4096);
  v1::IngestChunk chunk;
  for (const ExpertId& id : missing) {
    if (options.cancelled && options.cancelled()) {
      stream->Finish().status().IgnoreError();
      return absl::CancelledError(
          absl::StrCat("transfer to ", cluster.node(i).address, " cancelled"));
    }
    const moe::ExpertWeights& w = experts[id.layer][id.expert];
    const std::vector<ExpertPart> parts = ExpertParts(w);
    const uint64_t expert_bytes = ExpertBytes(w);
    uint64_t offset = 0;  // within gate | up | down | biases
    bool header = true;
    for (const ExpertPart& part : parts) {
      const uint64_t part_bytes = part.bytes;
      for (uint64_t at = 0; at < part_bytes;) {
        chunk.Clear();
        v1::ExpertKey* key = chunk.mutable_key();
        key->set_model_fingerprint(cluster.fingerprint());
        key->set_layer(id.layer);
        key->set_expert(id.expert);
        if (header) {
          FillTensor(w.gate, chunk.mutable_gate());
          FillTensor(w.up, chunk.mutable_up());
          FillTensor(w.down, chunk.mutable_down());
          FillBiasesAndActivation(w, &chunk);
          chunk.set_total_bytes(expert_bytes);
          chunk.set_xxh64(ModelChecksum(model, options, id.layer, id.expert));
          v1::ModelShape* shape = chunk.mutable_model();
          shape->set_n_layer(model.config().n_layer);
          shape->set_n_expert(model.config().n_expert);
          shape->set_n_embd(static_cast<int32_t>(model.config().n_embd));
          header = false;
        }
        // A chunk never spans two matrices: they are separate regions of the file.
        const uint64_t n = std::min(chunk_bytes, part_bytes - at);
        chunk.set_offset(offset);
        chunk.set_data(reinterpret_cast<const char*>(part.data) + at, n);
        absl::Status s = stream->Write(chunk);
        if (!s.ok()) {
          absl::StatusOr<v1::IngestReply> why = stream->Finish();
          return why.ok() ? s : why.status();
        }
        at += n;
        offset += n;
        progress.Add(n);
      }
    }
  }
  COLIBRI_ASSIGN_OR_RETURN(v1::IngestReply reply, stream->Finish());
  std::set<ExpertId> stored;
  for (const v1::ExpertKey& key : reply.stored()) stored.insert({key.layer(), key.expert()});
  for (const ExpertId& id : missing) {
    if (stored.count(id) == 0) {
      return absl::DataLossError(absl::StrCat(cluster.node(i).address, " did not store layer ",
                                              id.layer, " expert ", id.expert));
    }
  }
  progress.Print(true);
  absl::MutexLock lock(out_mu);
  result->experts_sent += static_cast<int64_t>(missing.size());
  result->bytes_sent += total;
  return absl::OkStatus();
}

absl::Status ImportExperts(const Cluster& cluster, int i, const std::vector<ExpertId>& missing,
                           const ExpertSetupOptions& options, absl::Mutex* out_mu,
                           ExpertSetupResult* result) {
  v1::ImportRequest request;
  request.set_gguf_path(options.node_gguf_path);
  request.set_model_fingerprint(cluster.fingerprint());
  for (const ExpertId& id : missing) {
    v1::ExpertKey* key = request.add_experts();
    key->set_model_fingerprint(cluster.fingerprint());
    key->set_layer(id.layer);
    key->set_expert(id.expert);
  }
  std::shared_ptr<NodeClient> client = cluster.client(i);
  if (client == nullptr) return Released(cluster, i);
  // The node streams its counts; the total is its own (the experts' bytes
  // as it stores them).
  Progress progress(options.progress, options.progress_in_place, "import", cluster.node(i).address,
                    0, options.progress_interval, out_mu);
  COLIBRI_ASSIGN_OR_RETURN(v1::ImportReply reply,
                           client->ImportWithProgress(request, [&](const v1::ImportReply& so_far) {
                             progress.Set(so_far.bytes_done(), so_far.bytes_total());
                           }));
  if (reply.imported() != static_cast<int32_t>(missing.size())) {
    return absl::DataLossError(absl::StrCat(cluster.node(i).address, " imported ", reply.imported(),
                                            " of ", missing.size(), " experts from ",
                                            options.node_gguf_path));
  }
  progress.Done(reply.bytes_done(), reply.bytes_total(),
                absl::StrFormat(", %d experts written", reply.imported()));
  absl::MutexLock lock(out_mu);
  result->experts_imported += reply.imported();
  return absl::OkStatus();
}

}  // namespace

uint64_t ExpertBytes(const moe::ExpertWeights& w) {
  uint64_t total = 0;
  for (const ExpertPart& part : ExpertParts(w)) total += part.bytes;
  return total;
}

uint64_t ExpertChecksum(const moe::ExpertWeights& w) {
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  for (const ExpertPart& part : ExpertParts(w)) XXH64_update(state, part.data, part.bytes);
  const uint64_t h = XXH64_digest(state);
  XXH64_freeState(state);
  return h;
}

absl::StatusOr<ExpertSetupResult> EnsureExperts(const Cluster& cluster, const arch::Model& model,
                                                const ExpertSetupOptions& options) {
  return EnsureExperts(cluster, cluster.placement(), model, options);
}

absl::StatusOr<ExpertSetupResult> EnsureExperts(const Cluster& cluster, const Placement& placement,
                                                const arch::Model& model,
                                                const ExpertSetupOptions& options) {
  ExpertSetupResult result;
  absl::Mutex mu;  // guards result and the progress stream
  // Nodes that joined after `placement` was computed hold nothing of it.
  const int n_nodes = std::min(cluster.n_nodes(), placement.n_nodes());
  std::vector<absl::Status> statuses(n_nodes);
  std::vector<std::thread> threads;
  for (int i = 0; i < n_nodes; ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<std::vector<ExpertId>> missing =
          MissingExperts(cluster, placement, i, model, options);
      if (!missing.ok()) {
        statuses[i] = missing.status();
        return;
      }
      if (missing->empty()) return;
      statuses[i] = options.node_gguf_path.empty()
                        ? StreamExperts(cluster, i, model, *missing, options, &mu, &result)
                        : ImportExperts(cluster, i, *missing, options, &mu, &result);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < n_nodes; ++i) {
    const absl::Status& s = statuses[i];
    if (s.ok()) continue;
    if (!options.skip_failed_nodes || absl::IsCancelled(s)) return s;
    result.failed_nodes.emplace_back(i, s);
  }
  return result;
}

void ReleaseExpertPages(const arch::Model& model) {
  for (const std::vector<moe::ExpertWeights>& layer : model.experts()) {
    for (auto member :
         {&moe::ExpertWeights::gate, &moe::ExpertWeights::up, &moe::ExpertWeights::down}) {
      uintptr_t begin = UINTPTR_MAX;
      uintptr_t end = 0;
      for (const moe::ExpertWeights& w : layer) {
        const ops::WeightMatrix& m = w.*member;
        if (m.data == nullptr) continue;
        begin = std::min(begin, reinterpret_cast<uintptr_t>(m.data));
        end = std::max(end, reinterpret_cast<uintptr_t>(m.data) + MatrixBytes(m));
      }
      if (begin >= end) continue;
      // Whole pages inside the region only, and none the coordinator copied
      // into RAM (the edges may hold dense tensors).
      for (int i = 0; const MappedFile* file = model.file().mapping(i); ++i) {
        const uintptr_t data = reinterpret_cast<uintptr_t>(file->data());
        if (begin >= data && end <= data + file->size()) file->DropPages(begin - data, end - begin);
      }
    }
  }
}

}  // namespace colibri::coordinator
