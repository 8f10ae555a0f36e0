#include "model/arch/model.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/huge_pages.h"
#include "common/mapped_file.h"
#include "common/memory_limit.h"
#include "common/status_macros.h"
#include "model/arch/nextn.h"
#include "model/ops/quantize.h"

namespace colibri::arch {

// Resolves tensor names to typed views, checking shape and type.
class Model::Binder {
 public:
  // How a step reads a matrix: whole, only when its experts are routed to, or
  // a row at a time (an embedding).
  enum class Use { kEveryStep, kRoutedExperts, kRows };

  Binder(Model* model) : model_(model), file_(*model->file_) {}

  const gguf::TensorInfo* Find(const std::string& name) const { return file_.FindTensor(name); }

  absl::StatusOr<const gguf::TensorInfo*> Require(const std::string& name) const {
    const gguf::TensorInfo* t = file_.FindTensor(name);
    if (t == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(file_.path(), ": required tensor ", name, " is missing"));
    }
    if (!ops::GetTraits(t->type).supported) {
      return absl::InvalidArgumentError(absl::StrCat(file_.path(), ": unsupported tensor type ",
                                                     ops::TypeName(t->type), " in tensor ", name));
    }
    return t;
  }

  absl::Status CheckDims(const gguf::TensorInfo& t, std::vector<int64_t> want) const {
    if (t.dims != want) {
      return absl::InvalidArgumentError(absl::StrCat(file_.path(), ": tensor ", t.name,
                                                     " has shape ", DimsString(t.dims),
                                                     ", expected ", DimsString(want)));
    }
    return absl::OkStatus();
  }

  // A 2-D matrix [rows][cols] (GGML dims {cols, rows}), read whole by every
  // step unless `use` says otherwise.
  absl::StatusOr<ops::WeightMatrix> Matrix(const std::string& name, int64_t cols, int64_t rows,
                                           Use use = Use::kEveryStep) {
    COLIBRI_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, Require(name));
    COLIBRI_RETURN_IF_ERROR(CheckDims(*t, {cols, rows}));
    ops::WeightMatrix m = View(*t, cols, rows, 0);
    Record(*t, use, m);
    return m;
  }

  // Expert e of a merged 3-D tensor {cols, rows, n_expert}.
  absl::StatusOr<std::vector<ops::WeightMatrix>> ExpertMatrices(const std::string& name,
                                                                int64_t cols, int64_t rows,
                                                                int n_expert,
                                                                Use use = Use::kEveryStep) {
    COLIBRI_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, Require(name));
    COLIBRI_RETURN_IF_ERROR(CheckDims(*t, {cols, rows, n_expert}));
    std::vector<ops::WeightMatrix> out;
    for (int e = 0; e < n_expert; ++e) out.push_back(View(*t, cols, rows, e));
    if (!out.empty()) Record(*t, use, out[0]);
    return out;
  }

  // Notes where a tensor's bytes are, for Model::CopyWeightsToRam and
  // InterleaveWeights; `first` is the view of its first matrix.
  void Record(const gguf::TensorInfo& t, Use use, const ops::WeightMatrix& first) {
    if (use == Use::kRows) return;
    model_->weight_ranges_.push_back(
        {t.split_index, t.offset_in_file, t.n_bytes, use == Use::kRoutedExperts, first});
  }

  // A float32 copy of a vector tensor of n elements (any supported type).
  absl::StatusOr<const float*> Vector(const std::string& name, int64_t n) {
    COLIBRI_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, Require(name));
    COLIBRI_RETURN_IF_ERROR(CheckDims(*t, {n}));
    auto v = std::make_unique<std::vector<float>>(n);
    ops::DequantizeRow(t->type, t->data, v->data(), n);
    const float* p = v->data();
    model_->owned_vectors_.push_back(std::move(v));
    return p;
  }

  // The attention tensors of a layer with prefix p ("blk.N.").
  absl::Status LoadStandardAttention(const ModelConfig& c, const std::string& p, LayerWeights* l);
  absl::Status LoadMla(const ModelConfig& c, const std::string& p, LayerWeights* l);

  // A float32 copy of a tensor of any shape (e.g. per-expert biases).
  absl::StatusOr<const float*> VectorDims(const std::string& name, std::vector<int64_t> dims) {
    COLIBRI_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, Require(name));
    COLIBRI_RETURN_IF_ERROR(CheckDims(*t, dims));
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    auto v = std::make_unique<std::vector<float>>(n);
    ops::DequantizeRow(t->type, t->data, v->data(), n);
    const float* p = v->data();
    model_->owned_vectors_.push_back(std::move(v));
    return p;
  }

  absl::StatusOr<const float*> OptionalVector(const std::string& name, int64_t n) {
    if (Find(name) == nullptr) return nullptr;
    return Vector(name, n);
  }

 private:
  static std::string DimsString(const std::vector<int64_t>& dims) {
    std::string s = "(";
    for (size_t i = 0; i < dims.size(); ++i) absl::StrAppend(&s, i ? ", " : "", dims[i]);
    return s + ")";
  }

  ops::WeightMatrix View(const gguf::TensorInfo& t, int64_t cols, int64_t rows, int index) const {
    ops::WeightMatrix m;
    m.type = t.type;
    m.rows = rows;
    m.cols = cols;
    m.row_bytes = ops::RowBytesUnchecked(t.type, cols);
    m.data = t.data + static_cast<uint64_t>(index) * rows * m.row_bytes;
    return m;
  }

  Model* model_;
  const gguf::GgufFile& file_;
};

