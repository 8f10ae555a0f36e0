#!/usr/bin/env bash
# Expert prefetch on and off, for 3 expert nodes whose RAM tiers hold only about
# a third of their experts (so decode reads experts from disk, with O_DIRECT),
# on loopback and through relays emulating a LAN. Run from the repository root
# after a build.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/bench-prefetch.sh [options]

  -n N               tokens to generate per run (default 64)
  --layers L         layers of the synthetic model (default $LAYERS or 4)
  --model M          benchmark this GGUF instead of the synthetic model
  --prompt TEXT      prompt (default "The small birds of the valley")
  --threads T        coordinator threads (default 0: physical cores)
  --node-threads T   compute threads per node (default 1)
  --ram-fraction F   share of a node's experts its RAM tier holds (default 0.333)
  --pin-fraction P   pin the hottest experts in P of the RAM budget (default 0: no
                     pinning); the nodes are restarted with --pin-budget after the
                     warm-up run, whose usage counts choose what they pin
  --delay-ms X       one-way delay of the relayed runs (default 0.25; 0: no relayed runs)
  --bandwidth R      bandwidth cap of the relayed runs (default 1Gbit; 0: none)
  --node-args "..."  more arguments for every expert node (e.g. "--background-reads 1")
  --run-args "..."   more arguments for every measured run (e.g. "--prefetch-count 4")
  --on-depth D       --prefetch-depth of the runs with prefetch on (default 1)
  --build DIR        build folder (default build)
  --fresh            delete the nodes' stored experts first (forces a new ingest)
  -h, --help         this text

Each node gets --ram-budget = routed expert bytes / 3 nodes * F, --direct-io
and --no-warm-ram (the tier fills only from the measured runs' own loads).
Prefetch is switched with the coordinator's --prefetch-depth 0 / 1. Node-side
disk wait, RAM hit rates and prefetch use are the decode-only change of the
nodes' NodeStats that `run` prints (node-tier lines). Data and logs go to
BUILD/bench-prefetch/.
EOF
}

cd "$(dirname "$0")/.."
source scripts/bench-common.sh

n_predict=64
layers="${LAYERS:-4}"
model=""
prompt="The small birds of the valley"
threads=0
node_threads=1
ram_fraction=0.333
pin_fraction=0
node_args=""
extra_run_args=""
on_depth=1
delay_ms=0.25
bandwidth=1Gbit
build=build
fresh=0
while [ $# -gt 0 ]; do
  case "$1" in
    --ram-fraction) ram_fraction="${2:?}"; shift 2 ;;
    --pin-fraction) pin_fraction="${2:?}"; shift 2 ;;
    --node-args) node_args="${2?}"; shift 2 ;;
    --run-args) extra_run_args="${2?}"; shift 2 ;;
    --on-depth) on_depth="${2:?}"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) bench_common_option "$@" || { usage >&2; exit 2; }; shift "$BENCH_SHIFT" ;;
  esac
done
[ "$n_predict" -ge 2 ] 2>/dev/null || bench_die "-n must be at least 2"
relayed=1
[ "$delay_ms" = 0 ] && relayed=0
[ "$bandwidth" = 0 ] && bandwidth=""

bench_init "$build"
[ "$relayed" -eq 1 ] && bench_need_relay
[ -n "$model" ] || model="$build/models/bench-qwen3-30b-a3b-L$layers.gguf"
bench_model "$model" "$layers"
work="$build/bench-prefetch"
[ "$fresh" -eq 1 ] && rm -rf "$work"
mkdir -p "$work"
trap bench_cleanup EXIT

bench_model_info "$model"
ram_budget=$(awk -v b="$MODEL_ROUTED_BYTES" -v f="$ram_fraction" 'BEGIN { printf "%.0f\n", b / 3 * f }')
run_args=(run -m "$model" -p "$prompt" --ignore-eos --threads "$threads")
read -r -a node_extra <<<"$node_args"
read -r -a run_extra <<<"$extra_run_args"

modes=(off)
# The help read whole first: `grep -q` exits at its first match, and the
# coordinator's SIGPIPE would fail the pipeline under pipefail.
run_help=$("$COORD" run --help 2>&1 || true)
if grep -q -- --prefetch-depth <<<"$run_help"; then
  modes=(off on)
  prefetch_note="prefetch switched with --prefetch-depth 0 / $on_depth"
else
  prefetch_note="this colibri-coordinator has no --prefetch-depth: prefetch off only"
fi
prefetch_flags() {
  if [ "${#modes[@]}" -eq 1 ]; then return 0; fi
  if [ "$1" = on ]; then echo "--prefetch-depth $on_depth"; else echo "--prefetch-depth 0"; fi
}

echo "starting 3 nodes, RAM budget $ram_budget bytes each, --direct-io..." >&2
bench_start_nodes "$work" 3 --threads "$node_threads" --ram-budget "$ram_budget" --direct-io \
  --no-warm-ram "${node_extra[@]}"
