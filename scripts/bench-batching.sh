#!/usr/bin/env bash
# Aggregate decode throughput of continuous batching: `serve --sessions S` with
# 1, 4, 8 and 16 concurrent generations (colibri-client processes started
# together), with the synthetic Qwen3-30B-A3B-shaped model locally and with 3
# expert nodes on loopback (optionally through colibri-relay to emulate a
# network), comparing serve's --pipeline-halves modes and, with --draft,
# speculative decoding. Run from the repository root after a build.
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
  --draft LIST       serve --draft drafters to compare, e.g. "none ngram"
                     (default none); one serve per halves mode and drafter
  --draft-max K      serve --draft-max with a drafter (default 8)
  --draft-fixed      serve --draft-fixed: always draft --draft-max tokens
  --layers L         layers of the synthetic model (default $LAYERS or 4)
  --model M          benchmark this GGUF instead of the synthetic model
  --prompt TEXT      prompt of every generation (default: generation i of a
                     run gets text i of 16 different ones, as colibri-client
                     bench does, so their expert unions do not coincide)
  --serve-args FLAGS more flags for every serve, e.g. "--wire-reduce" (word-split)
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
/metrics: 1 - expert wait / expert outstanding over the run). "accepted" is
the share of the drafted tokens that were accepted (serve's
colibri_draft_tokens_total on /metrics; "-" without drafts). With -r, each
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
drafts="none"
draft_max=8
draft_fixed=()
layers="${LAYERS:-4}"
model=""
prompt=""
serve_args=""
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
    --draft) drafts="${2:?}"; shift 2 ;;
    --draft-max) draft_max="${2:?}"; shift 2 ;;
    --draft-fixed) draft_fixed=(--draft-fixed); shift ;;
    --serve-args) serve_args="$2"; shift 2 ;;
    *) bench_common_option "$@" || { usage >&2; exit 2; }; shift "$BENCH_SHIFT" ;;
  esac
done
[ "$n_predict" -ge 1 ] 2>/dev/null || bench_die "-n must be at least 1"
[ -n "$bandwidth" ] && [ -z "$delay_ms" ] && bench_die "--bandwidth needs --delay-ms"
read -r -a serve_extra <<<"$serve_args"
bench_conc_prompts
[ -z "$prompt" ] || BENCH_CONC_PROMPTS=("$prompt")

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

# start_serve NAME HALVES DRAFT [FLAGS...]: serve with --sessions
# max_sessions, --pipeline-halves HALVES and drafter DRAFT; appends to
# SERVE_PIDS, SERVE_ADDRS, SERVE_HTTPS.
SERVE_PIDS=()
SERVE_ADDRS=()
SERVE_HTTPS=()
start_serve() {
  local name="$1" mode="$2" draft="$3"
  shift 3
  local speculation=(--draft "$draft")
  [ "$draft" = none ] || speculation+=(--draft-max "$draft_max" "${draft_fixed[@]}")
  bench_start_serve "$work/$name" -m "$model" --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
    --threads "$threads" --sessions "$max_sessions" --pipeline-halves "$mode" \
    "${speculation[@]}" "${serve_extra[@]}" "$@"
  SERVE_PIDS+=("$SERVE_PID")
  SERVE_ADDRS+=("$SERVE_ADDR")
  SERVE_HTTPS+=("$SERVE_HTTP")
}

# node_requests ADDR: the ComputeLayer requests every node received so far.
node_requests() {
  "$CLIENT" --coordinator "$1" status | awk '$1 ~ /:[0-9]+$/ {s += $(NF - 2)} END {print s + 0}'
}

# serve_figures HTTP: "outstanding wait accepted rejected" from serve's
# /metrics: expert seconds and drafted tokens by outcome so far.
serve_figures() {
  local metrics
  metrics=$(bench_serve_metrics "$1") || exit 1
  awk '
    $1 == "colibri_expert_outstanding_seconds_total" {o = $2}
    $1 == "colibri_expert_wait_seconds_total" {w = $2}
    $1 == "colibri_draft_tokens_total{outcome=\"accepted\"}" {a = $2}
    $1 == "colibri_draft_tokens_total{outcome=\"rejected\"}" {r = $2}
    END {printf "%.6f %.6f %.0f %.0f\n", o, w, a, r}' <<<"$metrics"
}

