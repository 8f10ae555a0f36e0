#!/usr/bin/env bash
# Colibri against llama.cpp's llama-bench on one machine: the same GGUF, the
# same threads, runs interleaved (llama.cpp, Colibri, llama.cpp, ...), so that a
# drift in the machine's speed hits both. Prints median and spread (min-max,
# max/min) of prompt and decode tokens/s for both, their ratio, and the
# bandwidth limit of decode. Run from anywhere after a Release build.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/bench-vs-llamacpp.sh --llama-bench PATH [options]

  --llama-bench PATH  llama-bench of a llama.cpp build of your own
  --colibri-only      no llama.cpp runs (Colibri's figures and the limit alone)
  --model M           GGUF to run (default: the synthetic Qwen3-30B-A3B-shaped
                      model, 4 layers Q4_K, made in BUILD/bench-vs-llamacpp/)
  -r N                interleaved repetitions (default 5)
  -t T                threads for both (default 2)
  -p P                prompt tokens (default 128)
  -n N                generated tokens (default 64)
  -d D                decode at a context depth of D tokens (default 0): the
                      decode rows only (llama-bench -d D; Colibri after a
                      D-token prompt)
  --colibri-args "A"  more flags for colibri-coordinator run (e.g. --kv-type f16)
  --busy-core         a busy loop (one more runnable process, as when another
                      program takes a core) during every llama.cpp and Colibri
                      run; the memory probes run without it
  --build DIR         Colibri build folder (default build)
  -h, --help          this text

Prompt tok/s: llama-bench's pp test (P tokens, one batch) against
`colibri-coordinator run --prompt-tokens` with P token ids (-b P).
Decode tok/s: llama-bench's tg test (N tokens) against the generation line of
the same Colibri run (N tokens after the prompt, --ignore-eos). Beside it,
Colibri's decode at each run's median token (its "per token" line): a run
slowed by a few stalled tokens (the host taking a core away) keeps its median,
one slowed throughout does not.
Bandwidth limit: active weight bytes per token (colibri-coordinator inspect)
divided into the parallel memory read bandwidth colibri_ops_bench measures
over 1 GiB ($MEM_BW_GBS overrides it; $COLIBRI_BENCH_PROBE_MIB sets the
probe's size, which the script's own test makes small); decode at the limit reads every active weight once
per token at that bandwidth. llama.cpp must be your own build: the project does
not download or build it.
EOF
}

cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-common.sh
source scripts/bench-common.sh

llama_bench=""
colibri_only=0
model=""
reps=5
threads=2
n_prompt=128
n_gen=64
depth=0
colibri_args=""
busy_core=0
build=build
while [ $# -gt 0 ]; do
  case "$1" in
    --llama-bench) llama_bench="${2:?}"; shift 2 ;;
    --colibri-only) colibri_only=1; shift ;;
    --model) model="${2:?}"; shift 2 ;;
    -r) reps="${2:?}"; shift 2 ;;
    -t) threads="${2:?}"; shift 2 ;;
    -p) n_prompt="${2:?}"; shift 2 ;;
    -n) n_gen="${2:?}"; shift 2 ;;
    -d) depth="${2:?}"; shift 2 ;;
    --colibri-args) colibri_args="${2:?}"; shift 2 ;;
    --busy-core) busy_core=1; shift ;;
    --build) build="${2:?}"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
if [ "$colibri_only" = 0 ]; then
  [ -n "$llama_bench" ] || bench_die "give --llama-bench PATH (or --colibri-only)"
  [ -x "$llama_bench" ] || bench_die "$llama_bench is not an executable llama-bench"
fi

COORD="$build/coordinator/colibri-coordinator"
# shellcheck disable=SC2034  # read by bench_memory_bandwidth
OPS_BENCH="$build/model/ops/colibri_ops_bench"
MAKE_MODEL="$build/tools/colibri-make-model"
[ -x "$COORD" ] || bench_die "$COORD is missing; build it: cmake --build $build --target colibri-coordinator"
work="$build/bench-vs-llamacpp"
mkdir -p "$work"
if [ -z "$model" ]; then
  [ -x "$MAKE_MODEL" ] || bench_die "$MAKE_MODEL is missing; build it or give --model"
  model="$work/qwen3-30b-a3b-4l-q4_k.gguf"
  bench_model "$model" 4
