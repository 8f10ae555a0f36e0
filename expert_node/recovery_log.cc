#include "expert_node/recovery_log.h"

#include <cstdarg>
#include <cstdio>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "expert_node/event_log.h"

namespace colibri::expert_node {
namespace {

class RecoveryReportingLogger final : public rocksdb::Logger {
 public:
  RecoveryReportingLogger(std::string data_dir, std::shared_ptr<rocksdb::Logger> file)
      : rocksdb::Logger(file->GetInfoLogLevel()),
        data_dir_(std::move(data_dir)),
        file_(std::move(file)) {}

  void Logv(const char* format, va_list ap) override {
    Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
  }

  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    va_list copy;
    va_copy(copy, ap);
    char line[1024];
    const int n = std::vsnprintf(line, sizeof(line), format, copy);
    va_end(copy);
    if (n > 0) {
      const absl::string_view text(line);
      const bool dropped =
          level >= rocksdb::InfoLogLevel::WARN_LEVEL && absl::StrContains(text, "dropping");
      const bool recovered = absl::StrContains(text, "Point in time recovered");
      if (dropped || recovered) {
        LogEvent(absl::StrCat("expert store ", data_dir_, ": ",
                              dropped ? "damaged write-ahead log: " : "", text,
                              dropped ? " (experts written after it are lost; the coordinator "
                                        "re-sends them)"
                                      : ""));
      }
    }
    file_->Logv(level, format, ap);
  }

  void LogHeader(const char* format, va_list ap) override { file_->LogHeader(format, ap); }
  size_t GetLogFileSize() const override { return file_->GetLogFileSize(); }
  void Flush() override { file_->Flush(); }
  void SetInfoLogLevel(const rocksdb::InfoLogLevel level) override {
    rocksdb::Logger::SetInfoLogLevel(level);
    file_->SetInfoLogLevel(level);
  }

 protected:
  rocksdb::Status CloseImpl() override { return file_->Close(); }

 private:
  const std::string data_dir_;
  const std::shared_ptr<rocksdb::Logger> file_;
};

}  // namespace

std::shared_ptr<rocksdb::Logger> MakeRecoveryReportingLogger(const std::string& data_dir,
                                                             const rocksdb::Options& options) {
  std::shared_ptr<rocksdb::Logger> file;
  if (!rocksdb::CreateLoggerFromOptions(data_dir, options, &file).ok() || file == nullptr) {
    return nullptr;
  }
  return std::make_shared<RecoveryReportingLogger>(data_dir, std::move(file));
}

}  // namespace colibri::expert_node
