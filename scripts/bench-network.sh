#!/usr/bin/env bash
# What the network costs Colibri, end to end: the
# synthetic Qwen3-30B-A3B-shaped model (Q4_K, 151,936-token vocabulary) with 8
# and 16 layers, locally and on 3 expert nodes behind colibri-relay links
# (default 0.25 ms / 1 Gbit and 1 ms / 100 Mbit one way): single-stream
# decode, aggregate tok/s of concurrent generations through `serve`, round
# trips and bytes per generated token, speculation's acceptance on three
# prompts, llama.cpp's RPC backend on the same links, and the targets T1-T3
# (--help states them) with MET / NOT MET. Run from anywhere after a Release build.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/bench-network.sh [options]

  --layers "L ..."     layer counts of the synthetic model (default "8 16")
  --model-dir DIR      where the synthetic models are made once and reused
                       (default BUILD/models)
  --model M            benchmark this one GGUF instead (--layers is ignored)
  --links "D:R ..."    relay links: one-way delay in ms and bandwidth per
                       direction, R 0 = uncapped, D 0 = the nodes without a
                       relay (default "0.25:1Gbit 1:100Mbit")
  -n N                 tokens of the single-stream runs (default 32)
  --concurrency "C ..." concurrent generations through serve (default "1 4 8 16")
  --conc-tokens N      tokens per concurrent generation (default 16)
  --threads T          coordinator and llama-bench threads (default 2)
  --node-threads T     threads per expert node (default 1)
  --rpc-threads T      threads per ggml-rpc-server (default: --node-threads;
                       llama.cpp's servers take their turns, one computes at a
                       time, so 2 lets it use both cores here)
  --run-args "FLAGS"   more flags for every `colibri-coordinator run`
                       (e.g. "--draft ngram"); word-split
  --serve-args "FLAGS" more flags for every `colibri-coordinator serve`
  --node-args "FLAGS"  more flags for every colibri-expert-node (without a
                       --ram-budget there, each node gets 1.5 x its share of
                       the routed experts, at least 1 GiB: the RAM tier holds
                       them all, and the runs measure the network, not disks)
  --client-args "FLAGS" more flags for every `colibri-client bench` (e.g.
                       "--prompts-file F"; a file of one line gives every
                       request the same prompt)
  --variant "LABEL:FLAGS"
                       one more configuration, measured after the plain one
                       locally and on every link: FLAGS go to its `run` and
                       `serve` (both take --draft, --draft-max, --wire-reduce,
                       --wire-dtype); repeatable. Default: "spec+reduce:--draft
                       ngram --wire-reduce" (drafting, node-side reduction and,
                       from 4 generations, serve's pipelined halves together);
                       --variant none measures the plain configuration only
  --spec-model M       model of the speculation figures (default the trained
                       demo model scripts/demo-model/colibri-demo-kjv-q8_0.gguf)
  --spec-tokens N      tokens per speculation run (default 96)
  --draft-max K        --draft-max of the speculation runs (default 8)
  --no-local           skip the runs without nodes (for investigations: T1
                       needs them)
  --llama-dir DIR      a llama.cpp build of your own: DIR holds llama-bench and
                       ggml-rpc-server (or rpc-server); without it no
                       llama.cpp figures (the project never downloads or
                       builds llama.cpp)
  --llama-reps R       llama-bench repetitions (default 2)
  --quick              smoke run: -n 4, --concurrency "1 2", --conc-tokens 4,
                       --spec-tokens 16, --links "0.25:1Gbit"
  --build DIR          Colibri build folder (default build)
  --work DIR           logs and node data (default BUILD/bench-network)
  -h, --help           this text

Needs colibri-coordinator, colibri-expert-node, colibri-client, colibri-relay
and colibri-make-model.

