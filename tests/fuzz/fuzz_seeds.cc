// Writes the seed corpora of the fuzz harnesses from the test fixtures:
//
//   fuzz_seeds FIXTURES_DIR OUT_DIR
//
// makes OUT_DIR/{gguf,tokenizer,expert_record,expert_request,inference_request}
// with one file per seed: the first 64 KiB of every fixture model and vocab
// GGUF (header, metadata and tensor table), a complete one-layer model small
// enough to fuzz whole (so that the loader runs), the tokenizer test strings, value
// headers, keys and model records of the fixture models' experts, and
// ExpertService / Inference requests shaped like the ones the coordinator
// sends for those models. Small, so it runs at test time (nothing is
// committed).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "colibri/v1/expert.pb.h"
#include "colibri/v1/inference.pb.h"
#include "expert_node/expert_record.h"
#include "model/gguf/gguf_file.h"
#include "model/gguf/gguf_fingerprint.h"
#include "model/gguf/gguf_writer.h"
#include "model/ops/tensor_type.h"

namespace fs = std::filesystem;
namespace ex = colibri::expert_node;
namespace v1 = colibri::v1;

namespace {

int g_written = 0;

void Write(const fs::path& dir, const std::string& name, const std::string& bytes) {
  std::ofstream(dir / name, std::ios::binary) << bytes;
  ++g_written;
}

std::string ReadPrefix(const fs::path& path, size_t n) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes(n, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(n));
  bytes.resize(static_cast<size_t>(in.gcount()));
  return bytes;
}

std::vector<fs::path> GgufFiles(const fs::path& dir) {
  std::vector<fs::path> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".gguf") out.push_back(entry.path());
  }
  return out;
}

// A complete qwen3moe model of one layer with F32 weights (about 6 KB): the
// seed from which gguf_fuzz reaches the loader with counts mutated.
std::string TinyModel() {
  namespace gg = colibri::gguf;
  constexpr int kEmbd = 8, kHeads = 2, kHeadDim = 4, kExperts = 4, kFf = 8, kVocab = 16;
  gg::GgufWriter w;
  const std::string a = "qwen3moe.";
  w.SetValue("general.architecture", gg::Value::String("qwen3moe"));
  w.SetValue(a + "block_count", gg::Value::Uint32(1));
  w.SetValue(a + "context_length", gg::Value::Uint32(32));
  w.SetValue(a + "embedding_length", gg::Value::Uint32(kEmbd));
  w.SetValue(a + "attention.head_count", gg::Value::Uint32(kHeads));
  w.SetValue(a + "attention.head_count_kv", gg::Value::Uint32(1));
  w.SetValue(a + "attention.key_length", gg::Value::Uint32(kHeadDim));
  w.SetValue(a + "attention.value_length", gg::Value::Uint32(kHeadDim));
  w.SetValue(a + "expert_count", gg::Value::Uint32(kExperts));
  w.SetValue(a + "expert_used_count", gg::Value::Uint32(2));
  w.SetValue(a + "expert_feed_forward_length", gg::Value::Uint32(kFf));
  const std::pair<const char*, std::vector<int64_t>> tensors[] = {
      {"token_embd.weight", {kEmbd, kVocab}},
      {"output_norm.weight", {kEmbd}},
      {"blk.0.attn_norm.weight", {kEmbd}},
      {"blk.0.attn_q.weight", {kEmbd, kHeads * kHeadDim}},
      {"blk.0.attn_k.weight", {kEmbd, kHeadDim}},
      {"blk.0.attn_v.weight", {kEmbd, kHeadDim}},
      {"blk.0.attn_output.weight", {kHeads * kHeadDim, kEmbd}},
      {"blk.0.attn_q_norm.weight", {kHeadDim}},
      {"blk.0.attn_k_norm.weight", {kHeadDim}},
      {"blk.0.ffn_norm.weight", {kEmbd}},
      {"blk.0.ffn_gate_inp.weight", {kEmbd, kExperts}},
      {"blk.0.ffn_gate_exps.weight", {kEmbd, kFf, kExperts}},
      {"blk.0.ffn_up_exps.weight", {kEmbd, kFf, kExperts}},
      {"blk.0.ffn_down_exps.weight", {kFf, kEmbd, kExperts}},
  };
  for (const auto& [name, dims] : tensors) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    std::vector<float> values(static_cast<size_t>(n), 0.25f);
    if (!w.AddF32Tensor(name, dims, values).ok()) return "";
  }
  const std::vector<uint8_t> image = w.Serialize();
  return std::string(image.begin(), image.end());
}

