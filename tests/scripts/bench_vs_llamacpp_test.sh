#!/usr/bin/env bash
# Smoke test of scripts/bench-vs-llamacpp.sh on the committed demo model with
# a stand-in llama-bench (one fixed pp and one fixed tg JSON line): the summary
# table, the ratios against the stand-in's figures and the bandwidth-limit lines
# are printed. No timing is asserted. Exit 77 (skipped) when a binary or the
# model is absent.
# usage: bench_vs_llamacpp_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src="$1"
bin="$2"
model="$src/scripts/demo-model/colibri-demo-kjv-q8_0.gguf"
for b in coordinator/colibri-coordinator model/ops/colibri_ops_bench; do
  [ -x "$bin/$b" ] || { echo "SKIP: $bin/$b is not built"; exit 77; }
done
[ -f "$model" ] || { echo "SKIP: no demo model at $model"; exit 77; }

tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/bench_vs_llamacpp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/llama-bench" <<'STUB'
#!/bin/sh
echo '{"build_commit": "stub", "n_prompt": 8, "n_gen": 0, "avg_ts": 1000.0, "stddev_ts": 1}'
echo '{"build_commit": "stub", "n_prompt": 0, "n_gen": 4, "avg_ts": 20.0, "stddev_ts": 1}'
STUB
chmod +x "$tmp/llama-bench"

out="$tmp/out.txt"
# shellcheck source=tests/scripts/script_test_lib.sh
source "$src/tests/scripts/script_test_lib.sh"
run_script "$src/scripts/bench-vs-llamacpp.sh" --llama-bench "$tmp/llama-bench" --model "$model" \
  --build "$bin" -r 2 -p 8 -n 4

expect "^model: .*; 2 interleaved runs; prompt 8 tokens, decode 4 tokens\$" "header line"
expect "^prompt tok/s +$num \($num-$num\) $num +1000\.00 \(1000\.00-1000\.00\) 1\.00 +$num\$" \
  "prompt row against the stand-in's 1000 tok/s"
expect "^decode tok/s +$num \($num-$num\) $num +20\.00 \(20\.00-20\.00\) 1\.00 +$num\$" \
  "decode row against the stand-in's 20 tok/s"
expect "^bandwidth limit: $num tok/s = memory read $num GB/s \(best of 5 probes\) / active weight bytes $num [KMG]iB per token\$" \
  "bandwidth limit line (the 3 final probes and each run's)"
# The limit's bandwidth is at least every run's own probe.
limit_gbs=$(sed -n 's/^bandwidth limit: .* memory read \([0-9.]*\) GB\/s.*/\1/p' "$out")
for run_gbs in $(sed -n 's/^run .* memory read \([0-9.]*\) GB\/s$/\1/p' "$tmp/err.txt"); do
  awk -v l="${limit_gbs:-0}" -v r="$run_gbs" 'BEGIN { exit !(l + 0 >= r + 0) }' ||
    { echo "FAIL: the limit's $limit_gbs GB/s is below a run's probe of $run_gbs GB/s"; fail=1; }
done
expect "^decode vs limit: Colibri [0-9]+%, llama\.cpp [0-9]+%\$" "decode vs limit line"
expect "^decode vs its own run's memory probe \(median, range\): Colibri $num% \($num-$num%\), llama\.cpp $num% \($num-$num%\)\$" \
  "per-run share line"
expect "^Colibri/llama\.cpp run by run, median \(min-max\) spread: decode $num \($num-$num\) $num, prompt $num \($num-$num\) $num\$" \
  "run-by-run ratios"
expect "^decode at each run's median token \(stalls left out\): Colibri $num \($num-$num\) $num\$" \
  "decode at the runs' median tokens"

# At a depth (-d): decode only, after a D-token prompt, with Colibri's extra
# flags passed through.
if [ "$fail" = 0 ]; then
  if ! bash "$src/scripts/bench-vs-llamacpp.sh" --llama-bench "$tmp/llama-bench" --model "$model" \
    --build "$bin" -r 1 -n 4 -d 16 --colibri-args "--kv-type f16" >"$out" 2>"$tmp/err.txt"; then
    echo "FAIL: bench-vs-llamacpp.sh -d 16 exited with an error"
    cat "$out" "$tmp/err.txt"
    exit 1
  fi
  expect "^model: .*; 1 interleaved runs; decode 4 tokens at a depth of 16 tokens; colibri --kv-type f16\$" \
    "header line at a depth"
  expect "^prompt tok/s +n/a " "no Colibri prompt figure at a depth"
  expect "^decode tok/s +$num \($num-$num\) $num +20\.00 \(20\.00-20\.00\) 1\.00 +$num\$" \
    "decode row at a depth"
  grep -q "KV cache f16" "$bin/bench-vs-llamacpp/colibri.1.err" ||
    { echo "FAIL: --colibri-args did not reach colibri-coordinator run"; fail=1; }
  grep -q "^prompt: 16 tokens" "$bin/bench-vs-llamacpp/colibri.1.err" ||
    { echo "FAIL: Colibri's prompt was not the 16 tokens of depth"; fail=1; }
fi
# --busy-core: the busy loop runs during the runs (the stand-in records what
# pgrep finds while it runs) and is gone when the script ends.
if [ "$fail" = 0 ]; then
  cat >"$tmp/llama-bench" <<STUB
#!/bin/sh
pgrep -f colibri-bench-busy-loop >>"$tmp/busy-seen" || echo none >>"$tmp/busy-seen"
echo '{"build_commit": "stub", "n_prompt": 8, "n_gen": 0, "avg_ts": 1000.0, "stddev_ts": 1}'
echo '{"build_commit": "stub", "n_prompt": 0, "n_gen": 4, "avg_ts": 20.0, "stddev_ts": 1}'
STUB
  if ! bash "$src/scripts/bench-vs-llamacpp.sh" --llama-bench "$tmp/llama-bench" --model "$model" \
    --build "$bin" -r 2 -p 8 -n 4 --busy-core >"$out" 2>"$tmp/err.txt"; then
    echo "FAIL: bench-vs-llamacpp.sh --busy-core exited with an error"
    cat "$out" "$tmp/err.txt"
    exit 1
  fi
  expect "^model: .*; a busy loop beside every run\$" "header line with --busy-core"
  if [ "$(grep -c '^[0-9][0-9]*$' "$tmp/busy-seen" 2>/dev/null)" != 2 ]; then
    echo "FAIL: the busy loop was not running during both llama-bench runs:"
    cat "$tmp/busy-seen"
    fail=1
  fi
  if pgrep -f colibri-bench-busy-loop >/dev/null; then
    echo "FAIL: the busy loop outlived the script"
    pkill -f colibri-bench-busy-loop
    fail=1
  fi
fi
if [ "$fail" != 0 ]; then
  echo "--- output"
  cat "$out"
  echo "--- stderr"
  cat "$tmp/err.txt"
  exit 1
fi
echo "PASS"