absl::Status Model::Binder::LoadStandardAttention(const ModelConfig& c, const std::string& p,
                                                  LayerWeights* l) {
  Binder& b = *this;
  COLIBRI_ASSIGN_OR_RETURN(l->wq, b.Matrix(p + "attn_q.weight", c.n_embd, c.q_dim()));
  COLIBRI_ASSIGN_OR_RETURN(l->wk, b.Matrix(p + "attn_k.weight", c.n_embd, c.kv_dim()));
  COLIBRI_ASSIGN_OR_RETURN(l->wv, b.Matrix(p + "attn_v.weight", c.n_embd, c.v_dim()));
  COLIBRI_ASSIGN_OR_RETURN(l->wo,
                           b.Matrix(p + "attn_output.weight", c.n_head * c.head_dim_v, c.n_embd));
  if (c.qkv_bias) {
    COLIBRI_ASSIGN_OR_RETURN(l->bq, b.Vector(p + "attn_q.bias", c.q_dim()));
    COLIBRI_ASSIGN_OR_RETURN(l->bk, b.Vector(p + "attn_k.bias", c.kv_dim()));
    COLIBRI_ASSIGN_OR_RETURN(l->bv, b.Vector(p + "attn_v.bias", c.v_dim()));
  }
  if (c.qk_norm == QkNorm::kPerHead) {
    COLIBRI_ASSIGN_OR_RETURN(l->q_norm, b.Vector(p + "attn_q_norm.weight", c.head_dim));
    COLIBRI_ASSIGN_OR_RETURN(l->k_norm, b.Vector(p + "attn_k_norm.weight", c.head_dim));
  } else if (c.qk_norm == QkNorm::kWhole) {
    COLIBRI_ASSIGN_OR_RETURN(l->q_norm, b.Vector(p + "attn_q_norm.weight", c.q_dim()));
    COLIBRI_ASSIGN_OR_RETURN(l->k_norm, b.Vector(p + "attn_k_norm.weight", c.kv_dim()));
  }
  if (c.attn_output_bias) {
    COLIBRI_ASSIGN_OR_RETURN(l->bo, b.Vector(p + "attn_output.bias", c.n_embd));
  }
  if (c.attn_sinks) {
    COLIBRI_ASSIGN_OR_RETURN(l->sinks, b.Vector(p + "attn_sinks.weight", c.n_head));
  }
  return absl::OkStatus();
}

