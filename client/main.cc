// colibri-client: the command line over client/client.h. Flags are read here
// only. Exit codes: 0 ok, 1 a runtime error (message on stderr), 2 usage.
#include <unistd.h>

#include <clocale>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/bench_command.h"
#include "client/bench_prompts.h"
#include "client/chat_command.h"
#include "client/client.h"
#include "client/interrupt_flag.h"
#include "client/line_reader.h"
#include "common/cli_config.h"
#include "common/cli_checks.h"
#include "common/mutex_mode.h"
#include "common/version_flag.h"
#include "google/protobuf/util/json_util.h"
#include "rpc/auth_token.h"

namespace {

using colibri::client::Client;
using colibri::client::ClientOptions;
namespace v1 = colibri::v1;

// The sampling flags with `colibri-coordinator run`'s names and defaults
// (model/sampling/sampler.h).
struct SamplingFlags {
  float temperature = 0.8f;
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int repeat_last_n = 64;
  // Drawn at random unless --seed is given (so two runs differ, as with
  // other tools); --verbose prints it, to repeat a run.
  uint64_t seed = 0;
};

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

const char* FinishReasonName(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_LENGTH: return "length";
    case v1::FINISH_REASON_EOS: return "eos";
    case v1::FINISH_REASON_STOP: return "stop";
    case v1::FINISH_REASON_CONTEXT: return "context";
    default: return "unspecified";
  }
}

int Fail(const absl::Status& status) {
  std::cerr << "colibri-client: " << absl::StatusCodeToString(status.code()) << ": "
            << status.message() << "\n";
  return 1;
}

std::string Bytes(uint64_t n) {
  if (n >= (uint64_t{1} << 30)) return absl::StrFormat("%.2fG", n / double(uint64_t{1} << 30));
  if (n >= (uint64_t{1} << 20)) return absl::StrFormat("%.1fM", n / double(uint64_t{1} << 20));
  if (n >= (uint64_t{1} << 10)) return absl::StrFormat("%.1fK", n / double(uint64_t{1} << 10));
  return absl::StrFormat("%d", n);
}

// A reply as one JSON object on a line: the proto's field names, every field
// (zeros and empty lists too), for scripts.
int PrintJson(const google::protobuf::Message& reply) {
  google::protobuf::util::JsonPrintOptions json;
  json.preserve_proto_field_names = true;
  json.always_print_primitive_fields = true;
  std::string out;
  if (const auto s = google::protobuf::util::MessageToJsonString(reply, &out, json); !s.ok()) {
    return Fail(absl::InternalError(absl::StrCat("the reply as JSON: ", s.ToString())));
  }
  std::printf("%s\n", out.c_str());
  return 0;
}

