#include "model/moe/routing_trace.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace colibri::moe {
namespace {

constexpr absl::string_view kMagic = "colibri-routing-trace 1";

}  // namespace

absl::StatusOr<std::unique_ptr<RoutingTraceWriter>> RoutingTraceWriter::Open(
    const std::string& path, const Options& options) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--trace-routing ", path, ": cannot create: ", std::strerror(errno)));
  }
  return std::unique_ptr<RoutingTraceWriter>(new RoutingTraceWriter(file, options));
}

RoutingTraceWriter::RoutingTraceWriter(std::FILE* file, const Options& options)
    : options_(options), file_(file) {
  absl::MutexLock lock(&mu_);
  Append(absl::StrCat(kMagic, "\n"));
  writer_ = std::thread([this] { WriteLoop(); });
}

RoutingTraceWriter::~RoutingTraceWriter() {
  {
    absl::MutexLock lock(&mu_);
    Handoff();
    stop_ = true;
  }
  writer_.join();
  std::fclose(file_);
}

void RoutingTraceWriter::Append(const std::string& record) {
  if (truncated_) {
    ++dropped_;
    return;
  }
  if (accepted_bytes_ + record.size() > options_.max_bytes) {
    truncated_ = true;
    ++dropped_;
    buffer_ += "# truncated\n";
    return;
  }
  if (pending_bytes_ > options_.max_pending_bytes) {
    ++dropped_;
    return;
  }
  accepted_bytes_ += record.size();
  buffer_ += record;
  if (buffer_.size() >= options_.buffer_bytes) Handoff();
}

void RoutingTraceWriter::Handoff() {
  if (buffer_.empty()) return;
  pending_bytes_ += buffer_.size();
  pending_.push_back(std::move(buffer_));
  buffer_.clear();
}

void RoutingTraceWriter::WriteLoop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.Await(absl::Condition(
        +[](RoutingTraceWriter* w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return w->stop_ || !w->pending_.empty();
        },
        this));
    if (pending_.empty() && stop_) return;
    std::vector<std::string> batch;
    batch.swap(pending_);
    writing_ = true;
    mu_.Unlock();
    size_t bytes = 0;
    for (const std::string& b : batch) {
      std::fwrite(b.data(), 1, b.size(), file_);
      bytes += b.size();
    }
    std::fflush(file_);
    mu_.Lock();
    writing_ = false;
    pending_bytes_ -= bytes;
    written_bytes_ += bytes;
  }
}

void RoutingTraceWriter::OnRoutes(int layer, int64_t n_tokens, int k, const int32_t* experts) {
  absl::MutexLock lock(&mu_);
  // A layer before the last one starts the next step; the same layer again
  // is the step's second half-batch.
  if (layer < last_layer_) ++step_;
  last_layer_ = layer;
  // (expert, tokens) by increasing expert.
  scratch_.clear();
  for (int64_t i = 0; i < n_tokens * k; ++i) {
    if (experts[i] >= 0) scratch_.emplace_back(experts[i], 1);
  }
  std::sort(scratch_.begin(), scratch_.end());
  std::string line = absl::StrCat("R ", step_, " ", layer);
  for (size_t i = 0; i < scratch_.size();) {
    size_t j = i;
    while (j < scratch_.size() && scratch_[j].first == scratch_[i].first) ++j;
    absl::StrAppend(&line, " ", scratch_[i].first, ":", j - i);
    i = j;
  }
  line += '\n';
  Append(line);
}

void RoutingTraceWriter::OnHints(int layer, absl::Span<const int32_t> experts) {
  absl::MutexLock lock(&mu_);
  // A hint for a layer at or before the last routed one is for the next step.
  const int64_t step = layer <= last_layer_ ? step_ + 1 : step_;
  std::string line = absl::StrCat("H ", step, " ", layer);
  for (int32_t e : experts) absl::StrAppend(&line, " ", e);
  line += '\n';
  Append(line);
}

void RoutingTraceWriter::Flush() {
  absl::MutexLock lock(&mu_);
  Handoff();
  mu_.Await(absl::Condition(
      +[](RoutingTraceWriter* w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return w->pending_.empty() && !w->writing_;
      },
      this));
}

uint64_t RoutingTraceWriter::dropped_records() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

uint64_t RoutingTraceWriter::written_bytes() const {
  absl::MutexLock lock(&mu_);
  return written_bytes_;
}

absl::StatusOr<std::vector<TraceRecord>> ParseRoutingTrace(absl::string_view text,
                                                           absl::string_view name) {
  std::vector<TraceRecord> records;
  int line_no = 0;
  bool header = false;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    auto bad = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(name, ":", line_no, ": ", what));
    };
    if (!header) {
      if (line != kMagic) return bad(absl::StrCat("not a routing trace (want \"", kMagic, "\")"));
      header = true;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ');
    if (fields.size() < 3 || (fields[0] != "R" && fields[0] != "H")) {
      return bad("want \"R <step> <layer> <expert>:<tokens>...\" or \"H <step> <layer> <expert>...\"");
    }
    TraceRecord r;
    r.kind = fields[0] == "R" ? TraceRecord::Kind::kRoute : TraceRecord::Kind::kHint;
    if (!absl::SimpleAtoi(fields[1], &r.step) || r.step < 0) return bad("bad step");
    if (!absl::SimpleAtoi(fields[2], &r.layer) || r.layer < 0) return bad("bad layer");
    for (size_t i = 3; i < fields.size(); ++i) {
      int32_t expert = 0;
      int32_t tokens = 0;
      if (r.kind == TraceRecord::Kind::kRoute) {
        std::pair<absl::string_view, absl::string_view> et = absl::StrSplit(fields[i], ':');
        if (!absl::SimpleAtoi(et.first, &expert) || !absl::SimpleAtoi(et.second, &tokens) ||
            expert < 0 || tokens <= 0) {
          return bad(absl::StrCat("bad <expert>:<tokens> \"", fields[i], "\""));
        }
      } else if (!absl::SimpleAtoi(fields[i], &expert) || expert < 0) {
        return bad(absl::StrCat("bad expert \"", fields[i], "\""));
      }
      r.experts.emplace_back(expert, tokens);
    }
    records.push_back(std::move(r));
  }
  if (!header) return absl::InvalidArgumentError(absl::StrCat(name, ": empty, not a routing trace"));
  return records;
}

absl::StatusOr<std::vector<TraceRecord>> ReadRoutingTrace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read the routing trace"));
  std::stringstream text;
  text << in.rdbuf();
  return ParseRoutingTrace(text.str(), path);
}

}  // namespace colibri::moe
