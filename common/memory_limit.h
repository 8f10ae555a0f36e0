// How much memory this process may use: physical memory, or less when a
// control group (a container, a systemd unit with MemoryMax=) limits it.
#ifndef COLIBRI_COMMON_MEMORY_LIMIT_H_
#define COLIBRI_COMMON_MEMORY_LIMIT_H_

#include <cstdint>
#include <string>

namespace colibri {

// The smaller of physical memory and the memory.max (cgroup v2) or
// memory.limit_in_bytes (v1) of this process's control group and of each of
// its ancestors. 0 when none of them can be read.
uint64_t MemoryLimitBytes();

// The same with the cgroup file system mounted at `cgroup_root` and
// `proc_self_cgroup` the text of /proc/self/cgroup ("0::/a/b" for v2,
// "N:memory:/a/b" for v1), and `physical` bytes of memory (0: unknown).
// For tests.
uint64_t MemoryLimitBytesFor(const std::string& cgroup_root, const std::string& proc_self_cgroup,
                             uint64_t physical);

}  // namespace colibri

#endif  // COLIBRI_COMMON_MEMORY_LIMIT_H_
