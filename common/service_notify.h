// Readiness notification to the service manager (systemd's sd_notify, for
// units with Type=notify): READY=1 once a server can serve, STOPPING=1 when
// it begins to shut down, with a one-line STATUS= that `systemctl status`
// shows. Without $NOTIFY_SOCKET (not started by systemd) nothing is sent.
//
// Thread-safety: callable from any thread.
#ifndef COLIBRI_COMMON_SERVICE_NOTIFY_H_
#define COLIBRI_COMMON_SERVICE_NOTIFY_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace colibri {

// Sends READY=1 and STATUS=`status`. OK also when there is no service
// manager to tell; Unavailable when the notification socket refuses it.
absl::Status NotifyServiceReady(absl::string_view status);

// Sends STOPPING=1 and STATUS=`status`; as NotifyServiceReady.
absl::Status NotifyServiceStopping(absl::string_view status);

}  // namespace colibri

#endif  // COLIBRI_COMMON_SERVICE_NOTIFY_H_
