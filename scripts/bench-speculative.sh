#!/usr/bin/env bash
# Speculative decoding (run --draft ngram) against plain decoding, on a
# code-editing prompt, a quoting prompt and free text, locally and with 3
# expert nodes through colibri-relay. Reports decode tok/s, acceptance rate,
# mean accepted length and round trips per generated token. Run from the
# repository root after a build.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: scripts/bench-speculative.sh [options]

  -n N               tokens to generate per run (default 96)
  --model M          GGUF to benchmark (default scripts/demo-model/colibri-demo-kjv-q8_0.gguf:
                     a trained model, so that acceptance means something; a
                     synthetic model with random weights never repeats its input)
  --threads T        coordinator threads (default 2)
  --node-threads T   compute threads per node (default 1)
  --delay-ms X       one-way delay of the relayed runs (default 0.25; 0: loopback only)
  --bandwidth R      bandwidth cap of the relayed runs (default 1Gbit; 0: none)
  --draft-max K      --draft-max of the speculative runs (default 8)
  --repeat R         runs per row; the fastest is reported (default 3: the
                     machine is shared and the runs are short)
  --build DIR        build folder (default build)
  -h, --help         this text

Greedy decoding. The demo model's context is 128 positions, so its runs end
when the context is full (the token count is printed per row). Every speculative run is checked to print the same token ids
as the plain run of the same configuration. Data and logs go to
BUILD/bench-speculative/.
USAGE
}

cd "$(dirname "$0")/.."
source scripts/bench-common.sh

n_predict=96
model=scripts/demo-model/colibri-demo-kjv-q8_0.gguf
threads=2
node_threads=1
delay_ms=0.25
bandwidth=1Gbit
draft_max=8
repeat=3
build=build
layers=4
prompt=""
fresh=0
while [ $# -gt 0 ]; do
  case "$1" in
    --draft-max) draft_max="${2:?}"; shift 2 ;;
    --repeat) repeat="${2:?}"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) bench_common_option "$@" || { usage >&2; exit 2; }; shift "$BENCH_SHIFT" ;;
  esac
done
[ "$bandwidth" = 0 ] && bandwidth=""

bench_init "$build"
[ "$delay_ms" != 0 ] && bench_need_relay
work="$build/bench-speculative"
rm -rf "$work"
mkdir -p "$work"
trap bench_cleanup EXIT

bench_spec_prompts
names=("${BENCH_SPEC_NAMES[@]}")
prompts=("${BENCH_SPEC_PROMPTS[@]}")

rows=()
# measure CONFIG NODES: plain, adaptive and fixed-length speculation for
# every prompt.
measure() {
  local config="$1" addrs="$2" i mode prefix plain_ids
  local node_args=()
  [ -n "$addrs" ] && node_args=(--nodes "$addrs")
  for i in "${!names[@]}"; do
    for mode in none adaptive fixed; do
      prefix="$work/${config// /_}-${names[$i]}-$mode"
      local flags=()
      case "$mode" in
        adaptive) flags=(--draft ngram --draft-max "$draft_max") ;;
        fixed) flags=(--draft ngram --draft-max "$draft_max" --draft-fixed) ;;
      esac
      echo "$config, ${names[$i]}, $mode..." >&2
      local best=0 r tps
      for r in $(seq "$repeat"); do
        bench_run "$prefix.$r" run -m "$model" -p "${prompts[$i]}" -n "$n_predict" --temp 0 \
          --ignore-eos --threads "$threads" --print-token-ids "${node_args[@]}" "${flags[@]}"
        bench_parse_run "$prefix.$r.err"
        tps="${STATS[gen_tps]:-0}"
        if awk -v a="$tps" -v b="$best" 'BEGIN { exit !(a > b) }'; then
          best="$tps"
          cp "$prefix.$r.out" "$prefix.out"
          cp "$prefix.$r.err" "$prefix.err"
        fi
      done
      [ "$mode" = none ] && plain_ids=$(cat "$prefix.out")
      [ "$(cat "$prefix.out")" = "$plain_ids" ] ||
        bench_die "$config ${names[$i]} $mode: the tokens differ from plain decoding"
      bench_parse_run "$prefix.err"
      local drafted accepted verify rate mean trips
      drafted=$(bench_spec_field "$prefix.err" drafted)
      accepted=$(bench_spec_field "$prefix.err" accepted)
      verify=$(bench_spec_field "$prefix.err" verify)
      rate=$(bench_div "${accepted:-}" "${drafted:-}" "%.3f")
      mean=$(bench_spec_field "$prefix.err" mean)
      trips=$(bench_div "${STATS[decode_round_trips]:-}" "${STATS[gen_tokens]:-}")
      rows+=("$(printf '%-22s %-6s %-9s %7s %9s %9s %9s %9s %9s %11s' "$config" "${names[$i]}" \
        "$mode" "${STATS[gen_tokens]:-n/a}" "${STATS[gen_tps]:-n/a}" "${verify:--}" \
        "${drafted:--}" "$rate" "${mean:--}" "$trips")")
    done
  done
}

measure "local" ""
echo "starting 3 nodes..." >&2
bench_start_nodes "$work" 3 --threads "$node_threads"
bench_wait_idle "${NODE_PIDS[@]}"  # a restart's RAM warm-up of the stored experts
nodes=$(IFS=,; echo "${NODE_ADDRS[*]}")
measure "3 nodes loopback" "$nodes"
if [ "$delay_ms" != 0 ]; then
  bench_start_relay "$work" "$delay_ms" "$bandwidth" "${NODE_ADDRS[@]}"
  relayed=$(IFS=,; echo "${RELAY_ADDRS[*]}")
  measure "3 nodes relay $delay_ms ms" "$relayed"
  bench_stop "$RELAY_PID"
fi
bench_stop_nodes

echo
echo "model: $model, $n_predict greedy tokens per run, --draft-max $draft_max," \
  "coordinator threads $threads${bandwidth:+, relay bandwidth $bandwidth}, best of $repeat"
printf '%-22s %-6s %-9s %7s %9s %9s %9s %9s %9s %11s\n' "config" "prompt" "drafting" \
  "tokens" "decode" "verify" "drafted" "accept" "mean acc" "round trips"
printf '%-22s %-6s %-9s %7s %9s %9s %9s %9s %9s %11s\n' "" "" "" "" "tok/s" "steps" "tokens" \
  "rate" "length" "per token"
printf '%s\n' "${rows[@]}"
echo "mean acc length: accepted drafts per verify step (each step also yields its own token)."
echo "round trips per token: the coordinator's decode round trips (all nodes) per generated token."