void PrintStatus(const v1::ClusterStatusReply& s) {
  std::printf("%-22s %-14s %-7s %8s %8s %9s %17s %10s %10s %9s %8s %9s\n", "ADDRESS", "NODE ID",
              "HEALTH", "ASSIGNED", "STORED", "BYTES", "RAM USED/BUDGET", "HITS", "MISSES",
              "REQUESTS", "FAILURES", "FAILOVERS");
  int64_t assigned = 0, stored = 0, requests = 0, failures = 0, failovers = 0;
  uint64_t bytes = 0, ram_used = 0, ram_budget = 0, hits = 0, misses = 0;
  int healthy = 0;
  for (const v1::NodeStatus& n : s.nodes()) {
    std::printf("%-22s %-14s %-7s %8lld %8lld %9s %17s %10llu %10llu %9lld %8lld %9lld\n",
                n.address().c_str(), n.node_id().c_str(),
                n.excluded() ? "OUT" : n.healthy() ? "ok" : "DOWN",
                static_cast<long long>(n.experts_assigned()),
                static_cast<long long>(n.experts_stored()), Bytes(n.bytes_stored()).c_str(),
                (Bytes(n.ram_used_bytes()) + "/" + Bytes(n.ram_budget_bytes())).c_str(),
                static_cast<unsigned long long>(n.ram_hits()),
                static_cast<unsigned long long>(n.ram_misses()),
                static_cast<long long>(n.requests()), static_cast<long long>(n.failures()),
                static_cast<long long>(n.failovers()));
    healthy += n.healthy() ? 1 : 0;
    assigned += n.experts_assigned();
    stored += n.experts_stored();
    bytes += n.bytes_stored();
    ram_used += n.ram_used_bytes();
    ram_budget += n.ram_budget_bytes();
    hits += n.ram_hits();
    misses += n.ram_misses();
    requests += n.requests();
    failures += n.failures();
    failovers += n.failovers();
  }
  const std::string health = absl::StrFormat("%d/%d", healthy, s.nodes_size());
  std::printf("%-22s %-14s %-7s %8lld %8lld %9s %17s %10llu %10llu %9lld %8lld %9lld\n", "TOTAL",
              "", health.c_str(), static_cast<long long>(assigned),
              static_cast<long long>(stored), Bytes(bytes).c_str(),
              (Bytes(ram_used) + "/" + Bytes(ram_budget)).c_str(),
              static_cast<unsigned long long>(hits), static_cast<unsigned long long>(misses),
              static_cast<long long>(requests), static_cast<long long>(failures),
              static_cast<long long>(failovers));
  for (const v1::NodeStatus& n : s.nodes()) {
    if (!n.advertise_address().empty()) {
      std::printf("%s advertises %s\n", n.address().c_str(), n.advertise_address().c_str());
    }
  }
  std::printf("replicas %d, fallback routes %lld, active generations %d, re-placements %lld\n",
              s.replicas(), static_cast<long long>(s.fallback_routes()), s.active_generations(),
              static_cast<long long>(s.replacements()));
  // The tiers: disk reads behind RAM misses, and what prefetch hints did.
  std::printf("\n%-22s %10s %11s %10s %10s %10s %10s\n", "ADDRESS", "DISK READ", "DISK WAIT",
              "PF ISSUED", "PF USED", "PF WASTED", "PF DROPPED");
  for (const v1::NodeStatus& n : s.nodes()) {
    std::printf("%-22s %10s %9.3f s %10llu %10llu %10llu %10llu\n", n.address().c_str(),
                Bytes(n.disk_bytes_read()).c_str(), n.disk_wait_micros() / 1e6,
                static_cast<unsigned long long>(n.prefetch_issued()),
                static_cast<unsigned long long>(n.prefetch_used()),
                static_cast<unsigned long long>(n.prefetch_wasted()),
                static_cast<unsigned long long>(n.prefetch_dropped()));
  }
  std::printf("predictor (next layer): recall %.3f, precision %.3f\n", s.predictor_recall(),
              s.predictor_precision());
}

}  // namespace