fi
[ -f "$model" ] || bench_die "no model at $model"

# Token ids 100, 101, ..., wrapping below the vocabulary size (a synthetic
# model's may be 4,096). At a depth, Colibri's prompt is the D tokens of
# context and only decode is compared (llama-bench's pp at a depth times P
# tokens after the D, which one run of Colibri's does not separate).
vocab=$("$COORD" inspect -m "$model" | sed -n 's/.*, vocab \([0-9]*\),.*/\1/p')
[ "${vocab:-0}" -gt 100 ] 2>/dev/null || bench_die "cannot read the vocabulary size of $model"
token_ids() { awk -v n="$1" -v v="$vocab" 'BEGIN { for (i = 0; i < n; i++) printf "%s%d", (i ? "," : ""), 100 + i % (v - 100) }'; }
llama_args=(-p "$n_prompt" -n "$n_gen")
colibri_run=(-b "$n_prompt")
if [ "$depth" -gt 0 ]; then
  prompt_ids=$(token_ids "$depth")
  llama_args=(-p 0 -n "$n_gen" -d "$depth")
  colibri_run=(-c $((depth + n_gen)))
else
  prompt_ids=$(token_ids "$n_prompt")
fi
read -r -a extra <<<"$colibri_args"

# stats VALUES...: "median min max max/min" of the values.
stats() {
  printf '%s\n' "$@" | sort -g | awk '
    { v[NR] = $1 }
    END {
      if (NR == 0) { print "n/a n/a n/a n/a"; exit }
      med = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf "%.2f %.2f %.2f %.2f\n", med, v[1], v[NR], (v[1] > 0) ? v[NR] / v[1] : 0
    }'
}

# busy_start / busy_stop: with --busy-core, a shell spinning in a loop (named
# colibri-bench-busy-loop, so that it can be found) around each timed run.
busy_pid=""
busy_start() {
  [ "$busy_core" = 1 ] || return 0
  (exec -a colibri-bench-busy-loop bash -c 'while :; do :; done') &
  busy_pid=$!
}
busy_stop() {
  [ -n "$busy_pid" ] || return 0
  kill "$busy_pid" 2>/dev/null || true
  wait "$busy_pid" 2>/dev/null || true
  busy_pid=""
}
trap busy_stop EXIT

llama_pp=()
llama_tg=()
colibri_pp=()
colibri_tg=()
colibri_steady=()
probes=()
for i in $(seq "$reps"); do
  if [ "$colibri_only" = 0 ]; then
    # One pp and one tg test, one repetition each, a JSON object per line.
    busy_start
    "$llama_bench" -m "$model" -t "$threads" "${llama_args[@]}" -r 1 -o jsonl \
      >"$work/llama.$i.jsonl" 2>"$work/llama.$i.err" ||
      bench_die "llama-bench failed: $(tail -3 "$work/llama.$i.err")"
    busy_stop
    while read -r np ng ts; do
      if [ "$np" -gt 0 ] && [ "$ng" -eq 0 ]; then llama_pp+=("$ts"); fi
      if [ "$np" -eq 0 ] && [ "$ng" -gt 0 ]; then llama_tg+=("$ts"); fi
    done < <(sed -n 's/.*"n_prompt": *\([0-9]*\).*"n_gen": *\([0-9]*\).*"avg_ts": *\([0-9.e+-]*\).*/\1 \2 \3/p' \
      "$work/llama.$i.jsonl")
  fi
  busy_start
  "$COORD" run -m "$model" --prompt-tokens "$prompt_ids" "${colibri_run[@]}" -n "$n_gen" \
    --ignore-eos --temp 0 -t "$threads" "${extra[@]}" >"$work/colibri.$i.out" \
    2>"$work/colibri.$i.err" ||
    bench_die "colibri-coordinator run failed: $(tail -3 "$work/colibri.$i.err")"
  busy_stop
  if [ "$depth" = 0 ]; then
    colibri_pp+=("$(sed -n 's/^prompt: .*(\([0-9.]*\) tokens\/s)$/\1/p' "$work/colibri.$i.err")")
  fi
  colibri_tg+=("$(sed -n 's/^generation: .*(\([0-9.]*\) tokens\/s)$/\1/p' "$work/colibri.$i.err")")
  # The run's decode rate at its median token: what it reached between the
  # host's stalls (a token that waits 100 ms for a core counts once, not by
  # its length).
  median_ms=$(sed -n 's/^per token: median \([0-9.]*\) ms,.*/\1/p' "$work/colibri.$i.err")
  if [ -n "$median_ms" ]; then
    colibri_steady+=("$(awk -v m="$median_ms" 'BEGIN { if (m > 0) printf "%.2f", 1000 / m }')")
  fi
  # The memory as it was during this run: the host's load moves it from run
  # to run, so each run's decode is also set against its own probe.
  probes+=("$(bench_memory_probe "$threads")")
  pp_now="n/a"
  if [ "${#colibri_pp[@]}" -gt 0 ]; then pp_now=${colibri_pp[-1]}; fi
  echo "run $i/$reps: colibri pp $pp_now tg ${colibri_tg[-1]}" \
    "${llama_pp:+llama.cpp pp ${llama_pp[-1]} tg ${llama_tg[-1]:-}}" \
    "memory read ${probes[-1]:-n/a} GB/s" >&2
