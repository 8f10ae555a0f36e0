# shellcheck shell=bash disable=SC2034
# (The variables set here are read by the scripts that source this file.)
#
# Shared by the scripts/bench-*.sh (sourced, not run): the binaries, the
# synthetic model, expert nodes, relays and `serve` on loopback, coordinator
# runs with their peak RSS, the one parser of the coordinator's stderr
# (bench_parse_run), serve's metrics, and the speculation prompts.
#
# Everything started here is recorded in BENCH_PIDS and stopped by bench_cleanup,
# which the scripts install as an EXIT trap.

BENCH_PIDS=()

bench_die() {
  echo "$(basename "$0"): $*" >&2
  exit 1
}

# bench_common_option ARGS...: parses one option both scripts take (-n,
# --layers, --model, --prompt, --threads, --node-threads, --delay-ms,
# --bandwidth, --build, --fresh) into the variable of that name, and sets
# BENCH_SHIFT to the arguments it used; returns 1 for any other option.
bench_common_option() {
  BENCH_SHIFT=2
  case "$1" in
    -n) n_predict="${2:?}" ;;
    --layers) layers="${2:?}" ;;
    --model) model="${2:?}" ;;
    --prompt) prompt="${2:?}" ;;
    --threads) threads="${2:?}" ;;
    --node-threads) node_threads="${2:?}" ;;
    --delay-ms) delay_ms="${2:?}" ;;
    --bandwidth) bandwidth="${2:?}" ;;
    --build) build="${2:?}" ;;
    --fresh) fresh=1; BENCH_SHIFT=1 ;;
    *) return 1 ;;
  esac
}

# bench_init BUILD_DIR: the binaries' paths; fails when a required one is missing.
bench_init() {
  local build="$1"
  COORD="$build/coordinator/colibri-coordinator"
  NODE="$build/expert_node/colibri-expert-node"
  MAKE_MODEL="$build/tools/colibri-make-model"
  RELAY="$build/tools/relay/colibri-relay"
  OPS_BENCH="$build/model/ops/colibri_ops_bench"
  local b
  for b in "$COORD" "$NODE" "$MAKE_MODEL"; do
    [ -x "$b" ] || bench_die "$b is missing; build it: cmake --build $build --target colibri-coordinator colibri-expert-node colibri-make-model colibri-relay"
  done
}

bench_need_relay() {
  [ -x "$RELAY" ] || bench_die "$RELAY is missing; build it: cmake --build <build> --target colibri-relay"
}

# bench_model PATH LAYERS [VOCAB]: the synthetic Qwen3-30B-A3B-shaped model
# (Q4_K; VOCAB pads the vocabulary, e.g. 151936 as Qwen3's), made if missing.
# It is written to PATH.tmp and renamed, so an interrupted run leaves no PATH.
bench_model() {
  local path="$1" layers="$2" vocab="${3:-}"
  if [ ! -f "$path" ]; then
    mkdir -p "$(dirname "$path")"
    echo "making $path ($layers layers${vocab:+, vocabulary $vocab})..." >&2
    "$MAKE_MODEL" --preset qwen3-30b-a3b --layers "$layers" --type q4_k \
      ${vocab:+--vocab-size "$vocab"} --out "$path.tmp" >&2 || bench_die "making $path failed"
    mv "$path.tmp" "$path"
  fi
}

# "130.08 MiB" -> bytes (approximate: inspect rounds to 2 decimals).
bench_to_bytes() {
  awk -v v="$1" -v u="$2" 'BEGIN {
    m = 1; if (u == "KiB") m = 1024; else if (u == "MiB") m = 1048576;
    else if (u == "GiB") m = 1073741824; else if (u == "TiB") m = 1099511627776;
    printf "%.0f\n", v * m }'
}

