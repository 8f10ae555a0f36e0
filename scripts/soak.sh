#!/usr/bin/env bash
# Soak test (not a CI test): a 3-node cluster and a coordinator on loopback,
# driven by 32 concurrent clients for N minutes. Each client loops: a Generate
# of 16 tokens (a random prompt of the fixture's english case, sampled with a
# random seed) through colibri-client. Alongside, scripts/soak-http-hostile.py
# attacks the coordinator's HTTP API: 10 connections trickling their request
# header, bodies of 200,000 keys, of 200,000 and 5,000 chat messages and a
# 7 MiB prompt, while it checks /health every second. At the end it prints
# the requests and errors by status code, the p50/p99/max latency, what the
# hostile client saw, and the RSS of the coordinator and of each node at the
# start and at the end of the load.
#
#   scripts/soak.sh [--minutes N] [--clients C] [--model M.gguf] [--sessions S]
#
#   --minutes N   duration of the load (default 2)
#   --clients C   concurrent clients (default 32)
#   --model M     GGUF model (default: the fixtures' qwen3moe-tiny-f32)
#   --sessions S  the coordinator's concurrent generations (default 4)
#
# Uses the binaries in COLIBRI_BUILD_DIR (default build; build colibri-coordinator,
# colibri-expert-node and colibri-client first). Everything it starts is
# stopped at exit; its state and logs are in a temporary folder it prints.
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=2
clients=32
sessions=4
model="$(realpath -m "${COLIBRI_FIXTURES_DIR:-../shared/fixtures}")/models/qwen3moe-tiny-f32.gguf"
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes="$2"; shift 2 ;;
    --clients) clients="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --sessions) sessions="$2"; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "soak: unknown argument $1" >&2; exit 2 ;;
  esac
done
build="${COLIBRI_BUILD_DIR:-build}"
coordinator="$build/coordinator/colibri-coordinator"
node="$build/expert_node/colibri-expert-node"
client="$build/client/colibri-client"
for b in "$coordinator" "$node" "$client"; do
  [ -x "$b" ] || { echo "soak: $b not built" >&2; exit 1; }
done
[ -f "$model" ] || { echo "soak: model $model not found" >&2; exit 1; }

dir="$(mktemp -d "${TMPDIR:-/tmp}/colibri-soak.XXXXXX")"
echo "soak: state and logs in $dir"
# Servers are started inside $(...) subshells: their pids are in $dir/*.pid.
cleanup() {
  local f
  for f in "$dir"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
}
trap cleanup EXIT

# Starts "$@" with stdout to $1.out, waits for its "listening on" line and
# prints the address.
start_server() {
  local name="$1"
  shift
  "$@" >"$dir/$name.out" 2>"$dir/$name.log" &
  echo $! >"$dir/$name.pid"
  for _ in $(seq 200); do
    if grep -q '^listening on ' "$dir/$name.out"; then
      sed -n 's/^listening on \([^ ]*\).*/\1/p' "$dir/$name.out" | head -n 1
      return 0
    fi
    sleep 0.1
  done
  echo "soak: $name did not start; see $dir/$name.log" >&2
  exit 1
}

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$(cat "$dir/$1.pid")/status"; }
rss_line() {
  local line="$1:"
  for name in coordinator node0 node1 node2; do
    line+=" $name $(( $(rss_kb "$name") / 1024 )) MiB"
  done
  echo "$line"
}

addresses=""
for i in 0 1 2; do
  mkdir -p "$dir/node$i"
  a=$(start_server "node$i" "$node" --listen 127.0.0.1:0 --data-dir "$dir/node$i" \
        --node-id "soak-$i" --threads 1)
  addresses+="${addresses:+,}$a"
done
coord=$(start_server coordinator "$coordinator" serve --model "$model" --listen 127.0.0.1:0 \
          --http-listen 127.0.0.1:0 --threads 2 --sessions "$sessions" --nodes "$addresses")
http=""
for _ in $(seq 100); do
  http=$(sed -n 's/^http listening on \([^ ]*\).*/\1/p' "$dir/coordinator.out" | head -n 1)
  [ -n "$http" ] && break
  sleep 0.1
done
[ -n "$http" ] || { echo "soak: no HTTP listener; see $dir/coordinator.log" >&2; exit 1; }
echo "soak: nodes $addresses, coordinator $coord (HTTP $http), $clients clients for $minutes min"

prompt_ids="$(python3 -c "
import json,sys
print(','.join(map(str, json.load(open(sys.argv[1]))['prompt_tokens'])))
" "$(dirname "$model")/../golden/$(basename "$model" .gguf).english.json" 2>/dev/null || echo 1,2,3,4)"

# Warm-up request (also checks that the cluster answers).
"$client" --coordinator "$coord" generate --prompt-tokens "$prompt_ids" -n 4 --temp 0 \
  --print-token-ids >/dev/null
rss_start="$(rss_line start)"

end=$(( $(date +%s) + minutes * 60 ))
worker() {
  local id="$1" seed=$(( $1 * 100003 ))
  while [ "$(date +%s)" -lt "$end" ]; do
    seed=$(( seed + 1 ))
    local t0 t1 code
    t0=$(date +%s%N)
    if "$client" --coordinator "$coord" generate --prompt-tokens "$prompt_ids" -n 16 \
         --temp 0.8 --seed "$seed" --print-token-ids >/dev/null 2>"$dir/client$id.err"; then
      code=OK
    else
      code=$(sed -n 's/^colibri-client: \([A-Z_]*\):.*/\1/p' "$dir/client$id.err" | head -n 1)
      code="${code:-FAILED}"
      cat "$dir/client$id.err" >>"$dir/errors.log"
    fi
    t1=$(date +%s%N)
    echo "$code $(( (t1 - t0) / 1000000 ))" >>"$dir/results.$id"
  done
}
workers=()
for c in $(seq "$clients"); do
  worker "$c" &
  workers+=($!)
done
hostile_status=0
python3 scripts/soak-http-hostile.py "$http" $(( minutes * 60 )) >"$dir/hostile.out" 2>&1 &
hostile=$!
wait "${workers[@]}"
wait "$hostile" || hostile_status=$?
rss_end="$(rss_line end)"

cat "$dir"/results.* >"$dir/results"
total=$(wc -l <"$dir/results")
echo "soak: $total requests in $minutes min ($clients clients, $sessions sessions)"
echo "requests by status code:"
awk '{n[$1]++} END {for (c in n) printf "  %-20s %d\n", c, n[c]}' "$dir/results" | sort
sort -n -k2 "$dir/results" | awk '{v[NR] = $2} END {
  if (NR == 0) exit
  p50 = v[int((NR - 1) * 0.50) + 1]; p99 = v[int((NR - 1) * 0.99) + 1]
  printf "latency (ms, 16 tokens, client process included): p50 %d, p99 %d, max %d\n", p50, p99, v[NR]
}'
echo "hostile HTTP clients (exit $hostile_status):"
cat "$dir/hostile.out"
echo "RSS $rss_start"
echo "RSS $rss_end"