// Seeds from one model: its experts' records and the requests for them.
void ModelSeeds(const fs::path& path, const fs::path& out) {
  absl::StatusOr<std::unique_ptr<colibri::gguf::GgufFile>> file =
      colibri::gguf::GgufFile::Open(path.string());
  if (!file.ok()) return;
  absl::StatusOr<std::string> fingerprint = colibri::gguf::ModelFingerprint(**file);
  if (!fingerprint.ok()) return;
  const std::string stem = path.stem().string();
  for (int layer = 0; layer < 4; ++layer) {
    const colibri::gguf::TensorInfo* t[3] = {
        (*file)->FindTensor(absl::StrCat("blk.", layer, ".ffn_gate_exps.weight")),
        (*file)->FindTensor(absl::StrCat("blk.", layer, ".ffn_up_exps.weight")),
        (*file)->FindTensor(absl::StrCat("blk.", layer, ".ffn_down_exps.weight"))};
    if (t[0] == nullptr || t[1] == nullptr || t[2] == nullptr || t[0]->dims.size() != 3) continue;
    ex::ExpertLayout layout;
    ex::TensorLayout* parts[3] = {&layout.gate, &layout.up, &layout.down};
    v1::IngestChunk chunk;
    v1::ExpertTensor* headers[3] = {chunk.mutable_gate(), chunk.mutable_up(), chunk.mutable_down()};
    for (int i = 0; i < 3; ++i) {
      parts[i]->type = t[i]->type;
      parts[i]->cols = t[i]->dims[0];
      parts[i]->rows = t[i]->dims[1];
      parts[i]->bytes = t[i]->n_bytes / static_cast<uint64_t>(t[i]->dims[2]);
      headers[i]->set_ggml_type(static_cast<uint32_t>(t[i]->type));
      headers[i]->add_dims(t[i]->dims[0]);
      headers[i]->add_dims(t[i]->dims[1]);
    }
    layout.xxh64 = 0x1234567890abcdefULL;
    const ex::ExpertId id{*fingerprint, layer, 1};
    const std::string name = absl::StrCat(stem, ".", layer);
    const fs::path records = out / "expert_record";
    Write(records, name + ".header", ex::EncodeHeader(layer, 1, layout));
    // The same as a version 2 record (gpt-oss: biases, clamped SwiGLU).
    ex::ExpertLayout biased = layout;
    biased.gate_bias = biased.up_bias = biased.down_bias = true;
    biased.activation = colibri::moe::Activation::kSwigluOai;
    biased.alpha = 1.702f;
    biased.limit = 7.0f;
    Write(records, name + ".header_v2", ex::EncodeHeader(layer, 1, biased));
    Write(records, name + ".value_key", ex::ExpertValueKey(id));
    Write(records, name + ".usage_key", ex::UsageKey(id));
    ex::ModelInfo info;
    info.n_layer = 3;
    info.n_expert = static_cast<int32_t>(t[0]->dims[2]);
    info.n_embd = t[0]->dims[0];
    Write(records, name + ".model", ex::EncodeModelInfo(info));

    const fs::path requests = out / "expert_request";
    chunk.mutable_key()->set_model_fingerprint(*fingerprint);
    chunk.mutable_key()->set_layer(layer);
    chunk.mutable_key()->set_expert(1);
    chunk.set_total_bytes(layout.payload_bytes());
    chunk.set_xxh64(layout.xxh64);
    chunk.set_data(std::string(64, '\x3c'));
    chunk.mutable_model()->set_n_layer(3);
    chunk.mutable_model()->set_n_expert(info.n_expert);
    chunk.mutable_model()->set_n_embd(info.n_embd);
    Write(requests, name + ".ingest", std::string(1, '\x02') + chunk.SerializeAsString());
    v1::PrefetchRequest prefetch;
    *prefetch.add_experts() = chunk.key();
    Write(requests, name + ".prefetch", std::string(1, '\x03') + prefetch.SerializeAsString());
    v1::ImportRequest import;
    import.set_gguf_path(path.filename().string());
    import.set_model_fingerprint(*fingerprint);
    *import.add_experts() = chunk.key();
    Write(requests, name + ".import", std::string(1, '\x05') + import.SerializeAsString());
  }
  v1::InventoryRequest inventory;
  inventory.set_model_fingerprint(*fingerprint);
  Write(out / "expert_request", stem + ".inventory",
        std::string(1, '\x04') + inventory.SerializeAsString());
}

