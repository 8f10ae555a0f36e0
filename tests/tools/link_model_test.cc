// LinkModel's delivery times, and the parsers of colibri-relay's flag values.
#include "tools/relay/link_model.h"

#include <chrono>

#include "gtest/gtest.h"
#include "tools/relay/relay_flags.h"

namespace colibri::relay {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using TimePoint = LinkModel::TimePoint;

TimePoint At(nanoseconds t) { return TimePoint(t); }

TEST(LinkModelTest, UnlimitedLinkOnlyDelays) {
  LinkModel link({microseconds(250), 0});
  EXPECT_EQ(link.Deliver(At(milliseconds(1)), 1 << 20), At(microseconds(1250)));
  // A later chunk is not held back by the earlier one: there is no rate.
  EXPECT_EQ(link.Deliver(At(milliseconds(1)), 1 << 20), At(microseconds(1250)));
  EXPECT_EQ(link.Deliver(At(milliseconds(5)), 1), At(microseconds(5250)));
  EXPECT_EQ(link.SerializationTime(1 << 30), nanoseconds(0));
}

TEST(LinkModelTest, ZeroDelayUnlimitedDeliversAtArrival) {
  LinkModel link({});
  EXPECT_EQ(link.Deliver(At(nanoseconds(123)), 4096), At(nanoseconds(123)));
}

TEST(LinkModelTest, SerializationTimeIsBytesOverRateRoundedUp) {
  LinkModel link({nanoseconds(0), 1'000'000});  // 8 Mbit/s: 1 us per byte
  EXPECT_EQ(link.SerializationTime(1), nanoseconds(1000));
  EXPECT_EQ(link.SerializationTime(1 << 20), nanoseconds(1'048'576'000));
  LinkModel gigabit({nanoseconds(0), 125'000'000});  // 8 ns per byte
  EXPECT_EQ(gigabit.SerializationTime(1500), nanoseconds(12'000));
  LinkModel odd({nanoseconds(0), 3});  // 333333333.3 ns per byte
  EXPECT_EQ(odd.SerializationTime(1), nanoseconds(333'333'334));
  EXPECT_EQ(odd.SerializationTime(3), nanoseconds(1'000'000'000));
}

TEST(LinkModelTest, BackToBackChunksQueueBehindEachOther) {
  // 1 ms one way, 1 MB/s: 1000 bytes take 1 ms on the link.
  LinkModel link({milliseconds(1), 1'000'000});
  // Arrives at 0: propagation to 1 ms, serialization to 2 ms.
  EXPECT_EQ(link.Deliver(At(nanoseconds(0)), 1000), At(milliseconds(2)));
  // Arrives at 0.5 ms: would start at 1.5 ms but the link is busy until 2 ms.
  EXPECT_EQ(link.Deliver(At(microseconds(500)), 1000), At(milliseconds(3)));
  // Arrives at 2.5 ms: 2.5 + 1 = 3.5 ms > 3 ms, the link is idle again.
  EXPECT_EQ(link.Deliver(At(microseconds(2500)), 500), At(milliseconds(4)));
  // Arrives after a long idle gap: delay + serialization only.
  EXPECT_EQ(link.Deliver(At(milliseconds(100)), 2000), At(milliseconds(103)));
}

TEST(LinkModelTest, ThroughputOfASteadyStreamIsTheRate) {
  LinkModel link({milliseconds(20), 1'000'000});
  TimePoint last{};
  // 1 MiB in 64 KiB chunks, all arriving at once.
  for (int i = 0; i < 16; ++i) last = link.Deliver(At(nanoseconds(0)), 64 * 1024);
  EXPECT_EQ(last, At(milliseconds(20) + nanoseconds(1'048'576'000)));
}

TEST(LinkModelTest, EmptyChunkIsDeliveredAfterEverythingBeforeIt) {
  LinkModel link({milliseconds(1), 1'000'000});
  EXPECT_EQ(link.Deliver(At(nanoseconds(0)), 1000), At(milliseconds(2)));
  EXPECT_EQ(link.Deliver(At(nanoseconds(0)), 0), At(milliseconds(2)));
}

TEST(ParseBandwidthTest, UnitsInBitsAndBytes) {
  EXPECT_EQ(*ParseBandwidth("1Gbit"), 125'000'000u);
  EXPECT_EQ(*ParseBandwidth("100Mbit"), 12'500'000u);
  EXPECT_EQ(*ParseBandwidth("8mbit/s"), 1'000'000u);
  EXPECT_EQ(*ParseBandwidth("2.5Gbit"), 312'500'000u);
  EXPECT_EQ(*ParseBandwidth("64kbit"), 8'000u);
  EXPECT_EQ(*ParseBandwidth("125MB"), 125'000'000u);
  EXPECT_EQ(*ParseBandwidth("1MiB"), 1'048'576u);
  EXPECT_EQ(*ParseBandwidth("10KB"), 10'000u);
  EXPECT_EQ(*ParseBandwidth("1000"), 1000u);
  EXPECT_EQ(*ParseBandwidth("1000B"), 1000u);
  EXPECT_EQ(*ParseBandwidth("0"), 0u);
}

TEST(ParseBandwidthTest, RejectsGarbage) {
  for (const char* bad : {"", "fast", "Gbit", "-1Mbit", "1Xbit", "1e30Gbit", "0.1bit", "nanB"}) {
    EXPECT_FALSE(ParseBandwidth(bad).ok()) << bad;
  }
}

TEST(ParseRouteTest, SplitsListenAndTarget) {
  absl::StatusOr<RouteSpec> route = ParseRoute("127.0.0.1:0=127.0.0.1:7070");
  ASSERT_TRUE(route.ok()) << route.status();
  EXPECT_EQ(route->listen, "127.0.0.1:0");
  EXPECT_EQ(route->target, "127.0.0.1:7070");
  EXPECT_TRUE(ParseRoute("[::1]:0=localhost:1").ok());
}

TEST(ParseRouteTest, RejectsMalformedRoutes) {
  for (const char* bad : {"127.0.0.1:0", "127.0.0.1:0=", "=127.0.0.1:1", "a:1=b", "a:1=b:99999",
                          "a:x=b:1", "[::1:0=b:1"}) {
    EXPECT_FALSE(ParseRoute(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace colibri::relay
