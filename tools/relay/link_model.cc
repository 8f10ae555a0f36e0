#include "tools/relay/link_model.h"

#include <algorithm>

namespace colibri::relay {
namespace {

// 128-bit so that neither huge chunks nor tiny rates overflow.
__extension__ typedef unsigned __int128 Uint128;

}  // namespace

LinkModel::Duration LinkModel::SerializationTime(uint64_t bytes) const {
  if (options_.bytes_per_second == 0) return Duration(0);
  const Uint128 numerator = static_cast<Uint128>(bytes) * 1'000'000'000u;
  const Uint128 ns = (numerator + options_.bytes_per_second - 1) / options_.bytes_per_second;
  return Duration(static_cast<int64_t>(ns));
}

LinkModel::TimePoint LinkModel::Deliver(TimePoint arrival, uint64_t bytes) {
  const TimePoint start = std::max(arrival + options_.delay, link_free_);
  link_free_ = start + SerializationTime(bytes);
  return link_free_;
}

}  // namespace colibri::relay
