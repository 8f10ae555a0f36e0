#include "common/service_notify.h"

#include <systemd/sd-daemon.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace colibri {
namespace {

absl::Status Notify(absl::string_view state, absl::string_view status) {
  // STATUS is one line: a newline would start another assignment.
  std::string line(status);
  for (char& c : line) {
    if (c == '\n') c = ' ';
  }
  const std::string message = absl::StrCat(state, "\nSTATUS=", line);
  // unset_environment = 0: a later notification (STOPPING) still finds the socket.
  const int sent = sd_notify(0, message.c_str());
  if (sent < 0) {
    return absl::UnavailableError(
        absl::StrCat("notifying the service manager (NOTIFY_SOCKET): ", std::strerror(-sent)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status NotifyServiceReady(absl::string_view status) { return Notify("READY=1", status); }

absl::Status NotifyServiceStopping(absl::string_view status) {
  return Notify("STOPPING=1", status);
}

}  // namespace colibri