absl::Status Model::Binder::LoadMla(const ModelConfig& c, const std::string& p, LayerWeights* l) {
  Binder& b = *this;
  if (c.q_lora_rank > 0) {
    COLIBRI_ASSIGN_OR_RETURN(l->wq_a, b.Matrix(p + "attn_q_a.weight", c.n_embd, c.q_lora_rank));
    COLIBRI_ASSIGN_OR_RETURN(l->q_a_norm, b.Vector(p + "attn_q_a_norm.weight", c.q_lora_rank));
    COLIBRI_ASSIGN_OR_RETURN(l->wq_b, b.Matrix(p + "attn_q_b.weight", c.q_lora_rank, c.q_dim()));
  } else {
    COLIBRI_ASSIGN_OR_RETURN(l->wq, b.Matrix(p + "attn_q.weight", c.n_embd, c.q_dim()));
  }
  COLIBRI_ASSIGN_OR_RETURN(
      l->wkv_a, b.Matrix(p + "attn_kv_a_mqa.weight", c.n_embd, c.kv_lora_rank + c.n_rot));
  COLIBRI_ASSIGN_OR_RETURN(l->kv_a_norm, b.Vector(p + "attn_kv_a_norm.weight", c.kv_lora_rank));
  COLIBRI_ASSIGN_OR_RETURN(
      l->wk_b, b.ExpertMatrices(p + "attn_k_b.weight", c.qk_nope(), c.kv_lora_rank, c.n_head));
  COLIBRI_ASSIGN_OR_RETURN(
      l->wv_b, b.ExpertMatrices(p + "attn_v_b.weight", c.kv_lora_rank, c.head_dim_v, c.n_head));
  COLIBRI_ASSIGN_OR_RETURN(l->wo,
                           b.Matrix(p + "attn_output.weight", c.n_head * c.head_dim_v, c.n_embd));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Model>> Model::Open(const std::string& path) {
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file, gguf::GgufFile::Open(path));
  return Load(std::move(file));
}

absl::StatusOr<std::unique_ptr<Model>> Model::Load(std::unique_ptr<gguf::GgufFile> file) {
  return LoadBlocks(std::move(file), -1);
}

absl::StatusOr<std::unique_ptr<Model>> Model::LoadNextn(std::unique_ptr<gguf::GgufFile> file,
                                                        int index) {
  return LoadBlocks(std::move(file), index);
}

