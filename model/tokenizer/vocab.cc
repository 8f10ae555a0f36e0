// Mirrors llama.cpp's llama_vocab::impl::load (src/llama-vocab.cpp), step by step.
#include "model/tokenizer/vocab.h"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/gguf/gguf_value.h"

namespace colibri::tokenizer {
namespace {

// DeepSeek's special tokens, spelled with "｜" (U+FF5C) and "▁" (U+2581).
constexpr char kDeepseekEndOfSentence[] =  // <｜end▁of▁sentence｜>
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81"
    "of\xE2\x96\x81"
    "sentence\xEF\xBD\x9C>";
constexpr char kDeepseekFimBegin[] =
    "<\xEF\xBD\x9C"
    "fim\xE2\x96\x81"
    "begin\xEF\xBD\x9C>";
constexpr char kDeepseekFimHole[] =
    "<\xEF\xBD\x9C"
    "fim\xE2\x96\x81"
    "hole\xEF\xBD\x9C>";
constexpr char kDeepseekFimEnd[] =
    "<\xEF\xBD\x9C"
    "fim\xE2\x96\x81"
    "end\xEF\xBD\x9C>";
constexpr char kSpmPre[] = "\xE2\x96\x81<PRE>";  // CodeLlama
constexpr char kSpmSuf[] = "\xE2\x96\x81<SUF>";
constexpr char kSpmMid[] = "\xE2\x96\x81<MID>";

using Names = std::initializer_list<absl::string_view>;

const Names kEotNames = {
    "<|eot_id|>",        "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>",   "<EOT>",      "_<EOT>",  "[EOT]",         kDeepseekEndOfSentence,
    "<end_of_utterance>"};
const Names kEomNames = {"<|eom_id|>"};
const Names kFimPreNames = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",    kDeepseekFimBegin,
                            "<PRE>",          kSpmPre,        "<|code_prefix|>", "<|prefix|>"};
const Names kFimSufNames = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",    kDeepseekFimHole,
                            "<SUF>",          kSpmSuf,        "<|code_suffix|>", "<|suffix|>"};
const Names kFimMidNames = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",    kDeepseekFimEnd,
                            "<MID>",          kSpmMid,        "<|code_middle|>", "<|middle|>"};
const Names kFimPadNames = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
const Names kFimRepNames = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
const Names kFimSepNames = {"<|file_sep|>"};
const Names kEogNames = {"<|eot_id|>",
                         "<|im_end|>",
                         "<|end|>",
                         "<|return|>",
                         "<|call|>",
                         "<|flush|>",
                         "<|calls|>",
                         "<end_of_turn>",
                         "<|endoftext|>",
                         "</s>",
                         "<|eom_id|>",
                         "<EOT>",
                         "_<EOT>",
                         "[EOT]",
                         "[EOS]",
                         "<|end_of_text|>",
                         "<end_of_utterance>",
                         "<eos>",
                         "<turn|>",
                         "<|tool_response>",
                         kDeepseekEndOfSentence,
                         "[e~["};
// gpt-oss: always rendered.
const Names kForcedUserDefined = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};

bool IsOneOf(absl::string_view text, const Names& names) {
  return std::find(names.begin(), names.end(), text) != names.end();
}

uint32_t AttrFromType(int32_t type) {
  switch (static_cast<TokenType>(type)) {
    case TokenType::kUnknown:
      return kAttrUnknown;
    case TokenType::kUnused:
      return kAttrUnused;
    case TokenType::kNormal:
      return kAttrNormal;
    case TokenType::kControl:
      return kAttrControl;
    case TokenType::kUserDefined:
      return kAttrUserDefined;
    case TokenType::kByte:
      return kAttrByte;
    default:
      return kAttrUndefined;
  }
}

}  // namespace

