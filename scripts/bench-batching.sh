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
  --halves MODES     serve --pipeline-halves modes to compare, e.g. "off on"
                     (default "auto"); one serve per mode, measured interleaved
  -r R               repetitions of every measurement (default 1); medians
  --configs C        which of "local nodes relay" to run (default all three;
                     relay needs --delay-ms)
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
the same for every concurrency. "overlap" is the share of the time expert
replies were outstanding during which the coordinator computed (serve's
/metrics: 1 - expert wait / expert outstanding over the run). With -r, each
figure is the median of the repetitions and "range" the tok/s min-max.
EOF
}

cd "$(dirname "$0")/.."
source scripts/bench-common.sh

n_predict=32
concurrency="1 4 8 16"
halves="auto"
reps=1
configs="local nodes relay"
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
    --halves) halves="${2:?}"; shift 2 ;;
    -r) reps="${2:?}"; shift 2 ;;
    --configs) configs="${2:?}"; shift 2 ;;
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

has_config() { [[ " $configs " == *" $1 "* ]]; }

# start_serve NAME [FLAGS...]: serve with --sessions max_sessions; appends to
# SERVE_PIDS, SERVE_ADDRS, SERVE_HTTP.
SERVE_PIDS=()
SERVE_ADDRS=()
SERVE_HTTP=()
start_serve() {
  local name="$1" pid addr http i
  shift
  "$COORD" serve -m "$model" --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
    --threads "$threads" --sessions "$max_sessions" "$@" \
    >"$work/$name.out" 2>"$work/$name.err" &
  pid=$!
  BENCH_PIDS+=($!)
  addr=$(bench_wait_listening "$work/$name.out" "$pid") ||
    bench_die "serve did not start: $(tail -3 "$work/$name.err")"
  for i in $(seq 100); do
    http=$(awk '/^http listening on /{print $4}' "$work/$name.out")
    [ -n "$http" ] && break
    sleep 0.1
  done
  [ -n "$http" ] || bench_die "serve did not start its HTTP listener"
  SERVE_PIDS+=("$pid")
  SERVE_ADDRS+=("$addr")
  SERVE_HTTP+=("$http")
}

# node_requests ADDR: the ComputeLayer requests every node received so far.
node_requests() {
  "$CLIENT" --coordinator "$1" status | awk '$1 ~ /:[0-9]+$/ {s += $(NF - 2)} END {print s + 0}'
}

# expert_times HTTP: "outstanding wait" seconds from serve's /metrics.
expert_times() {
  curl -sS "http://$1/metrics" | awk '
    $1 == "colibri_expert_outstanding_seconds_total" {o = $2}
    $1 == "colibri_expert_wait_seconds_total" {w = $2}
    END {print o + 0, w + 0}'
}

