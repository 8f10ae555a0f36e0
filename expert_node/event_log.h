// One line per significant event of the expert node (start, ingest done,
// corruption found), on stderr, with a UTC timestamp. Never per request.
//
// Thread-safety: LogEvent may be called from any thread; lines never interleave.
#ifndef COLIBRI_EXPERT_NODE_EVENT_LOG_H_
#define COLIBRI_EXPERT_NODE_EVENT_LOG_H_

#include "absl/strings/string_view.h"

namespace colibri::expert_node {

void LogEvent(absl::string_view line);

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_EVENT_LOG_H_