int main(int argc, char** argv) {
  colibri::UseReleaseMutexMode();
  CLI::App app{"colibri-client: talks to a Colibri coordinator (colibri-coordinator serve)"};
  app.require_subcommand(1);
  colibri::AddVersionFlag(&app, "colibri-client");
  ClientOptions options;
  std::string token_file;
  std::string ca_file;
  // The environment stands in for flags left out (as OLLAMA_HOST does); a
  // flag or a --config key wins over it.
  app.add_option("--coordinator", options.address,
                 "coordinator host:port")
      ->required()
      ->envname("COLIBRI_COORDINATOR")
      ->check(colibri::cli::ConnectAddress());
  app.add_option("--auth-token-file", token_file,
                 "file holding the coordinator's token")
      ->envname("COLIBRI_TOKEN_FILE");
  app.add_option("--tls-ca", ca_file, "PEM CA certificate: talk TLS to the coordinator");

  v1::GenerateRequest request;
  std::string prompt;
  std::string prompt_tokens;
  int n_predict = 64;
  SamplingFlags sf;
  std::vector<std::string> stop;
  bool ignore_eos = false, exact = false, print_ids = false, print_stats = false;
  CLI::App* gen = app.add_subcommand("generate", "generate text, printed as it streams");
  gen->add_option("prompt", prompt, "the prompt text");
  gen->add_option("--prompt-tokens", prompt_tokens,
                  "comma-separated token ids, fed exactly as given (instead of the text)");
  gen->add_option("--n-predict,-n", n_predict, "tokens to generate")
      ->capture_default_str()
      ->check(colibri::cli::kTokenCount);
  gen->add_option("--temp", sf.temperature, "sampling temperature (0: greedy)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  gen->add_option("--top-k", sf.top_k, "top-k (0: off)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  gen->add_option("--top-p", sf.top_p, "top-p (1: off)")
      ->capture_default_str()
      ->check(colibri::cli::kProbability);
  gen->add_option("--min-p", sf.min_p, "min-p (0: off)")
      ->capture_default_str()
      ->check(colibri::cli::kProbability);
  gen->add_option("--repeat-penalty", sf.repeat_penalty, "repetition penalty (1: off)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  gen->add_option("--presence-penalty", sf.presence_penalty, "(0: off)")->capture_default_str();
  gen->add_option("--frequency-penalty", sf.frequency_penalty, "(0: off)")
      ->capture_default_str();
  gen->add_option("--repeat-last-n", sf.repeat_last_n,
                  "tokens the penalties look back over (-1: all, 0: penalties off)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 20));
  gen->add_option("--seed", sf.seed, "sampling seed (default: random; --verbose prints it)")
      ->check(CLI::NonNegativeNumber);
  bool verbose = false;
  gen->add_flag("--verbose", verbose, "print the seed used on stderr");
  gen->add_option("--stop", stop, "stop when the text contains this (repeatable)");
  gen->add_flag("--ignore-eos", ignore_eos, "keep generating after end-of-generation tokens");
  gen->add_flag("--exact", exact, "keep activations in float32 (the reference path)");
  gen->add_flag("--print-token-ids", print_ids,
                "print the generated ids on one line instead of the text");
  gen->add_flag("--stats", print_stats, "print the finish reason and the request's stats");

  colibri::client::ChatOptions chat_options;
  int chat_n_predict = 512;
  float chat_temp = 0.8f;
  float chat_top_p = 1.0f;
  uint64_t chat_seed = 0;
  CLI::App* chat_cmd =
      app.add_subcommand("chat",
                         "an interactive conversation (the server applies the chat template); "
                         "/reset forgets the history, /exit or end of input quits");
  chat_cmd->add_option("--system", chat_options.system, "system prompt of the conversation");
  chat_cmd->add_option("--n-predict,-n", chat_n_predict, "most tokens of each reply")
      ->capture_default_str()
      ->check(colibri::cli::kTokenCount);
  chat_cmd->add_option("--temp", chat_temp, "sampling temperature (0: greedy)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  chat_cmd->add_option("--top-p", chat_top_p, "top-p (1: off)")
      ->capture_default_str()
      ->check(colibri::cli::kProbability);
  chat_cmd->add_option("--seed", chat_seed, "sampling seed (default: the server picks)")
      ->check(CLI::NonNegativeNumber);
  chat_cmd->add_flag("--stats", chat_options.print_stats,
                     "after each reply, print its token counts and finish reason on stderr");
  std::string chat_tools_file, chat_tool_choice;
  chat_cmd->add_option("--tools", chat_tools_file,
                       "JSON file of the functions the model may call (OpenAI's tools array); "
                       "calls print as [call ID] NAME ARGUMENTS, /tool ID TEXT answers one")
      ->check(CLI::ExistingFile);
  chat_cmd->add_option("--tool-choice", chat_tool_choice,
                       "auto, none, required or a function's name (default: auto)");

  colibri::client::BenchOptions bench_options;
  bool bench_json = false;
  CLI::App* bench_cmd = app.add_subcommand(
      "bench",
      "concurrent Generate requests: throughput, time to first token, inter-token "
      "latency");
  bench_cmd->add_option("--concurrency,-c", bench_options.concurrency, "requests in flight")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  bench_cmd->add_option("--requests", bench_options.requests, "requests in total")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  bench_cmd
      ->add_option("--duration", bench_options.duration_seconds,
                   "seconds to run instead of a request count")
      ->check(CLI::Range(0.001, 86400.0));
  bench_cmd
      ->add_option("--prompt-tokens", bench_options.prompt_tokens,
                   "prompt length: each prompt text is cut or repeated to it")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  std::string bench_prompts_file;
  bench_cmd->add_option("--prompts-file", bench_prompts_file,
                        "prompt texts, one per line, used in rotation by the requests (default: "
                        "16 built-in texts)");
  bench_cmd->add_option("--max-tokens", bench_options.max_tokens, "output tokens per request")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  bench_cmd->add_flag("--json", bench_json, "print one JSON object instead of the table");

  CLI::App* status_cmd = app.add_subcommand("status", "the expert nodes, their health and counters");
  bool status_json = false;
  status_cmd->add_flag("--json", status_json,
                       "print the reply as one JSON object (ClusterStatusReply's field names)");
  std::string health_service;
  CLI::App* health_cmd = app.add_subcommand("health", "SERVING (exit 0) or NOT_SERVING (exit 1)");
  health_cmd->add_option("--service", health_service,
                         "health of this service (default: the whole server)");
  CLI::App* info_cmd = app.add_subcommand("info", "the model being served");
  bool info_json = false;
  info_cmd->add_flag("--json", info_json,
                     "print the reply as one JSON object (ModelInfoReply's field names)");
  colibri::AddConfigFileOption(&app);
  if (const int code = colibri::cli::Parse(app, argc, argv); code >= 0) return code;

  if (!token_file.empty()) {
    absl::StatusOr<std::string> token = colibri::rpc::ReadTokenFile(token_file);
    if (!token.ok()) {
      std::cerr << "colibri-client: " << token.status().message() << "\n";
      return 1;
    }
    options.auth_token = *std::move(token);
  }
  if (!ca_file.empty()) {
    if (!ReadFile(ca_file, &options.tls_ca_pem)) {
      std::cerr << "colibri-client: cannot read TLS CA file " << ca_file << "\n";
      return 1;
    }
    options.use_tls = true;
  }
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  if (!client.ok()) return Fail(client.status());

  if (health_cmd->parsed()) {
    absl::StatusOr<bool> serving = (*client)->Health(health_service);
    std::printf("%s\n", serving.ok() && *serving ? "SERVING" : "NOT_SERVING");
    if (!serving.ok()) return Fail(serving.status());
    return *serving ? 0 : 1;
  }
  if (info_cmd->parsed()) {
    absl::StatusOr<v1::ModelInfoReply> info = (*client)->ModelInfo();
    if (!info.ok()) return Fail(info.status());
    if (info_json) return PrintJson(*info);
    std::printf(
        "architecture %s\nname %s\nfingerprint %s\nlayers %d\nembedding %d\nvocabulary %d\n"
        "context %d\nexperts %d (top-%d)\ndense bytes %llu\nrouted expert bytes %llu\n",
        info->architecture().c_str(), info->name().c_str(), info->fingerprint().c_str(),
        info->n_layer(), info->n_embd(), info->n_vocab(), info->n_ctx(), info->n_expert(),
        info->n_expert_used(), static_cast<unsigned long long>(info->dense_bytes()),
        static_cast<unsigned long long>(info->routed_expert_bytes()));
    return 0;
  }
  if (chat_cmd->parsed()) {
    chat_options.request.set_max_tokens(chat_n_predict);
    v1::SamplingParams* sampling = chat_options.request.mutable_sampling();
    sampling->set_temperature(chat_temp);
    sampling->set_top_p(chat_top_p);
    if (chat_cmd->count("--seed") > 0) {
      sampling->set_seed(chat_seed);
      sampling->set_has_seed(true);
    }
    if (!chat_tools_file.empty() || !chat_tool_choice.empty()) {
      std::ifstream tools_in(chat_tools_file);
      const std::string tools_json = chat_tools_file.empty()
                                         ? std::string("[]")
                                         : std::string(std::istreambuf_iterator<char>(tools_in),
                                                       std::istreambuf_iterator<char>());
      if (absl::Status s =
              colibri::client::SetTools(tools_json, chat_tool_choice, &chat_options.request);
          !s.ok()) {
        std::cerr << "colibri-client: --tools " << chat_tools_file << ": " << s.message() << "\n";
        return 2;
      }
    }
    if (::isatty(STDIN_FILENO) == 0) {
      colibri::client::StreamLineReader lines(std::cin);
      return colibri::client::RunChat(**client, chat_options, lines, std::cout, std::cerr);
    }
    // A person at a terminal: line editing and history; Ctrl-C stops a reply
    // (the flag is polled per token) or, at an empty prompt, ends.
    std::setlocale(LC_CTYPE, "");
    colibri::client::InstallInterruptFlag();
    chat_options.interrupted = colibri::client::TakeInterrupt;
    std::unique_ptr<colibri::client::TerminalLineReader> lines =
        colibri::client::TerminalLineReader::Open("> ", colibri::client::ChatHistoryPath(),
                                                  stderr);
    return colibri::client::RunChat(**client, chat_options, *lines, std::cout, std::cerr);
  }
  if (bench_cmd->parsed()) {
    if (!bench_prompts_file.empty()) {
      absl::StatusOr<std::vector<std::string>> prompts =
          colibri::client::ReadBenchPrompts(bench_prompts_file);
      if (!prompts.ok()) return Fail(prompts.status());
      bench_options.prompts = *std::move(prompts);
    }
    absl::StatusOr<colibri::client::BenchReport> report =
        colibri::client::RunBench(**client, bench_options);
    if (!report.ok()) return Fail(report.status());
    if (bench_json) {
      colibri::client::PrintBenchJson(bench_options, *report, std::cout);
    } else {
      colibri::client::PrintBenchTable(bench_options, *report, std::cout);
    }
    return 0;
  }
  if (status_cmd->parsed()) {
    absl::StatusOr<v1::ClusterStatusReply> status = (*client)->ClusterStatus();
    if (!status.ok()) return Fail(status.status());
    if (status_json) return PrintJson(*status);
    PrintStatus(*status);
    return 0;
  }

  // generate
  if (gen->count("--prompt-tokens") > 0) {
    if (!prompt.empty()) {
      std::cerr << "colibri-client: give the prompt text or --prompt-tokens, not both\n";
      return 2;
    }
    std::vector<int32_t> ids;
    if (const std::string error = colibri::cli::ParseTokenIds(prompt_tokens, &ids);
        !error.empty()) {
      std::cerr << "colibri-client: --prompt-tokens: " << error << "\n";
      return 2;
    }
    for (int32_t id : ids) request.mutable_tokens()->add_ids(id);
  } else {
    request.set_text(prompt);
  }
  if (n_predict < 1) {
    std::cerr << "colibri-client: --n-predict must be >= 1\n";
    return 2;
  }
  request.set_max_tokens(n_predict);
  v1::SamplingParams* p = request.mutable_sampling();
  p->set_temperature(sf.temperature);
  p->set_top_k(sf.top_k);
  p->set_top_p(sf.top_p);
  p->set_min_p(sf.min_p);
  if (sf.repeat_last_n == 0) {
    // The protocol's 0 means "the server default"; penalties over no tokens
    // are the same as neutral penalties.
    p->set_repeat_penalty(1.0f);
    p->set_penalty_last_n(-1);
  } else {
    p->set_repeat_penalty(sf.repeat_penalty);
    p->set_presence_penalty(sf.presence_penalty);
    p->set_frequency_penalty(sf.frequency_penalty);
    p->set_penalty_last_n(sf.repeat_last_n);
  }
  if (gen->count("--seed") == 0) {
    std::random_device random;
    sf.seed = (static_cast<uint64_t>(random()) << 32) | random();
  }
  if (verbose) std::cerr << "seed: " << sf.seed << "\n";
  p->set_seed(sf.seed);
  p->set_has_seed(true);
  for (const std::string& s : stop) request.add_stop(s);
  request.set_ignore_eos(ignore_eos);
  request.set_exact(exact);

  absl::StatusOr<colibri::client::GenerateResult> result =
      (*client)->Generate(request, [&](const v1::GenerateReply& reply) {
        if (!print_ids && !reply.text().empty()) {
          std::fwrite(reply.text().data(), 1, reply.text().size(), stdout);
          std::fflush(stdout);
        }
        return true;
      });
  if (!result.ok()) {
    if (!print_ids) std::printf("\n");
    return Fail(result.status());
  }
  if (print_ids) {
    for (size_t i = 0; i < result->tokens.size(); ++i) {
      std::printf("%s%d", i ? " " : "", result->tokens[i]);
    }
  }
  std::printf("\n");
  std::fflush(stdout);
  if (print_stats) {
    const v1::GenerateStats& s = result->stats;
    std::fprintf(stderr,
                 "finish: %s\nprompt: %d tokens in %.3f s\ngeneration: %d tokens in %.3f s\n"
                 "experts: round_trips=%lld bytes_sent=%lld wait_s=%.3f fallback_routes=%lld\n",
                 FinishReasonName(result->finish_reason), s.prompt_tokens(), s.prompt_seconds(),
                 s.generated_tokens(), s.generate_seconds(),
                 static_cast<long long>(s.expert_round_trips()),
                 static_cast<long long>(s.expert_bytes_sent()), s.expert_wait_seconds(),
                 static_cast<long long>(s.fallback_routes()));
  }
  return 0;
}
