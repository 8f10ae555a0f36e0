#!/usr/bin/env bash
# Several hosts without Kubernetes: two expert nodes and a coordinator, each in
# its own Linux network namespace joined by veth pairs (10.77.N.0/24), with
# names resolved per namespace from /etc/netns/NS/hosts. Exercises, across
# real network stacks:
#   - deploy/make-certs.sh certificates: TLS to the coordinator and mutual TLS
#     between coordinator and nodes, with host names and IP SANs;
#   - discovery by DNS name (--nodes-dns nodes.lab:7070, two addresses) and
#     by a static list of names;
#   - --advertise: the nodes say node1.lab:7070 while they are dialled by IP,
#     and colibri-client status shows it;
#   - --config files for all three binaries, the token from a file;
#   - the loopback-only rule: a node on 127.0.0.1 cannot be reached from the
#     coordinator's namespace, and a node on 0.0.0.0 without a token refuses;
#   - nodes importing their experts from their own GGUF copy (node-gguf) and
#     tokens equal to a local run;
#   - deploy/firewall/colibri.nft (when nft is installed): the cluster works
#     behind it, and a node's port is closed to anyone but the coordinator.
# Everything it creates (namespaces, veths, /etc/netns/*) is removed on exit,
# also on failure. Usage: multihost_netns_test.sh SOURCE_DIR BUILD_DIR
# FIXTURES_DIR. Exit 77: skipped (not root, no iproute2, no namespaces, no
# fixtures).
set -uo pipefail
src="$1"
build="$2"
fixtures="${COLIBRI_FIXTURES_DIR:-$3}"
model="$fixtures/models/qwen3moe-tiny-f32.gguf"

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root to create network namespaces"
command -v ip > /dev/null || skip "ip (iproute2) not found"
command -v openssl > /dev/null || skip "openssl not found"
[ -f "$model" ] || skip "fixture $model not found"

node_bin="$build/expert_node/colibri-expert-node"
coord_bin="$build/coordinator/colibri-coordinator"
client_bin="$build/client/colibri-client"

# Unique names: other test runs may share the machine.
id="c$$"
ns_coord="$id-coord"
ns_n1="$id-n1"
ns_n2="$id-n2"
tmp="$(mktemp -d)"
pids=()
status=0

cleanup() {
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2> /dev/null; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
  done
  for ns in "$ns_coord" "$ns_n1" "$ns_n2"; do
    ip netns del "$ns" 2> /dev/null
    rm -rf "/etc/netns/$ns"
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; status=1; }

in_ns() { local ns="$1"; shift; ip netns exec "$ns" "$@"; }

ip netns add "$ns_coord" 2> /dev/null || skip "cannot create network namespaces"
ip netns add "$ns_n1" && ip netns add "$ns_n2" || { fail "netns add"; exit 1; }
for ns in "$ns_coord" "$ns_n1" "$ns_n2"; do in_ns "$ns" ip link set lo up; done
# coord <-> n1 on 10.77.1.0/24, coord <-> n2 on 10.77.2.0/24.
for n in 1 2; do
  ns_var="ns_n$n"
  ip link add "$id-c$n" type veth peer name "$id-n$n" || { fail "veth"; exit 1; }
  ip link set "$id-c$n" netns "$ns_coord"
  ip link set "$id-n$n" netns "${!ns_var}"
  in_ns "$ns_coord" ip addr add "10.77.$n.1/24" dev "$id-c$n"
  in_ns "$ns_coord" ip link set "$id-c$n" up
  in_ns "${!ns_var}" ip addr add "10.77.$n.2/24" dev "$id-n$n"
  in_ns "${!ns_var}" ip link set "$id-n$n" up
done
# Names: `ip netns exec` bind-mounts /etc/netns/NS/* over /etc/*.
for ns in "$ns_coord" "$ns_n1" "$ns_n2"; do
  mkdir -p "/etc/netns/$ns"
  cat > "/etc/netns/$ns/hosts" << HOSTS
127.0.0.1 localhost
10.77.1.1 coord.lab
10.77.1.2 node1.lab nodes.lab
10.77.2.2 node2.lab nodes.lab
HOSTS
  echo "multi on" > "/etc/netns/$ns/host.conf"
done
in_ns "$ns_coord" getent ahostsv4 nodes.lab | awk '{print $1}' | sort -u > "$tmp/nodes.lab"
[ "$(wc -l < "$tmp/nodes.lab")" = 2 ] || fail "nodes.lab does not resolve to two addresses"

# Certificates and the token (the HOMELAB.md commands).
bash "$src/deploy/make-certs.sh" "$tmp/lab" coord.lab,10.77.1.1 node1.lab,10.77.1.2 \
  node2.lab,10.77.2.2 > /dev/null || { fail "make-certs.sh"; exit 1; }
lab="$tmp/lab"