// ComputeLayerRequests of the fuzzer's synthetic model (n_embd 16, 3 layers of
// 8 experts): 1..4 tokens, top-2 routes, both numeric paths, both reply forms.
void ComputeSeeds(const fs::path& out) {
  for (int tokens = 1; tokens <= 4; ++tokens) {
    for (int variant = 0; variant < 2; ++variant) {
      v1::ComputeLayerRequest request;
      request.set_model_fingerprint("fuzz-model");
      request.set_layer(tokens % 3);
      v1::Tensor* hidden = request.mutable_hidden();
      hidden->set_dtype(v1::DTYPE_F32);
      hidden->add_shape(tokens);
      hidden->add_shape(16);
      std::vector<float> rows(static_cast<size_t>(tokens) * 16);
      for (size_t i = 0; i < rows.size(); ++i) rows[i] = 0.1f * static_cast<float>(i % 11) - 0.5f;
      hidden->set_data(rows.data(), rows.size() * sizeof(float));
      for (int t = 0; t < tokens; ++t) {
        for (int k = 0; k < 2; ++k) {
          v1::Route* route = request.add_routes();
          route->set_token(t);
          route->set_expert((t + 3 * k) % 8);
          route->set_weight(k == 0 ? 0.7f : 0.3f);
        }
      }
      request.set_path(variant == 0 ? v1::NUMERIC_PATH_FAST : v1::NUMERIC_PATH_EXACT);
      request.set_reduce_per_token(variant == 1);
      const std::string body = request.SerializeAsString();
      const std::string name = absl::StrCat("compute.", tokens, ".", variant);
      Write(out / "expert_request", name + ".known", std::string(1, '\x00') + body);
      Write(out / "expert_request", name + ".unknown", std::string(1, '\x01') + body);
    }
  }
}