# bench_model_info MODEL: MODEL_LAYERS, MODEL_EMBD (hidden width),
# MODEL_MOE_LAYERS (layers with routed experts), MODEL_EXPERTS (routed
# experts per layer), MODEL_TOP_K (routed per token), MODEL_ACTIVE_BYTES (per token, from inspect),
# MODEL_ROUTED_BYTES (exact, summed from plan --assume-equal).
bench_model_info() {
  local model="$1" inspect line
  inspect=$("$COORD" inspect -m "$model")
  MODEL_LAYERS=$(sed -n 's/^  layers \([0-9]*\),.*/\1/p' <<<"$inspect")
  MODEL_EMBD=$(sed -n 's/^  layers [0-9]*, hidden \([0-9]*\),.*/\1/p' <<<"$inspect")
  local experts routed
  experts=$(sed -n 's/^  experts \([0-9]*\),.*/\1/p' <<<"$inspect")
  routed=$(sed -n 's/^routed experts: \([0-9]*\),.*/\1/p' <<<"$inspect")
  MODEL_MOE_LAYERS=$(bench_div "${routed:-}" "${experts:-}" "%.0f")
  MODEL_EXPERTS="${experts:-}"
  MODEL_TOP_K=$(sed -n 's/^  experts [0-9]*, top-\([0-9]*\).*/\1/p' <<<"$inspect")
  line=$(grep '^active weight bytes per token:' <<<"$inspect")
  MODEL_ACTIVE_TEXT=$(awk '{print $6, $7}' <<<"$line")
  local value unit
  read -r value unit <<<"$MODEL_ACTIVE_TEXT"
  MODEL_ACTIVE_BYTES=$(bench_to_bytes "$value" "$unit")
  MODEL_ROUTED_BYTES=$("$COORD" plan -m "$model" --nodes a:1,b:1,c:1 --assume-equal --summary |
    sed -n 's/.*(\([0-9]*\) bytes)$/\1/p' | awk '{s += $1} END {printf "%.0f\n", s}')
}

# bench_memory_probe [THREADS]: one colibri_ops_bench read-bandwidth probe over
# 1 GiB ($COLIBRI_BENCH_PROBE_MIB MiB when set: the scripts' own tests, which
# check the output and not the figure, take 64), in GB/s (empty when the
# bench is not built or prints none).
bench_memory_probe() {
  local threads_flag=()
  [ -n "${1:-}" ] && threads_flag=(--threads="$1")
  [ -x "$OPS_BENCH" ] || return 0
  "$OPS_BENCH" "${threads_flag[@]}" --memory_mib="${COLIBRI_BENCH_PROBE_MIB:-1024}" --types= |
    sed -n 's/^memory: read \([0-9.]*\) GB\/s.*/\1/p'
}

# bench_memory_bandwidth [THREADS]: MEM_READ_GBS, the parallel read bandwidth
# that colibri_ops_bench measures over 1 GiB with THREADS threads (default:
# the bench's own, the physical cores), the best of three probes, since one
# probe now and then catches a neighbour's burst ($MEM_BW_GBS overrides; "n/a"
# when the bench is not built).
bench_memory_bandwidth() {
  local probe best=0 i
  if [ -n "${MEM_BW_GBS:-}" ]; then
    MEM_READ_GBS="$MEM_BW_GBS"
  elif [ -x "$OPS_BENCH" ]; then
    for i in 1 2 3; do
      probe=$(bench_memory_probe "${1:-}")
      best=$(awk -v a="$best" -v b="${probe:-0}" 'BEGIN { print (b + 0 > a + 0) ? b : a }')
    done
    MEM_READ_GBS="$best"
    if [ "$best" = 0 ]; then MEM_READ_GBS="n/a"; fi
  else
    MEM_READ_GBS="n/a"
  fi
}

# bench_wait_listening FILE PID: the addresses of the "listening on HOST:PORT"
# lines in FILE (one per line), waiting at most 120 s for them (a
# 16-layer model loads slowly on a loaded machine).
bench_wait_listening() {
  local file="$1" pid="$2" want="${3:-1}" i
  for i in $(seq 1200); do
    if [ "$(grep -c '^listening on ' "$file" 2>/dev/null)" -ge "$want" ]; then
      awk '/^listening on /{print $3}' "$file"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  return 1
}