# Starts "$@" in the background in namespace $1, output in $2; waits for the
# "listening on" line.
start() {
  local ns="$1" log="$2"
  shift 2
  # Not through in_ns: a function in the background runs in a subshell, and
  # $! would name that subshell, not the server (cleanup's kill would leave
  # the server running). ip execs the command, so $! is the server itself.
  ip netns exec "$ns" "$@" > "$log" 2>&1 &
  pids+=("$!")
  disown "$!"
  for _ in $(seq 200); do
    grep -q "^listening on" "$log" && return 0
    kill -0 "${pids[-1]}" 2> /dev/null || break
    sleep 0.1
  done
  echo "--- $log"
  cat "$log"
  return 1
}

# The loopback-only rule: no token and 0.0.0.0 is refused...
if in_ns "$ns_n1" "$node_bin" --listen 0.0.0.0:7070 --data-dir "$tmp/refused" > "$tmp/refused.log" 2>&1; then
  fail "a node listened on 0.0.0.0 without a token"
fi
grep -q "refusing to listen" "$tmp/refused.log" || fail "no refusal message: $(cat "$tmp/refused.log")"
# ...and a node on its own loopback is not reachable from another host.
start "$ns_n1" "$tmp/loop.log" "$node_bin" --listen 127.0.0.1:7071 --data-dir "$tmp/loop" \
  || fail "loopback node did not start"
if in_ns "$ns_coord" "$client_bin" --coordinator 10.77.1.2:7071 health > /dev/null 2>&1; then
  fail "a node on 127.0.0.1 of another namespace answered"
fi
in_ns "$ns_n1" "$client_bin" --coordinator 127.0.0.1:7071 health > /dev/null \
  || fail "the loopback node does not answer on its own host"

# Two nodes from config files: TLS requiring the lab CA's client certificates.
for n in 1 2; do
  cat > "$tmp/node$n.toml" << TOML
listen = "0.0.0.0:7071"
advertise = "node$n.lab:7071"
data-dir = "$tmp/node$n"
node-id = "node$n"
auth-token-file = "$lab/token"
ram-budget = "64M"
tls-cert = "$lab/node$n.lab/host.crt"
tls-key = "$lab/node$n.lab/host.key"
tls-ca = "$lab/ca.crt"
TOML
  ns_var="ns_n$n"
  start "${!ns_var}" "$tmp/node$n.log" "$node_bin" --config "$tmp/node$n.toml" \
    || { fail "node$n did not start"; exit 1; }
done

# The firewall of HOMELAB.md: node ports open to the coordinator only.
firewall() {  # NS COORDINATOR_ADDRESS
  in_ns "$1" nft -D coordinator="$2" -D lan=10.77.0.0/16 -f "$src/deploy/firewall/colibri.nft"
}
can_connect() {  # NS HOST PORT
  in_ns "$1" timeout 3 bash -c "exec 3<> /dev/tcp/$2/$3" 2> /dev/null
}
have_nft=0
if command -v nft > /dev/null; then
  have_nft=1
  firewall "$ns_n1" 10.77.1.1 || fail "nft rules do not load"
  firewall "$ns_n2" 10.77.2.1 || fail "nft rules do not load"
  firewall "$ns_coord" 10.77.1.1 || fail "nft rules do not load"
else
  echo "note: nft not found (Debian package nftables): firewall not exercised"
fi

# The coordinator, nodes found by DNS name, experts imported from the nodes'
# own copy of the GGUF.
cat > "$tmp/coordinator.toml" << TOML
model = "$model"
listen = "10.77.1.1:7070"
auth-token-file = "$lab/token"
tls-cert = "$lab/coord.lab/host.crt"
tls-key = "$lab/coord.lab/host.key"
nodes-dns = "nodes.lab:7071"
node-gguf = "$model"
node-tls-ca = "$lab/ca.crt"
node-tls-cert = "$lab/coord.lab/host.crt"
node-tls-key = "$lab/coord.lab/host.key"
threads = 1
TOML
start "$ns_coord" "$tmp/coord.log" "$coord_bin" serve --config "$tmp/coordinator.toml" \
  || { fail "coordinator did not start"; exit 1; }

cat > "$tmp/client.toml" << TOML
coordinator = "coord.lab:7070"
auth-token-file = "$lab/token"
tls-ca = "$lab/ca.crt"
TOML
client() { in_ns "$ns_coord" "$client_bin" --config "$tmp/client.toml" "$@"; }
client health > /dev/null || fail "colibri-client health"
got="$(client generate --prompt-tokens 1,2,3 -n 6 --temp 0 --print-token-ids 2> "$tmp/gen.err")" \
  || fail "generate: $(cat "$tmp/gen.err")"
want="$("$coord_bin" run --model "$model" --prompt-tokens 1,2,3 -n 6 --temp 0 --print-token-ids \
  --threads 1 2> /dev/null)"
[ -n "$want" ] && [ "$got" = "$want" ] || fail "cluster tokens '$got' != local '$want'"
client status > "$tmp/status" || fail "colibri-client status"
for n in 1 2; do
  grep -q "^10.77.$n.2:7071 advertises node$n.lab:7071$" "$tmp/status" \
    || fail "status does not show node$n's advertised address"
  grep -Eq "^10.77.$n.2:7071 +node$n +ok " "$tmp/status" || fail "node$n not ok in status"