// Tokenizer test strings (each prefixed with the harness's options byte) and
// Generate / Tokenize requests carrying them.
void TextSeeds(const fs::path& vocab_dir, const fs::path& out) {
  std::ifstream in(vocab_dir / "ggml-vocab-gpt-2.gguf.inp", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  int i = 0;
  for (absl::string_view text : absl::StrSplit(ss.str(), "\n__ggml_vocab_test__\n")) {
    if (text.empty() || text.size() > 4096) continue;
    const char options = static_cast<char>(i % 8);
    Write(out / "tokenizer", absl::StrCat("case.", i), std::string(1, options) + std::string(text));
    v1::GenerateRequest generate;
    generate.set_text(std::string(text));
    generate.set_max_tokens(16);
    generate.add_stop("\n");
    generate.mutable_sampling()->set_temperature(0.7f);
    generate.mutable_sampling()->set_top_k(40);
    Write(out / "inference_request", absl::StrCat("generate_text.", i),
          std::string(1, '\x00') + generate.SerializeAsString());
    v1::TokenizeRequest tokenize;
    tokenize.set_text(std::string(text));
    tokenize.set_add_special(i % 2 == 0);
    Write(out / "inference_request", absl::StrCat("tokenize.", i),
          std::string(1, '\x01') + tokenize.SerializeAsString());
    if (++i >= 64) break;
  }
  v1::GenerateRequest ids;
  for (int id : {1, 464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13}) {
    ids.mutable_tokens()->add_ids(id % 1000);
  }
  ids.set_max_tokens(8);
  ids.set_ignore_eos(true);
  ids.set_exact(true);
  Write(out / "inference_request", "generate_ids",
        std::string(1, '\x00') + ids.SerializeAsString());
}

// Request bodies of the OpenAI-compatible API, first byte the endpoint as
// openai_request_fuzz reads it.
void OpenAiSeeds(const fs::path& out) {
  const std::pair<char, const char*> bodies[] = {
      {0, R"({"model": "m", "prompt": "Once upon a time", "max_tokens": 16, "temperature": 0.7,
             "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 7, "stop": ["\n", "END"],
             "presence_penalty": 0.5, "frequency_penalty": 0.1, "repeat_penalty": 1.1,
             "logprobs": 2, "stream": true, "stream_options": {"include_usage": true},
             "ignore_eos": false, "n": 1})"},
      {0, R"({"prompt": [1, 464, 2068, 7586], "max_completion_tokens": 8})"},
      {0, R"({"prompt": [[5, 6, 7]], "max_tokens": null})"},
      {1, R"({"model": "m", "messages": [{"role": "system", "content": "Be brief."},
             {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
             {"role": "assistant", "content": null, "tool_calls": [{"id": "c1",
              "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
             {"role": "tool", "tool_call_id": "c1", "content": "2"}],
             "tools": [{"type": "function", "function": {"name": "f", "parameters":
              {"type": "object", "properties": {"x": {"type": "integer"}}}}}],
             "logprobs": true, "top_logprobs": 3, "max_tokens": 32})"},
      {2, R"({"content": "Hello world", "add_special": true, "parse_special": false})"},
      {3, R"({"tokens": [1, 2, 3, 999]})"},
      {4, R"({"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": false})"},
  };
  int i = 0;
  for (const auto& [endpoint, body] : bodies) {
    Write(out / "openai_request", absl::StrCat("body.", i++), std::string(1, endpoint) + body);
  }
  // Bodies at and past the shape limits (keys of one object, messages),
  // for the mutations around them.
  const auto keys = [](int n) {
    std::string object = "{";
    for (int k = 0; k < n; ++k) absl::StrAppend(&object, k ? "," : "", "\"", k, "\":1");
    return object + "}";
  };
  std::string messages = "[";
  for (int m = 0; m < 1500; ++m) {
    absl::StrAppend(&messages, m ? "," : "", R"({"role":"user","content":"x"})");
  }
  messages += "]";
  const std::pair<char, std::string> shaped[] = {
      {0, R"({"prompt":"hi","logit_bias":)" + keys(256) + "}"},
      {0, R"({"prompt":"hi","logit_bias":)" + keys(257) + "}"},
      {1, R"({"max_tokens":1,"messages":)" + messages + "}"},
      {4, R"({"messages":)" + messages + "}"},
  };
  for (const auto& [endpoint, body] : shaped) {
    Write(out / "openai_request", absl::StrCat("body.", i++), std::string(1, endpoint) + body);
  }
}

// Generated texts of assistant_output_fuzz: first byte the dialect and
// options (dialect % 5, 0x08 think blocks, 0x10 starts inside one, 0x20 tool
// calls not parsed), second the chunking seed, then what a model wrote.
void AssistantOutputSeeds(const fs::path& out) {
  const std::pair<char, const char*> texts[] = {
      {0x09, "<think>Let me see.</think>\n\nThe answer is 4."},
      {0x19, "still thinking</think>Done.<tool_call>\n{\"name\": \"search\", \"arguments\": "
             "{\"q\": \"a\"}}\n</tool_call>"},
      {0x01, "<tool_call>{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": "
             "\\\"Oslo\\\"}\"}</tool_call><tool_call>{\"name\": \"search\"}</tool_call>"},
      {0x0a, "<think>hm</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>New "
             "York</arg_value><arg_key>days</arg_key><arg_value>3</arg_value></tool_call>"},
      {0x02, "<tool_call>search<arg_key>q</arg_key><arg_value>b</arg_value></tool_call>"},
      {0x03, "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
             "```json\n{\"city\": \"Lima\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
      {0x03, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"q\": \"a\"}"
             "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
      {0x04, "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant"
             "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
             "{\"city\": \"Rome\"}<|call|>"},
      {0x04, "<|channel|>final<|message|>Hello.<|return|>"},
      {0x21, "<tool_call>{\"name\": \"search\"}</tool_call> kept as text"},
  };
  int i = 0;
  for (const auto& [options, text] : texts) {
    const char chunking = static_cast<char>(i * 37);
    Write(out / "assistant_output", absl::StrCat("text.", i++),
          std::string(1, options) + std::string(1, chunking) + text);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: fuzz_seeds FIXTURES_DIR OUT_DIR\n";
    return 2;
  }
  const fs::path fixtures = argv[1];
  const fs::path out = argv[2];
  for (const char* sub : {"gguf", "tokenizer", "expert_record", "expert_request",
                          "inference_request", "openai_request", "assistant_output"}) {
    fs::create_directories(out / sub);
  }
  for (const char* sub : {"models", "vocab"}) {
    for (const fs::path& p : GgufFiles(fixtures / sub)) {
      Write(out / "gguf", p.filename().string(), ReadPrefix(p, 64 << 10));
    }
  }
  Write(out / "gguf", "tiny-model.gguf", TinyModel());
  for (const fs::path& p : GgufFiles(fixtures / "models")) ModelSeeds(p, out);
  ComputeSeeds(out);
  TextSeeds(fixtures / "vocab", out);
  OpenAiSeeds(out);
  AssistantOutputSeeds(out);
  std::cout << "fuzz_seeds: " << g_written << " seeds in " << out.string() << "\n";
  return g_written > 0 ? 0 : 1;
}