Single stream: `run` (greedy, EOS ignored). Its round trips and bytes per
generated token are the coordinator's node counters of the run minus those of
a prompt-only run (-n 0), divided by the decode evaluations' tokens (N - 1).
Aggregate: `serve --sessions <max C>` and `colibri-client bench -c C
--requests C` (C generations started together, each with its own 8-token
prompt: the client's built-in texts in rotation): output tokens / wall time;
trips and bytes per token are serve's /metrics deltas over the generated
tokens (prompts included). A warm-up sends all 16 built-in prompts first. "floor" is the hidden-state floor of
one token: hidden width x 4 bytes x MoE layers x 3 nodes, each way.

Where the time goes (one row per measurement, per generated token): wall
time; "wait", the time the coordinator was blocked on routed experts (run's
`expert overlap:` line, serve's colibri_expert_wait_seconds_total): network,
relay and node compute together; CPU time (user + system, /proc) of the
coordinator, of the 3 nodes together and of the relay; "cores" = all that CPU
/ wall time (this machine has `nproc` cores for all of them). Single-stream
rows subtract a prompt-only run (-n 0), so they are decode only.

Targets, for each link with RTT = 2 x delay:
  T1 time per token through the link <= local + 1.2 x MoE layers x RTT / L,
     L = generated tokens per verify step of that run (1 without --draft);
  T2 aggregate at 8 concurrent >= 4 x aggregate at 1 (set for 0.25 ms links);
  T3 single-stream decode >= 2 x llama.cpp RPC decode on the same link.
Beside T2: "T2 if weight reads bound the steps", the ratio of weight bytes
read per generated token at 1 and at 8 concurrent (the dense part once per
step, plus the experts the nodes read per token, both from the runs): where
routing spreads the generations over more experts, batching saves less.
llama.cpp splits by layers, not experts: with -ngl 99 its model loader puts
the token embedding on the host CPU and cuts the repeating layers plus the
output head into contiguous ranges, one per RPC server, in proportion to the
free memory each server reports (equal here: one machine), so one token visits
the servers in turn and crosses every server boundary through the host.
EOF
}

cd "$(dirname "$0")/.."
source scripts/bench-common.sh

layer_counts="8 16"
model_dir=""
model=""
links="0.25:1Gbit 1:100Mbit"
n_predict=32
concurrency="1 4 8 16"
conc_tokens=16
threads=2
node_threads=1
rpc_threads=""
run_args=""
serve_args=""
node_args=""
client_args=""
no_local=0
spec_model=scripts/demo-model/colibri-demo-kjv-q8_0.gguf
spec_tokens=96
draft_max=8
llama_dir=""
llama_reps=2
variants=("spec+reduce:--draft ngram --wire-reduce")
variants_given=0
build=build
work=""
vocab=151936
prompt="The small birds of the valley"
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --layers) layer_counts="${2:?}"; shift 2 ;;
    --model-dir) model_dir="${2:?}"; shift 2 ;;
    --model) model="${2:?}"; shift 2 ;;
    --links) links="${2:?}"; shift 2 ;;
    -n) n_predict="${2:?}"; shift 2 ;;
    --concurrency) concurrency="${2:?}"; shift 2 ;;
    --conc-tokens) conc_tokens="${2:?}"; shift 2 ;;
    --threads) threads="${2:?}"; shift 2 ;;
    --node-threads) node_threads="${2:?}"; shift 2 ;;
    --rpc-threads) rpc_threads="${2:?}"; shift 2 ;;
    --run-args) run_args="$2"; shift 2 ;;
    --serve-args) serve_args="$2"; shift 2 ;;
    --node-args) node_args="$2"; shift 2 ;;
    --client-args) client_args="$2"; shift 2 ;;
    --no-local) no_local=1; shift ;;
    --variant)
      [ "$variants_given" = 1 ] || variants=()
      variants_given=1
      if [ "${2:-}" != none ]; then
        [[ "${2:-}" == ?*:* ]] || bench_die "--variant takes LABEL:FLAGS or none"
        variants+=("$2")
      fi
      shift 2 ;;
    --spec-model) spec_model="${2:?}"; shift 2 ;;
    --spec-tokens) spec_tokens="${2:?}"; shift 2 ;;
    --draft-max) draft_max="${2:?}"; shift 2 ;;
    --llama-dir) llama_dir="${2:?}"; shift 2 ;;
    --llama-reps) llama_reps="${2:?}"; shift 2 ;;
    --quick)
      n_predict=4 concurrency="1 2" conc_tokens=4 spec_tokens=16 links="0.25:1Gbit"
      shift ;;
    --build) build="${2:?}"; shift 2 ;;
    --work) work="${2:?}"; shift 2 ;;
    *) usage >&2; exit 2 ;;
  esac
done
[ "$n_predict" -ge 2 ] 2>/dev/null || bench_die "-n must be at least 2"
[ -n "$rpc_threads" ] || rpc_threads=$node_threads
read -r -a run_extra <<<"$run_args"
read -r -a serve_extra <<<"$serve_args"
read -r -a node_extra <<<"$node_args"
read -r -a client_extra <<<"$client_args"

bench_init "$build"
bench_need_relay
CLIENT="$build/client/colibri-client"
[ -x "$CLIENT" ] || bench_die "$CLIENT is missing; build it: cmake --build $build --target colibri-client"
LLAMA_BENCH=""
RPC_SERVER=""
if [ -n "$llama_dir" ]; then
  LLAMA_BENCH="$llama_dir/llama-bench"
  RPC_SERVER="$llama_dir/ggml-rpc-server"
  [ -x "$RPC_SERVER" ] || RPC_SERVER="$llama_dir/rpc-server"
  [ -x "$LLAMA_BENCH" ] || bench_die "no llama-bench in $llama_dir"
  [ -x "$RPC_SERVER" ] || bench_die "no ggml-rpc-server (or rpc-server) in $llama_dir"
fi
[ -n "$work" ] || work="$build/bench-network"
mkdir -p "$work"
work=$(cd "$work" && pwd)
[ -n "$model_dir" ] || model_dir="$build/models"
trap bench_cleanup EXIT

max_conc=0
for c in $concurrency; do [ "$c" -gt "$max_conc" ] && max_conc=$c; done

# link_name DELAY RATE -> "0.25 ms 1Gbit" / "loopback"
link_name() {
  if [ "$1" = 0 ]; then echo "loopback"; else echo "$1 ms${2:+ $2}"; fi
}

# Result tables, one row per line.
single_rows=()
conc_rows=()
time_rows=()
variant_label=""   # the configuration being measured: "" (plain) or a --variant's label
variant_flags=()
CUR_RELAY_PID=""   # the relay in front of the nodes being measured, if any
llama_rows=()
target_rows=()
declare -A SINGLE_TPS   # "LAYERS/CONFIG" -> tok/s
declare -A SINGLE_STEP  # "LAYERS/CONFIG" -> generated tokens per verify step
declare -A CONC_TPS     # "LAYERS/CONFIG/C" -> aggregate tok/s
declare -A CONC_EXPERTS # "LAYERS/CONFIG/C" -> experts the nodes read per generated token
declare -A LLAMA_TPS    # "LAYERS/CONFIG" -> llama-bench tg tok/s
declare -A LLAMA_SPLIT  # LAYERS -> llama.cpp's model buffers per device

# tokens_per_step ERR_FILE: generated tokens per verify step of a `run` (1 when
# it did not speculate).
tokens_per_step() {
  local verify plain
  verify=$(bench_spec_field "$1" verify)
  if [ -z "$verify" ]; then echo 1; return; fi
  plain=$(awk '/^speculation / { for (i = 1; i <= NF; i++) if ($(i + 1) == "plain") print $i }' "$1")
  bench_parse_run "$1"
  bench_div "$((STATS[gen_tokens] - 1))" "$((verify + ${plain:-0}))"
}