done
# Without the token, or without TLS, the coordinator refuses.
if in_ns "$ns_coord" "$client_bin" --coordinator coord.lab:7070 --tls-ca "$lab/ca.crt" status \
  > /dev/null 2>&1; then
  fail "status without the token succeeded"
fi
if in_ns "$ns_coord" "$client_bin" --coordinator coord.lab:7070 --auth-token-file "$lab/token" \
  status > /dev/null 2>&1; then
  fail "plaintext status against the TLS coordinator succeeded"
fi

# A static list of names, planned from the nodes' inventories (HOMELAB.md:
# sizing), over the same TLS.
# Adding and removing a PC without restarting the coordinator (HOMELAB.md,
# section 7): a second coordinator reads its nodes from a file; the file is
# edited with the guide's commands and SIGHUP (what `systemctl reload` sends)
# makes it re-read. Tokens stay equal to the local run throughout.
nodes_file="$tmp/nodes"
echo "node1.lab:7071" > "$nodes_file"
sed -e 's|^listen = .*|listen = "10.77.1.1:7072"|' \
  -e "s|^nodes-dns = .*|nodes-file = \"$nodes_file\"|" "$tmp/coordinator.toml" > "$tmp/coordinator2.toml"
start "$ns_coord" "$tmp/coord2.log" "$coord_bin" serve --config "$tmp/coordinator2.toml" \
  || { fail "the nodes-file coordinator did not start"; exit 1; }
coord2_pid="$(pgrep -f -- "--config $tmp/coordinator2.toml" | head -1)"
client2() { client --coordinator coord.lab:7072 "$@"; }
wait_status() {  # REGEX PRESENT(1/0): waits up to 30 s for status to (not) match
  for _ in $(seq 150); do
    if client2 status > "$tmp/status2" 2> /dev/null; then
      if grep -Eq "$1" "$tmp/status2"; then [ "$2" = 1 ] && return 0; else [ "$2" = 0 ] && return 0; fi
    fi
    sleep 0.2
  done
  return 1
}
wait_status "^node1.lab:7071 +node1 +ok " 1 || fail "node1 not ok in the nodes-file cluster"
echo "node2.lab:7071" | tee -a "$nodes_file" > /dev/null
kill -HUP "$coord2_pid"
wait_status "^node2.lab:7071 +node2 +ok +[1-9]" 1 \
  || fail "node2 was not taken in after SIGHUP: $(cat "$tmp/status2")"
got="$(client2 generate --prompt-tokens 1,2,3 -n 6 --temp 0 --print-token-ids 2> /dev/null)"
[ "$got" = "$want" ] || fail "tokens after adding node2 '$got' != local '$want'"
sed -i '/^node1.lab:7071$/d' "$nodes_file"
kill -HUP "$coord2_pid"
wait_status "^node1.lab:7071 " 0 || fail "node1 was not retired after SIGHUP: $(cat "$tmp/status2")"
got="$(client2 generate --prompt-tokens 1,2,3 -n 6 --temp 0 --print-token-ids 2> /dev/null)"
[ "$got" = "$want" ] || fail "tokens after removing node1 '$got' != local '$want'"
grep -q "nodes now" "$tmp/coord2.log" || fail "no membership line in the coordinator's log"

in_ns "$ns_coord" "$coord_bin" plan --model "$model" --nodes node1.lab:7071,node2.lab:7071 \
  --auth-token-file "$lab/token" --tls-ca "$lab/ca.crt" --tls-cert "$lab/coord.lab/host.crt" \
  --tls-key "$lab/coord.lab/host.key" --summary > "$tmp/plan" 2>&1 || fail "plan: $(cat "$tmp/plan")"
grep -q "node1" "$tmp/plan" && grep -q "node2" "$tmp/plan" || fail "plan lacks a node: $(cat "$tmp/plan")"

# Sizing before the nodes exist (HOMELAB.md, step 1).
"$coord_bin" inspect --model "$model" > "$tmp/inspect" 2>&1 || fail "inspect"
grep -q "dense part (coordinator)" "$tmp/inspect" || fail "inspect lacks the dense part's bytes"
"$coord_bin" plan --model "$model" --nodes node1.lab:7071,node2.lab:7071,node3.lab:7071 \
  --assume-equal --summary > "$tmp/plan-equal" 2>&1 || fail "plan --assume-equal"
[ "$(grep -c '^node node[123].lab:7071' "$tmp/plan-equal")" = 3 ] \
  || fail "plan --assume-equal: $(cat "$tmp/plan-equal")"

if [ "$have_nft" = 1 ]; then
  can_connect "$ns_coord" 10.77.1.2 7071 || fail "the coordinator cannot reach node1 behind the firewall"
  firewall "$ns_n1" 10.77.1.99 || fail "nft rules do not reload"
  if can_connect "$ns_coord" 10.77.1.2 7071; then
    fail "node1's port is open to an address that is not the coordinator"
  fi
fi

if [ "$status" != 0 ]; then
  for f in "$tmp"/*.log "$tmp/status"; do echo "--- $f"; tail -20 "$f"; done
else
  echo "multi-host: all checks passed"
fi
exit "$status"
