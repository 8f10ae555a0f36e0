// colibri-make-model: writes a synthetic MoE GGUF model (seeded random weights,
// a real BPE tokenizer) of any shape, so that demos and benchmarks need no
// download. Flags are read here only; the work is GenerateModel.
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/process_knobs.h"
#include "common/version_flag.h"
#include "model/ops/tensor_type.h"
#include "tools/synthetic_model/model_spec.h"
#include "tools/synthetic_model/synthetic_model.h"

namespace {

using colibri::synthetic::Architecture;
using colibri::synthetic::ArchitectureName;
using colibri::synthetic::GenerateOptions;
using colibri::synthetic::GenerateReport;
using colibri::synthetic::ModelSpec;

// A shape flag that overrides one ModelSpec field when given.
struct IntFlag {
  const char* flag;
  int ModelSpec::*field;
  const char* help;
  int value = 0;
  CLI::Option* option = nullptr;
};

struct FloatFlag {
  const char* flag;
  float ModelSpec::*field;
  const char* help;
  float value = 0.0f;
  CLI::Option* option = nullptr;
};

std::string Mib(uint64_t bytes) {
  return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

std::string Size(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (uint64_t{1} << 30)) return absl::StrFormat("%.2f GiB", b / (1 << 30));
  if (bytes >= (uint64_t{1} << 20)) return absl::StrFormat("%.1f MiB", b / (1 << 20));
  return absl::StrFormat("%.1f KiB", b / 1024);
}

// Progress on stderr for files big enough to take a while: a line rewritten in
// place on a terminal, one line per 10% otherwise.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool enabled) : enabled_(enabled), tty_(isatty(2) != 0) {}

  void Update(uint64_t done, uint64_t total, const std::string& tensor) {
    if (!enabled_ || total < (uint64_t{64} << 20)) return;
    const int percent = static_cast<int>(100 * done / total);
    if (tty_) {
      std::fprintf(stderr, "\r[%3d%%] %s / %s  %-40s", percent, Mib(done).c_str(),
                   Mib(total).c_str(), tensor.c_str());
    } else if (percent / 10 != last_decile_) {
      last_decile_ = percent / 10;
      std::fprintf(stderr, "[%3d%%] %s / %s  %s\n", percent, Mib(done).c_str(), Mib(total).c_str(),
                   tensor.c_str());
    }
    if (done == total) std::fprintf(stderr, "%swriting the file\n", tty_ ? "\n" : "");
    std::fflush(stderr);
  }

 private:
  const bool enabled_;
  const bool tty_;
  int last_decile_ = 0;
};