absl::StatusOr<std::unique_ptr<Model>> Model::LoadBlocks(std::unique_ptr<gguf::GgufFile> file,
                                                         int nextn_index) {
  std::unique_ptr<Model> model(new Model());
  COLIBRI_ASSIGN_OR_RETURN(model->config_, ReadModelConfig(*file));
  model->file_ = std::move(file);
  // Blocks blk.<first_block> .. of the file become layers 0 ..
  int first_block = 0;
  if (nextn_index >= 0) {
    COLIBRI_ASSIGN_OR_RETURN(first_block,
                             ToNextnConfig(model->file(), nextn_index, &model->config_));
  }
  const ModelConfig& c = model->config_;
  Binder b(model.get());

  using Use = Binder::Use;
  COLIBRI_ASSIGN_OR_RETURN(model->token_embd_,
                           b.Matrix("token_embd.weight", c.n_embd, c.n_vocab, Use::kRows));
  COLIBRI_ASSIGN_OR_RETURN(model->output_norm_, b.Vector("output_norm.weight", c.n_embd));
  if (b.Find("output.weight") != nullptr) {
    COLIBRI_ASSIGN_OR_RETURN(model->output_, b.Matrix("output.weight", c.n_embd, c.n_vocab));
  } else {
    // The embedding is the output head as well: read whole every step.
    COLIBRI_ASSIGN_OR_RETURN(model->output_, b.Matrix("token_embd.weight", c.n_embd, c.n_vocab));
    model->tied_embeddings_ = true;
  }
  if (nextn_index >= 0) {
    const std::string p = absl::StrCat("blk.", first_block, ".nextn.");
    NextnWeights& n = model->nextn_;
    COLIBRI_ASSIGN_OR_RETURN(n.eh_proj, b.Matrix(p + "eh_proj.weight", 2 * c.n_embd, c.n_embd));
    COLIBRI_ASSIGN_OR_RETURN(n.enorm, b.Vector(p + "enorm.weight", c.n_embd));
    COLIBRI_ASSIGN_OR_RETURN(n.hnorm, b.Vector(p + "hnorm.weight", c.n_embd));
    COLIBRI_ASSIGN_OR_RETURN(model->output_norm_,
                             b.Vector(p + "shared_head_norm.weight", c.n_embd));
    if (b.Find(p + "embed_tokens.weight") != nullptr) {
      COLIBRI_ASSIGN_OR_RETURN(model->token_embd_,
                               b.Matrix(p + "embed_tokens.weight", c.n_embd, c.n_vocab,
                                        model->tied_embeddings_ ? Use::kEveryStep : Use::kRows));
      if (model->tied_embeddings_) model->output_ = model->token_embd_;
    }
    if (b.Find(p + "shared_head_head.weight") != nullptr) {
      COLIBRI_ASSIGN_OR_RETURN(model->output_,
                               b.Matrix(p + "shared_head_head.weight", c.n_embd, c.n_vocab));
      model->tied_embeddings_ = false;
    }
  }

  model->layers_.resize(c.n_layer);
  model->experts_.resize(c.n_layer);
  for (int il = 0; il < c.n_layer; ++il) {
    LayerWeights& l = model->layers_[il];
    const std::string p = absl::StrCat("blk.", first_block + il, ".");
    COLIBRI_ASSIGN_OR_RETURN(l.attn_norm, b.Vector(p + "attn_norm.weight", c.n_embd));
    if (c.attention == AttentionKind::kMla) {
      COLIBRI_RETURN_IF_ERROR(b.LoadMla(c, p, &l));
    } else {
      COLIBRI_RETURN_IF_ERROR(b.LoadStandardAttention(c, p, &l));
    }
    const std::string ffn_norm =
        b.Find(p + "ffn_norm.weight") == nullptr && b.Find(p + "post_attention_norm.weight")
            ? "post_attention_norm.weight"
            : "ffn_norm.weight";
    COLIBRI_ASSIGN_OR_RETURN(l.ffn_norm, b.Vector(p + ffn_norm, c.n_embd));
    if (c.is_dense_layer(il)) {
      COLIBRI_ASSIGN_OR_RETURN(l.ffn.gate, b.Matrix(p + "ffn_gate.weight", c.n_embd, c.n_ff));
      COLIBRI_ASSIGN_OR_RETURN(l.ffn.up, b.Matrix(p + "ffn_up.weight", c.n_embd, c.n_ff));
      COLIBRI_ASSIGN_OR_RETURN(l.ffn.down, b.Matrix(p + "ffn_down.weight", c.n_ff, c.n_embd));
      continue;
    }
    if (c.selection_bias) {
      COLIBRI_ASSIGN_OR_RETURN(l.selection_bias, b.Vector(p + "exp_probs_b.bias", c.n_expert));
    }
    if (c.router_bias) {
      COLIBRI_ASSIGN_OR_RETURN(l.router_bias, b.Vector(p + "ffn_gate_inp.bias", c.n_expert));
    }
    COLIBRI_ASSIGN_OR_RETURN(l.router, b.Matrix(p + "ffn_gate_inp.weight", c.n_embd, c.n_expert));

    l.experts.resize(c.n_expert);
    if (b.Find(p + "ffn_gate_exps.weight") != nullptr) {
      const Use routed = Use::kRoutedExperts;
      COLIBRI_ASSIGN_OR_RETURN(auto gate, b.ExpertMatrices(p + "ffn_gate_exps.weight", c.n_embd,
                                                           c.n_ff_exp, c.n_expert, routed));
      COLIBRI_ASSIGN_OR_RETURN(auto up, b.ExpertMatrices(p + "ffn_up_exps.weight", c.n_embd,
                                                         c.n_ff_exp, c.n_expert, routed));
      COLIBRI_ASSIGN_OR_RETURN(auto down, b.ExpertMatrices(p + "ffn_down_exps.weight", c.n_ff_exp,
                                                           c.n_embd, c.n_expert, routed));
      for (int e = 0; e < c.n_expert; ++e) l.experts[e] = {gate[e], up[e], down[e]};
      if (c.expert_bias) {
        COLIBRI_ASSIGN_OR_RETURN(const float* bg,
                                 b.VectorDims(p + "ffn_gate_exps.bias", {c.n_ff_exp, c.n_expert}));
        COLIBRI_ASSIGN_OR_RETURN(const float* bu,
                                 b.VectorDims(p + "ffn_up_exps.bias", {c.n_ff_exp, c.n_expert}));
        COLIBRI_ASSIGN_OR_RETURN(const float* bd,
                                 b.VectorDims(p + "ffn_down_exps.bias", {c.n_embd, c.n_expert}));
        for (int e = 0; e < c.n_expert; ++e) {
          l.experts[e].gate_bias = bg + static_cast<int64_t>(e) * c.n_ff_exp;
          l.experts[e].up_bias = bu + static_cast<int64_t>(e) * c.n_ff_exp;
          l.experts[e].down_bias = bd + static_cast<int64_t>(e) * c.n_embd;
        }
      }
      if (c.swiglu_oai) {
        for (moe::ExpertWeights& w : l.experts) w.activation = moe::Activation::kSwigluOai;
      }
    } else {
      if (c.expert_bias || c.swiglu_oai) {
        return absl::InvalidArgumentError(absl::StrCat(model->file().path(), ": required tensor ",
                                                       p, "ffn_gate_exps.weight is missing"));
      }
      for (int e = 0; e < c.n_expert; ++e) {
        const std::string pe = absl::StrCat(".", e, ".weight");
        moe::ExpertWeights& w = l.experts[e];
        const Use routed = Use::kRoutedExperts;
        COLIBRI_ASSIGN_OR_RETURN(w.gate,
                                 b.Matrix(p + "ffn_gate" + pe, c.n_embd, c.n_ff_exp, routed));
        COLIBRI_ASSIGN_OR_RETURN(w.up, b.Matrix(p + "ffn_up" + pe, c.n_embd, c.n_ff_exp, routed));
        COLIBRI_ASSIGN_OR_RETURN(w.down,
                                 b.Matrix(p + "ffn_down" + pe, c.n_ff_exp, c.n_embd, routed));
      }
    }
    if (c.shared_expert) {
      COLIBRI_ASSIGN_OR_RETURN(l.shared.gate,
                               b.Matrix(p + "ffn_gate_shexp.weight", c.n_embd, c.n_ff_shexp));
      COLIBRI_ASSIGN_OR_RETURN(l.shared.up,
                               b.Matrix(p + "ffn_up_shexp.weight", c.n_embd, c.n_ff_shexp));
      COLIBRI_ASSIGN_OR_RETURN(l.shared.down,
                               b.Matrix(p + "ffn_down_shexp.weight", c.n_ff_shexp, c.n_embd));
      if (c.shared_expert_gate) {
        COLIBRI_ASSIGN_OR_RETURN(l.shared_gate,
                                 b.Vector(p + "ffn_gate_inp_shexp.weight", c.n_embd));
      }
    }
    model->experts_[il] = l.experts;
  }
  return model;
}

