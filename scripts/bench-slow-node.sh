#!/usr/bin/env bash
# A slow or hung expert node against the healthy cluster: 3 expert nodes,
# --replicas 2, each behind a colibri-relay link, one `serve` per situation,
# single-stream generations through `colibri-client bench`, interleaved:
#   healthy  every node behind a FAST_MS link
#   slow     the third node behind a DELAY_MS link instead (--slow-node)
#   hang     every node fast, the one serve called most SIGSTOPped SECONDS
#            into the generation (--hang-node) and SIGCONTed after it
# Prints tok/s, wall time and p99 inter-token latency (median and range of
# the repetitions), the failovers, deadline misses, hedges and hedge wins
# serve counted over the repetitions,
# whether a greedy generation in each situation gives the healthy one's token
# ids, and the goals: slow >= 0.7 x healthy tok/s, hang wall <= 2 x healthy + 5 s.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/bench-slow-node.sh [options]

  --model M            GGUF to serve (default: the fixtures' qwen3moe-tiny-f32,
                       $COLIBRI_FIXTURES_DIR or /work/shared/fixtures)
  -n N                 tokens per generation (default 48)
  --reps R             repetitions of each situation, interleaved (default 5)
  --slow-node DELAY_MS one-way delay of the slow node's link (default 20;
                       0 skips the slow situation)
  --hang-node SECONDS  SIGSTOP the node serve called most this long after a
                       generation starts (default 0.05; 0 skips the hang
                       situation)
  --fast-ms MS         one-way delay of the other links (default 0.25)
  --threads T          coordinator threads (default 1)
  --node-threads T     threads per expert node (default 1)
  --serve-args "FLAGS" more flags for every `serve` (word-split), e.g.
                       "--replica-choice balance"
  --build DIR          Colibri build folder (default build)
  --work DIR           logs and node data (default BUILD/bench-slow-node)
  -h, --help           this text
EOF
}

cd "$(dirname "$0")/.."
source scripts/bench-common.sh

fixtures="${COLIBRI_FIXTURES_DIR:-/work/shared/fixtures}"
model="$fixtures/models/qwen3moe-tiny-f32.gguf"
n_predict=48
reps=5
slow_ms=20
hang_s=0.05
fast_ms=0.25
threads=1
node_threads=1
serve_args=""
build=build
work=""
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="${2:?}"; shift 2 ;;
    -n) n_predict="${2:?}"; shift 2 ;;
    --reps) reps="${2:?}"; shift 2 ;;
    --slow-node) slow_ms="${2:?}"; shift 2 ;;
    --hang-node) hang_s="${2:?}"; shift 2 ;;
    --fast-ms) fast_ms="${2:?}"; shift 2 ;;
    --threads) threads="${2:?}"; shift 2 ;;
    --node-threads) node_threads="${2:?}"; shift 2 ;;
    --serve-args) serve_args="${2?}"; shift 2 ;;
    --build) build="${2:?}"; shift 2 ;;
    --work) work="${2:?}"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
[ -f "$model" ] || bench_die "$model not found"
bench_init "$build"
bench_need_relay
CLIENT="$build/client/colibri-client"
[ -x "$CLIENT" ] || bench_die "$CLIENT is missing; build it: cmake --build $build --target colibri-client"
work="${work:-$build/bench-slow-node}"
rm -rf "$work"
mkdir -p "$work"
trap bench_cleanup EXIT

bench_start_nodes "$work" 3 --threads "$node_threads"
bench_start_relay "$work" "$fast_ms" "" "${NODE_ADDRS[@]}"
fast=("${RELAY_ADDRS[@]}")
situations=(healthy)
declare -A SERVE HTTP
# shellcheck disable=SC2206
extra=($serve_args)
start_serve() {  # NAME NODES
  bench_start_serve "$work/serve-$1" --model "$model" --listen 127.0.0.1:0 \
    --http-listen 127.0.0.1:0 --threads "$threads" --nodes "$2" --replicas 2 \
    --probe-interval 0.2 "${extra[@]}"
  SERVE[$1]="$SERVE_ADDR"
  HTTP[$1]="$SERVE_HTTP"
}
start_serve healthy "${fast[0]},${fast[1]},${fast[2]}"
if [ "$slow_ms" != 0 ]; then
  mkdir -p "$work/slow"
  bench_start_relay "$work/slow" "$slow_ms" "" "${NODE_ADDRS[2]}"
  start_serve slow "${fast[0]},${fast[1]},${RELAY_ADDRS[0]}"
  situations+=(slow)
fi
if [ "$hang_s" != 0 ]; then
  start_serve hang "${fast[0]},${fast[1]},${fast[2]}"
  situations+=(hang)
fi