void PrintPresets() {
  for (const colibri::synthetic::Preset& preset : colibri::synthetic::Presets()) {
    std::printf("%-20s %s\n", preset.name, preset.description);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "colibri-make-model: writes a synthetic Mixture-of-Experts GGUF model with seeded random "
      "weights and a real byte-level BPE tokenizer"};
  colibri::AddVersionFlag(&app, "colibri-make-model");
  std::string preset_name = "demo";
  std::string arch_name;
  std::string type_name = "q4_k";
  std::string out;
  GenerateOptions options;
  bool tied_embeddings = false;
  bool quiet = false;
  bool list_presets = false;

  app.add_option("--preset", preset_name, "shape to start from (see --list-presets)")
      ->capture_default_str();
  app.add_flag("--list-presets", list_presets, "print the presets and exit");
  app.add_option("--arch", arch_name,
                 "general.architecture: qwen3moe, qwen2moe, llama, olmoe, deepseek2 or glm4moe "
                 "(default: the preset's; deepseek2 needs the MLA fields of --preset deepseek-v3)");
  IntFlag int_flags[] = {
      {"--layers", &ModelSpec::n_layer, "transformer blocks"},
      {"--hidden", &ModelSpec::n_embd, "embedding width"},
      {"--heads", &ModelSpec::n_head, "query heads"},
      {"--kv-heads", &ModelSpec::n_head_kv, "key/value heads"},
      {"--head-dim", &ModelSpec::head_dim, "width of one head"},
      {"--experts", &ModelSpec::n_expert, "routed experts per layer"},
      {"--top-k", &ModelSpec::n_expert_used, "experts used per token"},
      {"--expert-ffn", &ModelSpec::n_ff_exp, "hidden width of a routed expert"},
      {"--shared-ffn", &ModelSpec::n_ff_shexp,
       "hidden width of the shared expert (qwen2moe; default top-k * expert-ffn)"},
      {"--context", &ModelSpec::n_ctx, "context_length written to the file"},
      {"--vocab-size", &ModelSpec::vocab_size,
       "tokenizer size: trained as far as the built-in text allows (about 4,200), the rest unused "
       "padding"},
      {"--dense-layers", &ModelSpec::n_dense_lead, "deepseek2, glm4moe: leading dense layers"},
      {"--dense-ffn", &ModelSpec::n_ff_dense, "deepseek2, glm4moe: their FFN width"},
      {"--shared-experts", &ModelSpec::n_shared_exp,
       "deepseek2, glm4moe: shared experts, each expert-ffn wide"},
      {"--nextn-layers", &ModelSpec::n_nextn,
       "deepseek2, glm4moe: NextN/MTP blocks after the layers (for --draft mtp)"},
  };
  for (IntFlag& f : int_flags) f.option = app.add_option(f.flag, f.value, f.help);
  FloatFlag float_flags[] = {
      {"--rope-base", &ModelSpec::rope_freq_base, "rope.freq_base"},
      {"--rms-eps", &ModelSpec::rms_eps, "attention.layer_norm_rms_epsilon"},
  };
  for (FloatFlag& f : float_flags) f.option = app.add_option(f.flag, f.value, f.help);
  app.add_flag("--tied-embeddings", tied_embeddings, "omit output.weight (reuse token_embd)");
  app.add_option("--type", type_name,
                 "type of the weight matrices and token_embd (q4_k, q8_0, f16, ...); norms, "
                 "biases and routers stay F32")
      ->capture_default_str();
  app.add_option("--seed", options.seed, "weight seed (decimal or 0x hex)")->capture_default_str();
  app.add_option("--threads", options.num_threads, "worker threads (0: physical cores)")
      ->capture_default_str();
  app.add_option("--name", options.name, "general.name (default colibri-synthetic-<arch>)");
  app.add_option("--out,-o", out, "output file (default colibri-<preset>-<type>.gguf)");
  app.add_flag("--quiet,-q", quiet, "no progress or summary");
  CLI11_PARSE(app, argc, argv);

  if (list_presets) {
    PrintPresets();
    return 0;
  }
  absl::StatusOr<ModelSpec> preset = colibri::synthetic::FindPreset(preset_name);
  if (!preset.ok()) {
    std::fprintf(stderr, "colibri-make-model: %s\n",
                 std::string(preset.status().message()).c_str());
    return 2;
  }
  ModelSpec spec = *preset;
  if (!arch_name.empty()) {
    absl::StatusOr<Architecture> arch = colibri::synthetic::ParseArchitecture(arch_name);
    if (!arch.ok()) {
      std::fprintf(stderr, "colibri-make-model: %s\n",
                   std::string(arch.status().message()).c_str());
      return 2;
    }
    spec.arch = *arch;
  }
  for (const IntFlag& f : int_flags) {
    if (f.option->count() > 0) spec.*f.field = f.value;
  }
  for (const FloatFlag& f : float_flags) {
    if (f.option->count() > 0) spec.*f.field = f.value;
  }
  spec.tied_embeddings = spec.tied_embeddings || tied_embeddings;
  bool shared_given = false;
  for (const IntFlag& f : int_flags) {
    if (f.field == &ModelSpec::n_ff_shexp) shared_given = f.option->count() > 0;
  }
  if (spec.arch != Architecture::kQwen2Moe && !shared_given) spec.n_ff_shexp = 0;
  if (spec.arch == Architecture::kQwen2Moe && spec.n_ff_shexp == 0) {
    spec.n_ff_shexp = spec.n_expert_used * spec.n_ff_exp;
  }

  absl::StatusOr<colibri::ops::TensorType> type = colibri::ops::ParseTensorType(type_name);
  if (!type.ok()) {
    std::fprintf(stderr, "colibri-make-model: --type: %s\n",
                 std::string(type.status().message()).c_str());
    return 2;
  }
  options.type = *type;
  absl::StatusOr<colibri::ProcessKnobs> knobs = colibri::ReadProcessKnobs();
  if (!knobs.ok()) {
    std::fprintf(stderr, "colibri-make-model: %s\n", std::string(knobs.status().message()).c_str());
    return 2;
  }
  options.spin_us = knobs->spin_us;
  if (out.empty()) {
    out = absl::StrCat("colibri-", preset_name, "-", absl::AsciiStrToLower(type_name), ".gguf");
  }

  ProgressPrinter progress(!quiet);
  options.progress = [&progress](uint64_t done, uint64_t total, const std::string& tensor) {
    progress.Update(done, total, tensor);
  };
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<GenerateReport> report = colibri::synthetic::GenerateModel(spec, options, out);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!report.ok()) {
    std::fprintf(stderr, "colibri-make-model: %s\n", report.status().ToString().c_str());
    return 1;
  }
  for (const std::string& note : report->notes) std::fprintf(stderr, "note: %s\n", note.c_str());
  if (quiet) return 0;

  std::printf("wrote %s: %s (%llu bytes), %d tensors, %.2f M parameters, %.1f s\n", out.c_str(),
              Size(report->file_bytes).c_str(), static_cast<unsigned long long>(report->file_bytes),
              report->n_tensors, static_cast<double>(report->n_params) / 1e6, seconds);
  std::printf("  %s: layers %d, d=%d, %d/%d heads of %d, context %d%s\n",
              ArchitectureName(spec.arch), spec.n_layer, spec.n_embd, spec.n_head, spec.n_head_kv,
              spec.head_dim, spec.n_ctx, spec.tied_embeddings ? ", tied embeddings" : "");
  std::printf("  experts: %d per layer, top-%d, ffn %d", spec.n_expert, spec.n_expert_used,
              spec.n_ff_exp);
  if (spec.n_ff_shexp > 0) std::printf(", shared expert ffn %d", spec.n_ff_shexp);
  std::printf(
      "; %d routed experts in all, %s per expert, %s together (%.1f%% of the tensor data)\n",
      spec.n_expert * (spec.n_layer - spec.n_dense_lead), Size(report->bytes_per_expert).c_str(),
      Size(report->expert_bytes).c_str(),
      100.0 * static_cast<double>(report->expert_bytes) /
          static_cast<double>(report->tensor_bytes));
  std::printf("  weights %s, seed 0x%llX; tokenizer gpt2 BPE, %d tokens (%d merges)\n",
              colibri::ops::TypeName(options.type), static_cast<unsigned long long>(options.seed),
              report->n_vocab, report->n_merges);
  return 0;
}