absl::StatusOr<Vocab> Vocab::Build(VocabData data) {
  Vocab v;
  if (data.model == "llama") {
    v.type_ = VocabType::kSpm;
    v.bos_id_ = 1;
    v.eos_id_ = 2;
    v.unk_id_ = 0;
    v.add_space_prefix_ = true;
    v.clean_spaces_ = false;
    v.add_bos_ = true;
    v.add_eos_ = false;
  } else if (data.model == "gpt2") {
    v.type_ = VocabType::kBpe;
    if (!data.has_merges) {
      return absl::DataLossError("BPE vocabulary without tokenizer.ggml.merges");
    }
    v.bos_id_ = 11;
    v.eos_id_ = 11;
    auto pre = FindPreTokenizerSpec(data.pre);
    if (!pre.ok()) return pre.status();
    v.pre_ = *std::move(pre);
    v.add_space_prefix_ = false;
    v.clean_spaces_ = v.pre_.clean_spaces;
    if (v.pre_.add_bos) v.add_bos_ = true;
    if (v.pre_.no_bos) v.bos_id_ = -1;
    v.merges_ = std::move(data.merges);
  } else if (data.model == "bert" || data.model == "t5" || data.model == "rwkv" ||
             data.model == "plamo2" || data.model == "gemma4" || data.model == "no_vocab" ||
             data.model == "none" || data.model == "hybriddna" || data.model == "whitespace") {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer model '", gguf::EscapeForMessage(data.model),
                     "' (tokenizer.ggml.model) is not supported"));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown tokenizer model '", gguf::EscapeForMessage(data.model),
                     "' (tokenizer.ggml.model)"));
  }
  if (data.add_space_prefix) v.add_space_prefix_ = *data.add_space_prefix;

  if (absl::Status status = v.LoadTokens(data); !status.ok()) return status;
  v.ResolveSpecialIds(data);
  if (data.add_bos) v.add_bos_ = *data.add_bos;
  if (data.add_eos) v.add_eos_ = *data.add_eos;
  if (v.add_bos_ && v.bos_id_ < 0) {
    return absl::DataLossError(
        "tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id is not set");
  }
  if (v.add_eos_ && v.eos_id_ < 0) {
    return absl::DataLossError(
        "tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id is not set");
  }
  v.DetectSpecialTokens();
  v.BuildEogSet();

  for (int32_t id = 0; id < v.n_tokens(); ++id) {
    if (v.attrs_[id] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
      v.special_tokens_.push_back(id);
    }
  }
  std::stable_sort(v.special_tokens_.begin(), v.special_tokens_.end(),
                   [&v](int32_t a, int32_t b) { return v.text_[a].size() > v.text_[b].size(); });
  v.ApplyModelTweaks(data.general_name);
  return v;
}

absl::Status Vocab::LoadTokens(VocabData& data) {
  const size_t n = data.tokens.size();
  if (n == 0) return absl::DataLossError("tokenizer.ggml.tokens is empty");
  if (n > static_cast<size_t>(INT32_MAX)) return absl::DataLossError("too many tokens");
  if (!data.scores.empty() && data.scores.size() < n) {
    return absl::DataLossError(absl::StrCat("tokenizer.ggml.scores has ", data.scores.size(),
                                            " entries for ", n, " tokens"));
  }
  if (!data.token_types.empty() && data.token_types.size() < n) {
    return absl::DataLossError(absl::StrCat(
        "tokenizer.ggml.token_type has ", data.token_types.size(), " entries for ", n, " tokens"));
  }
  text_ = std::move(data.tokens);
  scores_.assign(n, 0.0f);
  attrs_.assign(n, kAttrNormal);
  size_t capacity = 16;
  while (capacity < 2 * n) capacity *= 2;
  index_.assign(capacity, 0);
  index_mask_ = capacity - 1;
  for (size_t i = 0; i < n; ++i) {
    if (text_[i].empty()) text_[i] = absl::StrCat("[EMPTY_", i, "]");
    if (const int32_t other = Find(text_[i]); other >= 0) {
      return absl::DataLossError(absl::StrCat("duplicate token in vocabulary: '", gguf::EscapeForMessage(text_[i]),
                                              "' has ids ", other, " and ", i));
    }
    const uint64_t hash = absl::HashOf(absl::string_view(text_[i]));
    uint64_t slot = hash & index_mask_;
    while (index_[slot] != 0) slot = (slot + 1) & index_mask_;
    index_[slot] = (hash & 0xFFFFFFFF00000000ull) | static_cast<uint64_t>(i + 1);
    if (!data.scores.empty()) scores_[i] = data.scores[i];
    if (!data.token_types.empty()) attrs_[i] = AttrFromType(data.token_types[i]);
  }
  return absl::OkStatus();
}

int32_t Vocab::Find(absl::string_view text) const {
  if (index_.empty()) return -1;
  const uint64_t hash = absl::HashOf(text);
  const uint64_t tag = hash & 0xFFFFFFFF00000000ull;
  for (uint64_t slot = hash & index_mask_;; slot = (slot + 1) & index_mask_) {
    const uint64_t entry = index_[slot];
    if (entry == 0) return -1;
    if ((entry & 0xFFFFFFFF00000000ull) == tag) {
      const int32_t id = static_cast<int32_t>(entry & 0xFFFFFFFFull) - 1;
      if (text_[id] == text) return id;
    }
  }
}

