// Session::ForwardHalves: one forward pass as two half-batches pipelined
// against the expert backend (see session.h).
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "model/arch/session.h"
#include "model/moe/expert_ffn.h"
#include "model/ops/vector_ops.h"

namespace colibri::arch {

void Session::SwapHalves() {
  HalfRows& h = *half_;
  x_.swap(h.x);
  xn_.swap(h.xn);
  route_w_.swap(h.route_w);
  expert_out_.swap(h.expert_out);
  shared_out_.swap(h.shared_out);
  routes_.swap(h.routes);
  row_seq_.swap(h.row_seq);
  row_pos_.swap(h.row_pos);
  predicted_.swap(h.predicted);
}

absl::Status Session::ForwardHalves(int n_a, int n_b) {
  const int64_t d = c_.n_embd;
  if (half_ == nullptr) {
    half_ = std::make_unique<HalfRows>();
    HalfRows& h = *half_;
    h.x.resize(x_.size());
    h.xn.resize(xn_.size());
    h.route_w.resize(route_w_.size());
    h.expert_out.resize(expert_out_.size());
    h.shared_out.resize(shared_out_.size());
    h.routes.resize(routes_.size());
    h.row_seq.resize(row_seq_.size());
    h.row_pos.resize(row_pos_.size());
    h.predicted.resize(predicted_.size());
  }
  // Half B's rows move to the other buffers' first rows.
  std::memcpy(half_->x.data(), x_.data() + n_a * d, n_b * d * sizeof(float));
  std::copy(row_seq_.begin() + n_a, row_seq_.begin() + n_a + n_b, half_->row_seq.begin());
  std::copy(row_pos_.begin() + n_a, row_pos_.begin() + n_a + n_b, half_->row_pos.begin());
  if (!predicted_.empty()) half_->predicted = predicted_;

  // Channel of each half: with one channel, a half's batch is submitted only
  // once the other's was waited for (at most one batch in flight).
  moe::ExpertBackend* second = experts_->SecondChannel();
  moe::ExpertBackend* const chan[2] = {experts_, second != nullptr ? second : experts_};
  const int n[2] = {n_a, n_b};
  int layer[2] = {0, 0};               // the layer each half is at
  bool waiting[2] = {false, false};    // its MoE batch is routed, not yet summed
  bool submitted[2] = {false, false};  // ... and submitted
  moe::ExpertBatch batch[2];
  float* out[2] = {nullptr, nullptr};
  int active = 0;  // the half whose buffers the members hold

  auto activate = [&](int h) {
    if (h != active) {
      SwapHalves();
      active = h;
    }
    channel_ = chan[h];
  };
  auto submit = [&](int h) {
    SubmitTimed(chan[h], batch[h], out[h]);
    submitted[h] = true;
  };
  // Sums half h's outstanding MoE layer (if any), then runs it on to its
  // next MoE batch (submitted when its channel is free) or to the end.
  auto advance = [&](int h) -> absl::Status {
    activate(h);
    const int o = 1 - h;
    if (waiting[h]) {
      if (!submitted[h]) submit(h);
      absl::Status status = WaitTimed(chan[h]);
      waiting[h] = submitted[h] = false;
      if (waiting[o] && !submitted[o]) submit(o);  // the channel is free now
      if (!status.ok()) return status;
      MoeCombine(n[h]);
      ++layer[h];
    }
    while (layer[h] < c_.n_layer) {
      const int il = layer[h];
      AttentionBlock(il, n[h]);
      if (c_.is_dense_layer(il)) {
        DenseFfnBlock(il, n[h]);
        ++layer[h];
        continue;
      }
      MoeRoute(il, n[h]);
      MoeBatch(il, n[h], &batch[h]);
      out[h] = expert_out_.data();
      waiting[h] = true;
      if (chan[o] != chan[h] || !submitted[o]) submit(h);
      MoeShared(il, n[h]);
      return absl::OkStatus();
    }
    return absl::OkStatus();
  };

  // Each half hints its first MoE layer before any layer runs.
  for (int h = 0; h < 2; ++h) {
    activate(h);
    PredictFirstMoeLayer(n[h]);
  }
  // A before B at every layer: when a chunk is split across the halves, B's
  // rows attend to A's keys and values of the same layer.
  absl::Status status = absl::OkStatus();
  while (status.ok() && (layer[0] < c_.n_layer || layer[1] < c_.n_layer)) {
    for (int h = 0; h < 2 && status.ok(); ++h) {
      if (layer[h] < c_.n_layer) status = advance(h);
    }
  }
  if (!status.ok()) {
    // The other half's batch must complete before its buffers are reused.
    for (int h = 0; h < 2; ++h) {
      if (submitted[h]) WaitTimed(chan[h]).IgnoreError();
    }
    activate(0);
    channel_ = experts_;
    return status;
  }
  activate(0);
  channel_ = experts_;
  std::memcpy(x_.data() + n_a * d, half_->x.data(), n_b * d * sizeof(float));
  std::copy(half_->row_seq.begin(), half_->row_seq.begin() + n_b, row_seq_.begin() + n_a);
  std::copy(half_->row_pos.begin(), half_->row_pos.begin() + n_b, row_pos_.begin() + n_a);
  return absl::OkStatus();
}

}  // namespace colibri::arch
