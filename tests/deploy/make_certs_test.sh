#!/usr/bin/env bash
# deploy/make-certs.sh: a CA, per-host certificates that verify against it
# with the names and IPs asked for, usable as server and client, private keys
# 0600, the token made once; a second run keeps everything and adds new hosts.
# Usage: make_certs_test.sh SOURCE_DIR. Exit 77: skipped.
set -euo pipefail
src="$1"
command -v openssl > /dev/null || { echo "SKIP: openssl not found"; exit 77; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }

bash "$src/deploy/make-certs.sh" "$tmp/lab" coord.lab node1.lab,10.0.0.11,fd00::11 > /dev/null
for host in coord.lab node1.lab; do
  openssl verify -CAfile "$tmp/lab/ca.crt" "$tmp/lab/$host/host.crt" > /dev/null \
    || fail "$host certificate does not verify"
  [ "$(stat -c %a "$tmp/lab/$host/host.key")" = 600 ] || fail "$host key is not 0600"
  openssl x509 -in "$tmp/lab/$host/host.crt" -noout -ext extendedKeyUsage \
    | grep -q "Server Authentication, TLS Web Client Authentication" \
    || fail "$host certificate is not for server and client"
done
san="$(openssl x509 -in "$tmp/lab/node1.lab/host.crt" -noout -ext subjectAltName)"
for want in "DNS:node1.lab" "IP Address:10.0.0.11" "IP Address:FD00:0:0:0:0:0:0:11"; do
  [[ "$san" == *"$want"* ]] || fail "node1 SAN lacks $want: $san"
done
[ "$(stat -c %a "$tmp/lab/ca.key")" = 600 ] || fail "CA key is not 0600"
[[ "$(cat "$tmp/lab/token")" =~ ^[0-9a-f]{64}$ ]] || fail "token is not 64 hex digits"

token="$(cat "$tmp/lab/token")"
ca="$(sha256sum < "$tmp/lab/ca.crt")"
node1="$(sha256sum < "$tmp/lab/node1.lab/host.crt")"
bash "$src/deploy/make-certs.sh" "$tmp/lab" node1.lab node2.lab > /dev/null
[ "$token" = "$(cat "$tmp/lab/token")" ] || fail "second run changed the token"
[ "$ca" = "$(sha256sum < "$tmp/lab/ca.crt")" ] || fail "second run changed the CA"
[ "$node1" = "$(sha256sum < "$tmp/lab/node1.lab/host.crt")" ] || fail "second run changed node1"
openssl verify -CAfile "$tmp/lab/ca.crt" "$tmp/lab/node2.lab/host.crt" > /dev/null \
  || fail "node2 (added later) does not verify"

if bash "$src/deploy/make-certs.sh" "$tmp/lab" 'bad host' > /dev/null 2>&1; then
  fail "accepted a bad host name"
fi
[ "$status" = 0 ] && echo "make-certs: all checks passed"
exit "$status"
