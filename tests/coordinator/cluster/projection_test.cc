// The throughput projection's arithmetic on shapes whose answer is worked
// out by hand here: a network-bound cluster, a RAM-short one reading from
// disk, batching's distinct experts, speculation's accepted length, the
// shape parser's errors.
#include "coordinator/cluster/projection.h"

#include <algorithm>
#include <cmath>

#include "gtest/gtest.h"

namespace colibri::coordinator {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

ModelShape Shape() {
  ModelShape m;
  m.name = "t";
  m.layers = 10;
  m.moe_layers = 8;
  m.experts = 64;
  m.experts_used = 4;
  m.embd = 1000;
  m.expert_bytes = 2 * kMiB;
  m.dense_bytes = 10 * kMiB;
  return m;
}

MachineRates Rates() {
  MachineRates r;
  r.threads = 4;
  r.bytes_per_s_1tok_1thread = 1e9;
  r.bytes_per_s_1tok = 4e9;
  r.bytes_per_s_8tok_1thread = 0.5e9;
  r.bytes_per_s_8tok = 2e9;
  r.call_overhead_seconds = 0.0002;
  return r;
}

TEST(ProjectionTest, OneStreamOverNodesIsEachPartByHand) {
  ClusterShape c;
  c.nodes = 4;
  c.rtt_seconds = 0.002;
  c.link_gbit = 1;
  c.node_threads = 2;
  auto p = Project(Shape(), c, Rates(), StepShape());
  ASSERT_TRUE(p.ok()) << p.status();
  // Dense 10 MiB at the 4-thread one-token rate, 4 GB/s.
  EXPECT_NEAR(p->coordinator, 10 * kMiB / 4e9, 1e-12);
  // One token routes to exactly top-k = 4 experts: one per node, 2 MiB at
  // the node's 2 threads x 1 GB/s (under the 4 GB/s machine cap), per layer.
  EXPECT_NEAR(p->node_compute, 8 * 1.0 * 2 * kMiB / 2e9, 1e-12);
  // 4 routes x 1000 x 4 bytes each way, 8 layers, 1 Gbit/s.
  EXPECT_NEAR(p->transfer, 8 * 2.0 * 4 * 1000 * 4 / 125e6, 1e-12);
  EXPECT_NEAR(p->network, 8 * (0.002 + 0.0002) + p->transfer, 1e-12);
  EXPECT_EQ(p->disk, 0);
  EXPECT_NEAR(p->step, p->coordinator + p->network + p->node_compute, 1e-15);
  EXPECT_NEAR(p->tokens_per_second, 1 / p->step, 1e-9);
  EXPECT_EQ(p->binding, "network latency");
  // Nodes with more threads, up to their own memory bandwidth.
  c.node_threads = 16;
  c.node_mem_gbs = 10;
  p = Project(Shape(), c, Rates(), StepShape());
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(p->node_compute, 8 * 1.0 * 2 * kMiB / 10e9, 1e-12);
  // A coordinator PC of 2 threads instead of this machine's 4.
  c.coordinator_threads = 2;
  p = Project(Shape(), c, Rates(), StepShape());
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(p->coordinator, 10 * kMiB / 2e9, 1e-12);
}

TEST(ProjectionTest, ANodeShortOfRamReadsItsMissesFromDisk) {
  ClusterShape c;
  c.nodes = 2;
  c.node_threads = 4;
  c.disk_gbs = 0.5;
  // A node's share: 8 layers x 64 experts x 2 MiB / 2 nodes = 512 MiB; RAM
  // for a quarter of it.
  c.node_ram_bytes = 128 * kMiB;
  auto p = Project(Shape(), c, Rates(), StepShape());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NEAR(p->miss_rate, 0.75, 1e-12);
  // Per layer each node computes 2 of the 4 experts, 3/4 of them from disk.
  EXPECT_NEAR(p->disk, 8 * 2 * 0.75 * 2 * kMiB / 0.5e9, 1e-12);
  EXPECT_NEAR(p->disk_bytes_per_token, 8 * 4 * 0.75 * 2 * kMiB, 1e-6);
  EXPECT_EQ(p->binding, "disk");
  c.node_ram_bytes = 1024 * kMiB;  // more than the share: nothing from disk
  p = Project(Shape(), c, Rates(), StepShape());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->miss_rate, 0);
  EXPECT_EQ(p->disk, 0);
}

