// Ingest without the wire: IngestChunks in, durable expert records out.
//
// A stream sends each expert as a header chunk (key, tensor shapes, total
// bytes, xxh64, optionally the model's shape) followed by data chunks at
// increasing offsets; a Stream assembles one expert at a time in memory and,
// once it has every byte, verifies the checksum, records the model's shape
// (ModelRegistry) and writes the expert to the store, which acknowledges only
// what is durable. An expert already stored with other bytes is refused
// (AlreadyExists, see expert_store.h); the same bytes again are acknowledged.
//
// Memory: every Stream of one IngestAssembly together holds at most
// Options::max_buffer_bytes of experts being assembled (each stream at most
// one expert); an expert that would go beyond is refused with
// ResourceExhausted and counted (refused()).
//
// Thread-safety: IngestAssembly's methods are thread-safe. A Stream is used
// by one thread at a time (Add on one thread, Store on another after it is
// fine, as long as they do not overlap).
#ifndef COLIBRI_EXPERT_NODE_INGEST_ASSEMBLY_H_
#define COLIBRI_EXPERT_NODE_INGEST_ASSEMBLY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "colibri/v1/expert.pb.h"
#include "expert_node/expert_record.h"
#include "expert_node/expert_store.h"
#include "expert_node/model_registry.h"

namespace colibri::expert_node {

class IngestAssembly {
 public:
  struct Options {
    // Largest expert (gate + up + down bytes) accepted. Default: 4 GiB.
    uint64_t max_expert_bytes = uint64_t{4} << 30;
    // Bytes all streams together may hold in experts being assembled.
    // Default: 2 GiB.
    uint64_t max_buffer_bytes = uint64_t{2} << 30;
  };

  // The experts one stream sends, assembled one at a time.
  class Stream {
   public:
    ~Stream() { Release(); }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;

    // Adds the stream's next chunk. InvalidArgument (naming the expert and
    // the field) for a header that does not parse or exceeds
    // max_expert_bytes, a header before the previous expert is complete, a
    // data chunk without its header or at the wrong offset or beyond
    // total_bytes; ResourceExhausted when the expert's buffer would exceed
    // max_buffer_bytes. After an error the stream is to be ended.
    absl::Status Add(const v1::IngestChunk& chunk);
    // True when the expert being assembled has all its bytes: Store it
    // before the next Add.
    bool expert_complete() const { return assembling_ && received_ == layout_.payload_bytes(); }
    // Verifies the complete expert (DataLoss when its bytes do not match the
    // header's xxh64), registers its model's shape and writes it durably
    // (registry and store errors pass through), then frees its buffer. On
    // success appends its key and bytes to *reply. Blocks on the disk write.
    absl::Status Store(v1::IngestReply* reply);
    // OK when the stream may end here; InvalidArgument when it ends inside an
    // expert (nothing of that expert is stored).
    absl::Status End() const;
    // "; nothing of <expert> was stored" while an expert is partly
    // assembled, else "": for the message of an error that ends the stream.
    std::string PartialNote() const;
    // Frees the partly assembled expert and its share of max_buffer_bytes.
    void Release();

   private:
    friend class IngestAssembly;
    explicit Stream(IngestAssembly* assembly) : assembly_(assembly) {}
    absl::Status StartExpert(const v1::IngestChunk& chunk, ExpertId id);

    IngestAssembly* const assembly_;
    bool assembling_ = false;
    ExpertId id_;
    ExpertLayout layout_;
    ModelInfo shape_;                    // from the header; zero fields unknown
    std::unique_ptr<uint8_t[]> buffer_;  // [layout_.payload_bytes()]
    uint64_t reserved_ = 0;              // of assembly_->buffered_
    uint64_t received_ = 0;
  };

  // store and registry are borrowed and must outlive the assembly and its
  // streams.
  IngestAssembly(const Options& options, ExpertStore* store, ModelRegistry* registry);
  IngestAssembly(const IngestAssembly&) = delete;
  IngestAssembly& operator=(const IngestAssembly&) = delete;

  std::unique_ptr<Stream> OpenStream() { return std::unique_ptr<Stream>(new Stream(this)); }

  // Bytes the streams hold now in experts being assembled.
  uint64_t buffered_bytes() const { return buffered_.load(); }
  // Experts refused because max_buffer_bytes was reached.
  uint64_t refused() const { return refused_.load(); }
  // Streams ended for idling (counted by whoever ends them).
  void CountIdleTimeout() { idle_timeouts_.fetch_add(1); }
  uint64_t idle_timeouts() const { return idle_timeouts_.load(); }

 private:
  // Takes `bytes` of max_buffer_bytes; false (counted) when they are not
  // available.
  bool Reserve(uint64_t bytes);

  const Options options_;
  ExpertStore* const store_;
  ModelRegistry* const registry_;
  std::atomic<uint64_t> buffered_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> idle_timeouts_{0};
};

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_INGEST_ASSEMBLY_H_