absl::Status Model::EmbedToken(int32_t id, float* out) const {
  if (id < 0 || id >= config_.n_vocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("token id ", id, " is outside the vocabulary [0, ", config_.n_vocab, ")"));
  }
  ops::DequantizeRow(token_embd_.type, token_embd_.data + id * token_embd_.row_bytes, out,
                     config_.n_embd);
  return absl::OkStatus();
}

Model::~Model() {
  for (const auto& [bytes, size] : interleaved_) ::munmap(bytes, size);
}

std::vector<Model::WeightRange> Model::RangesOf(RamWeights which) const {
  std::vector<WeightRange> ranges;
  for (const WeightRange& r : weight_ranges_) {
    if (r.routed_expert && which != RamWeights::kAll) continue;
    if (file_->mapping(r.split) == nullptr || r.bytes == 0) continue;
    ranges.push_back(r);
  }
  std::sort(ranges.begin(), ranges.end(), [](const WeightRange& a, const WeightRange& b) {
    return a.split != b.split ? a.split < b.split : a.offset < b.offset;
  });
  // A tensor read two ways (a tied embedding) is recorded twice.
  ranges.erase(std::unique(ranges.begin(), ranges.end(),
                           [](const WeightRange& a, const WeightRange& b) {
                             return a.split == b.split && a.offset == b.offset;
                           }),
               ranges.end());
  return ranges;
}