void Vocab::ResolveSpecialIds(const VocabData& data) {
  const int64_t n = n_tokens();
  auto resolve = [n](int32_t* id, const std::optional<int64_t>& from_file) {
    if (*id >= n) *id = -1;  // a default outside the vocabulary
    if (from_file && *from_file >= 0 && *from_file < n) *id = static_cast<int32_t>(*from_file);
  };
  resolve(&bos_id_, data.bos_id);
  resolve(&eos_id_, data.eos_id);
  resolve(&eot_id_, data.eot_id);
  resolve(&eom_id_, data.eom_id);
  resolve(&unk_id_, data.unk_id);
  resolve(&sep_id_, data.sep_id);
  resolve(&pad_id_, data.pad_id);
  resolve(&mask_id_, data.mask_id);
  resolve(&fim_pre_id_, data.fim_pre_id);
  resolve(&fim_suf_id_, data.fim_suf_id);
  resolve(&fim_mid_id_, data.fim_mid_id);
  resolve(&fim_pad_id_, data.fim_pad_id);
  resolve(&fim_rep_id_, data.fim_rep_id);
  resolve(&fim_sep_id_, data.fim_sep_id);
}

// Tokens found by their text become control tokens (llama.cpp: "control-looking
// token ... its type will be overridden"). llama.cpp walks a hash map, so when
// several tokens qualify for one role the winner is unspecified; here the lowest
// id wins. Only the reported id can differ: every candidate ends up in the EOG set.
void Vocab::DetectSpecialTokens() {
  struct Role {
    int32_t* id;
    const Names* names;
  };
  const Role roles[] = {
      {&eot_id_, &kEotNames},        {&eom_id_, &kEomNames},        {&fim_pre_id_, &kFimPreNames},
      {&fim_suf_id_, &kFimSufNames}, {&fim_mid_id_, &kFimMidNames}, {&fim_pad_id_, &kFimPadNames},
      {&fim_rep_id_, &kFimRepNames}, {&fim_sep_id_, &kFimSepNames},
  };
  for (int32_t id = 0; id < n_tokens(); ++id) {
    for (const Role& role : roles) {
      if (*role.id < 0 && IsOneOf(text_[id], *role.names)) {
        *role.id = id;
        attrs_[id] |= kAttrControl;
      }
    }
  }
  for (int32_t id = 0; id < n_tokens(); ++id) {
    if ((attrs_[id] & kAttrControl) && absl::StrContains(text_[id], "unused")) {
      attrs_[id] |= kAttrUnused;
    }
  }
}

void Vocab::BuildEogSet() {
  for (int32_t id : {fim_pad_id_, fim_rep_id_, fim_sep_id_}) {
    if (id >= 0) eog_ids_.insert(id);
  }
  for (int32_t id = 0; id < n_tokens(); ++id) {
    if (IsOneOf(text_[id], kEogNames)) {
      eog_ids_.insert(id);
      attrs_[id] |= kAttrControl;
    }
  }
  for (int32_t id = 0; id < n_tokens(); ++id) {
    if (IsOneOf(text_[id], kForcedUserDefined)) attrs_[id] = kAttrUserDefined;
  }
  for (int32_t id : {eos_id_, eot_id_, eom_id_}) {
    if (id >= 0) eog_ids_.insert(id);
  }
  // o200k_harmony / solar-open: "<|end|>" ends a message, not the generation.
  auto has = [this](absl::string_view text) {
    const int32_t id = Find(text);
    return id >= 0 && eog_ids_.contains(id);
  };
  const bool has_call = has("<|call|>") || has("<|calls|>");
  if (has_call && has("<|end|>") && (has("<|return|>") || has("<|flush|>"))) {
    const int32_t end_id = Find("<|end|>");
    eog_ids_.erase(end_id);
    attrs_[end_id] = kAttrUserDefined;
  }
  // gemma4 / paddleocr: "</s>" is not an end of generation there.
  if (has("<|tool_response>") && has("</s>")) {
    const int32_t s_id = Find("</s>");
    eog_ids_.erase(s_id);
    attrs_[s_id] = kAttrNormal;
  }
}

void Vocab::ApplyModelTweaks(absl::string_view general_name) {
  const std::string name = absl::AsciiStrToLower(general_name);
  if (absl::StrContains(name, "phi-3") || absl::StrContains(name, "phi3")) {
    for (int32_t id : special_tokens_) attrs_[id] |= kAttrRstrip;
    if (int32_t id = Find("</s>"); id >= 0) attrs_[id] |= kAttrRstrip;
    for (absl::string_view text : {"<unk>", "<s>", "<|endoftext|>"}) {
      if (int32_t id = Find(text); id >= 0) attrs_[id] &= ~static_cast<uint32_t>(kAttrRstrip);
    }
  }
}

}  // namespace colibri::tokenizer