done

c_pp="n/a" c_pp_min="" c_pp_max="" c_pp_spread="n/a"
if [ "${#colibri_pp[@]}" -gt 0 ]; then
  read -r c_pp c_pp_min c_pp_max c_pp_spread <<<"$(stats "${colibri_pp[@]}")"
fi
read -r c_tg c_tg_min c_tg_max c_tg_spread <<<"$(stats "${colibri_tg[@]}")"
l_pp="n/a" l_pp_min="" l_pp_max="" l_pp_spread="n/a" l_tg="n/a" l_tg_min="" l_tg_max="" l_tg_spread="n/a"
if [ "${#llama_pp[@]}" -gt 0 ]; then
  read -r l_pp l_pp_min l_pp_max l_pp_spread <<<"$(stats "${llama_pp[@]}")"
fi
if [ "${#llama_tg[@]}" -gt 0 ]; then
  read -r l_tg l_tg_min l_tg_max l_tg_spread <<<"$(stats "${llama_tg[@]}")"
fi
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 > 0 && a + 0 > 0) printf "%.2f", a / b; else print "n/a" }'; }

active_line=$("$COORD" inspect -m "$model" | grep '^active weight bytes per token:' || true)
read -r av au <<<"$(awk '{print $6, $7}' <<<"$active_line")"
active_bytes=$(bench_to_bytes "${av:-0}" "${au:-B}")
bench_memory_bandwidth "$threads"
# The limit is the machine's: the best read of every probe in the session
# (each run's and the final three), since a probe caught in a slow stretch
# of a shared host would lower it ($MEM_BW_GBS, when set, is taken as is).
n_probes=3
if [ -z "${MEM_BW_GBS:-}" ] && [ "$MEM_READ_GBS" != "n/a" ]; then
  for p in "${probes[@]}"; do
    [ -n "$p" ] || continue
    n_probes=$((n_probes + 1))
    MEM_READ_GBS=$(awk -v a="$MEM_READ_GBS" -v b="$p" 'BEGIN { print (b + 0 > a + 0) ? b : a }')
  done
fi
limit=$(awk -v g="$MEM_READ_GBS" -v b="$active_bytes" \
  'BEGIN { if (g + 0 > 0 && b > 0) printf "%.1f", g * 1e9 / b; else print "n/a" }')
pct() { awk -v a="$1" -v l="$limit" 'BEGIN { if (l + 0 > 0 && a + 0 > 0) printf "%.0f%%", 100 * a / l; else print "n/a" }'; }

busy_note=""
[ "$busy_core" = 1 ] && busy_note="; a busy loop beside every run"
echo
if [ "$depth" -gt 0 ]; then
  echo "model: $model; $threads threads; $reps interleaved runs; decode $n_gen tokens at a depth of $depth tokens${colibri_args:+; colibri $colibri_args}$busy_note"
