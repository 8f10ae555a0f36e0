// libFuzzer harness for the expert node's request decoding: the input's first
// byte picks a colibri.v1.ExpertService request type, the rest is parsed as
// that message (any bytes: protobuf's own parser first), then run through the
// node's checks. A ComputeLayerRequest goes through ParseLayerRequest (against
// a known model and against one of unknown shape) and, when it is accepted and
// small, through ComputeLayerWork over synthetic F32 experts, so that hostile
// routes, weights and hidden rows reach the compute path. Keys, fingerprints
// and Ingest tensor headers go through the record validators.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "colibri/v1/expert.pb.h"
#include "common/thread_pool.h"
#include "expert_node/expert_record.h"
#include "expert_node/layer_compute.h"
#include "model/moe/expert_ffn.h"

namespace {

namespace ex = colibri::expert_node;
namespace v1 = colibri::v1;

constexpr int64_t kEmbd = 16;
constexpr int64_t kFf = 8;
constexpr int32_t kLayers = 3;
constexpr int32_t kExperts = 8;

// One F32 expert shared by every (layer, expert): small deterministic values.
struct SyntheticExpert {
  SyntheticExpert() : gate(kFf * kEmbd), up(kFf * kEmbd), down(kEmbd * kFf) {
    for (size_t i = 0; i < gate.size(); ++i) gate[i] = 0.01f * static_cast<float>(i % 7) - 0.03f;
    for (size_t i = 0; i < up.size(); ++i) up[i] = 0.02f * static_cast<float>(i % 5) - 0.04f;
    for (size_t i = 0; i < down.size(); ++i) down[i] = 0.01f * static_cast<float>(i % 3);
    weights.gate = Matrix(gate, kFf, kEmbd);
    weights.up = Matrix(up, kFf, kEmbd);
    weights.down = Matrix(down, kEmbd, kFf);
  }
  static colibri::ops::WeightMatrix Matrix(const std::vector<float>& v, int64_t rows,
                                           int64_t cols) {
    colibri::ops::WeightMatrix m;
    m.type = colibri::ops::TensorType::kF32;
    m.data = reinterpret_cast<const uint8_t*>(v.data());
    m.rows = rows;
    m.cols = cols;
    m.row_bytes = static_cast<uint64_t>(cols) * sizeof(float);
    return m;
  }
  std::vector<float> gate, up, down;
  colibri::moe::ExpertWeights weights;
};

void FuzzComputeLayer(const v1::ComputeLayerRequest& request, const ex::ModelInfo& model) {
  static SyntheticExpert* expert = new SyntheticExpert();
  static colibri::ThreadPool* pool = new colibri::ThreadPool(1);
  absl::StatusOr<ex::LayerWork> work = ex::ParseLayerRequest(request, model);
  if (!work.ok() || work->n_embd != kEmbd || work->n_routes() > 256 || work->n_tokens > 64) {
    return;
  }
  auto lookup = [](int layer, int e) -> absl::StatusOr<colibri::moe::ExpertWeights> {
    if (layer < 0 || layer >= kLayers || e < 0 || e >= kExperts) {
      return absl::NotFoundError("no such expert");
    }
    return expert->weights;
  };
  std::vector<float> out;
  if (!ex::ComputeLayerWork(*work, lookup, pool, &out).ok()) return;
  const int64_t rows = work->reduce_per_token ? work->n_tokens : work->n_routes();
  if (out.size() != static_cast<size_t>(rows * kEmbd)) __builtin_trap();
}

void CheckKey(const v1::ExpertKey& key) {
  ex::ValidateFingerprint(key.model_fingerprint()).IgnoreError();
}

void CheckTensorHeaders(const v1::IngestChunk& chunk) {
  const v1::ExpertTensor* parts[3] = {&chunk.gate(), &chunk.up(), &chunk.down()};
  ex::ExpertLayout layout;
  ex::TensorLayout* out[3] = {&layout.gate, &layout.up, &layout.down};
  for (int i = 0; i < 3; ++i) {
    const v1::ExpertTensor& t = *parts[i];
    if (t.dims_size() < 2 || t.dims_size() > 4) return;
    out[i]->type = static_cast<colibri::ops::TensorType>(t.ggml_type());
    out[i]->cols = t.dims(0);
    out[i]->rows = t.dims(1);
    out[i]->bytes = chunk.total_bytes() / 3;
  }
  ex::ValidateLayout(layout, "fuzz").IgnoreError();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t kind = data[0] % 6;
  const void* body = data + 1;
  const int n = static_cast<int>(size - 1);
  switch (kind) {
    case 0:
    case 1: {
      v1::ComputeLayerRequest request;
      if (!request.ParseFromArray(body, n)) return 0;
      ex::ModelInfo model;
      model.n_embd = kEmbd;
      if (kind == 0) {
        model.n_layer = kLayers;
        model.n_expert = kExperts;
      }
      FuzzComputeLayer(request, model);
      break;
    }
    case 2: {
      v1::IngestChunk chunk;
      if (!chunk.ParseFromArray(body, n)) return 0;
      CheckKey(chunk.key());
      CheckTensorHeaders(chunk);
      break;
    }
    case 3: {
      v1::PrefetchRequest request;
      if (!request.ParseFromArray(body, n)) return 0;
      for (const v1::ExpertKey& key : request.experts()) CheckKey(key);
      break;
    }
    case 4: {
      v1::InventoryRequest request;
      if (!request.ParseFromArray(body, n)) return 0;
      ex::ValidateFingerprint(request.model_fingerprint()).IgnoreError();
      break;
    }
    case 5: {
      v1::ImportRequest request;
      if (!request.ParseFromArray(body, n)) return 0;
      ex::ValidateFingerprint(request.model_fingerprint()).IgnoreError();
      for (const v1::ExpertKey& key : request.experts()) CheckKey(key);
      break;
    }
  }
  return 0;
}
