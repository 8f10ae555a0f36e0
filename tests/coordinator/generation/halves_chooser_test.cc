#include "coordinator/generation/halves_chooser.h"

#include <functional>
#include <optional>
#include <vector>

#include "gtest/gtest.h"

namespace colibri::coordinator {
namespace {

// Step seconds of a step of `tokens` tokens run split or not: the injected
// timings of a simulated run.
using StepTime = std::function<double(int tokens, bool split, int step)>;

struct SimulatedRun {
  int split_steps = 0;
  std::vector<HalvesChooser::Change> changes;
};

// Runs `steps` steps of `tokens` tokens through `chooser`, counting the split
// steps among those from `count_from` on.
SimulatedRun Simulate(HalvesChooser& chooser, int tokens, int steps, const StepTime& time,
                      int count_from = 0, int first_step = 0) {
  SimulatedRun run;
  for (int i = first_step; i < first_step + steps; ++i) {
    const bool split = chooser.Split(tokens);
    if (split && i - first_step >= count_from) ++run.split_steps;
    std::optional<HalvesChooser::Change> change =
        chooser.Observe(tokens, split, time(tokens, split, i));
    if (change.has_value()) run.changes.push_back(*change);
  }
  return run;
}

// Alternating +-1 % noise, so that no two consecutive steps take the same time.
double Noise(int step) { return step % 2 == 0 ? 1.01 : 0.99; }

HalvesChooser::Octave OctaveWith(const HalvesChooser& chooser, int tokens) {
  for (const HalvesChooser::Octave& o : chooser.octaves()) {
    if (o.min_tokens <= tokens && tokens <= o.max_tokens) return o;
  }
  ADD_FAILURE() << "no octave holds " << tokens << " tokens";
  return {};
}

TEST(HalvesChooserTest, ChoosesUnsplitWhenSplitStepsAreSlower) {
  HalvesChooser::Options options;
  options.initial_split = true;
  options.warmup_steps = 1;
  HalvesChooser chooser(options);
  const StepTime time = [](int, bool split, int step) {
    return (split ? 0.012 : 0.010) * Noise(step);
  };
  const SimulatedRun run = Simulate(chooser, 8, 340, time, /*count_from=*/40);
  const HalvesChooser::Octave o = OctaveWith(chooser, 8);
  EXPECT_FALSE(o.split);
  ASSERT_EQ(run.changes.size(), 1u);
  EXPECT_FALSE(run.changes[0].octave.split);
  EXPECT_NEAR(o.ratio, 1.2, 0.03);
  EXPECT_NEAR(o.split_seconds, 0.012, 0.0005);
  EXPECT_NEAR(o.unsplit_seconds, 0.010, 0.0005);
  EXPECT_EQ(o.probes, run.split_steps + 2);  // steps 22 and 39 probed too
  // Of the last 300 steps, only the probes (one in 17) ran split.
  EXPECT_EQ(run.split_steps, 300 / (options.probe_interval + 1));
  EXPECT_EQ(o.switches, 0);
}

TEST(HalvesChooserTest, ChoosesSplitWhenSplitStepsAreFaster) {
  HalvesChooser::Options options;
  options.initial_split = false;
  options.warmup_steps = 1;
  HalvesChooser chooser(options);
  const StepTime time = [](int, bool split, int step) {
    return (split ? 0.007 : 0.010) * Noise(step);
  };
  const SimulatedRun run = Simulate(chooser, 8, 340, time, /*count_from=*/40);
  const HalvesChooser::Octave o = OctaveWith(chooser, 8);
  EXPECT_TRUE(o.split);
  ASSERT_EQ(run.changes.size(), 1u);
  EXPECT_TRUE(run.changes[0].octave.split);
  EXPECT_EQ(run.split_steps, 300 - 300 / (options.probe_interval + 1));
}

TEST(HalvesChooserTest, MeasuresBothModesBeforeDeciding) {
  HalvesChooser::Options options;
  options.warmup_steps = 1;
  HalvesChooser chooser(options);
  const StepTime time = [](int, bool split, int) { return split ? 0.02 : 0.01; };
  // Split twice (the first not counted), unsplit twice (the second pairs
  // with the counted split step), split (a pair), then unsplit: the third
  // pair decides.
  SimulatedRun run = Simulate(chooser, 4, 5, time);
  EXPECT_TRUE(run.changes.empty());
  EXPECT_EQ(run.split_steps, 3);
  EXPECT_EQ(OctaveWith(chooser, 4).pairs, 2);
  run = Simulate(chooser, 4, 1, time);
  ASSERT_EQ(run.changes.size(), 1u);
  EXPECT_FALSE(run.changes[0].octave.split);
  EXPECT_NEAR(run.changes[0].octave.ratio, 2.0, 1e-9);
}

TEST(HalvesChooserTest, TheFirstStepsOfAModeAreNotCounted) {
  HalvesChooser chooser;  // warmup_steps 3
  // The first three split steps are slow (buffers, connections), later
  // ones are fast.
  int split_steps = 0;
  const StepTime time = [&split_steps](int, bool split, int) {
    if (split && ++split_steps <= 3) return 1.0;
    return split ? 0.005 : 0.010;
  };
  Simulate(chooser, 16, 60, time);
  const HalvesChooser::Octave o = OctaveWith(chooser, 16);
  EXPECT_TRUE(o.split);
  EXPECT_NEAR(o.ratio, 0.5, 1e-9);
  EXPECT_NEAR(o.split_seconds, 0.005, 1e-9);
}

TEST(HalvesChooserTest, NoiseWithinTheMarginDoesNotSwitch) {
  HalvesChooser chooser;
  // 2 % apart with +-1 % noise that favours each mode in turn.
  const StepTime time = [](int, bool split, int step) {
    const double noise = (step / 17) % 2 == 0 ? 1.01 : 0.99;
    return (split ? 0.0100 : 0.0102) * (split ? noise : 2 - noise);
  };
  const SimulatedRun run = Simulate(chooser, 8, 1000, time);
  EXPECT_EQ(run.changes.size(), 1u);  // the first decision only
  EXPECT_EQ(OctaveWith(chooser, 8).switches, 0);
}

// The current mode's steps get slower with the machine's load while the
// other mode was last measured before: comparing each mode's own average
// would switch, the pairs do not.
TEST(HalvesChooserTest, ALoadChangeAloneDoesNotSwitch) {
  HalvesChooser chooser;
  // Split 10 % faster throughout; every step 4 times slower from step 100.
  const StepTime time = [](int, bool split, int step) {
    return (split ? 0.009 : 0.010) * (step < 100 ? 1 : 4);
  };
  const SimulatedRun run = Simulate(chooser, 8, 400, time);
  ASSERT_EQ(run.changes.size(), 1u);
  EXPECT_TRUE(run.changes[0].octave.split);
  EXPECT_EQ(OctaveWith(chooser, 8).switches, 0);
}

TEST(HalvesChooserTest, FollowsAChangeOfTheFasterMode) {
  HalvesChooser chooser;
  // Split pays for 200 steps (a slow link), then costs (the link got fast).
  const StepTime time = [](int, bool split, int step) {
    if (step < 200) return split ? 0.006 : 0.010;
    return split ? 0.012 : 0.008;
  };
  SimulatedRun run = Simulate(chooser, 8, 200, time);
  EXPECT_TRUE(OctaveWith(chooser, 8).split);
  run = Simulate(chooser, 8, 300, time, /*count_from=*/200, /*first_step=*/200);
  const HalvesChooser::Octave o = OctaveWith(chooser, 8);
  EXPECT_FALSE(o.split);
  EXPECT_EQ(o.switches, 1);
  ASSERT_EQ(run.changes.size(), 1u);
  EXPECT_FALSE(run.changes[0].octave.split);
  // Within the last 100 steps, only probes ran split.
  EXPECT_LE(run.split_steps, 100 / 17 + 1);
}

TEST(HalvesChooserTest, EachOctaveDecidesForItself) {
  HalvesChooser chooser;
  // Two tokens split pay two round trips for nothing; 32 tokens hide compute.
  const StepTime time = [](int tokens, bool split, int) {
    if (tokens < 4) return split ? 0.011 : 0.008;
    return split ? 0.015 : 0.020;
  };
  for (int i = 0; i < 100; ++i) {
    const int tokens = i % 2 == 0 ? 2 : 32;
    const bool split = chooser.Split(tokens);
    chooser.Observe(tokens, split, time(tokens, split, i));
  }
  const std::vector<HalvesChooser::Octave> octaves = chooser.octaves();
  ASSERT_EQ(octaves.size(), 2u);
  EXPECT_EQ(octaves[0].min_tokens, 2);
  EXPECT_EQ(octaves[0].max_tokens, 3);
  EXPECT_FALSE(octaves[0].split);
  EXPECT_EQ(octaves[1].min_tokens, 32);
  EXPECT_EQ(octaves[1].max_tokens, 63);
  EXPECT_TRUE(octaves[1].split);
}

TEST(HalvesChooserTest, ComparesTheModesAtTheStepsTokenCount) {
  HalvesChooser chooser;
  // Steps alternate between 8 and 15 tokens, and a step's time grows with
  // its tokens far more than with its mode: split costs 20 % more at either
  // count. Pairs are of equal counts, so the ratio is exact.
  const StepTime time = [](int tokens, bool split, int) {
    return (split ? 1.2 : 1.0) * 0.001 * tokens;
  };
  SimulatedRun run;
  for (int i = 0; i < 400; ++i) {
    const int tokens = i % 2 == 0 ? 8 : 15;
    const bool split = chooser.Split(tokens);
    if (split && i >= 200) ++run.split_steps;
    chooser.Observe(tokens, split, time(tokens, split, i));
  }
  const HalvesChooser::Octave o = OctaveWith(chooser, 8);
  EXPECT_FALSE(o.split);
  EXPECT_NEAR(o.ratio, 1.2, 1e-9);
  EXPECT_LE(run.split_steps, 200 / 17 + 1);
}

TEST(HalvesChooserTest, AChangeDescribesItsFigures) {
  HalvesChooser::Change change;
  change.octave.min_tokens = 8;
  change.octave.max_tokens = 15;
  change.octave.split = true;
  change.octave.ratio = 0.8333;
  change.octave.pairs = 5;
  change.octave.split_seconds = 0.0125;
  change.octave.unsplit_seconds = 0.0150;
  EXPECT_EQ(change.Describe(),
            "steps of 8-15 tokens now run split in two pipelined halves (split / unsplit step "
            "time 0.833 over 5 pairs; recent steps: split 12.50 ms, unsplit 15.00 ms)");
}

}  // namespace
}  // namespace colibri::coordinator