nodes=$(IFS=,; echo "${NODE_ADDRS[*]}")
echo "nodes $nodes; ingest and warm-up run..." >&2
bench_run "$work/warmup" "${run_args[@]}" -n "$n_predict" --nodes "$nodes"
pin_budget=$(awk -v b="$ram_budget" -v f="$pin_fraction" 'BEGIN { printf "%.0f\n", b * f }')
if [ "$pin_budget" -gt 0 ]; then
  echo "restarting the nodes with --pin-budget $pin_budget (usage counts of the warm-up)..." >&2
  bench_stop_nodes
  bench_start_nodes "$work" 3 --threads "$node_threads" --ram-budget "$ram_budget" --direct-io \
    --no-warm-ram --pin-budget "$pin_budget" "${node_extra[@]}"
  nodes=$(IFS=,; echo "${NODE_ADDRS[*]}")
  grep -h "pinned" "$work"/node*.err >&2 || true
fi

rows=()
# measure NAME PREFIX NODES MODE: prompt-only baseline and full run; a row.
measure() {
  local name="$1" prefix="$2" addrs="$3" mode="$4" flags
  read -r -a flags <<<"$(prefetch_flags "$mode")"
  bench_run "$prefix.base" "${run_args[@]}" "${flags[@]}" "${run_extra[@]}" -n 0 --nodes "$addrs"
  bench_run "$prefix" "${run_args[@]}" "${flags[@]}" "${run_extra[@]}" -n "$n_predict" \
    --nodes "$addrs"
  bench_decode_stats "$prefix.err" "$prefix.base.err"
  bench_parse_run "$prefix.err"
  local disk_ms hit_rate pf_used
  disk_ms=$(bench_div "$(awk -v w="${STATS[tier_disk_wait_us]:-}" \
    'BEGIN { if (w != "") print w / 1000 }')" "${DECODE[steps]}" "%.3f")
  hit_rate=$(bench_div "${STATS[tier_ram_hits]:-}" \
    "$((${STATS[tier_ram_hits]:-0} + ${STATS[tier_ram_misses]:-0}))" "%.3f")
  pf_used=$(bench_div "${STATS[tier_prefetch_used]:-}" "${STATS[tier_prefetch_issued]:-}" "%.3f")
  local disk_mib pf_wasted pf_stale
  disk_mib=$(bench_div "$(awk -v b="${STATS[tier_disk_bytes_read]:-}" \
    'BEGIN { if (b != "") print b / 1048576 }')" "${DECODE[steps]}" "%.1f")
  pf_wasted=$(bench_div "${STATS[tier_prefetch_wasted]:-}" "${STATS[tier_prefetch_issued]:-}" "%.3f")
  pf_stale=$(bench_div "${STATS[tier_prefetch_stale]:-}" "${STATS[tier_prefetch_issued]:-}" "%.3f")
  rows+=("$(printf '%-36s %9s %12s %12s %10s %10s %9s %9s %9s %9s %9s' "$name, prefetch $mode" \
    "${DECODE[tps]}" "${DECODE[wait_ms]}" "$disk_ms" "$hit_rate" "$pf_used" \
    "${STATS[predict_recall]:--}" "${STATS[predict_precision]:--}" "$disk_mib" "$pf_wasted" \
    "$pf_stale")")
  [ "${DECODE[failovers]}" = 0 ] || rows+=("  (warning: ${DECODE[failovers]} failovers in decode)")
}

for mode in "${modes[@]}"; do
  echo "loopback, prefetch $mode..." >&2
  measure "loopback" "$work/loopback-$mode" "$nodes" "$mode"
done
if [ "$relayed" -eq 1 ]; then
  bench_start_relay "$work" "$delay_ms" "$bandwidth" "${NODE_ADDRS[@]}"
  relay_nodes=$(IFS=,; echo "${RELAY_ADDRS[*]}")
  for mode in "${modes[@]}"; do
    echo "relay $delay_ms ms, prefetch $mode..." >&2
    measure "relay ${delay_ms} ms${bandwidth:+ $bandwidth}" "$work/relay-$mode" "$relay_nodes" "$mode"
  done
  bench_stop "$RELAY_PID"
fi
bench_stop_nodes

echo
echo "model: $model, $n_predict tokens per run; routed experts $MODEL_ROUTED_BYTES bytes;" \
  "RAM budget $ram_budget bytes per node ($ram_fraction of a node's third), --direct-io," \
  "pin budget $pin_budget bytes"
echo "$prefetch_note"
printf '%-36s %9s %12s %12s %10s %10s %9s %9s %9s %9s %9s\n' "config" "decode" "net wait" \
  "disk wait" "RAM hit" "prefetch" "predict" "predict" "disk MiB" "prefetch" "prefetch"
printf '%-36s %9s %12s %12s %10s %10s %9s %9s %9s %9s %9s\n' "" "tok/s" "ms/token" "ms/token" \
  "rate" "used" "recall" "precis." "/token" "wasted" "stale"
printf '%s\n' "${rows[@]}"
echo "net wait: the coordinator's wait for node replies per decode step, summed over nodes."
echo "disk wait (summed over nodes), RAM hit rate, prefetch used/issued: the nodes' decode-only"
echo "NodeStats change (run's node-tier lines); predict: next-layer recall and precision in decode."
echo "disk MiB/token: the nodes' disk_bytes_read per decode step; prefetch wasted / stale: evicted"
echo "unused / dropped unread as stale, over those issued."
for i in "${!NODE_IDS[@]}"; do
  echo "node ${NODE_IDS[$i]} peak RSS: $(bench_mib "${NODE_HWM_KB[$i]}")"
done
