// colibri-quantize: converts a float GGUF model to F16 / Q8_0 / Q4_K / ... with
// colibri's own quantizer. Flags are read here only; the work is QuantizeGguf.
#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "common/version_flag.h"
#include "model/ops/tensor_type.h"
#include "tools/quantize/quantize_gguf.h"

int main(int argc, char** argv) {
  CLI::App app{"colibri-quantize: re-encodes the weight matrices of a float GGUF model"};
  colibri::AddVersionFlag(&app, "colibri-quantize");
  colibri::quantize::QuantizeOptions options;
  std::string type_name = "q8_0";
  app.add_option("--in,-i", options.input_path, "GGUF model with F32/F16/BF16 tensors")->required();
  app.add_option("--out,-o", options.output_path, "GGUF file to write")->required();
  app.add_option("--type,-t", type_name, "type of the matrices: f16, q8_0, q4_k, q6_k, ...")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  absl::StatusOr<colibri::ops::TensorType> type = colibri::ops::ParseTensorType(type_name);
  if (!type.ok()) {
    std::fprintf(stderr, "colibri-quantize: %s\n", std::string(type.status().message()).c_str());
    return 2;
  }
  options.type = *type;
  absl::StatusOr<colibri::quantize::QuantizeReport> report =
      colibri::quantize::QuantizeGguf(options);
  if (!report.ok()) {
    std::fprintf(stderr, "colibri-quantize: %s\n", std::string(report.status().message()).c_str());
    return 1;
  }
  for (const std::string& f : report->fallbacks) std::printf("fallback %s\n", f.c_str());
  std::printf("%s: %d tensors (%d converted to %s or a fallback), %.2f MiB -> %.2f MiB\n",
              options.output_path.c_str(), report->tensors, report->converted,
              colibri::ops::TypeName(options.type), report->input_bytes / 1048576.0,
              report->output_bytes / 1048576.0);
  return 0;
}
