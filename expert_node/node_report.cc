#include "expert_node/node_report.h"

#include "common/status_macros.h"

namespace colibri::expert_node {

absl::Status NodeReport::Inventory(const v1::InventoryRequest& request,
                                   v1::InventoryReply* reply) const {
  if (!request.model_fingerprint().empty()) {
    COLIBRI_RETURN_IF_ERROR(ValidateFingerprint(request.model_fingerprint()));
  }
  COLIBRI_ASSIGN_OR_RETURN(const auto models,
                           parts_.store->ListHashed(request.model_fingerprint()));
  reply->set_node_id(options_.node_id);
  reply->set_advertise_address(options_.advertise_address);
  reply->set_disk_budget_bytes(options_.disk_budget_bytes);
  reply->set_ram_budget_bytes(parts_.tier->budget_bytes());
  for (const auto& [fingerprint, layers] : models) {
    for (const auto& [layer, experts] : layers) {
      v1::InventoryEntry* entry = reply->add_entries();
      entry->set_model_fingerprint(fingerprint);
      entry->set_layer(layer);
      for (const ExpertStore::HashedExpert& e : experts) {
        entry->add_experts(e.expert);
        entry->add_xxh64(e.xxh64);
      }
    }
  }
  return absl::OkStatus();
}

void NodeReport::Stats(v1::NodeStatsReply* reply) const {
  const RamTier::Counters c = parts_.tier->counters();
  const LayerComputer::Counters compute = parts_.compute->counters();
  const PrefetchQueue::Counters hints = parts_.prefetch->counters();
  const ExpertStore& store = *parts_.store;
  reply->set_node_id(options_.node_id);
  reply->set_ram_budget_bytes(parts_.tier->budget_bytes());
  reply->set_ram_used_bytes(c.used_bytes);
  reply->set_experts_stored(store.experts_stored());
  reply->set_bytes_stored(store.payload_bytes_stored());
  reply->set_experts_in_ram(parts_.tier->resident_count());
  reply->set_ram_hits(c.hits);
  reply->set_ram_misses(c.misses);
  reply->set_disk_bytes_read(c.disk_bytes_read);
  reply->set_disk_wait_micros(compute.disk_wait_micros);
  reply->set_compute_requests(compute.requests);
  reply->set_compute_routes(compute.routes);
  reply->set_checksum_failures(store.checksum_failures());
  reply->set_ingest_buffered_bytes(parts_.ingest->buffered_bytes());
  reply->set_ingest_refused(parts_.ingest->refused());
  reply->set_ingest_timeouts(parts_.ingest->idle_timeouts());
  reply->set_prefetch_issued(hints.issued);
  reply->set_prefetch_used(c.prefetch_used);
  reply->set_prefetch_wasted(c.prefetch_wasted);
  reply->set_prefetch_dropped(hints.queue_full + c.prefetch_no_room + c.prefetch_declined);
  reply->set_in_flight(compute.in_flight);
  reply->set_ram_peak_used_bytes(c.peak_used_bytes);
  reply->set_pinned_experts(c.pinned_experts);
  reply->set_pinned_bytes(c.pinned_bytes);
  reply->set_prefetch_hints(hints.hints);
  reply->set_prefetch_ignored(hints.ignored);
  reply->set_prefetch_resident(hints.resident + c.prefetch_resident);
  reply->set_prefetch_coalesced(hints.coalesced + c.prefetch_coalesced);
  reply->set_prefetch_loaded(c.prefetch_loaded);
  reply->set_prefetch_stale(hints.stale + c.prefetch_cancelled);
  reply->set_ram_warmed_experts(c.warm_loaded);
  reply->set_load_waits(c.load_waits);
  reply->set_evictions(c.evictions);
  reply->set_uncached(c.uncached);
  reply->set_disk_read_micros(c.disk_read_micros);
  if (const BlobBufferPool* pool = store.buffer_pool(); pool != nullptr) {
    const BlobBufferPool::Counters b = pool->counters();
    reply->set_buffer_allocations(b.allocations);
    reply->set_buffer_reuses(b.reuses);
    reply->set_free_buffer_bytes(b.free_bytes);
  }
}

}  // namespace colibri::expert_node