# metric NAME SITUATION: the sum of NAME's samples in that serve's /metrics.
metric() { bench_serve_metric "$1" "${HTTP[$2]}"; }
# all_healthy SITUATION: waits up to 20 s until serve sees 3 healthy nodes.
all_healthy() {
  local i
  for i in $(seq 200); do
    [ "$(metric colibri_node_healthy "$1")" = 3 ] && return 0
    sleep 0.1
  done
  bench_die "serve $1 did not see its nodes healthy again"
}
# busiest_pid SITUATION: the pid of the node that serve made the most
# ComputeLayer calls to (node ids are bench1..3), the one a hang hurts.
busiest_pid() {
  local id
  id=$(bench_serve_metrics "${HTTP[$1]}" | awk '$1 ~ /^colibri_node_round_trips_total\{/ {
      if ($2 + 0 > best) { best = $2 + 0; id = $1 } }
    END { sub(/.*node="bench/, "", id); sub(/".*/, "", id); print id }')
  echo "${NODE_PIDS[$((id - 1))]}"
}
# client SITUATION OUT ARGS...: colibri-client ARGS against that serve, output
# to OUT; for hang the busiest node is SIGSTOPped hang_s in and SIGCONTed after.
client() {
  local s="$1" out="$2" hung_pid=""
  shift 2
  [ "$s" = hang ] && hung_pid=$(busiest_pid hang)
  "$CLIENT" --coordinator "${SERVE[$s]}" "$@" >"$out" 2>"$out.err" &
  local pid=$!
  if [ "$s" = hang ]; then
    sleep "$hang_s"
    kill -STOP "$hung_pid"
  fi
  wait "$pid" || { [ -n "$hung_pid" ] && kill -CONT "$hung_pid"; bench_die "client on $s failed: $(tail -3 "$out.err")"; }
  if [ "$s" = hang ]; then
    kill -CONT "$hung_pid"
    all_healthy hang
  fi
}
generate() {  # SITUATION: one generation; prints "tok/s wall p99"
  client "$1" "$work/client-$1.out" bench -c 1 --requests 1 --prompt-tokens 8 \
    --max-tokens "$n_predict"
  awk '/^wall time/ { w = $4 } /^output tokens\/s/ { t = $4 } /^inter-token latency/ { p = $6 }
    END { print t, w, p }' "$work/client-$1.out"
}
# token_ids SITUATION: the greedy token ids of one generation, one line.
token_ids() {
  client "$1" "$work/ids-$1" generate "The slow node" -n "$n_predict" --temp 0 --ignore-eos \
    --print-token-ids
  cat "$work/ids-$1"
}

declare -A TPS WALL P99 FAILOVERS0 MISSES0 HEDGES0 WINS0
for s in "${situations[@]}"; do
  generate "$s" >/dev/null  # warm-up: every node replied, estimates exist
  FAILOVERS0[$s]=$(metric colibri_node_failovers_total "$s")
  MISSES0[$s]=$(metric colibri_node_deadline_misses_total "$s")
  HEDGES0[$s]=$(metric colibri_hedges_total "$s")
  WINS0[$s]=$(metric colibri_hedge_wins_total "$s")
done
for r in $(seq "$reps"); do
  for s in "${situations[@]}"; do
    read -r t w p < <(generate "$s")
    TPS[$s]="${TPS[$s]:-} $t"
    WALL[$s]="${WALL[$s]:-} $w"
    P99[$s]="${P99[$s]:-} $p"
    echo "rep $r $s: $t tok/s, ${w} s, p99 inter-token ${p} s" >&2
  done
done

median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END {
  print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "model $(basename "$model"), 3 nodes, --replicas 2, links ${fast_ms} ms one way," \
  "$n_predict tokens per generation, $reps interleaved repetitions; median (range)"
printf '%-8s %-26s %-26s %-28s %9s %9s %6s %5s\n' situation "tok/s" "wall s" \
  "p99 inter-token s" failovers deadline hedges wins
for s in "${situations[@]}"; do
  printf '%-8s %-26s %-26s %-28s %9s %9s %6s %5s\n' "$s" "$(bench_median_range "${TPS[$s]}")" \
    "$(bench_median_range "${WALL[$s]}")" "$(bench_median_range "${P99[$s]}")" \
    $(($(metric colibri_node_failovers_total "$s") - FAILOVERS0[$s])) \
    $(($(metric colibri_node_deadline_misses_total "$s") - MISSES0[$s])) \
    $(($(metric colibri_hedges_total "$s") - HEDGES0[$s])) \
    $(($(metric colibri_hedge_wins_total "$s") - WINS0[$s]))
done
# Same tokens: one more greedy generation per situation (hung as above).
healthy_ids=$(token_ids healthy)
for s in "${situations[@]}"; do
  [ "$s" = healthy ] && continue
  if [ "$(token_ids "$s")" = "$healthy_ids" ]; then
    echo "$s: the same $n_predict token ids as healthy"
  else
    echo "$s: token ids DIFFER from healthy (see $work/ids-*)"
  fi
done
healthy_tps=$(median "${TPS[healthy]}")
healthy_wall=$(median "${WALL[healthy]}")
if [ "$slow_ms" != 0 ]; then
  awk -v s="$(median "${TPS[slow]}")" -v h="$healthy_tps" -v d="$slow_ms" 'BEGIN {
    r = s / h; printf "slow node (%s ms link): %.2f x healthy tok/s, goal >= 0.70: %s\n", d, r,
      (r >= 0.7) ? "MET" : "NOT MET" }'
fi
if [ "$hang_s" != 0 ]; then
  awk -v w="$(median "${WALL[hang]}")" -v h="$healthy_wall" 'BEGIN {
    g = 2 * h + 5; printf "hung node: %.3f s against %.3f s healthy, goal <= %.3f s: %s\n", w, h, g,
      (w <= g) ? "MET" : "NOT MET" }'
fi
