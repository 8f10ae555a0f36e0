#include "model/tokenizer/tokenizer.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "model/tokenizer/bpe_tokenizer.h"
#include "model/tokenizer/special_token_splitter.h"
#include "model/tokenizer/spm_tokenizer.h"
#include "model/tokenizer/unicode_util.h"

namespace colibri::tokenizer {
namespace {

constexpr char kSpmSpace[] = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// llama.cpp's llama_decode_text: each code point of a byte-level token stands
// for one byte.
std::string DecodeByteLevel(const std::string& text) {
  std::vector<uint32_t> cps;
  DecodeUtf8(text, &cps);
  std::string out;
  out.reserve(cps.size());
  for (uint32_t cp : cps) {
    const int byte = CodepointToByte(cp);
    if (byte >= 0) {
      out.push_back(static_cast<char>(byte));
      continue;
    }
    std::string utf8;
    AppendUtf8(cp, &utf8);
    absl::StrAppend(&out, "[UNK_BYTE_0x");
    for (const char c : utf8)
      absl::StrAppend(&out, absl::Hex(static_cast<uint8_t>(c), absl::kZeroPad2));
    absl::StrAppend(&out, text, "]");
  }
  return out;
}

// The byte of a "<0xXX>" token.
char ByteOfByteToken(const std::string& text) {
  unsigned value = 0;
  for (size_t i = 3; i < 5 && i < text.size(); ++i) {
    const char c = text[i];
    const unsigned digit = (c >= '0' && c <= '9')   ? c - '0'
                           : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                           : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                                    : 0;
    value = value * 16 + digit;
  }
  return static_cast<char>(value);
}

}  // namespace

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromVocabData(VocabData data) {
  auto vocab = Vocab::Build(std::move(data));
  if (!vocab.ok()) return vocab.status();
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer(*std::move(vocab)));
  if (tokenizer->vocab_.type() == VocabType::kBpe) {
    auto bpe = BpeTokenizer::Create(tokenizer->vocab_);
    if (!bpe.ok()) return bpe.status();
    tokenizer->bpe_ = *std::move(bpe);
  } else {
    tokenizer->spm_ = std::make_unique<SpmTokenizer>(tokenizer->vocab_);
  }
  tokenizer->splitter_ = std::make_unique<SpecialTokenSplitter>(tokenizer->vocab_);
  return tokenizer;
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(absl::string_view text,
                                                       const EncodeOptions& options) const {
  if (text.size() >= (uint64_t{1} << 32)) {
    return absl::InvalidArgumentError(absl::StrCat("text of ", text.size(), " bytes is too long"));
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (options.add_special && vocab_.add_bos()) out.push_back(vocab_.bos_id());
  const std::vector<Fragment> fragments = splitter_->Split(text, options.parse_special);
  if (spm_ != nullptr) {
    // SentencePiece: a space goes in front of the text and after each special
    // token, and every space becomes U+2581.
    bool after_special = true;
    std::string normalized;
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        out.push_back(f.token);
        after_special = true;
        continue;
      }
      normalized.clear();
      if (vocab_.add_space_prefix() && after_special) normalized.push_back(' ');
      normalized.append(text.data() + f.offset, f.length);
      absl::StrReplaceAll({{" ", kSpmSpace}}, &normalized);
      spm_->Encode(normalized, &out);
      after_special = false;
    }
  } else {
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        out.push_back(f.token);
        continue;
      }
      absl::Status status = bpe_->Encode(text.substr(f.offset, f.length), &out);
      if (!status.ok()) return status;
    }
  }
  if (options.add_special && vocab_.add_eos()) out.push_back(vocab_.eos_id());
  return out;
}

bool Tokenizer::IsControl(int32_t id) const {
  return id >= 0 && id < vocab_.n_tokens() &&
         (vocab_.attr(id) & (kAttrControl | kAttrUnknown)) != 0;
}

std::string Tokenizer::TokenToPiece(int32_t id, bool render_special) const {
  if (id < 0 || id >= vocab_.n_tokens()) return "";
  const uint32_t attr = vocab_.attr(id);
  if (!render_special && (attr & (kAttrControl | kAttrUnknown))) return "";
  const std::string& text = vocab_.text(id);
  if (attr & (kAttrControl | kAttrUnknown | kAttrUserDefined)) return text;
  if (attr & kAttrNormal) {
    if (vocab_.type() == VocabType::kSpm) return absl::StrReplaceAll(text, {{kSpmSpace, " "}});
    return DecodeByteLevel(text);
  }
  if (attr & kAttrByte) return std::string(1, ByteOfByteToken(text));
  return "";  // unused or undefined tokens render as nothing
}

std::string Tokenizer::Decode(absl::Span<const int32_t> ids, bool render_special) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string piece = TokenToPiece(ids[i], render_special);
    // llama_detokenize strips the space SentencePiece put in front of the text
    // (one space, from the first token only).
    if (i == 0 && vocab_.add_space_prefix() && !piece.empty() && piece[0] == ' ') {
      piece.erase(0, 1);
    }
    out += piece;
  }
  return out;
}

}  // namespace colibri::tokenizer
