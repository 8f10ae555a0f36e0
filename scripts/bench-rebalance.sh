#!/usr/bin/env bash
# Hot-expert replication (serve --rebalance) against none: 3 expert nodes,
# one copy of each expert, two `serve`s over the same nodes (off:
# --no-rebalance; on: --rebalance every INTERVAL s), the same greedy
# generations of held-out text sent to each, interleaved. Before the timed
# repetitions every serve gets WARM generations (the on serve plans its copies
# from them and its rounds go on during the repetitions).
# Prints, per situation, the load balance of the repetitions: the busiest
# node's ExpertWork units over the mean of the three (1.0 is even; from
# serve's colibri_node_work_units_total), median and range; the extra copies
# added, dropped and the bytes sent for them; and whether every generation's
# token ids are the same in both situations and equal to a local `run`'s.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/bench-rebalance.sh [options]

  --model M            GGUF to serve (default: scripts/demo-model/colibri-demo-kjv-q8_0.gguf)
  -n N                 tokens per generation (default 32)
  --prompts P          generations per repetition (default 6)
  --reps R             repetitions of each situation, interleaved (default 5)
  --warm W             warm-up generations per serve (default 12)
  --interval S         --rebalance-interval of the on serve (default 1)
  --threads T          coordinator threads (default 1)
  --serve-args "FLAGS" more flags for both serves (word-split)
  --build DIR          Colibri build folder (default build)
  --work DIR           logs and node data (default BUILD/bench-rebalance)
  -h, --help           this text
EOF
}

cd "$(dirname "$0")/.."
source scripts/bench-common.sh

model="scripts/demo-model/colibri-demo-kjv-q8_0.gguf"
n_predict=32
prompts=6
reps=5
warm=12
interval=1
threads=1
serve_args=""
build=build
work=""
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="${2:?}"; shift 2 ;;
    -n) n_predict="${2:?}"; shift 2 ;;
    --prompts) prompts="${2:?}"; shift 2 ;;
    --reps) reps="${2:?}"; shift 2 ;;
    --warm) warm="${2:?}"; shift 2 ;;
    --interval) interval="${2:?}"; shift 2 ;;
    --threads) threads="${2:?}"; shift 2 ;;
    --serve-args) serve_args="${2?}"; shift 2 ;;
    --build) build="${2:?}"; shift 2 ;;
    --work) work="${2:?}"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
[ -f "$model" ] || bench_die "$model not found"
bench_init "$build"
CLIENT="$build/client/colibri-client"
[ -x "$CLIENT" ] || bench_die "$CLIENT is missing; build it: cmake --build $build --target colibri-client"
work="${work:-$build/bench-rebalance}"
rm -rf "$work"
mkdir -p "$work"
trap bench_cleanup EXIT

# The prompts: the first words of held-out verses, one per generation.
mapfile -t texts < <(awk 'NF >= 6 { print $1, $2, $3, $4, $5, $6 }' \
  scripts/demo-model/heldout.txt | head -n $((warm + prompts)))
[ "${#texts[@]}" -ge $((warm + prompts)) ] || bench_die "too few held-out verses"

bench_start_nodes "$work" 3
nodes="${NODE_ADDRS[0]},${NODE_ADDRS[1]},${NODE_ADDRS[2]}"
declare -A SERVE HTTP
# shellcheck disable=SC2206
extra=($serve_args)
start_serve() {  # NAME FLAGS...
  local name="$1"
  shift
  bench_start_serve "$work/serve-$name" --model "$model" --listen 127.0.0.1:0 \
    --http-listen 127.0.0.1:0 --threads "$threads" --nodes "$nodes" "$@" "${extra[@]}"
  SERVE[$name]="$SERVE_ADDR"
  HTTP[$name]="$SERVE_HTTP"
}
start_serve off --no-rebalance
start_serve on --rebalance --rebalance-interval "$interval"
situations=(off on)