// Merged per file: ranges in offset order, joined when the gap between them
// is under a huge page (CopyToRam moves whole huge-page chunks anyway).
std::vector<Model::WeightRange> Model::MergeRanges(const std::vector<WeightRange>& ranges) {
  constexpr uint64_t kChunk = MappedFile::kHugePageBytes;
  std::vector<WeightRange> merged;
  for (const WeightRange& r : ranges) {
    WeightRange* last = merged.empty() ? nullptr : &merged.back();
    if (last != nullptr && last->split == r.split &&
        r.offset <= last->offset + last->bytes + kChunk) {
      last->bytes = std::max(last->bytes, r.offset + r.bytes - last->offset);
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

bool Model::FitsInRam(RamWeights which) const {
  constexpr uint64_t kChunk = MappedFile::kHugePageBytes;
  uint64_t total = 0;
  for (const WeightRange& r : MergeRanges(RangesOf(which))) {
    total += (r.offset + r.bytes + kChunk - 1) / kChunk * kChunk - r.offset / kChunk * kChunk;
  }
  const uint64_t limit = MemoryLimitBytes();
  return total > 0 && limit > 0 && total <= limit / 2;
}

absl::StatusOr<uint64_t> Model::CopyWeightsToRam(RamWeights which) const {
  if (!FitsInRam(which)) return uint64_t{0};
  std::vector<WeightRange> ranges = RangesOf(which);
  // The interleaved ones are in RAM already; their file bytes are not read.
  ranges.erase(std::remove_if(ranges.begin(), ranges.end(),
                              [&](const WeightRange& r) {
                                return interleaved_ranges_.count({r.split, r.offset}) > 0;
                              }),
               ranges.end());
  constexpr uint64_t kChunk = MappedFile::kHugePageBytes;
  uint64_t total = 0;
  for (const WeightRange& r : MergeRanges(ranges)) {
    COLIBRI_RETURN_IF_ERROR(file_->mapping(r.split)->CopyToRam(r.offset, r.bytes));
    total += (r.offset + r.bytes + kChunk - 1) / kChunk * kChunk - r.offset / kChunk * kChunk;
  }
  return total;
}

absl::StatusOr<uint64_t> Model::InterleaveWeights(RamWeights which) {
  if (!FitsInRam(which)) return uint64_t{0};
  // [source, source + bytes) of a tensor -> its interleaved copy.
  struct Moved {
    const uint8_t* source;
    uint64_t bytes;
    const uint8_t* copy;
  };
  std::vector<Moved> moved;
  uint64_t total = 0;
  for (const WeightRange& r : RangesOf(which)) {
    if (!ops::PrefersInterleaved(r.first) || interleaved_ranges_.count({r.split, r.offset})) {
      continue;
    }
    uint8_t* copy = MapHugePages(r.bytes);
    if (copy == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(
          file_->path(), ": no memory for ", r.bytes, " bytes of interleaved weights"));
    }
    interleaved_.emplace_back(copy, r.bytes);
    // The tensor's matrices one after another (the experts of a merged one).
    const uint64_t matrix_bytes = static_cast<uint64_t>(r.first.rows) * r.first.row_bytes;
    for (uint64_t at = 0; at + matrix_bytes <= r.bytes; at += matrix_bytes) {
      ops::WeightMatrix m = r.first;
      m.data = r.first.data + at;
      ops::InterleaveMatrix(m, copy + at);
    }
    moved.push_back({r.first.data, r.bytes, copy});
    interleaved_ranges_.insert({r.split, r.offset});
    total += r.bytes;
  }
  if (moved.empty()) return total;
  auto repoint = [&](ops::WeightMatrix* m) {
    for (const Moved& mv : moved) {
      if (m->data >= mv.source && m->data < mv.source + mv.bytes) {
        m->data = mv.copy + (m->data - mv.source);
        m->layout = ops::WeightLayout::kInterleaved8;
        return;
      }
    }
  };
  auto repoint_ffn = [&](moe::ExpertWeights* e) {
    repoint(&e->gate);
    repoint(&e->up);
    repoint(&e->down);
  };
  // Every view but token_embd_, whose rows EmbedToken looks up (a tied
  // output_ shares its bytes: the head then reads the copy, lookups the file).
  for (LayerWeights& l : layers_) {
    for (ops::WeightMatrix* m :
         {&l.wq, &l.wk, &l.wv, &l.wo, &l.wq_a, &l.wq_b, &l.wkv_a, &l.router}) {
      repoint(m);
    }
    for (ops::WeightMatrix& m : l.wk_b) repoint(&m);
    for (ops::WeightMatrix& m : l.wv_b) repoint(&m);
    repoint_ffn(&l.ffn);
    repoint_ffn(&l.shared);
    for (moe::ExpertWeights& e : l.experts) repoint_ffn(&e);
  }
  for (std::vector<moe::ExpertWeights>& layer : experts_) {
    for (moe::ExpertWeights& e : layer) repoint_ffn(&e);
  }
  repoint(&output_);
  repoint(&nextn_.eh_proj);
  return total;
}

bool Model::PopulateIfItFits() const {
  uint64_t bytes = 0;
  for (int i = 0; file_->mapping(i) != nullptr; ++i) bytes += file_->mapping(i)->size();
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (bytes == 0 || pages <= 0 || page_size <= 0 ||
      bytes > static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size) / 2) {
    return false;
  }
  for (int i = 0; file_->mapping(i) != nullptr; ++i) file_->mapping(i)->Populate();
  return true;
}

}  // namespace colibri::arch
