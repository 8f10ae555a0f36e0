#!/usr/bin/env bash
# Decode speed of the synthetic Qwen3-30B-A3B-shaped model run locally and
# against 3 expert nodes on loopback (optionally through colibri-relay to
# emulate a network), with what the network costs per token and the peak RSS of
# every process. Run from the repository root after a build.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/bench-cluster.sh [options]

  -n N               tokens to generate per run (default 64)
  --layers L         layers of the synthetic model (default $LAYERS or 4)
  --model M          benchmark this GGUF instead of the synthetic model
  --prompt TEXT      prompt (default "The small birds of the valley")
  --threads T        coordinator threads (default 0: physical cores)
  --node-threads T   compute threads per node (default 1)
  --delay-ms X       also run the 3 nodes through relays with this one-way delay
  --bandwidth R      with --delay-ms: relay bandwidth cap, e.g. 1Gbit (default none)
  --wire LIST        wire settings of the cluster runs, comma-separated, each a row:
                     f32 (default), bf16 (--wire-dtype bf16), reduce (--wire-reduce),
                     bf16+reduce
  --build DIR        build folder (default build)
  --fresh            delete the nodes' stored experts first (forces a new ingest)
  -h, --help         this text

Needs colibri-coordinator, colibri-expert-node, colibri-make-model (and
colibri-relay with --delay-ms; colibri_ops_bench for the memory-bandwidth limit,
or set MEM_BW_GBS). Data and logs go to BUILD/bench-cluster/.

Per-token network numbers are decode only: the counters of a prompt-only run
are subtracted from those of the full run, and divided by the decode steps
(generated tokens - 1: the last sampled token is not evaluated). "net wait" is
the coordinator's wait for node replies (network and node compute), summed over
the nodes: requests to different nodes overlap, so it can exceed the token time.
"wire B/tok" is the coordinator's own decode count of ComputeLayer bytes both
ways per generated token, "x floor" its ratio to the hidden-state floor
(n_embd x tokens x 4 bytes each way per involved node).
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
delay_ms=""
bandwidth=""
build=build
fresh=0
wire=f32
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --wire) wire="${2:?}"; shift 2 ;;
    *) bench_common_option "$@" || { usage >&2; exit 2; }; shift "$BENCH_SHIFT" ;;
  esac
done
[ "$n_predict" -ge 2 ] 2>/dev/null || bench_die "-n must be at least 2"
[ -n "$bandwidth" ] && [ -z "$delay_ms" ] && bench_die "--bandwidth needs --delay-ms"
IFS=, read -r -a wires <<<"$wire"
# wire_args NAME: the coordinator flags of one --wire setting.
wire_args() {
  case "$1" in
    f32) ;;
    bf16) echo "--wire-dtype bf16" ;;
    reduce) echo "--wire-reduce" ;;
    bf16+reduce) echo "--wire-dtype bf16 --wire-reduce" ;;
    *) return 1 ;;
  esac
}
for w in "${wires[@]}"; do wire_args "$w" >/dev/null || bench_die "unknown --wire setting $w"; done

bench_init "$build"
[ -n "$delay_ms" ] && bench_need_relay
[ -n "$model" ] || model="$build/models/bench-qwen3-30b-a3b-L$layers.gguf"
bench_model "$model" "$layers"
work="$build/bench-cluster"
[ "$fresh" -eq 1 ] && rm -rf "$work"
mkdir -p "$work"
trap bench_cleanup EXIT

bench_model_info "$model"
bench_memory_bandwidth
run_args=(run -m "$model" -p "$prompt" --ignore-eos --threads "$threads")

# Rows of the table, one per configuration.
rows=()
# add_row NAME STDERR_FILE [BASELINE_STDERR_FILE]
add_row() {
  bench_decode_stats "$2" "${3:-}"
  rows+=("$(printf '%-40s %9s %9s %11s %11s %11s %7s %12s %12s' "$1" "${DECODE[tps]}" \
    "${DECODE[round_trips]}" "${DECODE[sent]}" "${DECODE[received]}" "${DECODE[wire_bpt]}" \
    "${DECODE[wire_floor]}" "${DECODE[wait_ms]}" "$(bench_mib "$RUN_HWM_KB")")")
  [ "${DECODE[failovers]}" = 0 ] || rows+=("  (warning: ${DECODE[failovers]} failovers in decode)")
}

echo "local run..." >&2
bench_run "$work/local" "${run_args[@]}" -n "$n_predict"
add_row "local" "$work/local.err"

echo "starting 3 nodes..." >&2
bench_start_nodes "$work" 3 --threads "$node_threads"
nodes=$(IFS=,; echo "${NODE_ADDRS[*]}")
# The same tokens as the measured runs, so that their experts are in the nodes'
# RAM tiers (and, on the first run, ingested) before anything is measured.
echo "nodes $nodes; ingest and warm-up run..." >&2
bench_run "$work/warmup" "${run_args[@]}" -n "$n_predict" --nodes "$nodes"
bench_wait_idle "${NODE_PIDS[@]}"  # the RAM warm-up of what was ingested

# cluster_rows NAME PREFIX NODES: per --wire setting, a prompt-only baseline,
# then the full run.
cluster_rows() {
  local w extra
  for w in "${wires[@]}"; do
    read -r -a extra <<<"$(wire_args "$w")"
    bench_run "$2.$w.base" "${run_args[@]}" -n 0 --nodes "$3" "${extra[@]}"
    bench_run "$2.$w" "${run_args[@]}" -n "$n_predict" --nodes "$3" "${extra[@]}"
    add_row "$1 $w" "$2.$w.err" "$2.$w.base.err"
  done
}
echo "3 nodes..." >&2
cluster_rows "3 nodes (loopback)" "$work/nodes" "$nodes"

if [ -n "$delay_ms" ]; then
  bench_start_relay "$work" "$delay_ms" "$bandwidth" "${NODE_ADDRS[@]}"
  relayed=$(IFS=,; echo "${RELAY_ADDRS[*]}")
  echo "3 nodes through relays $relayed..." >&2
  cluster_rows "3 nodes, relay ${delay_ms} ms${bandwidth:+ $bandwidth}" "$work/relay" "$relayed"
  bench_stop "$RELAY_PID"
fi
bench_stop_nodes

echo
echo "model: $model ($MODEL_LAYERS layers), $n_predict tokens per run, prompt \"$prompt\""
printf '%-40s %9s %9s %11s %11s %11s %7s %12s %12s\n' "config" "decode" "round" "sent" \
  "received" "wire" "x" "net wait" "coordinator"
printf '%-40s %9s %9s %11s %11s %11s %7s %12s %12s\n' "" "tok/s" "trips/tok" "bytes/tok" \
  "bytes/tok" "B/tok" "floor" "ms/token" "peak RSS"
printf '%s\n' "${rows[@]}"
for i in "${!NODE_IDS[@]}"; do
  echo "node ${NODE_IDS[$i]} peak RSS: $(bench_mib "${NODE_HWM_KB[$i]}")"
done
limit=$(bench_div "$MEM_READ_GBS" "$(awk -v b="$MODEL_ACTIVE_BYTES" 'BEGIN {print b / 1e9}')" "%.1f")
echo "limit: $limit tok/s = memory read bandwidth $MEM_READ_GBS GB/s ÷ active weight bytes" \
  "per token $MODEL_ACTIVE_TEXT ($MODEL_ACTIVE_BYTES bytes; one machine, every process shares it)"
