// Status propagation macros for absl::Status / absl::StatusOr.
//
//   COLIBRI_RETURN_IF_ERROR(DoThing());
//   COLIBRI_ASSIGN_OR_RETURN(auto file, GgufFile::Open(path));
//   COLIBRI_ASSIGN_OR_RETURN(value, Compute());   // assigns to an existing variable
#ifndef COLIBRI_COMMON_STATUS_MACROS_H_
#define COLIBRI_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define COLIBRI_STATUS_CONCAT_INNER_(a, b) a##b
#define COLIBRI_STATUS_CONCAT_(a, b) COLIBRI_STATUS_CONCAT_INNER_(a, b)

#define COLIBRI_RETURN_IF_ERROR(expr)                \
  do {                                               \
    ::absl::Status colibri_status_ = (expr);         \
    if (!colibri_status_.ok()) return colibri_status_; \
  } while (0)

#define COLIBRI_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                   \
  if (!tmp.ok()) return std::move(tmp).status();        \
  lhs = std::move(tmp).value()

#define COLIBRI_ASSIGN_OR_RETURN(lhs, rexpr) \
  COLIBRI_ASSIGN_OR_RETURN_IMPL_(COLIBRI_STATUS_CONCAT_(colibri_statusor_, __LINE__), lhs, rexpr)

#endif  // COLIBRI_COMMON_STATUS_MACROS_H_