else
  echo "model: $model; $threads threads; $reps interleaved runs; prompt $n_prompt tokens, decode $n_gen tokens${colibri_args:+; colibri $colibri_args}$busy_note"
fi
printf '%-22s %-30s %-30s %s\n' "" "Colibri median (min-max) spread" "llama.cpp median (min-max) spread" "Colibri/llama.cpp"
printf '%-22s %-30s %-30s %s\n' "prompt tok/s" "$c_pp ($c_pp_min-$c_pp_max) $c_pp_spread" \
  "$l_pp ($l_pp_min-$l_pp_max) $l_pp_spread" "$(ratio "$c_pp" "$l_pp")"
printf '%-22s %-30s %-30s %s\n' "decode tok/s" "$c_tg ($c_tg_min-$c_tg_max) $c_tg_spread" \
  "$l_tg ($l_tg_min-$l_tg_max) $l_tg_spread" "$(ratio "$c_tg" "$l_tg")"
echo "bandwidth limit: $limit tok/s = memory read $MEM_READ_GBS GB/s (best of $n_probes probes) / active weight bytes ${av:-?} ${au:-} per token"
echo "decode vs limit: Colibri $(pct "$c_tg"), llama.cpp $(pct "$l_tg")"
# Each run's decode against the probe taken right after it (median, range).
run_shares() {
  local -n tgs=$1
  local shares=() i
  for i in "${!tgs[@]}"; do
    shares+=("$(awk -v t="${tgs[$i]}" -v g="${probes[$i]:-0}" -v b="$active_bytes" \
      'BEGIN { if (g + 0 > 0 && t + 0 > 0) printf "%.1f", 100 * t * b / (g * 1e9); }')")
  done
  local filled=()
  for i in "${shares[@]}"; do [ -n "$i" ] && filled+=("$i"); done
  if [ "${#filled[@]}" -eq 0 ]; then echo "n/a"; return; fi
  read -r med lo hi _ <<<"$(stats "${filled[@]}")"
  echo "$med% ($lo-$hi%)"
}
if [ "$active_bytes" -gt 0 ] 2>/dev/null; then
  line="decode vs its own run's memory probe (median, range): Colibri $(run_shares colibri_tg)"
  [ "${#llama_tg[@]}" -gt 0 ] && line="$line, llama.cpp $(run_shares llama_tg)"
  echo "$line"
fi
# Each run's ratio to the llama.cpp run just before it: a slow hour of the
# host slows both of a pair, so these vary less than either side's rates.
pair_ratios() {
  local -n cs=$1 ls=$2
  local out=() i
  for i in "${!cs[@]}"; do
    [ -n "${ls[$i]:-}" ] && out+=("$(ratio "${cs[$i]}" "${ls[$i]}")")
  done
  local filled=()
  for i in "${out[@]}"; do [ "$i" != "n/a" ] && filled+=("$i"); done
  if [ "${#filled[@]}" -eq 0 ]; then echo "n/a"; return; fi
  read -r med lo hi spread <<<"$(stats "${filled[@]}")"
  echo "$med ($lo-$hi) $spread"
}
if [ "${#llama_tg[@]}" -gt 0 ]; then
  line="Colibri/llama.cpp run by run, median (min-max) spread: decode $(pair_ratios colibri_tg llama_tg)"
  [ "${#colibri_pp[@]}" -gt 0 ] && [ "${#llama_pp[@]}" -gt 0 ] &&
    line="$line, prompt $(pair_ratios colibri_pp llama_pp)"
  echo "$line"
fi
if [ "${#colibri_steady[@]}" -gt 0 ]; then
  read -r s_tg s_tg_min s_tg_max s_tg_spread <<<"$(stats "${colibri_steady[@]}")"
  echo "decode at each run's median token (stalls left out): Colibri $s_tg ($s_tg_min-$s_tg_max) $s_tg_spread"
fi
echo "spread = max/min of the runs (target <= 1.2); logs in $work/"
