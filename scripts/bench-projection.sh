#!/usr/bin/env bash
# `plan --project` against measurement where the network, not this host's two
# cores, sets the pace: 1 and 3 expert nodes behind colibri-relay links of
# DELAY ms one way, single-stream decode of `run` (no speculation), repeated
# and interleaved; for each case the projection for the same cluster (round
# trip 2 x DELAY, one thread per node) and measured / projected, against the
# +-25% the projection promises (docs/projection.md).
set -euo pipefail

usage() {
  cat <<'EOF2'
usage: scripts/bench-projection.sh [options]

  --model M       GGUF (default: the demo model, scripts/demo-model/)
  --delays "D.."  one-way link delays in ms (default "1 5")
  --nodes "N.."   node counts (default "1 3")
  -n N            tokens per generation (default 48)
  --reps R        repetitions of each case, interleaved (default 3)
  --build DIR     Colibri build folder (default build)
  --work DIR      logs and node data (default BUILD/bench-projection)
  -h, --help      this text
EOF2
}

cd "$(dirname "$0")/.."
source scripts/bench-common.sh

model=scripts/demo-model/colibri-demo-kjv-q8_0.gguf
delays="1 5"
node_counts="1 3"
n_predict=48
reps=3
build=build
work=""
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="${2:?}"; shift 2 ;;
    --delays) delays="${2:?}"; shift 2 ;;
    --nodes) node_counts="${2:?}"; shift 2 ;;
    -n) n_predict="${2:?}"; shift 2 ;;
    --reps) reps="${2:?}"; shift 2 ;;
    --build) build="${2:?}"; shift 2 ;;
    --work) work="${2:?}"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
[ -f "$model" ] || bench_die "$model not found"
bench_init "$build"
bench_need_relay
work="${work:-$build/bench-projection}"
rm -rf "$work"
mkdir -p "$work"
trap bench_cleanup EXIT

max_nodes=0
for n in $node_counts; do [ "$n" -gt "$max_nodes" ] && max_nodes=$n; done
bench_start_nodes "$work" "$max_nodes" --threads 1
declare -A LINKS PROJECTED MEASURED
cases=()
for d in $delays; do
  mkdir -p "$work/relay-$d"
  bench_start_relay "$work/relay-$d" "$d" "" "${NODE_ADDRS[@]}"
  for n in $node_counts; do
    c="${n}x${d}"
    cases+=("$c")
    LINKS[$c]=$(IFS=,; echo "${RELAY_ADDRS[*]:0:$n}")
    "$COORD" plan --project --model "$model" --project-nodes "$n" \
      --project-rtt-ms "$(awk -v d="$d" 'BEGIN { print 2 * d }')" --project-node-threads 1 \
      --project-drafts 0 >"$work/project-$c.out" 2>"$work/project-$c.err" ||
      bench_die "plan --project failed: $(tail -3 "$work/project-$c.err")"
    PROJECTED[$c]=$(awk '/^projected single-stream decode:/ { print $4 }' "$work/project-$c.out")
  done
done
for r in $(seq "$reps"); do
  for c in "${cases[@]}"; do
    bench_run "$work/run-$c-$r" run --model "$model" --nodes "${LINKS[$c]}" --threads 1 \
      --prompt "And it came to pass" -n "$n_predict" --seed 1 --draft none
    bench_parse_run "$work/run-$c-$r.err"
    MEASURED[$c]="${MEASURED[$c]:-} ${STATS[gen_tps]}"
    echo "rep $r $c: ${STATS[gen_tps]} tok/s" >&2
  done
done
printf '%-10s %-10s %-10s %-26s %-10s %s\n' nodes delay_ms projected "measured tok/s (median, range)" ratio "within 25%"
for c in "${cases[@]}"; do
  m=$(bench_median_range "${MEASURED[$c]}")
  med=${m%% *}
  ratio=$(awk -v a="$med" -v b="${PROJECTED[$c]}" 'BEGIN { printf "%.2f", a / b }')
  ok=$(awk -v r="$ratio" 'BEGIN { print (r >= 0.75 && r <= 1.25) ? "yes" : "NO" }')
  printf '%-10s %-10s %-10s %-26s %-10s %s\n' "${c%x*}" "${c#*x}" "${PROJECTED[$c]}" "$m" "$ratio" "$ok"
done
