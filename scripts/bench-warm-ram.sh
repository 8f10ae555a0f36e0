#!/usr/bin/env bash
# The first request after expert nodes restart, with the RAM warm-up
# (--warm-ram, the default) and without it (--no-warm-ram), interleaved. Run
# from the repository root after a build.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/bench-warm-ram.sh [options]

  -r ROUNDS          rounds, each one restart with and one without (default 3)
  -n N               tokens to generate per run (default 32)
  --layers L         layers of the synthetic model (default $LAYERS or 8)
  --model M          benchmark this GGUF instead of the synthetic model
  --prompt TEXT      prompt (default: a 35-token sentence)
  --threads T        coordinator threads (default 2)
  --node-threads T   compute threads per node (default 1)
  --ram-budget B     each node's --ram-budget (default 1G)
  --drop-caches      drop the OS page cache before each restart (needs root),
                     so that the warm-up and the misses read the device
  --build DIR        build folder (default build)
  --work DIR         nodes' data and logs (default BUILD/bench-warm-ram)
  --fresh            delete the nodes' stored experts first (forces a new ingest)
  -h, --help         this text

Three nodes hold the model's experts (ingested once). Each round restarts them
twice: with the warm-up, waiting until every node has logged its pass ("RAM
warm-up: loaded ..."), then without it, waiting as long. Then one
`colibri-coordinator run` per restart: its prompt time, decode tok/s and the
nodes' RAM misses during decode (the node-tier lines `run` prints).
Medians and ranges at the end.
EOF
}

cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-common.sh
source scripts/bench-common.sh

rounds=3
n_predict=32
layers="${LAYERS:-8}"
model=""
prompt="The history of the river valley begins with the first farmers who settled along its banks, building small villages of mud brick and reed."
threads=2
node_threads=1
ram_budget=1G
drop_caches=0
build=build
fresh=0
work=""
while [ $# -gt 0 ]; do
  case "$1" in
    -r) rounds="${2:?}"; shift 2 ;;
    --ram-budget) ram_budget="${2:?}"; shift 2 ;;
    --drop-caches) drop_caches=1; shift ;;
    --work) work="${2:?}"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --delay-ms | --bandwidth) echo "bench-warm-ram.sh: $1: loopback only" >&2; exit 2 ;;
    *) bench_common_option "$@" || { usage >&2; exit 2; }; shift "$BENCH_SHIFT" ;;
  esac
done
[ "$rounds" -ge 1 ] 2>/dev/null || bench_die "-r must be at least 1"
[ "$n_predict" -ge 1 ] 2>/dev/null || bench_die "-n must be at least 1"

bench_init "$build"
[ -n "$model" ] || model="$build/models/bench-qwen3-30b-a3b-L$layers.gguf"
bench_model "$model" "$layers"
[ -n "$work" ] || work="$build/bench-warm-ram"
[ "$fresh" -eq 1 ] && rm -rf "$work"
mkdir -p "$work"
trap bench_cleanup EXIT

node_flags=(--threads "$node_threads" --ram-budget "$ram_budget")
run_args=(run -m "$model" -p "$prompt" --ignore-eos --threads "$threads")

echo "ingesting the experts into 3 nodes (skipped for what they hold)..." >&2
bench_start_nodes "$work" 3 "${node_flags[@]}" --no-warm-ram
bench_run "$work/ingest" "${run_args[@]}" -n 1 --nodes "$(IFS=,; echo "${NODE_ADDRS[*]}")"
grep -h '^ingest: ' "$work/ingest.err" >&2 || true
bench_stop_nodes

drop() {
  [ "$drop_caches" -eq 1 ] || return 0
  sync
  echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || bench_die "--drop-caches: cannot write /proc/sys/vm/drop_caches (root only)"
}

# wait_warmed: until every node has logged a warm-up pass; prints the slowest
# pass's seconds.
wait_warmed() {
  local f done_count
  for _ in $(seq 3000); do
    done_count=0
    for f in "$work"/node{1,2,3}.err; do
      grep -q 'RAM warm-up: loaded' "$f" && done_count=$((done_count + 1))
    done
    if [ "$done_count" -eq 3 ]; then
      sed -n 's/.*RAM warm-up: loaded .* in \([0-9.]*\) s .*/\1/p' "$work"/node{1,2,3}.err |
        sort -g | tail -1
      return 0
    fi
    sleep 0.1
  done
  bench_die "the nodes did not log a warm-up pass within 300 s: $(tail -2 "$work/node1.err")"
}

# prompt_seconds FILE: S of "prompt: N tokens in S s".
prompt_seconds() { awk '/^prompt: / { print $5; exit }' "$1"; }
declare -A rows
printf '%-6s %-5s %10s %10s %12s %14s\n' round mode "warm-up s" "prompt s" "decode tok/s" "decode misses"
for r in $(seq "$rounds"); do
  waited=0
  for mode in warm cold; do
    drop
    flag=--warm-ram
    [ "$mode" = cold ] && flag=--no-warm-ram
    start=$(date +%s.%N)
    bench_start_nodes "$work" 3 "${node_flags[@]}" "$flag"
    warm_s="-"
    if [ "$mode" = warm ]; then
      warm_s=$(wait_warmed)
      waited=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')
    else
      sleep "$waited"
    fi
    bench_run "$work/r$r.$mode" "${run_args[@]}" -n "$n_predict" --nodes "$(IFS=,; echo "${NODE_ADDRS[*]}")"
    bench_parse_run "$work/r$r.$mode.err"
    prompt_s=$(prompt_seconds "$work/r$r.$mode.err")
    misses="${STATS[tier_ram_misses]:-n/a}"
    printf '%-6s %-5s %10s %10s %12s %14s\n' "$r" "$mode" "$warm_s" "$prompt_s" \
      "${STATS[gen_tps]:-n/a}" "$misses"
    rows[$mode.prompt]+="$prompt_s "
    rows[$mode.decode]+="${STATS[gen_tps]:-n/a} "
    bench_stop_nodes
  done
done

echo
echo "first run after a restart, median (range) of $rounds:"
for mode in warm cold; do
  label="--warm-ram"
  [ "$mode" = cold ] && label="--no-warm-ram"
  printf '  %-13s prompt %s s, decode %s tok/s\n' "$label" \
    "$(bench_median_range "${rows[$mode.prompt]}")" "$(bench_median_range "${rows[$mode.decode]}")"
done
