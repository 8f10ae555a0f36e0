#!/usr/bin/env bash
# Prefix reuse across requests: the second turn of a chat whose first turn had
# a ~350-token prompt, through `serve` with 3 expert nodes on loopback (or
# locally), with the synthetic Qwen3-30B-A3B-shaped model. Reports the prompt
# tokens turn 2 took from the prefix cache (target: >= 90% of turn 1's
# prompt) and its time to first token against turn 1's (target: <= 15%),
# beside turn 2 on a serve without reuse (--kv-cache-size 0); then the same
# after a crash: serve with --kv-cache-dir killed with SIGKILL one second
# after turn 1 and restarted on the same directory before turn 2 (target:
# turn 2 still takes >= 90% of turn 1's prompt from the cache, with the
# tokens of a serve without reuse). Run from the repository root after a
# build.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/bench-prefix-reuse.sh [options]

  -r R               conversations per serve (default 5); medians and ranges
  -n N               tokens of turn 1's answer (default 32)
  --prompt-tokens P  turn 1's prompt size to aim for (default 350)
  --configs C        "nodes" (3 expert nodes, the default), "local" or both
  --no-kill          skip the kill -9 and restart rows
  --layers L         layers of the synthetic model (default $LAYERS or 4)
  --model M          benchmark this GGUF instead of the synthetic model
  --threads T        coordinator threads (default 0: physical cores)
  --node-threads T   compute threads per node (default 1)
  --build DIR        build folder (default build)
  --fresh            delete the nodes' stored experts first (forces a new ingest)
  -h, --help         this text

Every conversation has a system prompt of its own (so turn 1 finds nothing
cached), and the two serves (reuse on, reuse off) take turns. The synthetic
model's tokenizer has no ChatML tokens (spelled out, "<|im_start|>" is 9
tokens), so with it the chats are rendered by a ChatML-shaped template that
puts its one special token where Qwen3's <|im_start|> and <|im_end|> go:
turn 2's new tokens are then about as many as with Qwen3's tokenizer. "ttft" is the
time from sending a streamed /v1/chat/completions request to its first
content chunk; "cached" is usage.prompt_tokens_details.cached_tokens of the
final usage chunk. In the kill -9 rows each conversation has a serve of its
own (one directory for all of them, so the files of earlier ones are there
too), killed one second after turn 1's last chunk; turn 2's ttft is the
restarted serve's first request, and its 8 greedy tokens are compared with
those of the serve without reuse. Data and logs go to
BUILD/bench-prefix-reuse/.
EOF
}

cd "$(dirname "$0")/.."
source scripts/bench-common.sh

reps=5
n_predict=32
prompt_tokens=350
configs="nodes"
layers="${LAYERS:-4}"
model=""
threads=0
node_threads=1
build=build
fresh=0
kill_rows=1
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    -r) reps="${2:?}"; shift 2 ;;
    --prompt-tokens) prompt_tokens="${2:?}"; shift 2 ;;
    --configs) configs="${2:?}"; shift 2 ;;
    --no-kill) kill_rows=0; shift ;;
    *) bench_common_option "$@" || { usage >&2; exit 2; }; shift "$BENCH_SHIFT" ;;
  esac
done
command -v python3 >/dev/null || bench_die "python3 is needed to time the streams"

bench_init "$build"
[ -n "$model" ] || model="$build/models/bench-qwen3-30b-a3b-L$layers.gguf"
bench_model "$model" "$layers"
work="$build/bench-prefix-reuse"
[ "$fresh" -eq 1 ] && rm -rf "$work"
mkdir -p "$work"
trap bench_cleanup EXIT
template=()
if [ "$model" = "$build/models/bench-qwen3-30b-a3b-L$layers.gguf" ]; then
  cat >"$work/chatml-one-token.jinja" <<'EOF'
{%- for m in messages -%}<|endoftext|>{{ m.role }}
{{ m.content }}<|endoftext|>
{% endfor -%}
{%- if add_generation_prompt -%}<|endoftext|>assistant
{% endif -%}
EOF
  template=(--chat-template-file "$work/chatml-one-token.jinja")
fi

