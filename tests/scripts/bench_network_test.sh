#!/usr/bin/env bash
# Smoke test of scripts/bench-network.sh --quick on the committed demo model:
# every table and target line is printed, for the plain configuration and a
# --variant (speculation and node-side reduction together), with the figures
# of a stand-in llama.cpp (a llama-bench that prints one fixed JSON line, an
# rpc server that only sleeps) carried through to the llama.cpp table and
# target T3. No timing is asserted. Exit 77 (skipped) when a binary or the model is absent.
# usage: bench_network_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src="$1"
bin="$2"
model="$src/scripts/demo-model/colibri-demo-kjv-q8_0.gguf"
for b in coordinator/colibri-coordinator expert_node/colibri-expert-node \
  client/colibri-client tools/relay/colibri-relay tools/colibri-make-model; do
  [ -x "$bin/$b" ] || { echo "SKIP: $bin/$b is not built"; exit 77; }
done
[ -f "$model" ] || { echo "SKIP: no demo model at $model"; exit 77; }

tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/bench_network.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/llama"
cat >"$tmp/llama/llama-bench" <<'STUB'
#!/bin/sh
echo '{"build_commit": "stub", "n_prompt": 0, "n_gen": 4, "avg_ts": 12.5, "stddev_ts": 0.1}'
STUB
printf '#!/bin/sh\nexec sleep 600\n' >"$tmp/llama/ggml-rpc-server"
chmod +x "$tmp/llama/llama-bench" "$tmp/llama/ggml-rpc-server"

out="$tmp/out.txt"
# shellcheck source=tests/scripts/script_test_lib.sh
source "$src/tests/scripts/script_test_lib.sh"
run_script "$src/scripts/bench-network.sh" --quick --concurrency "1 8" --model "$model" \
  --build "$bin" --work "$tmp/work" --llama-dir "$tmp/llama" \
  --variant "spec+reduce:--draft ngram --wire-reduce"

expect "^4 +local +$num +$num +1 " "local single-stream row"
expect "^4 +3 nodes 0\.25 ms 1Gbit +$num +$num +1 +$num +[0-9]+ +[0-9]+\$" \
  "relayed single-stream row with trips and bytes"
expect "^hidden-state floor, 4 layers: 6144 bytes" "floor (128 x 4 x 4 layers x 3 nodes)"
for c in 1 8; do
  expect "^4 +local +$c +$num " "local row with $c concurrent"
  expect "^4 +3 nodes 0\.25 ms 1Gbit +$c +$num +$num +$num +$num +[0-9]+ +[0-9]+\$" \
    "relayed row with $c concurrent"
done
for v in "" " spec\+reduce"; do
  expect "^4 +local$v +$num +$num +$num " "local$v single-stream row"
  expect "^4 +3 nodes 0\.25 ms 1Gbit$v +$num +$num +$num +$num +[0-9]+ +[0-9]+\$" \
    "relayed$v single-stream row"
  for c in 1 8; do
    expect "^4 +3 nodes 0\.25 ms 1Gbit$v +$c +$num +$num +$num +$num +[0-9]+ +[0-9]+\$" \
      "relayed$v row with $c concurrent"
  done
  # Where the time goes: wall, wait, CPU of coordinator, nodes and relay,
  # cores busy, overlap (serve with nodes), share of drafts accepted.
  cpu='-?[0-9]+\.[0-9]+'
  expect "^4 +local$v +run +$num +- +$cpu +- +- +$cpu +- +" "local$v time row"
  # ... and the experts the nodes read per token.
  expect "^4 +3 nodes 0\.25 ms 1Gbit$v +run +$num +$cpu +$cpu +$cpu +$cpu +$cpu +- +[^ ]+ +$num\$" \
    "relayed$v single-stream time row"
  for c in 1 8; do
    expect "^4 +3 nodes 0\.25 ms 1Gbit$v +$c +$num +$cpu +$cpu +$cpu +$cpu +$cpu +([0-9]+%|-) +[^ ]+ +$num\$" \
      "relayed$v time row with $c concurrent"
  done
done
expect "^4 +3 nodes 0\.25 ms 1Gbit spec\+reduce +T3 decode $num >= 2 x llama\.cpp RPC 12\.50" \
  "target T3 of the variant"
expect "^variant spec\+reduce: run and serve with --draft ngram --wire-reduce\$" "variant line"
expect "^4 +local \(CPU\) +12\.50\$" "llama.cpp CPU row from the stub"
expect "^4 +3 nodes 0\.25 ms 1Gbit +12\.50\$" "llama.cpp RPC row from the stub"
for p in code quote free; do
  for m in fixed adaptive; do
    expect "^$p +$m +$num +[0-9]+ +[0-9]+ +$num +$num +$num\$" "speculation row $p $m"
  done
done
expect "T1 time/token $num ms <= local $num \+ 1\.2 x 4 x 0\.5 ms / $num = $num ms: (MET|NOT MET)\$" \
  "target T1"
expect "T2 aggregate x8 $num >= 4 x $num = $num tok/s \(${num}x\): (MET|NOT MET)\$" "target T2"
expect "T2 if weight reads bound the steps: \($num \+ $num x $num\) / \($num / 8 \+ $num x $num\) MiB per token = ${num}x\$" \
  "T2's bound from the experts read"
expect "T3 decode $num >= 2 x llama.cpp RPC 12\.50 = 25\.00 tok/s \(${num}x\): (MET|NOT MET)\$" \
  "target T3"
# Nothing the script started is left running.
if pgrep -f -- "$tmp/" >/dev/null; then
  echo "FAIL: processes of the run are still alive:"
  pgrep -af -- "$tmp/"
  fail=1
fi
[ "$fail" = 0 ] || cat "$out"
exit "$fail"