# measure KEY S N KIND: N generations at once on serve S; appends
# "KEY|tok/s|trips/tok|overlap|accepted" to $work/samples.
measure() {
  local key="$1" s="$2" n="$3" kind="$4" i start end before after pids=() t0 t1
  local addr="${SERVE_ADDRS[$s]}" http="${SERVE_HTTPS[$s]}" tag="${key// /_}"
  before=$([ "$kind" = nodes ] && node_requests "$addr" || echo 0)
  t0=$(serve_figures "$http")
  start=$(date +%s.%N)
  for i in $(seq "$n"); do
    "$CLIENT" --coordinator "$addr" generate \
      "${BENCH_CONC_PROMPTS[$(((i - 1) % ${#BENCH_CONC_PROMPTS[@]}))]}" -n "$n_predict" --ignore-eos \
      --temp 0 --stats >"$work/$tag.$i.out" 2>"$work/$tag.$i.err" &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || bench_die "a client failed: $(tail -3 "$work/$tag."*.err)"; done
  end=$(date +%s.%N)
  after=$([ "$kind" = nodes ] && node_requests "$addr" || echo 0)
  t1=$(serve_figures "$http")
  local tokens=$((n * n_predict)) tps trips overlap accepted
  tps=$(awk -v t="$tokens" -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", t / (b - a)}')
  if [ "$kind" = nodes ]; then trips=$(bench_div "$((after - before))" "$tokens" "%.1f"); else trips="-"; fi
  # Locally the experts run inside Submit: nothing is outstanding to overlap.
  overlap=$(awk -v a="$t0" -v b="$t1" -v k="$kind" 'BEGIN {
    split(a, x, " "); split(b, y, " "); o = y[1] - x[1]; w = y[2] - x[2];
    if (k == "nodes" && o > 0) printf "%.0f%%", 100 * (1 - w / o); else print "-" }')
  accepted=$(awk -v a="$t0" -v b="$t1" 'BEGIN {
    split(a, x, " "); split(b, y, " "); acc = y[3] - x[3]; d = acc + y[4] - x[4];
    if (d > 0) printf "%.0f%%", 100 * acc / d; else print "-" }')
  echo "$key|$tps|$trips|$overlap|$accepted" >>"$work/samples"
  echo "  $key: $tps tok/s, $trips trips/token, overlap $overlap, accepted $accepted" >&2
}

# run_config NAME KIND [FLAGS...]: one serve per halves mode and drafter,
# warmed up, then every concurrency and serve interleaved, reps times.
run_config() {
  local name="$1" kind="$2" mode draft s c
  shift 2
  SERVE_PIDS=()
  SERVE_ADDRS=()
  SERVE_HTTPS=()
  for mode in $halves; do
    for draft in $drafts; do
      start_serve "$name-$mode-$draft" "$mode" "$draft" "$@"
      # Warm-up: the experts reach the nodes' RAM tiers, the pages the OS cache.
      local p
      for p in "${BENCH_CONC_PROMPTS[@]}"; do
        "$CLIENT" --coordinator "${SERVE_ADDRS[-1]}" generate "$p" -n "$n_predict" \
          --ignore-eos --temp 0 >/dev/null 2>&1 || bench_die "warm-up failed"
      done
    done
  done
  # The nodes' RAM warm-up of what was ingested runs in the background.
  if [ "$kind" = nodes ]; then bench_wait_idle "${NODE_PIDS[@]}"; fi
  for _ in $(seq "$reps"); do
    for c in $concurrency; do
      s=0
      for mode in $halves; do
        for draft in $drafts; do
          measure "$name|$mode|$draft|$c" "$s" "$c" "$kind"
          s=$((s + 1))
        done
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
draft_note=""
[ "$drafts" = none ] || draft_note=", --draft-max $draft_max${draft_fixed[*]:+ --draft-fixed}"
prompt_note="${#BENCH_CONC_PROMPTS[@]} different prompts in rotation"
[ -z "$prompt" ] || prompt_note="prompt \"$prompt\""
echo "model: $model, $n_predict tokens per generation, $prompt_note, --sessions $max_sessions$draft_note${serve_args:+, serve $serve_args}, $reps repetition(s)"
printf '%-32s %-6s %-6s %6s %10s %13s %10s %8s %8s\n' "config" "halves" "draft" "concur" \
  "aggregate" "range" "round" "overlap" "accepted"
printf '%-32s %-6s %-6s %6s %10s %13s %10s %8s %8s\n' "" "" "" "" "tok/s" "tok/s" "trips/tok" "" ""
# Medians per (config, mode, drafter, concurrency), in the order first measured.
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
    key = $1 "|" $2 "|" $3 "|" $4
    if (!(key in tps)) { order[++keys] = key }
    tps[key] = tps[key] " " $5; trips[key] = trips[key] " " $6
    ov = $7; sub(/%/, "", ov); over[key] = over[key] " " ov
    ac = $8; sub(/%/, "", ac); if (ac != "-") acc[key] = acc[key] " " ac
  }
  END {
    for (k = 1; k <= keys; k++) {
      key = order[k]; split(key, f, "|")
      t = trips[key]; tr = (t ~ /-/) ? "-" : sprintf("%.1f", median(t))
      o = over[key]; ovs = (o ~ /-/) ? "-" : sprintf("%.0f%%", median(o))
      a = acc[key]; acs = (a == "") ? "-" : sprintf("%.0f%%", median(a))
      printf "%-32s %-6s %-6s %6d %10.1f %13s %10s %8s %8s\n", f[1], f[2], f[3], f[4],
        median(tps[key]), sprintf("%.1f-%.1f", lo(tps[key]), hi(tps[key])), tr, ovs, acs
    }
  }' "$work/samples"