# bench_start_nodes DIR COUNT [NODE FLAGS...]: COUNT expert nodes with data in
# DIR/nodeI and logs in DIR/nodeI.{out,err}; sets NODE_PIDS, NODE_ADDRS, NODE_IDS.
bench_start_nodes() {
  local dir="$1" count="$2" i addr
  shift 2
  NODE_PIDS=()
  NODE_ADDRS=()
  NODE_IDS=()
  for i in $(seq "$count"); do
    : >"$dir/node$i.out"  # not a previous run's "listening on" (see bench_run)
    "$NODE" --listen 127.0.0.1:0 --data-dir "$dir/node$i" --node-id "bench$i" "$@" \
      >"$dir/node$i.out" 2>"$dir/node$i.err" &
    NODE_PIDS+=($!)
    BENCH_PIDS+=($!)
    NODE_IDS+=("bench$i")
  done
  for i in $(seq "$count"); do
    addr=$(bench_wait_listening "$dir/node$i.out" "${NODE_PIDS[$((i - 1))]}") ||
      bench_die "node $i did not start: $(tail -3 "$dir/node$i.err")"
    NODE_ADDRS+=("$addr")
  done
}

# bench_vmhwm PID: peak resident set of a running process, in KiB (0 if gone).
bench_vmhwm() {
  awk '/^VmHWM:/ {print $2; found = 1} END {if (!found) print 0}' "/proc/$1/status" 2>/dev/null ||
    echo 0
}

# bench_stop PID...: SIGTERM, then wait.
bench_stop() {
  local pid
  for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "$@"; do wait "$pid" 2>/dev/null || true; done
}

# bench_stop_nodes: NODE_HWM_KB (read before stopping), then stops the nodes.
bench_stop_nodes() {
  local pid
  NODE_HWM_KB=()
  for pid in "${NODE_PIDS[@]}"; do NODE_HWM_KB+=("$(bench_vmhwm "$pid")"); done
  bench_stop "${NODE_PIDS[@]}"
}

# bench_start_relay DIR DELAY_MS BANDWIDTH TARGET...: one colibri-relay with a
# route per target; sets RELAY_PID and RELAY_ADDRS (in the order of the targets).
bench_start_relay() {
  local dir="$1" delay="$2" bandwidth="$3" target addrs
  shift 3
  local args=(--delay-ms "$delay")
  [ -n "$bandwidth" ] && args+=(--bandwidth "$bandwidth")
  for target in "$@"; do args+=(--route "127.0.0.1:0=$target"); done
  : >"$dir/relay.out"  # not a previous run's "listening on" (see bench_run)
  "$RELAY" "${args[@]}" >"$dir/relay.out" 2>"$dir/relay.err" &
  RELAY_PID=$!
  BENCH_PIDS+=($!)
  addrs=$(bench_wait_listening "$dir/relay.out" "$RELAY_PID" "$#") ||
    bench_die "the relay did not start: $(cat "$dir/relay.err")"
  mapfile -t RELAY_ADDRS <<<"$addrs"
}

# bench_run PREFIX ARGS...: colibri-coordinator ARGS with stdout in PREFIX.out
# and stderr in PREFIX.err; RUN_HWM_KB is its peak RSS, polled from /proc
# while it runs (VmHWM only grows, so the last reading is the peak to within
# the 20 ms poll), RUN_CPU_S its CPU time (user + system, from this
# shell's reaped-children times; the poll forks nothing, so nothing else adds
# to them) and RUN_DECODE_CPU_S the part of it after its first byte of output
# (`run` streams the generated text, so: after the prompt and first token, to
# within the poll; "" when it printed nothing). Dies when the run fails.
bench_run() {
  local prefix="$1" pid key value rest v rc=0 running cpu0 first="" line f
  shift
  bench_children_ticks
  cpu0=$BENCH_CHILDREN_TICKS
  # Emptied here, not only by the child's redirection: the poll below can run
  # before the child has truncated the file, and would take a previous run's
  # text for this one's first output (counting the load as decode).
  : >"$prefix.out"
  "$COORD" "$@" >"$prefix.out" 2>"$prefix.err" &
  pid=$!
  RUN_HWM_KB=0
  while true; do
    running=0
    v=0
    while read -r key value rest; do
      case "$key" in
        State:) [ "$value" = Z ] || running=1 ;;
        VmHWM:) v=$value ;;
      esac
    done 2>/dev/null <"/proc/$pid/status" || true
    [ "$running" = 1 ] || break
    [ "${v:-0}" -gt "$RUN_HWM_KB" ] && RUN_HWM_KB=$v
    if [ -z "$first" ] && [ -s "$prefix.out" ] && read -r line 2>/dev/null <"/proc/$pid/stat"; then
      read -r -a f <<<"${line##*) }"
      first=$((f[11] + f[12]))  # utime + stime so far
    fi
    bench_nap
  done
  wait "$pid" || rc=$?
  bench_children_ticks
  RUN_CPU_S=$(bench_ticks_to_s "$((BENCH_CHILDREN_TICKS - cpu0))")
  RUN_DECODE_CPU_S=""
  [ -z "$first" ] || RUN_DECODE_CPU_S=$(bench_ticks_to_s "$((BENCH_CHILDREN_TICKS - cpu0 - first))")
  [ "$rc" -eq 0 ] || bench_die "colibri-coordinator $* failed ($rc): $(tail -5 "$prefix.err")"
}

