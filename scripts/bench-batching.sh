#!/usr/bin/env bash
# Aggregate decode throughput of continuous batching: `serve --sessions S` with
# 1, 4, 8 and 16 concurrent generations (colibri-client processes started
# together), with the synthetic Qwen3-30B-A3B-shaped model locally and with 3
# expert nodes on loopback (optionally through colibri-relay to emulate a
# network). Run from the repository root after a build.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/bench-batching.sh [options]

  -n N               tokens to generate per generation (default 32)
  --concurrency L    concurrent generations to measure (default "1 4 8 16")
  --layers L         layers of the synthetic model (default $LAYERS or 4)
  --model M          benchmark this GGUF instead of the synthetic model
  --prompt TEXT      prompt of every generation (default "The small birds of the valley")
  --threads T        coordinator threads (default 0: physical cores)
  --node-threads T   compute threads per node (default 1)
  --delay-ms X       also run the 3 nodes through relays with this one-way delay
  --bandwidth R      with --delay-ms: relay bandwidth cap, e.g. 1Gbit (default none)
  --build DIR        build folder (default build)
  --fresh            delete the nodes' stored experts first (forces a new ingest)
  -h, --help         this text

Needs colibri-coordinator, colibri-client, colibri-expert-node,
colibri-make-model (and colibri-relay with --delay-ms). Data and logs go to
BUILD/bench-batching/.

"tok/s" is every generation's tokens divided by the wall time from the start
of the first client to the end of the last (prompts included: they are short).
"trips/tok" is the ComputeLayer requests the nodes received during the run
(ClusterStatus) divided by the tokens generated; without batching it would be
the same for every concurrency.
EOF
}

cd "$(dirname "$0")/.."
source scripts/bench-common.sh

n_predict=32
concurrency="1 4 8 16"
layers="${LAYERS:-4}"
model=""
prompt="The small birds of the valley"
threads=0
node_threads=1
delay_ms=""
bandwidth=""
build=build
fresh=0
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --concurrency) concurrency="${2:?}"; shift 2 ;;
    *) bench_common_option "$@" || { usage >&2; exit 2; }; shift "$BENCH_SHIFT" ;;
  esac
done
[ "$n_predict" -ge 1 ] 2>/dev/null || bench_die "-n must be at least 1"
[ -n "$bandwidth" ] && [ -z "$delay_ms" ] && bench_die "--bandwidth needs --delay-ms"

bench_init "$build"
CLIENT="$build/client/colibri-client"
[ -x "$CLIENT" ] || bench_die "$CLIENT is missing; build it: cmake --build $build --target colibri-client"
[ -n "$delay_ms" ] && bench_need_relay
[ -n "$model" ] || model="$build/models/bench-qwen3-30b-a3b-L$layers.gguf"
bench_model "$model" "$layers"
work="$build/bench-batching"
[ "$fresh" -eq 1 ] && rm -rf "$work"
mkdir -p "$work"
trap bench_cleanup EXIT

max_sessions=0
for c in $concurrency; do [ "$c" -gt "$max_sessions" ] && max_sessions=$c; done

# start_serve NAME [FLAGS...]: serve with --sessions max_sessions; sets SERVE_PID, SERVE_ADDR.
start_serve() {
  local name="$1"
  shift
  "$COORD" serve -m "$model" --listen 127.0.0.1:0 --threads "$threads" \
    --sessions "$max_sessions" "$@" >"$work/$name.out" 2>"$work/$name.err" &
  SERVE_PID=$!
  BENCH_PIDS+=($!)
  SERVE_ADDR=$(bench_wait_listening "$work/$name.out" "$SERVE_PID") ||
    bench_die "serve did not start: $(tail -3 "$work/$name.err")"
}

# node_requests: the ComputeLayer requests every node received so far.
node_requests() {
  "$CLIENT" --coordinator "$SERVE_ADDR" status | awk '$1 ~ /:[0-9]+$/ {s += $(NF - 2)} END {print s + 0}'
}

# measure NAME N: N generations at once; appends a row.
rows=()
measure() {
  local name="$1" n="$2" i start end before after pids=()
  before=$( [ "$3" = nodes ] && node_requests || echo 0)
  start=$(date +%s.%N)
  for i in $(seq "$n"); do
    "$CLIENT" --coordinator "$SERVE_ADDR" generate "$prompt" -n "$n_predict" --ignore-eos \
      --temp 0 --stats >"$work/$name.c$n.$i.out" 2>"$work/$name.c$n.$i.err" &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || bench_die "a client failed: $(tail -3 "$work/$name.c$n."*.err)"; done
  end=$(date +%s.%N)
  after=$( [ "$3" = nodes ] && node_requests || echo 0)
  local tokens=$((n * n_predict))
  local tps trips
  tps=$(awk -v t="$tokens" -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", t / (b - a)}')
  if [ "$3" = nodes ]; then trips=$(bench_div "$((after - before))" "$tokens" "%.1f"); else trips="-"; fi
  rows+=("$(printf '%-30s %6d %10s %10s' "$name" "$n" "$tps" "$trips")")
  echo "  $name x$n: $tps tok/s, $trips trips/token" >&2
}

run_all() {
  local name="$1" kind="$2" c
  # Warm-up: the experts reach the nodes' RAM tiers, the pages the OS cache.
  "$CLIENT" --coordinator "$SERVE_ADDR" generate "$prompt" -n "$n_predict" --ignore-eos \
    --temp 0 >/dev/null 2>&1 || bench_die "warm-up failed"
  for c in $concurrency; do measure "$name" "$c" "$kind"; done
}

echo "local..." >&2
start_serve local
run_all "local" local
bench_stop "$SERVE_PID"

echo "starting 3 nodes..." >&2
bench_start_nodes "$work" 3 --threads "$node_threads"
nodes=$(IFS=,; echo "${NODE_ADDRS[*]}")
start_serve nodes --nodes "$nodes"
run_all "3 nodes (loopback)" nodes
bench_stop "$SERVE_PID"

if [ -n "$delay_ms" ]; then
  bench_start_relay "$work" "$delay_ms" "$bandwidth" "${NODE_ADDRS[@]}"
  relayed=$(IFS=,; echo "${RELAY_ADDRS[*]}")
  start_serve relay --nodes "$relayed"
  run_all "3 nodes, relay ${delay_ms} ms${bandwidth:+ $bandwidth}" nodes
  bench_stop "$SERVE_PID"
  bench_stop "$RELAY_PID"
fi
bench_stop_nodes

echo
echo "model: $model, $n_predict tokens per generation, prompt \"$prompt\", --sessions $max_sessions"
printf '%-30s %6s %10s %10s\n' "config" "concur" "aggregate" "round"
printf '%-30s %6s %10s %10s\n' "" "" "tok/s" "trips/tok"
printf '%s\n' "${rows[@]}"