TEST(ProjectionTest, StreamsShareExpertsAndDraftsYieldTheirAcceptedLength) {
  ClusterShape c;
  c.nodes = 1;
  c.node_threads = 4;
  StepShape step;
  step.streams = 16;
  auto p = Project(Shape(), c, Rates(), step);
  ASSERT_TRUE(p.ok());
  const double distinct = 64 * (1 - std::pow(1 - 4.0 / 64, 16));
  // Each expert's product has 64 routes / distinct rows: its rate lies that
  // far from the one-token rate towards the eight-token one.
  const double t = (64 / distinct - 1) / 7;
  const double rate = std::min(4 * (1e9 - t * 0.5e9), 4e9 - t * 2e9);
  EXPECT_NEAR(p->node_compute, 8 * distinct * 2 * kMiB / rate, 1e-9);
  // The dense weights' product has all 16 rows: the eight-token rate.
  EXPECT_NEAR(p->coordinator, 10 * kMiB / 2e9, 1e-12);
  EXPECT_EQ(p->tokens_per_step, 16);

  step.streams = 1;
  step.drafts = 3;
  step.acceptance = 0.5;
  p = Project(Shape(), c, Rates(), step);
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(p->tokens_per_step, 1 + 0.5 + 0.25 + 0.125, 1e-12);
  // Four rows: between the one- and eight-token rates (3/7 of the way).
  EXPECT_NEAR(p->coordinator, 10 * kMiB / (4e9 - 3.0 / 7 * 2e9), 1e-12);
}

TEST(ProjectionTest, WithoutNodesTheCoordinatorComputesTheExperts) {
  ClusterShape c;
  c.nodes = 0;
  auto p = Project(Shape(), c, Rates(), StepShape());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->network, 0);
  EXPECT_NEAR(p->node_compute, 8 * 4 * 2 * kMiB / 4e9, 1e-12);
  EXPECT_EQ(p->binding, "node compute");
}

TEST(ProjectionTest, ShapesParseAndBadOnesAreNamed) {
  auto preset = ParseModelShape("deepseek-v3");
  ASSERT_TRUE(preset.ok());
  EXPECT_EQ(preset->layers, 61);
  EXPECT_EQ(preset->experts, 256);
  auto custom = ParseModelShape(
      "name=x,layers=4,moe_layers=3,experts=16,experts_used=2,embd=512,expert_mib=1.5,dense_gib=0.25");
  ASSERT_TRUE(custom.ok()) << custom.status();
  EXPECT_EQ(custom->name, "x");
  EXPECT_EQ(custom->moe_layers, 3);
  EXPECT_DOUBLE_EQ(custom->expert_bytes, 1.5 * kMiB);
  EXPECT_DOUBLE_EQ(custom->dense_bytes, 0.25 * 1024 * kMiB);
  EXPECT_NE(ParseModelShape("deepseek-v4").status().message().find("presets"), std::string::npos);
  EXPECT_NE(ParseModelShape("layers=4,colour=2").status().message().find("colour"),
            std::string::npos);
  EXPECT_NE(ParseModelShape("layers=4,moe_layers=3,experts=16,experts_used=2,embd=512,"
                            "expert_mib=1")
                .status()
                .message()
                .find("dense_gib missing"),
            std::string::npos);
  EXPECT_NE(ParseModelShape("layers=-4").status().message().find("layers=-4"), std::string::npos);
  EXPECT_FALSE(ParseModelShape("layers=nan").ok());
}

TEST(ProjectionTest, WhatCannotBeProjectedIsRefused) {
  ModelShape m = Shape();
  m.experts_used = 65;
  EXPECT_FALSE(Project(m, ClusterShape(), Rates(), StepShape()).ok());
  ClusterShape c;
  c.nodes = 2;
  c.replicas = 3;
  EXPECT_FALSE(Project(Shape(), c, Rates(), StepShape()).ok());
  MachineRates r = Rates();
  r.bytes_per_s_8tok = 0;
  EXPECT_FALSE(Project(Shape(), ClusterShape(), r, StepShape()).ok());
  StepShape s;
  s.acceptance = 1.5;
  EXPECT_FALSE(Project(Shape(), ClusterShape(), Rates(), s).ok());
}

}  // namespace
}  // namespace colibri::coordinator