# bench_nap: waits 20 ms without forking (a `sleep` process per poll costs
# milliseconds of CPU, which would count as the run's): a read that times out
# on a FIFO nobody writes.
BENCH_NAP_FD=""
bench_nap() {
  if [ -z "$BENCH_NAP_FD" ]; then
    local fifo
    fifo=$(mktemp -u "${TMPDIR:-/tmp}/bench-nap.XXXXXX")
    mkfifo "$fifo"
    exec {BENCH_NAP_FD}<>"$fifo"
    rm -f "$fifo"
  fi
  read -r -t 0.02 -u "$BENCH_NAP_FD" _ || true
}

BENCH_CLK_TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)

# bench_cpu_ticks PID...: user + system CPU time of the running processes, in
# clock ticks (a process that is gone counts 0).
bench_cpu_ticks() {
  local pid line total=0 f
  for pid in "$@"; do
    line=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
    line=${line##*) }  # after the command name, which may hold spaces
    read -r -a f <<<"$line"
    total=$((total + f[11] + f[12]))  # utime, stime: fields 14 and 15 of stat
  done
  echo "$total"
}

# bench_wait_idle PID...: until the processes' CPU time grows by at most one
# tick in 0.5 s (at most 300 s), so that a background task (an expert node's
# RAM warm-up after a start or an ingest) does not land in a measurement.
bench_wait_idle() {
  local before after i
  for i in $(seq 600); do
    before=$(bench_cpu_ticks "$@")
    sleep 0.5
    after=$(bench_cpu_ticks "$@")
    [ $((after - before)) -le 1 ] && return 0
  done
  echo "bench: the processes $* were still busy after 300 s; measuring anyway" >&2
}

# bench_children_ticks: sets BENCH_CHILDREN_TICKS to the user + system CPU
# time of this shell's reaped children, in clock ticks (not a $(...): that
# would read its own subshell's).
bench_children_ticks() {
  local line f
  read -r line <"/proc/$BASHPID/stat"
  line=${line##*) }
  read -r -a f <<<"$line"
  BENCH_CHILDREN_TICKS=$((f[13] + f[14]))  # cutime, cstime: fields 16 and 17 of stat
}

# bench_ticks_to_s TICKS -> seconds
bench_ticks_to_s() { awk -v t="$1" -v h="$BENCH_CLK_TCK" 'BEGIN { printf "%.3f\n", t / h }'; }

# bench_parse_run FILE: the one parser of what `colibri-coordinator run` prints
# on stderr. Fills the associative array STATS:
#   layers          model layers ("colibri: ..., N layers, ...")
#   gen_tokens gen_seconds gen_tps   ("generation: N tokens in S s (R tokens/s)")
#   nodes requests bytes_sent bytes_received wait_s   (sums over "node ...:" lines)
#   decode_layers decode_round_trips decode_failovers decode_fallback_routes
#                                                      ("experts decode: ...")
#   tier_ram_hits tier_ram_misses tier_disk_bytes_read tier_disk_wait_us
#   tier_prefetch_issued tier_prefetch_used tier_prefetch_wasted tier_prefetch_dropped
#   tier_prefetch_stale
#                     (decode only, sums over the "node-tier ... decode:" lines)
#   predict_recall predict_precision   (decode, "prediction L+1: ... decode: ...")
#   overlap_outstanding_s overlap_wait_s   (the whole run, "expert overlap: ...")
# Keys are absent when their line is (a local run has no node lines).
declare -A STATS
bench_parse_run() {
  STATS=()
  local key value
  while IFS='=' read -r key value; do
    [ -n "$key" ] && STATS[$key]=$value
  done < <(awk '
    /^colibri: / && match($0, /, [0-9]+ layers,/) {
      s = substr($0, RSTART + 2, RLENGTH - 2); split(s, a, " "); print "layers=" a[1]
    }
    /^generation: / {
      gsub(/\(/, "", $7); print "gen_tokens=" $2; print "gen_seconds=" $5; print "gen_tps=" $7
    }
    /^node .*requests=/ {
      nodes++
      for (i = 3; i <= NF; i++) { split($i, kv, "="); sum[kv[1]] += kv[2] }
    }
    /^experts decode: / {
      for (i = 3; i <= NF; i++) { split($i, kv, "="); print "decode_" kv[1] "=" kv[2] }
    }
    /^expert overlap: / {
      for (i = 3; i <= NF; i++) { split($i, kv, "="); print "overlap_" kv[1] "=" kv[2] }
    }
    /^wire decode: / {
      for (i = 3; i <= NF; i++) { split($i, kv, "="); print "wire_" kv[1] "=" kv[2] }
    }
    /^node-tier .* decode: / {
      for (i = 4; i <= NF; i++) { split($i, kv, "="); tier[kv[1]] += kv[2]; tiers++ }
    }
    /^prediction L\+1: / && match($0, /decode: recall=[0-9.]+ precision=[0-9.]+/) {
      s = substr($0, RSTART, RLENGTH); split(s, a, /[= ]/)
      print "predict_recall=" a[3]; print "predict_precision=" a[5]
    }
    END {
      if (tiers > 0) for (k in tier) printf "tier_%s=%.0f\n", k, tier[k]
      if (nodes > 0) {
        print "nodes=" nodes
        printf "requests=%d\nbytes_sent=%.0f\nbytes_received=%.0f\nwait_s=%.6f\n", \
          sum["requests"], sum["bytes_sent"], sum["bytes_received"], sum["wait_s"]
      }
    }' "$1")
}

# bench_decode_stats FULL_ERR [BASE_ERR]: decode-only numbers of a run into
# the associative array DECODE: tps, steps (decode evaluations), round_trips,
# sent, received (bytes per step), wait_ms (per step, summed over nodes) and
# failovers, wire_bpt and wire_floor (the coordinator's own "wire decode:"
# bytes per generated token both ways and their ratio to the hidden-state
# floor; "-" from builds without it). With BASE_ERR, a prompt-only run of the same prompt, whose node
# counters are subtracted (the node lines count the prompt too); without it
# the network numbers are "-".
declare -A DECODE
bench_decode_stats() {
  local full="$1" base="${2:-}"
  bench_parse_run "$full"
  DECODE=([tps]="${STATS[gen_tps]:-n/a}" [round_trips]="-" [sent]="-" [received]="-"
    [wait_ms]="-" [failovers]="${STATS[decode_failovers]:-0}")
  DECODE[steps]=$(bench_div "${STATS[decode_layers]:-}" "${STATS[layers]:-}" "%.0f")
  DECODE[wire_bpt]="${STATS[wire_bytes_per_token]:--}"
  DECODE[wire_floor]="${STATS[wire_bytes_over_floor]:--}"
  [ -n "$base" ] || return 0
  DECODE[round_trips]=$(bench_div "${STATS[decode_round_trips]:-}" "${DECODE[steps]}")
  local sent="${STATS[bytes_sent]}" received="${STATS[bytes_received]}" wait="${STATS[wait_s]}"
  bench_parse_run "$base"
  DECODE[sent]=$(bench_div "$((sent - STATS[bytes_sent]))" "${DECODE[steps]}" "%.0f")
  DECODE[received]=$(bench_div "$((received - STATS[bytes_received]))" "${DECODE[steps]}" "%.0f")
  DECODE[wait_ms]=$(bench_div "$(awk -v f="$wait" -v b="${STATS[wait_s]}" \
    'BEGIN { print (f - b) * 1000 }')" "${DECODE[steps]}" "%.3f")
}

# bench_cleanup: stops everything bench_start_* started (the EXIT trap).
bench_cleanup() {
  local pid
  for pid in "${BENCH_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${BENCH_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}

# bench_mib KIB -> "123.4 MiB"
bench_mib() { awk -v k="$1" 'BEGIN { printf "%.1f MiB", k / 1024 }'; }

# bench_figure V: V with three significant digits in fixed notation, never an
# exponent (1158 -> "1158", 12.34 -> "12.3", 0.01234 -> "0.0123"): what the
# tables and summaries print, so that their pattern holds on any machine.
BENCH_FIGURE_AWK='function figure(v,   a, e, p, d) {
  a = (v < 0) ? -v : v
  if (a == 0) return "0"
  e = log(a) / log(10)
  p = int(e)
  if (p > e) p--
  d = 2 - p
  if (d < 0) d = 0
  return sprintf("%." d "f", v) }'
bench_figure() { awk -v v="$1" "$BENCH_FIGURE_AWK"' BEGIN { print figure(v) }'; }

# bench_median_range "V V V": "median (min-max)" of the values, each as
# bench_figure prints it.
bench_median_range() {
  tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g |
    awk "$BENCH_FIGURE_AWK"'{ v[NR] = $1 } END {
      m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf "%s (%s-%s)\n", figure(m), figure(v[1]), figure(v[NR]) }'
}

# bench_div A B [FORMAT]: A / B, or "n/a" when either is missing or B is 0.
bench_div() {
  awk -v a="$1" -v b="$2" -v f="${3:-%.2f}" 'BEGIN {
    if (a == "" || b == "" || a == "n/a" || b == "n/a" || b + 0 == 0) print "n/a";
    else printf f "\n", a / b }'
}

# bench_start_serve PREFIX ARGS...: `colibri-coordinator serve ARGS` with
# stdout in PREFIX.out and stderr in PREFIX.err, waiting until it listens; sets
# SERVE_PID, SERVE_ADDR (gRPC) and SERVE_HTTP (the --http-listen address, or
# empty when ARGS have none).
bench_start_serve() {
  local prefix="$1" arg http=0 i
  shift
  for arg in "$@"; do [ "$arg" = --http-listen ] && http=1; done
  : >"$prefix.out"  # not a previous run's "listening on" (see bench_run)
  "$COORD" serve "$@" >"$prefix.out" 2>"$prefix.err" &
  SERVE_PID=$!
  BENCH_PIDS+=($!)
  SERVE_ADDR=$(bench_wait_listening "$prefix.out" "$SERVE_PID") ||
    bench_die "serve did not start: $(tail -3 "$prefix.err")"
  SERVE_HTTP=""
  [ "$http" = 1 ] || return 0
  for i in $(seq 1200); do  # printed after the gRPC line
    SERVE_HTTP=$(awk '/^http listening on /{print $4; exit}' "$prefix.out")
    [ -n "$SERVE_HTTP" ] && return 0
    sleep 0.1
  done
  bench_die "serve printed no http address: $(tail -3 "$prefix.err")"
}

# bench_serve_metrics HOST:PORT: the text of serve's GET /metrics (no token:
# loopback), without CRs. Uses bash's /dev/tcp, so it needs no HTTP client.
bench_serve_metrics() {
  local host="${1%:*}" port="${1##*:}" body
  body=$(
    exec 3<>"/dev/tcp/$host/$port" || exit 1
    printf 'GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n' "$1" >&3
    cat <&3
  ) || bench_die "GET http://$1/metrics failed"
  printf '%s\n' "${body//$'\r'/}"
}

# bench_serve_metric NAME HOST:PORT: the sum of NAME's samples (every label
# set) in serve's /metrics, as an integer.
bench_serve_metric() {
  bench_serve_metrics "$2" | awk -v n="$1" '$1 == n || index($1, n "{") == 1 { s += $2 }
    END { printf "%.0f\n", s }'
}

# bench_serve_counters HOST:PORT: serve's /metrics summed over the nodes, as
# "round_trips sent_bytes received_bytes generated_tokens expert_wait_s
# expert_outstanding_s drafts_accepted drafts_rejected" (0 for a family that
# is absent, e.g. without nodes or drafts).
bench_serve_counters() {
  local metrics
  metrics=$(bench_serve_metrics "$1") || exit 1
  awk '
    $1 ~ /^colibri_node_round_trips_total/ { t += $2 }
    $1 ~ /^colibri_node_sent_bytes_total/ { s += $2 }
    $1 ~ /^colibri_node_received_bytes_total/ { r += $2 }
    $1 == "colibri_generated_tokens_total" { g += $2 }
    $1 == "colibri_expert_wait_seconds_total" { w = $2 }
    $1 == "colibri_expert_outstanding_seconds_total" { o = $2 }
    $1 == "colibri_draft_tokens_total{outcome=\"accepted\"}" { a = $2 }
    $1 == "colibri_draft_tokens_total{outcome=\"rejected\"}" { j = $2 }
    END { printf "%.0f %.0f %.0f %.0f %.6f %.6f %.0f %.0f\n", t, s, r, g, w, o, a, j }' <<<"$metrics"
}

# bench_conc_prompts: BENCH_CONC_PROMPTS, 16 short prompts on different
# subjects for concurrent generations (one each, in rotation), so that their
# expert unions do not coincide as one shared prompt would make them.
bench_conc_prompts() {
  BENCH_CONC_PROMPTS=(
    "The small birds of the valley"
    "Write a function that sorts a list of names"
    "Quote the first line of the old song"
    "Why does the river freeze in winter"
    "Tell the story of a lighthouse keeper"
    "List five uses of a wooden ladder"
    "Translate the greeting into French"
    "Explain how a steam engine works"
    "Describe the market on a Saturday"
    "Compose a poem about the first snow"
    "Summarize the history of the city walls"
    "How many days are there in a leap year"
    "Fix the bug in this loop over the array"
    "Dear committee, I am writing to ask"
    "Once upon a time a fox found a key"
    "Given the table of prices, compute the total"
  )
}

# bench_spec_prompts: BENCH_SPEC_NAMES (code quote free) and
# BENCH_SPEC_PROMPTS, the three prompts speculation is measured on: a
# code-editing prompt, a quoting prompt and free text.
bench_spec_prompts() {
  BENCH_SPEC_NAMES=(code quote free)
  BENCH_SPEC_PROMPTS=('Rename the variable count to total in this function:

int Sum(const std::vector<int>& values) {
  int count = 0;
  for (int v : values) count += v;
  return count;
}

Here is the function with count renamed to total:

int Sum('
    'And God said, Let there be light: and there was light. And God saw the light, that it was good: and God divided the light from the darkness. And God called the light Day, and the darkness he called Night. And the evening and the morning were the first day.

Quote the verse above exactly: And God said,'
    'Tell the story of a shepherd who crossed the river at night')
}

# bench_spec_field FILE FIELD: a figure of run's "speculation (...): ..."
# line: drafted, accepted, verify (steps) or mean (accepted length); empty
# when the run did not speculate. ("mean accepted length" is not a count.)
bench_spec_field() {
  awk -v f="$2" '/^speculation / {
    for (i = 1; i <= NF; i++) {
      if (f == "drafted" && $(i + 1) == "drafted,") print $i
      if (f == "accepted" && $(i + 1) == "accepted" && $i ~ /^[0-9]+$/) print $i
      if (f == "verify" && $(i + 1) == "verify") print $i
      if (f == "mean" && $i == "length") print $(i + 1)
    } }' "$1"
}
