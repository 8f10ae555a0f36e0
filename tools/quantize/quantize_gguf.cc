#include "tools/quantize/quantize_gguf.h"

#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/gguf/gguf_file.h"
#include "model/gguf/gguf_writer.h"
#include "model/ops/quantize.h"
#include "tools/synthetic_model/model_spec.h"

namespace colibri::quantize {
namespace {

using ops::TensorType;

bool Fits(TensorType type, int64_t row_length) {
  return row_length % ops::GetTraits(type).block_size == 0;
}

bool IsFloat(TensorType type) {
  return type == TensorType::kF32 || type == TensorType::kF16 || type == TensorType::kBF16;
}

}  // namespace

TensorType ChooseType(const std::string& name, int n_dims, int64_t row_length, TensorType source,
                      TensorType target) {
  if (n_dims < 2 || absl::StrContains(name, "ffn_gate_inp")) return source;
  for (TensorType t : {target, TensorType::kQ8_0, TensorType::kF16}) {
    if (Fits(t, row_length)) return t;
  }
  return TensorType::kF32;
}

absl::StatusOr<QuantizeReport> QuantizeGguf(const QuantizeOptions& options) {
  const ops::TensorTypeTraits& target = ops::GetTraits(options.type);
  {
    // Probe the encoder once so that an unsupported target fails before any work.
    std::vector<float> probe(target.block_size, 0.0f);
    std::vector<uint8_t> bytes(target.type_size);
    absl::Status s = ops::QuantizeRow(options.type, probe.data(), bytes.data(), target.block_size);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot encode type ", target.name, ": ", s.message()));
    }
  }
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> in,
                           gguf::GgufFile::Open(options.input_path));
  gguf::GgufWriter writer;
  for (const auto& [key, value] : in->metadata()) {
    if (key == "general.alignment") continue;  // the writer's own alignment applies
    writer.SetValue(key, value);
  }
  writer.SetValue("general.file_type", gguf::Value::Uint32(synthetic::LlamaFileType(options.type)));

  QuantizeReport report;
  std::vector<float> row;
  for (const gguf::TensorInfo& t : in->tensors()) {
    if (!IsFloat(t.type)) {
      return absl::InvalidArgumentError(
          absl::StrCat(options.input_path, ": tensor ", t.name, " is ", ops::TypeName(t.type),
                       "; only F32, F16 and BF16 inputs can be converted"));
    }
    const int64_t n = t.row_length();
    const TensorType type =
        ChooseType(t.name, static_cast<int>(t.dims.size()), n, t.type, options.type);
    report.input_bytes += t.n_bytes;
    if (type == t.type) {
      COLIBRI_RETURN_IF_ERROR(writer.AddTensor(t.name, t.type, t.dims,
                                               std::vector<uint8_t>(t.data, t.data + t.n_bytes)));
      report.output_bytes += t.n_bytes;
      ++report.tensors;
      continue;
    }
    if (type != options.type) {
      report.fallbacks.push_back(
          absl::StrCat(t.name, ": ", ops::TypeName(type), " (row length ", n, ")"));
    }
    const uint64_t in_row = ops::RowBytesUnchecked(t.type, n);
    const uint64_t out_row = ops::RowBytesUnchecked(type, n);
    std::vector<uint8_t> out(out_row * static_cast<uint64_t>(t.rows()));
    row.resize(static_cast<size_t>(n));
    for (int64_t r = 0; r < t.rows(); ++r) {
      ops::DequantizeRow(t.type, t.data + r * in_row, row.data(), n);
      COLIBRI_RETURN_IF_ERROR(ops::QuantizeRow(type, row.data(), out.data() + r * out_row, n));
    }
    report.output_bytes += out.size();
    COLIBRI_RETURN_IF_ERROR(writer.AddTensor(t.name, type, t.dims, std::move(out)));
    ++report.tensors;
    ++report.converted;
  }
  COLIBRI_RETURN_IF_ERROR(writer.WriteFile(options.output_path));
  return report;
}

}  // namespace colibri::quantize
