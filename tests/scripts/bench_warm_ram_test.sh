#!/usr/bin/env bash
# Smoke test of scripts/bench-warm-ram.sh on the committed demo model, one
# round: both restarts run, the warmed nodes logged their pass (its seconds are
# in the table) and their decode read no expert from disk, and the summary
# names both modes. No timing is asserted. Exit 77 (skipped)
# when a binary or the model is absent.
# usage: bench_warm_ram_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src="$1"
bin="$2"
model="$src/scripts/demo-model/colibri-demo-kjv-q8_0.gguf"
for b in coordinator/colibri-coordinator expert_node/colibri-expert-node; do
  [ -x "$bin/$b" ] || { echo "SKIP: $bin/$b is not built"; exit 77; }
done
[ -f "$model" ] || { echo "SKIP: no demo model at $model"; exit 77; }

tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/bench_warm_ram.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
out="$tmp/out.txt"
# shellcheck source=tests/scripts/script_test_lib.sh
source "$src/tests/scripts/script_test_lib.sh"
run_script "$src/scripts/bench-warm-ram.sh" --model "$model" --build "$bin" --work "$tmp/work" \
  -r 1 -n 4 --prompt "In the beginning"

expect "^1 +warm +$num +$num +$num +0\$" "warm row with no decode misses"
expect "^1 +cold +- +$num +$num +[0-9]+\$" "cold row"
expect "^  --warm-ram +prompt $num \($num-$num\) s, decode $num \($num-$num\) tok/s\$" "warm summary"
expect "^  --no-warm-ram prompt $num \($num-$num\) s, decode $num \($num-$num\) tok/s\$" "cold summary"
[ "$fail" -eq 0 ] || { cat "$out" "$tmp/err.txt"; exit 1; }
echo "PASS"