# converse HTTP TAG [MODE STATE REF_HTTP]: one two-turn conversation on serve
# HTTP; prints "prompt1 ttft1 prompt2 cached2 ttft2" (tokens, seconds). MODE
# turn1 does turn 1 only, keeps the conversation in the file STATE and prints
# "prompt1 ttft1"; turn2 continues STATE's with 8 tokens and prints "prompt2
# cached2 ttft2 same", same 1 when serve REF_HTTP gives the same tokens.
converse() {
  python3 - "$1" "$2" "$n_predict" "$prompt_tokens" "${3:-both}" "${4:-}" "${5:-}" <<'PY'
import json, sys, time, urllib.request

http, tag, n_predict, target = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
mode, state, ref_http = sys.argv[5], sys.argv[6], sys.argv[7]

def post(path, body, server=None):
    req = urllib.request.Request(f"http://{server or http}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=600)

def chat(messages, max_tokens, server=None):
    """Streams a greedy chat completion (on serve `server`, default http):
    (ttft seconds, text, usage)."""
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    start = time.monotonic()
    ttft, text, usage = None, "", None
    with post("/v1/chat/completions", body, server) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk.get("choices", []):
                piece = choice.get("delta", {}).get("content")
                if piece is not None and ttft is None and choice.get("delta", {}).get("role") is None:
                    ttft = time.monotonic() - start
                text += piece or ""
    return ttft, text, usage

follow_up = {"role": "user", "content": "And where do the bees go in winter?"}
if mode == "turn2":
    with open(state) as f:
        messages = json.load(f) + [follow_up]
    ttft2, text2, usage2 = chat(messages, 8)
    _, ref_text, _ = chat(messages, 8, ref_http)
    print(usage2["prompt_tokens"], usage2["prompt_tokens_details"]["cached_tokens"],
          f"{ttft2:.4f}", int(text2 == ref_text))
    sys.exit(0)

# A system prompt of about `target` tokens, its own for this conversation.
def count(text):
    with post("/tokenize", {"content": text}) as r:
        return len(json.loads(r.read())["tokens"])

words = ("the farm keeps sheep goats cows hens and bees it grows barley beans and apples "
         "and sells cheese and honey in the valley market every week").split()
system, i = f"Conversation {tag}.", 0
while count(system) < target - 30:  # the template and the question add the rest
    system += " " + " ".join(words[i % len(words):] + words[:i % len(words)])
    i += 7
messages = [{"role": "system", "content": system},
            {"role": "user", "content": "What should we plant after the barley this year?"}]
ttft1, answer, usage1 = chat(messages, n_predict)
messages += [{"role": "assistant", "content": answer}]
if mode == "turn1":
    with open(state, "w") as f:
        json.dump(messages, f)
    print(usage1["prompt_tokens"], f"{ttft1:.4f}")
    sys.exit(0)
messages += [follow_up]
ttft2, _, usage2 = chat(messages, 4)
print(usage1["prompt_tokens"], f"{ttft1:.4f}", usage2["prompt_tokens"],
      usage2["prompt_tokens_details"]["cached_tokens"], f"{ttft2:.4f}")
PY
}

# awk functions: median(a, n) and range(a, n) ("lo-hi") of a[1..n].
stats_awk='
  function median(a, n,   i, j, t) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) {
      t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  function range(a, n,   i, lo, hi) {
    lo = hi = a[1]; for (i = 2; i <= n; i++) { if (a[i] < lo) lo = a[i]; if (a[i] > hi) hi = a[i] }
    return sprintf("%.3f-%.3f", lo, hi)
  }'

# run_config NAME [SERVE FLAGS...]: a serve with reuse and one without, a
# warm-up conversation each, then reps conversations on each, interleaved.
run_config() {
  local name="$1" r on off
  shift
  bench_start_serve "$work/$name-reuse" -m "$model" --listen 127.0.0.1:0 \
    --http-listen 127.0.0.1:0 --threads "$threads" "${template[@]}" "$@"
  on="$SERVE_HTTP"
  bench_start_serve "$work/$name-noreuse" -m "$model" --listen 127.0.0.1:0 \
    --http-listen 127.0.0.1:0 --threads "$threads" --kv-cache-size 0 "${template[@]}" "$@"
  off="$SERVE_HTTP"
  converse "$on" "$name-warm-on" >/dev/null || bench_die "warm-up failed"
  converse "$off" "$name-warm-off" >/dev/null || bench_die "warm-up failed"
  : >"$work/$name.samples"
  for r in $(seq "$reps"); do
    echo "on $(converse "$on" "$name-$r-on")" >>"$work/$name.samples"
    echo "off $(converse "$off" "$name-$r-off")" >>"$work/$name.samples"
    tail -2 "$work/$name.samples" | sed "s/^/  $name $r: /" >&2
  done
  awk -v name="$name" -v target_cached=0.90 -v target_ttft=0.15 "$stats_awk"'
    $1 == "on" { n++; p1[n] = $2; t1[n] = $3 * 1000; p2[n] = $4; c[n] = $5 / $2;
                 t2[n] = $6 * 1000; q[n] = $6 / $3 }
    $1 == "off" { m++; o1[m] = $3 * 1000; o2[m] = $6 * 1000; oq[m] = $6 / $3 }
    END {
      printf "%s: turn 1 prompt %d tokens (median), turn 2 prompt %d; %d conversations per serve\n",
        name, median(p1, n), median(p2, n), n
      printf "  reuse on:  turn 1 ttft %.1f ms, turn 2 ttft %.1f ms, turn 2 / turn 1 %.3f (range %s; target <= %.2f)\n",
        median(t1, n), median(t2, n), median(q, n), range(q, n), target_ttft
      printf "             turn 2 cached / turn 1 prompt %.3f (range %s; target >= %.2f)\n",
        median(c, n), range(c, n), target_cached
      printf "  reuse off: turn 1 ttft %.1f ms, turn 2 ttft %.1f ms, turn 2 / turn 1 %.3f (range %s)\n",
        median(o1, m), median(o2, m), median(oq, m), range(oq, m)
    }' "$work/$name.samples"
  bench_stop "${BENCH_PIDS[-1]}" "${BENCH_PIDS[-2]}"
}

# kill_restart NAME [SERVE FLAGS...]: reps conversations, each on a serve
# with --kv-cache-dir killed with SIGKILL one second after turn 1 and
# restarted on the same directory for turn 2, against a serve without reuse.
kill_restart() {
  local name="$1" r dir off ref_pid t1 t2 pid keep p
  shift
  bench_start_serve "$work/$name-kill-ref" -m "$model" --listen 127.0.0.1:0 \
    --http-listen 127.0.0.1:0 --threads "$threads" --kv-cache-size 0 "${template[@]}" "$@"
  off="$SERVE_HTTP"
  ref_pid="$SERVE_PID"
  dir="$work/$name-kv-cache-dir"
  rm -rf "$dir"
  : >"$work/$name-kill.samples"
  local serve=(-m "$model" --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 --threads "$threads"
    --kv-cache-dir "$dir" "${template[@]}" "$@")
  for r in $(seq "$reps"); do
    bench_start_serve "$work/$name-kill-$r-a" "${serve[@]}"
    t1=$(converse "$SERVE_HTTP" "$name-kill-$r" turn1 "$work/$name-kill-$r.json") ||
      bench_die "turn 1 failed"
    sleep 1
    pid="$SERVE_PID"
    kill -KILL "$pid"
    wait "$pid" 2>/dev/null || true
    keep=()  # its pid is free again: not ours to signal at exit
    for p in "${BENCH_PIDS[@]}"; do [ "$p" = "$pid" ] || keep+=("$p"); done
    BENCH_PIDS=("${keep[@]}")
    bench_start_serve "$work/$name-kill-$r-b" "${serve[@]}"
    t2=$(converse "$SERVE_HTTP" "$name-kill-$r" turn2 "$work/$name-kill-$r.json" "$off") ||
      bench_die "turn 2 after the restart failed"
    echo "kill $t1 $t2" >>"$work/$name-kill.samples"
    tail -1 "$work/$name-kill.samples" | sed "s/^/  $name $r: /" >&2
    bench_stop "$SERVE_PID"
  done
  awk -v name="$name" -v target_cached=0.90 "$stats_awk"'
    { n++; p1[n] = $2; t1[n] = $3 * 1000; c[n] = $5 / $2; t2[n] = $6 * 1000; q[n] = $6 / $3
      same += $7 }
    END {
      printf "%s, kill -9 1 s after turn 1 and restart (--kv-cache-dir): %d conversations\n", name, n
      printf "  turn 2 cached / turn 1 prompt %.3f (range %s; target >= %.2f); same 8 tokens as without reuse: %d of %d\n",
        median(c, n), range(c, n), target_cached, same, n
      printf "  turn 1 ttft %.1f ms, turn 2 ttft after the restart %.1f ms, turn 2 / turn 1 %.3f (range %s)\n",
        median(t1, n), median(t2, n), median(q, n), range(q, n)
    }' "$work/$name-kill.samples"
  bench_stop "$ref_pid"
}

echo "model $model; turn 1 answer $n_predict tokens" >&2
if [[ " $configs " == *" local "* ]]; then
  run_config local
  if [ "$kill_rows" -eq 1 ]; then kill_restart local; fi
fi
if [[ " $configs " == *" nodes "* ]]; then
  [ "$fresh" -eq 1 ] && rm -rf "$work/nodes"
  mkdir -p "$work/nodes"
  bench_start_nodes "$work/nodes" 3 --threads "$node_threads"
  nodes=$(IFS=,; echo "${NODE_ADDRS[*]}")
  run_config nodes --nodes "$nodes"
  if [ "$kill_rows" -eq 1 ]; then kill_restart nodes --nodes "$nodes"; fi
  bench_stop_nodes
fi