# metric NAME SITUATION: the sum of NAME's samples in that serve's /metrics.
metric() { bench_serve_metric "$1" "${HTTP[$2]}"; }
# work_units SITUATION: the nodes' colibri_node_work_units_total, in node order.
work_units() {
  bench_serve_metrics "${HTTP[$1]}" |
    awk '$1 ~ /^colibri_node_work_units_total\{/ { printf "%s ", $2 } END { print "" }'
}
# generate SITUATION TEXT OUT: one greedy generation; its token ids to OUT.
generate() {
  "$CLIENT" --coordinator "${SERVE[$1]}" generate "$2" -n "$n_predict" --temp 0 --ignore-eos \
    --print-token-ids >"$3" 2>"$3.err" || bench_die "client on $1 failed: $(tail -3 "$3.err")"
}

for s in "${situations[@]}"; do
  for i in $(seq 0 $((warm - 1))); do generate "$s" "${texts[$i]}" "$work/warm-$s-$i"; done
done
sleep "$(awk -v i="$interval" 'BEGIN { print 3 * i }')"  # rounds plan and send copies

declare -A BALANCE
for r in $(seq "$reps"); do
  for s in "${situations[@]}"; do
    read -r -a before < <(work_units "$s")
    for i in $(seq 0 $((prompts - 1))); do
      generate "$s" "${texts[$((warm + i))]}" "$work/ids-$s-$r-$i"
    done
    read -r -a after < <(work_units "$s")
    b=$(awk -v a="${after[*]}" -v b="${before[*]}" 'BEGIN {
      n = split(a, x, " "); split(b, y, " "); max = 0; sum = 0
      for (i = 1; i <= n; ++i) { d = x[i] - y[i]; sum += d; if (d > max) max = d }
      printf "%.3f\n", (sum > 0) ? max / (sum / n) : 0 }')
    BALANCE[$s]="${BALANCE[$s]:-} $b"
    echo "rep $r $s: node work max/mean $b (units $(awk -v a="${after[*]}" -v b="${before[*]}" \
      'BEGIN { n = split(a, x, " "); split(b, y, " "); for (i = 1; i <= n; ++i) printf "%d ", x[i] - y[i] }'))" >&2
  done
done

echo "model $(basename "$model"), 3 nodes, --replicas 1, $n_predict tokens x $prompts generations" \
  "per repetition, $reps interleaved repetitions after $warm warm-up generations;" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-4s %-26s %7s %8s %12s\n' serve "node work max/mean" added dropped moved_bytes
for s in "${situations[@]}"; do
  printf '%-4s %-26s %7s %8s %12s\n' "$s" "$(bench_median_range "${BALANCE[$s]}")" \
    "$(metric colibri_extra_copies_added_total "$s")" \
    "$(metric colibri_extra_copies_dropped_total "$s")" \
    "$(metric colibri_placement_moved_bytes_total "$s")"
done
# Same tokens: every generation of the repetitions in both serves, and a
# local run of the first prompt.
same=1
for r in $(seq "$reps"); do
  for i in $(seq 0 $((prompts - 1))); do
    cmp -s "$work/ids-off-$r-$i" "$work/ids-on-$r-$i" || same=0
    cmp -s "$work/ids-off-1-$i" "$work/ids-on-$r-$i" || same=0
  done
done
"$COORD" run --model "$model" --prompt "${texts[$warm]}" -n "$n_predict" --temp 0 --ignore-eos \
  --print-token-ids --threads "$threads" >"$work/ids-local" 2>"$work/ids-local.err" ||
  bench_die "local run failed: $(tail -3 "$work/ids-local.err")"
cmp -s "$work/ids-local" "$work/ids-on-1-0" || same=0
if [ "$same" = 1 ]; then
  echo "tokens: every generation's ids equal in off and on, and the local run's"
else
  echo "tokens: ids DIFFER (see $work/ids-*)"
fi