# time_row LAYERS CONFIG CONCUR TOKENS WALL_S WAIT_S COORD_TICKS NODE_TICKS
# RELAY_TICKS OVERLAP ACCEPTED EXPERTS: appends a row of "where the time
# goes", per generated token (TOKENS of them in WALL_S seconds); EXPERTS is
# the experts the nodes acquired (RAM hits + misses: one per expert per
# request) or "-".
time_row() {
  local layers="$1" config="$2" concur="$3" tokens="$4" wall="$5" wait="$6"
  time_rows+=("$(awk -v l="$layers" -v c="$config" -v k="$concur" -v t="$tokens" -v w="$wall" \
    -v x="$wait" -v a="$7" -v n="$8" -v r="$9" -v h="$BENCH_CLK_TCK" -v o="${10}" -v acc="${11}" -v e="${12:--}" '
    function ms(v) { return (v == "-") ? "-" : sprintf("%.2f", 1000 * v / t) }
    BEGIN {
      if (t <= 0 || w <= 0) { printf "%-7s %-34s %6s   n/a", l, c, k; exit }
      cpu = a / h + (n == "-" ? 0 : n / h) + (r == "-" ? 0 : r / h)
      printf "%-7s %-34s %6s %9s %9s %9s %9s %9s %6.2f %8s %8s %8s", l, c, k, ms(w), ms(x),
        ms(a / h), (n == "-") ? "-" : ms(n / h), (r == "-") ? "-" : ms(r / h), cpu / w, o, acc,
        (e == "-") ? "-" : sprintf("%.1f", e / t)
    }')")
}

# single LAYERS CONFIG PREFIX [NODES]: one single-stream run and its
# prompt-only baseline; appends a row to the single-stream table and one to
# the time table.
single() {
  local layers="$1" config="$2" prefix="$3" nodes="${4:-}" node_flags=()
  [ -n "$nodes" ] && node_flags=(--nodes "$nodes")
  local args=(run -m "$model" -p "$prompt" --temp 0 --ignore-eos --threads "$threads"
    "${node_flags[@]}" "${run_extra[@]}" "${variant_flags[@]}")
  local trips="-" sent="-" received="-" pids=() relay=()
  [ -n "$nodes" ] && pids=("${NODE_PIDS[@]}")
  [ -n "$nodes" ] && [ -n "$CUR_RELAY_PID" ] && relay=("$CUR_RELAY_PID")
  local n0 r0 n1 r1 n2 r2 n3 r3
  n0=$(bench_cpu_ticks "${pids[@]}") r0=$(bench_cpu_ticks "${relay[@]}")
  bench_run "$prefix.base" "${args[@]}" -n 0
  n1=$(bench_cpu_ticks "${pids[@]}") r1=$(bench_cpu_ticks "${relay[@]}")
  bench_parse_run "$prefix.base.err"
  local t0="${STATS[decode_round_trips]:-0}" s0="${STATS[bytes_sent]:-0}" r0b="${STATS[bytes_received]:-0}"
  local rq0="${STATS[requests]:-0}" w0="${STATS[overlap_wait_s]:-0}"
  n2=$(bench_cpu_ticks "${pids[@]}") r2=$(bench_cpu_ticks "${relay[@]}")
  bench_run "$prefix" "${args[@]}" -n "$n_predict"
  n3=$(bench_cpu_ticks "${pids[@]}") r3=$(bench_cpu_ticks "${relay[@]}")
  bench_parse_run "$prefix.err"
  local tps="${STATS[gen_tps]:-n/a}" decode_tokens=$((STATS[gen_tokens] - 1))
  if [ -n "$nodes" ]; then
    trips=$(bench_div "$((STATS[requests] - rq0))" "$decode_tokens")
    sent=$(bench_div "$((STATS[bytes_sent] - s0))" "$decode_tokens" "%.0f")
    received=$(bench_div "$((STATS[bytes_received] - r0b))" "$decode_tokens" "%.0f")
  fi
  local step
  step=$(tokens_per_step "$prefix.err")
  SINGLE_TPS["$layers/$config"]=$tps
  SINGLE_STEP["$layers/$config"]=$step
  single_rows+=("$(printf '%-7s %-34s %9s %9s %8s %11s %11s %11s' "$layers" "$config" "$tps" \
    "$(bench_div 1000 "$tps")" "$step" "$trips" "$sent" "$received")")
  # Decode only: the full run minus the prompt-only one.
  local wall wait="-" coord nt="-" rt="-" overlap="-"
  wall=$(bench_div "$decode_tokens" "$tps" "%.6f")
  # The coordinator's own: from its first generated token on (the base run's
  # share would carry its load, which hashes every expert with nodes).
  coord=$(awk -v a="${RUN_DECODE_CPU_S:-0}" -v h="$BENCH_CLK_TCK" 'BEGIN { printf "%.0f", a * h }')
  if [ -n "$nodes" ]; then
    wait=$(awk -v a="${STATS[overlap_wait_s]:-0}" -v b="$w0" 'BEGIN { printf "%.6f", a - b }')
    nt=$(((n3 - n2) - (n1 - n0)))
  fi
  [ "${#relay[@]}" -gt 0 ] && rt=$(((r3 - r2) - (r1 - r0)))
  local experts="-"
  [ -n "$nodes" ] && experts=$((${STATS[tier_ram_hits]:-0} + ${STATS[tier_ram_misses]:-0}))
  time_row "$layers" "$config" run "$decode_tokens" "$wall" "$wait" "$coord" "$nt" "$rt" "$overlap" \
    "$(bench_div "$(bench_spec_field "$prefix.err" accepted)" "$(bench_spec_field "$prefix.err" drafted)" "%.2f")" \
    "$experts"
  echo "  $layers layers, $config: $tps tok/s, $trips trips/token" >&2
}

# node_experts ADDR: the experts the nodes acquired so far (RAM tier hits +
# misses summed over the nodes, from the TOTAL row of colibri-client status).
node_experts() {
  "$CLIENT" --coordinator "$1" status | awk '$1 == "TOTAL" { print $(NF - 4) + $(NF - 3) }'
}

# concurrent LAYERS CONFIG PREFIX [NODES]: serve, then every concurrency.
concurrent() {
  local layers="$1" config="$2" prefix="$3" nodes="${4:-}" node_flags=() c pids=() relay=()
  [ -n "$nodes" ] && node_flags=(--nodes "$nodes")
  [ -n "$nodes" ] && pids=("${NODE_PIDS[@]}")
  [ -n "$nodes" ] && [ -n "$CUR_RELAY_PID" ] && relay=("$CUR_RELAY_PID")
  bench_start_serve "$prefix.serve" -m "$model" --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
    --threads "$threads" --sessions "$max_conc" "${node_flags[@]}" "${serve_extra[@]}" \
    "${variant_flags[@]}"
  # Every built-in prompt once, so that the measured generations find the
  # experts their prompts route to in the page cache (or the nodes' RAM
  # tiers), as the single-stream runs do after their warm-up.
  "$CLIENT" --coordinator "$SERVE_ADDR" bench -c "$max_conc" --requests 16 --prompt-tokens 8 \
    --max-tokens "$conc_tokens" "${client_extra[@]}" >"$prefix.warmup" 2>&1 ||
    bench_die "serve warm-up failed: $(tail -3 "$prefix.warmup")"
  for c in $concurrency; do
    local t0 s0 r0 g0 w0 o0 a0 j0 t1 s1 r1 g1 w1 o1 a1 j1 out="$prefix.c$c.json"
    local sc0 sc1 n0 n1 l0 l1
    local e0=0 e1=0
    [ -n "$nodes" ] && e0=$(node_experts "$SERVE_ADDR")
    read -r t0 s0 r0 g0 w0 o0 a0 j0 <<<"$(bench_serve_counters "$SERVE_HTTP")"
    sc0=$(bench_cpu_ticks "$SERVE_PID") n0=$(bench_cpu_ticks "${pids[@]}") l0=$(bench_cpu_ticks "${relay[@]}")
    "$CLIENT" --coordinator "$SERVE_ADDR" bench -c "$c" --requests "$c" --prompt-tokens 8 \
      --max-tokens "$conc_tokens" --json "${client_extra[@]}" >"$out" 2>"$prefix.c$c.err" ||
      bench_die "colibri-client bench -c $c failed: $(tail -3 "$prefix.c$c.err")"
    sc1=$(bench_cpu_ticks "$SERVE_PID") n1=$(bench_cpu_ticks "${pids[@]}") l1=$(bench_cpu_ticks "${relay[@]}")
    read -r t1 s1 r1 g1 w1 o1 a1 j1 <<<"$(bench_serve_counters "$SERVE_HTTP")"
    [ -n "$nodes" ] && e1=$(node_experts "$SERVE_ADDR")
    local tps ok itl ttft trips="-" sent="-" received="-" tokens=$((g1 - g0)) seconds
    tps=$(sed -n 's/^ *"output_tokens_per_second": *\([0-9.e+-]*\).*/\1/p' "$out")
    seconds=$(sed -n 's/^ *"seconds": *\([0-9.e+-]*\).*/\1/p' "$out")
    ok=$(sed -n 's/^ *"ok": *\([0-9]*\).*/\1/p' "$out")
    [ "$ok" = "$c" ] || bench_die "$config: $((c - ${ok:-0})) of $c generations failed ($out)"
    itl=$(json_p50 "$out" inter_token_latency_seconds)
    ttft=$(json_p50 "$out" time_to_first_token_seconds)
    if [ -n "$nodes" ]; then
      trips=$(bench_div "$((t1 - t0))" "$tokens")
      sent=$(bench_div "$((s1 - s0))" "$tokens" "%.0f")
      received=$(bench_div "$((r1 - r0))" "$tokens" "%.0f")
    fi
    tps=$(awk -v t="$tps" 'BEGIN { printf "%.2f", t }')
    CONC_TPS["$layers/$config/$c"]=$tps
    [ -n "$nodes" ] && CONC_EXPERTS["$layers/$config/$c"]=$(bench_div "$((e1 - e0))" "$tokens" "%.2f")
    conc_rows+=("$(printf '%-7s %-34s %6s %10s %9s %9s %9s %11s %11s' "$layers" "$config" "$c" \
      "$tps" "$ttft" "$itl" "$trips" "$sent" "$received")")
    local wait="-" nt="-" rt="-" overlap="-" accepted="-"
    if [ -n "$nodes" ]; then
      wait=$(awk -v a="$w1" -v b="$w0" 'BEGIN { printf "%.6f", a - b }')
      nt=$((n1 - n0))
      overlap=$(awk -v w="$wait" -v a="$o1" -v b="$o0" \
        'BEGIN { o = a - b; if (o > 0) printf "%.0f%%", 100 * (1 - w / o); else print "-" }')
    fi
    [ "${#relay[@]}" -gt 0 ] && rt=$((l1 - l0))
    accepted=$(awk -v a="$((a1 - a0))" -v j="$((j1 - j0))" \
      'BEGIN { if (a + j > 0) printf "%.2f", a / (a + j); else print "-" }')
    local experts="-"
    [ -n "$nodes" ] && experts=$((e1 - e0))
    time_row "$layers" "$config" "$c" "$tokens" "$seconds" "$wait" "$((sc1 - sc0))" "$nt" "$rt" \
      "$overlap" "$accepted" "$experts"
    echo "  $layers layers, $config, $c concurrent: $tps tok/s, $trips trips/token" >&2
  done
  bench_stop "$SERVE_PID"
}

# json_p50 FILE KEY: the "p50" of KEY's object in colibri-client bench
# --json output, in ms ("n/a" when absent).
json_p50() {
  awk -v k="\"$2\"" 'index($0, k) { f = 1 } f && /"p50"/ { gsub(/[",]/, ""); printf "%.1f\n", $2 * 1000; found = 1; exit }
    END { if (!found) print "n/a" }' "$1"
}

# free_port: a loopback port nothing listens on (for ggml-rpc-server, which
# cannot pick one itself).
free_port() {
  local p
  while true; do
    p=$((20000 + RANDOM % 30000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
}

# llama_start_servers: 3 ggml-rpc-servers (CPU device, --rpc-threads
# threads, each with its own tensor cache under $work); sets RPC_PIDS and
# RPC_ADDRS.
llama_start_servers() {
  local i port
  RPC_PIDS=()
  RPC_ADDRS=()
  for i in 1 2 3; do
    for _ in 1 2 3 4 5; do
      port=$(free_port)
      mkdir -p "$work/llama-cache$i"
      LLAMA_CACHE="$work/llama-cache$i/" "$RPC_SERVER" -H 127.0.0.1 -p "$port" -t "$rpc_threads" \
        -c >"$work/rpc$i.out" 2>"$work/rpc$i.err" &
      local pid=$!
      sleep 1  # it prints nothing once it listens (stdout is buffered): wait, then check
      if kill -0 "$pid" 2>/dev/null; then
        BENCH_PIDS+=("$pid")
        RPC_PIDS+=("$pid")
        RPC_ADDRS+=("127.0.0.1:$port")
        break
      fi
      wait "$pid" 2>/dev/null || true
    done
    [ "${#RPC_ADDRS[@]}" -eq "$i" ] || bench_die "ggml-rpc-server did not start: $(tail -3 "$work/rpc$i.err")"
  done
}

# llama_tg PREFIX [RPC_ADDRS]: llama-bench's decode tok/s (mean of its
# repetitions) on the model, through the given RPC servers or on the CPU.
llama_tg() {
  local prefix="$1" rpc="${2:-}" rpc_flags=()
  [ -n "$rpc" ] && rpc_flags=(--rpc "$rpc" -ngl 99)
  if ! "$LLAMA_BENCH" -m "$model" -t "$threads" -p 0 -n "$n_predict" -r "$llama_reps" -o jsonl \
    "${rpc_flags[@]}" >"$prefix.jsonl" 2>"$prefix.err"; then
    echo "llama-bench failed (the Colibri figures stand): $(tail -3 "$prefix.err")" >&2
    echo "n/a"
    return
  fi
  sed -n 's/.*"n_gen": *[1-9][0-9]*.*"avg_ts": *\([0-9.e+-]*\).*/\1/p' "$prefix.jsonl" |
    awk 'NR == 1 { printf "%.2f\n", $1 }'
}

# llama_all LAYERS: llama.cpp on the CPU, then through 3 RPC servers on each link.
llama_all() {
  local layers="$1" tg link delay rate
  echo "  llama.cpp, $layers layers, CPU..." >&2
  tg=$(llama_tg "$work/L$layers.llama-local")
  LLAMA_TPS["$layers/local"]=$tg
  llama_rows+=("$(printf '%-7s %-22s %9s' "$layers" "local (CPU)" "$tg")")
  llama_start_servers
  # Loads the tensors into the servers' caches without a link in between, so
  # that the relayed runs do not spend minutes sending the weights.
  echo "  llama.cpp, $layers layers, filling the RPC servers' caches..." >&2
  if ! "$LLAMA_BENCH" -m "$model" -t "$threads" -p 0 -n 1 -r 1 \
    --rpc "$(IFS=,; echo "${RPC_ADDRS[*]}")" -ngl 99 -v >"$work/L$layers.llama-fill.out" \
    2>"$work/L$layers.llama-fill.err"; then
    echo "llama-bench --rpc failed (the Colibri figures stand): $(tail -3 "$work/L$layers.llama-fill.err")" >&2
    bench_stop "${RPC_PIDS[@]}"
    return
  fi
  for link in $links; do
    delay="${link%%:*}" rate="${link#*:}"
    [ "$rate" = 0 ] && rate=""
    local config addrs
    config="3 nodes $(link_name "$delay" "$rate")"
    if [ "$delay" = 0 ]; then
      addrs=$(IFS=,; echo "${RPC_ADDRS[*]}")
    else
      bench_start_relay "$work" "$delay" "$rate" "${RPC_ADDRS[@]}"
      addrs=$(IFS=,; echo "${RELAY_ADDRS[*]}")
    fi
    echo "  llama.cpp, $layers layers, $config..." >&2
    tg=$(llama_tg "$work/L$layers.llama-${delay}" "$addrs")
    [ "$delay" = 0 ] || bench_stop "$RELAY_PID"
    LLAMA_TPS["$layers/$config"]=$tg
    llama_rows+=("$(printf '%-7s %-22s %9s' "$layers" "$config" "$tg")")
  done
  # Where llama.cpp put the weights (its -v log): one buffer per device.
  LLAMA_SPLIT["$layers"]=$(sed -n 's/.*load_tensors: *\(.*\) model buffer size = *\([0-9.]*\) MiB.*/\1 \2 MiB/p' \
    "$work/L$layers.llama-fill.err" | paste -sd, - | sed 's/,/, /g')
  bench_stop "${RPC_PIDS[@]}"
}

# verdict OK -> MET / NOT MET
verdict() { if [ "$1" = 1 ]; then echo "MET"; else echo "NOT MET"; fi; }

# targets LAYERS: the targets T1-T3 for every link.
targets() {
  local layers="$1" v
  for v in "" "${variants[@]}"; do
    use_variant "$v"
    targets_of "$layers"
  done
  use_variant ""
}

# targets_of LAYERS: the targets of the configuration use_variant chose, on
# every link (its local run is the local time of T1).
targets_of() {
  local layers="$1" link delay rate config
  local t_local
  t_local=$(bench_div 1000 "${SINGLE_TPS[$layers/local$variant_suffix]:-}" "%.3f")
  for link in $links; do
    delay="${link%%:*}" rate="${link#*:}"
    [ "$rate" = 0 ] && rate=""
    [ "$delay" = 0 ] && continue  # no link: nothing to hide
    config="3 nodes $(link_name "$delay" "$rate")$variant_suffix"
    local t step bound ok
    t=$(bench_div 1000 "${SINGLE_TPS[$layers/$config]}" "%.3f")
    step="${SINGLE_STEP[$layers/$config]}"
    if [ "$t_local" = n/a ]; then
      target_rows+=("$(printf '%-7s %-34s T1 n/a (no local run: --no-local)' "$layers" "$config")")
    else
      bound=$(awk -v l="$t_local" -v m="$MODEL_MOE_LAYERS" -v d="$delay" -v s="$step" \
        'BEGIN { printf "%.3f", l + 1.2 * m * 2 * d / s }')
      ok=$(awk -v t="$t" -v b="$bound" 'BEGIN { print (t + 0 > 0 && t <= b) ? 1 : 0 }')
      target_rows+=("$(printf '%-7s %-34s T1 time/token %s ms <= local %s + 1.2 x %s x %s ms / %s = %s ms: %s' \
        "$layers" "$config" "$t" "$t_local" "$MODEL_MOE_LAYERS" \
        "$(awk -v d="$delay" 'BEGIN { print 2 * d }')" "$step" "$bound" "$(verdict "$ok")")")
    fi
    # The same bound from the nodes without a relay (when measured): on a
    # machine this small, local is no lower bound (the nodes add cores).
    local t_loop="${SINGLE_TPS[$layers/3 nodes loopback$variant_suffix]:-}"
    if [ -n "$t_loop" ] && [ "$delay" != 0 ]; then
      t_loop=$(bench_div 1000 "$t_loop" "%.3f")
      bound=$(awk -v l="$t_loop" -v m="$MODEL_MOE_LAYERS" -v d="$delay" -v s="$step" \
        'BEGIN { printf "%.3f", l + 1.2 * m * 2 * d / s }')
      ok=$(awk -v t="$t" -v b="$bound" 'BEGIN { print (t + 0 > 0 && t <= b) ? 1 : 0 }')
      target_rows+=("$(printf '%-7s %-34s T1 vs loopback nodes: %s ms <= %s + 1.2 x %s x %s ms / %s = %s ms: %s' \
        "$layers" "$config" "$t" "$t_loop" "$MODEL_MOE_LAYERS" \
        "$(awk -v d="$delay" 'BEGIN { print 2 * d }')" "$step" "$bound" "$(verdict "$ok")")")
    fi
    local a1="${CONC_TPS[$layers/$config/1]:-}" a8="${CONC_TPS[$layers/$config/8]:-}"
    if [ -n "$a1" ] && [ -n "$a8" ]; then
      ok=$(awk -v a="$a8" -v b="$a1" 'BEGIN { print (a >= 4 * b) ? 1 : 0 }')
      target_rows+=("$(printf '%-7s %-34s T2 aggregate x8 %s >= 4 x %s = %s tok/s (%sx): %s' \
        "$layers" "$config" "$a8" "$a1" "$(awk -v b="$a1" 'BEGIN { printf "%.2f", 4 * b }')" \
        "$(bench_div "$a8" "$a1")" "$(verdict "$ok")")")
    else
      target_rows+=("$(printf '%-7s %-34s T2 n/a (needs --concurrency with 1 and 8)' "$layers" "$config")")
    fi
    # What T2 can reach when weight reads bound the steps: weight bytes per
    # generated token alone over those at 8 concurrent, with the experts the
    # nodes read (E1, E8 per token) and the dense part read once per step.
    local e1="${CONC_EXPERTS[$layers/$config/1]:-}" e8="${CONC_EXPERTS[$layers/$config/8]:-}"
    if [ -n "$e1" ] && [ -n "$e8" ] && [ "$e1" != n/a ] && [ "$e8" != n/a ]; then
      target_rows+=("$(awk -v l="$layers" -v c="$config" -v a="$MODEL_ACTIVE_BYTES" \
        -v r="$MODEL_ROUTED_BYTES" -v m="$MODEL_MOE_LAYERS" -v n="$MODEL_EXPERTS" \
        -v k="$MODEL_TOP_K" -v e1="$e1" -v e8="$e8" 'BEGIN {
          e = r / (m * n); d = a - m * k * e; mib = 1048576
          b1 = d + e1 * e; b8 = d / 8 + e8 * e
          printf "%-7s %-34s T2 if weight reads bound the steps: (%.0f + %.1f x %.2f) / (%.0f / 8 + %.1f x %.2f) MiB per token = %.2fx", \
            l, c, d / mib, e1, e / mib, d / mib, e8, e / mib, b1 / b8 }')")
    fi
    local l="${LLAMA_TPS[$layers/3 nodes $(link_name "$delay" "$rate")]:-}"
    local s="${SINGLE_TPS[$layers/$config]}"
    if [ -n "$l" ] && [ "$l" != n/a ]; then
      ok=$(awk -v a="$s" -v b="$l" 'BEGIN { print (b + 0 > 0 && a >= 2 * b) ? 1 : 0 }')
      target_rows+=("$(printf '%-7s %-34s T3 decode %s >= 2 x llama.cpp RPC %s = %s tok/s (%sx): %s' \
        "$layers" "$config" "$s" "$l" "$(awk -v b="$l" 'BEGIN { printf "%.2f", 2 * b }')" \
        "$(bench_div "$s" "$l")" "$(verdict "$ok")")")
    else
      target_rows+=("$(printf '%-7s %-34s T3 n/a (no llama.cpp figure; --llama-dir)' "$layers" "$config")")
    fi
  done
}

# use_variant "" | "LABEL:FLAGS": the configuration the next runs measure;
# sets variant_label, variant_flags, variant_suffix (" LABEL", for the
# config column) and variant_tag ("-LABEL", for file names).
use_variant() {
  variant_label="" variant_flags=() variant_suffix="" variant_tag=""
  [ -n "$1" ] || return 0
  variant_label="${1%%:*}"
  read -r -a variant_flags <<<"${1#*:}"
  variant_suffix=" $variant_label"
  variant_tag="-${variant_label//[^A-Za-z0-9_.+-]/_}"
}

# bench_layers LAYERS: every Colibri and llama.cpp run on one model.
bench_layers() {
  local layers="$1" link delay rate config nodes addrs
  local dir="$work/L$layers"
  mkdir -p "$dir"
  bench_model_info "$model"
  layers="$MODEL_LAYERS"
  echo "$model: $MODEL_LAYERS layers ($MODEL_MOE_LAYERS MoE), hidden $MODEL_EMBD" >&2
  # The same run first, so that the measured one finds the experts it routes
  # to in the page cache (as the nodes' warm-up run does for theirs).
  echo "local warm-up run..." >&2
  [ "$no_local" = 1 ] || bench_run "$dir/local-warmup" run -m "$model" -p "$prompt" -n "$n_predict" --temp 0 \
    --ignore-eos --threads "$threads" "${run_extra[@]}"
  local v
  for v in "" "${variants[@]}"; do
    [ "$no_local" = 1 ] && break
    use_variant "$v"
    single "$layers" "local$variant_suffix" "$dir/local$variant_tag"
    concurrent "$layers" "local$variant_suffix" "$dir/local$variant_tag"
  done
  use_variant ""
  echo "starting 3 nodes..." >&2
  local budget=()
  if [[ " ${node_extra[*]}" != *" --ram-budget "* && " ${node_extra[*]}" != *" --ram-budget="* ]]; then
    # The nodes' default 1 GiB held only part of a 16-layer model's share
    # (5.1 GB of experts over 3 nodes): its concurrent runs read the disk tier.
    budget=(--ram-budget "$(awk -v r="$MODEL_ROUTED_BYTES" \
      'BEGIN { b = r / 3 * 1.5; if (b < 1073741824) b = 1073741824; printf "%.0f", b }')")
    echo "node RAM budget: ${budget[1]} bytes each" >&2
  fi
  bench_start_nodes "$dir" 3 --threads "$node_threads" "${budget[@]}" "${node_extra[@]}"
  nodes=$(IFS=,; echo "${NODE_ADDRS[*]}")
  echo "nodes $nodes: ingest and warm-up run..." >&2
  bench_run "$dir/warmup" run -m "$model" -p "$prompt" -n "$n_predict" --temp 0 --ignore-eos \
    --threads "$threads" --nodes "$nodes" "${run_extra[@]}"
  bench_wait_idle "${NODE_PIDS[@]}"  # the RAM warm-up of what was ingested
  for link in $links; do
    delay="${link%%:*}" rate="${link#*:}"
    [ "$rate" = 0 ] && rate=""
    config="3 nodes $(link_name "$delay" "$rate")"
    CUR_RELAY_PID=""
    if [ "$delay" = 0 ]; then
      addrs="$nodes"
    else
      bench_start_relay "$dir" "$delay" "$rate" "${NODE_ADDRS[@]}"
      addrs=$(IFS=,; echo "${RELAY_ADDRS[*]}")
      CUR_RELAY_PID=$RELAY_PID
    fi
    for v in "" "${variants[@]}"; do
      use_variant "$v"
      single "$layers" "$config$variant_suffix" "$dir/relay-$delay$variant_tag" "$addrs"
      concurrent "$layers" "$config$variant_suffix" "$dir/relay-$delay$variant_tag" "$addrs"
    done
    use_variant ""
    [ "$delay" = 0 ] || bench_stop "$RELAY_PID"
    CUR_RELAY_PID=""
  done
  bench_stop_nodes
  [ -z "$LLAMA_BENCH" ] || llama_all "$layers"
  FLOOR["$layers"]=$((MODEL_EMBD * 4 * MODEL_MOE_LAYERS * 3))
  targets "$layers"
}

# Speculation's acceptance on the three prompts (local: acceptance does not
# depend on the network).
spec_rows=()
speculation() {
  local i prefix mode
  bench_spec_prompts
  for i in "${!BENCH_SPEC_NAMES[@]}"; do
    for mode in fixed adaptive; do
      prefix="$work/spec-${BENCH_SPEC_NAMES[$i]}-$mode"
      local flags=(--draft ngram --draft-max "$draft_max")
      [ "$mode" = fixed ] && flags+=(--draft-fixed)
      echo "speculation, ${BENCH_SPEC_NAMES[$i]}, $mode..." >&2
      bench_run "$prefix" run -m "$spec_model" -p "${BENCH_SPEC_PROMPTS[$i]}" -n "$spec_tokens" \
        --temp 0 --ignore-eos --threads "$threads" "${flags[@]}"
      bench_parse_run "$prefix.err"
      local drafted accepted mean
      drafted=$(bench_spec_field "$prefix.err" drafted)
      accepted=$(bench_spec_field "$prefix.err" accepted)
      mean=$(bench_spec_field "$prefix.err" mean)
      spec_rows+=("$(printf '%-6s %-9s %7s %9s %9s %9s %9s %9s' "${BENCH_SPEC_NAMES[$i]}" "$mode" \
        "${STATS[gen_tokens]:-n/a}" "${drafted:--}" "${accepted:--}" \
        "$(bench_div "${accepted:-}" "${drafted:-}" "%.3f")" "${mean:--}" \
        "$(tokens_per_step "$prefix.err")")")
    done
  done
}

declare -A FLOOR
if [ -n "$model" ]; then
  [ -f "$model" ] || bench_die "no model at $model"
  bench_layers 0
  model_list=("$model")
else
  model_list=()
  for layers in $layer_counts; do
    model="$model_dir/qwen3-30b-a3b-${layers}l-v$((vocab / 1000))k-q4_k.gguf"
    bench_model "$model" "$layers" "$vocab"
    model_list+=("$model")
    bench_layers "$layers"
  done
fi
if [ -f "$spec_model" ]; then
  speculation
else
  echo "no speculation figures: $spec_model is missing" >&2
fi

echo
echo "models: ${model_list[*]}"
echo "coordinator threads $threads, node threads $node_threads, rpc-server threads $rpc_threads; links: $links" \
  "(one-way delay:bandwidth per direction, RTT = 2 x delay)${run_args:+; run $run_args}${serve_args:+; serve $serve_args}"
[ -z "$client_args" ] || echo "colibri-client bench $client_args"
for v in "${variants[@]}"; do echo "variant ${v%%:*}: run and serve with ${v#*:}"; done
echo
echo "single stream: $n_predict greedy tokens (run; per token: decode, prompt excluded)"
printf '%-7s %-34s %9s %9s %8s %11s %11s %11s\n' "layers" "config" "decode" "ms per" "tokens" \
  "round trips" "sent" "received"
printf '%-7s %-34s %9s %9s %8s %11s %11s %11s\n' "" "" "tok/s" "token" "/step" "per token" \
  "bytes/tok" "bytes/tok"
printf '%s\n' "${single_rows[@]}"
echo "round trips: ComputeLayer calls summed over the nodes (one layer's calls go out in parallel)"
for layers in "${!FLOOR[@]}"; do
  echo "hidden-state floor, $layers layers: ${FLOOR[$layers]} bytes per token each way (3 nodes)"
done
echo
echo "concurrent generations: serve --sessions $max_conc, colibri-client bench," \
  "$conc_tokens tokens each (per token: prompts included)"
printf '%-7s %-34s %6s %10s %9s %9s %9s %11s %11s\n' "layers" "config" "concur" "aggregate" \
  "TTFT p50" "ITL p50" "trips" "sent" "received"
printf '%-7s %-34s %6s %10s %9s %9s %9s %11s %11s\n' "" "" "" "tok/s" "ms" "ms" "per tok" \
  "bytes/tok" "bytes/tok"
printf '%s\n' "${conc_rows[@]}"
echo
echo "where the time goes, per generated token (ms; concur \"run\": single-stream decode)"
printf '%-7s %-34s %6s %9s %9s %9s %9s %9s %6s %8s %8s %8s\n' "layers" "config" "concur" \
  "wall" "wait" "coord" "nodes" "relay" "cores" "overlap" "accepted" "experts"
printf '%-7s %-34s %6s %9s %9s %9s %9s %9s %6s %8s %8s %8s\n' "" "" "" "" "experts" "CPU" "CPU" \
  "CPU" "busy" "" "drafts" "/token"
printf '%s\n' "${time_rows[@]}"
echo "wait: coordinator blocked on routed experts (network + relay + node compute); CPU: user +"
echo "system time of the coordinator, the 3 nodes together, the relay; cores busy: all of it /"
echo "wall ($(nproc) cores here); overlap: 1 - wait / experts outstanding (serve); experts/token:"
echo "experts the nodes read per generated token (RAM hits + misses; one per expert per request)"
if [ "${#llama_rows[@]}" -gt 0 ]; then
  echo
  echo "llama.cpp ($LLAMA_BENCH): llama-bench -p 0 -n $n_predict -r $llama_reps -t $threads," \
    "3 ggml-rpc-servers -t $rpc_threads (-ngl 99: layers split across them)"
  printf '%-7s %-22s %9s\n' "layers" "config" "tg tok/s"
  printf '%s\n' "${llama_rows[@]}"
  for layers in "${!LLAMA_SPLIT[@]}"; do
    echo "llama.cpp weights, $layers layers: ${LLAMA_SPLIT[$layers]:-n/a (no -v log)}"
  done
fi
if [ "${#spec_rows[@]}" -gt 0 ]; then
  echo
  echo "speculation: $spec_model, run --draft ngram --draft-max $draft_max," \
    "$spec_tokens greedy tokens, local"
  printf '%-6s %-9s %7s %9s %9s %9s %9s %9s\n' "prompt" "drafting" "tokens" "drafted" \
    "accepted" "accept" "mean acc" "tokens"
  printf '%-6s %-9s %7s %9s %9s %9s %9s %9s\n' "" "" "" "" "" "rate" "length" "/step"
  printf '%s\n' "${spec_rows[@]}"
  echo "mean acc length: accepted drafts per verify step; tokens/step: generated tokens per"
  echo "evaluation (verify and plain steps). fixed: --draft-fixed (every step drafts up to"
  echo "--draft-max); adaptive: the default, which stops drafting when it measures no gain."
fi
echo
echo "targets (T2 and T3 are set for 0.25 ms links):"
printf '%s\n' "${target_rows[@]}"