# measure KEY S N KIND: N generations at once on serve S; appends
# "KEY tok/s trips/tok overlap" to $work/samples.
measure() {
  local key="$1" s="$2" n="$3" kind="$4" i start end before after pids=() t0 t1
  local addr="${SERVE_ADDRS[$s]}" http="${SERVE_HTTP[$s]}" tag="${key// /_}"
  before=$([ "$kind" = nodes ] && node_requests "$addr" || echo 0)
  t0=$(expert_times "$http")
  start=$(date +%s.%N)
  for i in $(seq "$n"); do
    "$CLIENT" --coordinator "$addr" generate "$prompt" -n "$n_predict" --ignore-eos \
      --temp 0 --stats >"$work/$tag.$i.out" 2>"$work/$tag.$i.err" &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || bench_die "a client failed: $(tail -3 "$work/$tag."*.err)"; done
  end=$(date +%s.%N)
  after=$([ "$kind" = nodes ] && node_requests "$addr" || echo 0)
  t1=$(expert_times "$http")
  local tokens=$((n * n_predict)) tps trips overlap
  tps=$(awk -v t="$tokens" -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", t / (b - a)}')
  if [ "$kind" = nodes ]; then trips=$(bench_div "$((after - before))" "$tokens" "%.1f"); else trips="-"; fi
  overlap=$(awk -v a="$t0" -v b="$t1" 'BEGIN {
    split(a, x, " "); split(b, y, " "); o = y[1] - x[1]; w = y[2] - x[2];
    if (o > 0) printf "%.0f%%", 100 * (1 - w / o); else print "-" }')
  echo "$key|$tps|$trips|$overlap" >>"$work/samples"
  echo "  $key: $tps tok/s, $trips trips/token, overlap $overlap" >&2
}

# run_config NAME KIND [FLAGS...]: one serve per halves mode, warmed up, then
# every concurrency and mode interleaved, reps times.
run_config() {
  local name="$1" kind="$2" mode s c r
  shift 2
  SERVE_PIDS=()
  SERVE_ADDRS=()
  SERVE_HTTP=()
  for mode in $halves; do
    start_serve "$name-$mode" --pipeline-halves "$mode" "$@"
    # Warm-up: the experts reach the nodes' RAM tiers, the pages the OS cache.
    "$CLIENT" --coordinator "${SERVE_ADDRS[-1]}" generate "$prompt" -n "$n_predict" --ignore-eos \
      --temp 0 >/dev/null 2>&1 || bench_die "warm-up failed"
  done
  for r in $(seq "$reps"); do
    for c in $concurrency; do
      s=0
      for mode in $halves; do
        measure "$name|$mode|$c" "$s" "$c" "$kind"
        s=$((s + 1))
      done
    done
  done
  bench_stop "${SERVE_PIDS[@]}"
}

: >"$work/samples"
if has_config local; then
  echo "local..." >&2
  run_config "local" local
fi

if has_config nodes || { has_config relay && [ -n "$delay_ms" ]; }; then
  echo "starting 3 nodes..." >&2
  bench_start_nodes "$work" 3 --threads "$node_threads"
  nodes=$(IFS=,; echo "${NODE_ADDRS[*]}")
  has_config nodes && run_config "3 nodes (loopback)" nodes --nodes "$nodes"
  if has_config relay && [ -n "$delay_ms" ]; then
    bench_start_relay "$work" "$delay_ms" "$bandwidth" "${NODE_ADDRS[@]}"
    relayed=$(IFS=,; echo "${RELAY_ADDRS[*]}")
    run_config "3 nodes, relay ${delay_ms} ms${bandwidth:+ $bandwidth}" nodes --nodes "$relayed"
    bench_stop "$RELAY_PID"
  fi
  bench_stop_nodes
fi

echo
echo "model: $model, $n_predict tokens per generation, prompt \"$prompt\", --sessions $max_sessions, $reps repetition(s)"
printf '%-32s %-6s %6s %10s %13s %10s %8s\n' "config" "halves" "concur" "aggregate" "range" "round" "overlap"
printf '%-32s %-6s %6s %10s %13s %10s %8s\n' "" "" "" "tok/s" "tok/s" "trips/tok" ""
# Medians per (config, mode, concurrency), in the order first measured.
awk -F'|' '
  function median(list,   n, v, i, j, t) {
    n = split(list, v, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) {
      t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
    if (n % 2) return v[(n + 1) / 2]
    return (v[n / 2] + v[n / 2 + 1]) / 2
  }
  function lo(list,   n, v, i, m) { n = split(list, v, " "); m = v[1]; for (i = 2; i <= n; i++) if (v[i] + 0 < m + 0) m = v[i]; return m }
  function hi(list,   n, v, i, m) { n = split(list, v, " "); m = v[1]; for (i = 2; i <= n; i++) if (v[i] + 0 > m + 0) m = v[i]; return m }
  {
    key = $1 "|" $2 "|" $3
    if (!(key in tps)) { order[++keys] = key }
    tps[key] = tps[key] " " $4; trips[key] = trips[key] " " $5
    ov = $6; sub(/%/, "", ov); over[key] = over[key] " " ov
  }
  END {
    for (k = 1; k <= keys; k++) {
      key = order[k]; split(key, f, "|")
      t = trips[key]; tr = (t ~ /-/) ? "-" : sprintf("%.1f", median(t))
      o = over[key]; ovs = (o ~ /-/) ? "-" : sprintf("%.0f%%", median(o))
      printf "%-32s %-6s %6d %10.1f %13s %10s %8s\n", f[1], f[2], f[3], median(tps[key]),
        sprintf("%.1f-%.1f", lo(tps[key]), hi(tps[key])), tr, ovs
    }
  }' "$work/samples"
