#!/usr/bin/env bash
# Aggregate decode throughput of continuous batching: `serve --sessions S` with
# 1, 4, 8 and 16 concurrent generations (colibri-client processes started
# together), with the synthetic Qwen3-30B-A3B-shaped model locally and with 3
# expert nodes on loopback (optionally through colibri-relay to emulate a
# network), with and without speculative decoding (--draft). Run from the
# repository root after a build.
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
  --draft LIST       serve's drafters to measure, e.g. "none ngram" (default none)
  --draft-max K      serve --draft-max with a drafter (default 8)
  --draft-fixed      serve --draft-fixed: always draft --draft-max tokens
  --fresh            delete the nodes' stored experts first (forces a new ingest)
  -h, --help         this text

Needs colibri-coordinator, colibri-client, colibri-expert-node,
colibri-make-model (and colibri-relay with --delay-ms). Data and logs go to
BUILD/bench-batching/.

"tok/s" is every generation's tokens divided by the wall time from the start
of the first client to the end of the last (prompts included: they are short).
"trips/tok" is the ComputeLayer requests the nodes received during the run
(ClusterStatus) divided by the tokens generated; without batching it would be
the same for every concurrency. "accepted" is the share of drafted tokens
that were accepted (serve's colibri_draft_tokens_total on /metrics).
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
drafts="none"
draft_max=8
draft_fixed=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --concurrency) concurrency="${2:?}"; shift 2 ;;
    --draft) drafts="${2:?}"; shift 2 ;;
    --draft-max) draft_max="${2:?}"; shift 2 ;;
    --draft-fixed) draft_fixed=(--draft-fixed); shift ;;
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

# start_serve NAME DRAFT [FLAGS...]: serve with --sessions max_sessions and
# drafter DRAFT; sets SERVE_PID, SERVE_ADDR and SERVE_HTTP.
start_serve() {
  local name="$1" draft="$2" i
  shift 2
  local speculation=(--draft "$draft")
  [ "$draft" = none ] || speculation+=(--draft-max "$draft_max" "${draft_fixed[@]}")
  "$COORD" serve -m "$model" --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
    --threads "$threads" --sessions "$max_sessions" "${speculation[@]}" "$@" \
    >"$work/$name.out" 2>"$work/$name.err" &
  SERVE_PID=$!
  BENCH_PIDS+=($!)
  SERVE_ADDR=$(bench_wait_listening "$work/$name.out" "$SERVE_PID") ||
    bench_die "serve did not start: $(tail -3 "$work/$name.err")"
  SERVE_HTTP=""
  for i in $(seq 100); do
    SERVE_HTTP=$(awk '/^http listening on /{print $4}' "$work/$name.out")
    [ -n "$SERVE_HTTP" ] && break
    sleep 0.1
  done
  [ -n "$SERVE_HTTP" ] || bench_die "serve's HTTP API did not start"
}

# drafts_total OUTCOME: serve's drafted tokens so far with that outcome.
drafts_total() {
  curl -s "http://$SERVE_HTTP/metrics" |
    awk -v s="colibri_draft_tokens_total{outcome=\"$1\"}" '$1 == s {print $2 + 0; f = 1} END {if (!f) print 0}'
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
  local acc0 rej0 acc1 rej1
  acc0=$(drafts_total accepted)
  rej0=$(drafts_total rejected)
  start=$(date +%s.%N)
  for i in $(seq "$n"); do
    "$CLIENT" --coordinator "$SERVE_ADDR" generate "$prompt" -n "$n_predict" --ignore-eos \
      --temp 0 --stats >"$work/$name.c$n.$i.out" 2>"$work/$name.c$n.$i.err" &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || bench_die "a client failed: $(tail -3 "$work/$name.c$n."*.err)"; done
  end=$(date +%s.%N)
  after=$( [ "$3" = nodes ] && node_requests || echo 0)
  acc1=$(drafts_total accepted)
  rej1=$(drafts_total rejected)
  local tokens=$((n * n_predict))
  local tps trips accepted="-"
  [ $((acc1 + rej1 - acc0 - rej0)) -gt 0 ] &&
    accepted=$(bench_div "$((acc1 - acc0))" "$((acc1 + rej1 - acc0 - rej0))" "%.2f")
  tps=$(awk -v t="$tokens" -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", t / (b - a)}')
  if [ "$3" = nodes ]; then trips=$(bench_div "$((after - before))" "$tokens" "%.1f"); else trips="-"; fi
  rows+=("$(printf '%-38s %6d %10s %10s %9s' "$name" "$n" "$tps" "$trips" "$accepted")")
  echo "  $name x$n: $tps tok/s, $trips trips/token, $accepted of drafts accepted" >&2
}

run_all() {
  local name="$1" kind="$2" c
  # Warm-up: the experts reach the nodes' RAM tiers, the pages the OS cache.
  "$CLIENT" --coordinator "$SERVE_ADDR" generate "$prompt" -n "$n_predict" --ignore-eos \
    --temp 0 >/dev/null 2>&1 || bench_die "warm-up failed"
  for c in $concurrency; do measure "$name" "$c" "$kind"; done
}

echo "local..." >&2
for d in $drafts; do
  start_serve "local-$d" "$d"
  run_all "local, draft $d" local
  bench_stop "$SERVE_PID"
done

echo "starting 3 nodes..." >&2
bench_start_nodes "$work" 3 --threads "$node_threads"
nodes=$(IFS=,; echo "${NODE_ADDRS[*]}")
for d in $drafts; do
  start_serve "nodes-$d" "$d" --nodes "$nodes"
  run_all "3 nodes (loopback), draft $d" nodes
  bench_stop "$SERVE_PID"
done

if [ -n "$delay_ms" ]; then
  bench_start_relay "$work" "$delay_ms" "$bandwidth" "${NODE_ADDRS[@]}"
  relayed=$(IFS=,; echo "${RELAY_ADDRS[*]}")
  for d in $drafts; do
    start_serve "relay-$d" "$d" --nodes "$relayed"
    run_all "3 nodes, relay ${delay_ms} ms${bandwidth:+ $bandwidth}, draft $d" nodes
    bench_stop "$SERVE_PID"
  done
  bench_stop "$RELAY_PID"
fi
bench_stop_nodes

echo
echo "model: $model, $n_predict tokens per generation, prompt \"$prompt\", --sessions $max_sessions, --draft-max $draft_max${draft_fixed:+ --draft-fixed}"
printf '%-38s %6s %10s %10s %9s\n' "config" "concur" "aggregate" "round" "drafts"
printf '%-38s %6s %10s %10s %9s\n' "" "" "tok/s" "trips/tok" "accepted"
printf '%s\n' "${rows[@]}"
