// RocksDB's own log (the LOG file of a data dir) says when opening a store
// recovered past damage: "dropping N bytes; Corruption: ..." for each damaged
// write-ahead log record and the point in time it recovered to. Those writes
// (experts stored after the damage, before a flush) are lost; the node must
// say so, not only RocksDB's LOG file. This logger writes the LOG file as
// before and repeats such warnings on the node's event log.
//
// Thread-safety: RocksDB calls the logger from any of its threads; it only
// forwards (LogEvent and the file logger are thread-safe).
#ifndef COLIBRI_EXPERT_NODE_RECOVERY_LOG_H_
#define COLIBRI_EXPERT_NODE_RECOVERY_LOG_H_

#include <memory>
#include <string>

#include "rocksdb/env.h"
#include "rocksdb/options.h"

namespace colibri::expert_node {

// The default file logger of `data_dir` for `options`, wrapped so that
// warnings about dropped (damaged) log records and point-in-time recovery go
// to LogEvent too, each prefixed with "expert store DATA_DIR: ". Null when
// the file logger cannot be created (RocksDB then makes its own).
std::shared_ptr<rocksdb::Logger> MakeRecoveryReportingLogger(const std::string& data_dir,
                                                             const rocksdb::Options& options);

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_RECOVERY_LOG_H_
