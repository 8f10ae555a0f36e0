#!/usr/bin/env bash
# deploy/install-host.sh (HOMELAB.md's install step) into a temporary root:
# binaries, the role's unit (the verified one of deploy/systemd), its config
# with the host's advertise address, parsing with the installed binary, the
# token and key 0600, an existing config kept on a re-run (upgrades).
# Usage: install_host_test.sh SOURCE_DIR BUILD_DIR. Exit 77: skipped.
set -euo pipefail
src="$1"
build="$2"
command -v openssl > /dev/null || { echo "SKIP: openssl not found"; exit 77; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }
root="$tmp/root"

bash "$src/deploy/make-certs.sh" "$tmp/lab" coord.lab node2.lab > /dev/null
bash "$src/deploy/install-host.sh" node node2.lab "$tmp/lab" --root "$root" --bin "$build" > /dev/null
bash "$src/deploy/install-host.sh" coordinator coord.lab "$tmp/lab" --root "$root" --bin "$build" \
  > /dev/null

for b in colibri-coordinator colibri-expert-node colibri-client; do
  [ -x "$root/usr/local/bin/$b" ] || fail "$b not installed"
done
for u in colibri-expert-node colibri-coordinator; do
  cmp -s "$src/deploy/systemd/$u.service" "$root/etc/systemd/system/$u.service" \
    || fail "$u.service differs from deploy/systemd"
done
grep -qx 'advertise = "node2.lab:7071"' "$root/etc/colibri/expert-node.toml" \
  || fail "node config does not advertise node2.lab:7071"
"$root/usr/local/bin/colibri-expert-node" --config "$root/etc/colibri/expert-node.toml" --help \
  > /dev/null || fail "installed node config does not parse"
"$root/usr/local/bin/colibri-coordinator" serve --config "$root/etc/colibri/coordinator.toml" \
  --help > /dev/null || fail "installed coordinator config does not parse"
grep -qx 'nodes-file = "/etc/colibri/nodes"' "$root/etc/colibri/coordinator.toml" \
  || fail "coordinator config does not read /etc/colibri/nodes"
cmp -s "$src/deploy/systemd/nodes" "$root/etc/colibri/nodes" || fail "nodes file not installed"
for f in etc/colibri/token etc/colibri/tls/host.key; do
  [ "$(stat -c %a "$root/$f")" = 600 ] || fail "$f is not 0600"
done
cmp -s "$tmp/lab/coord.lab/host.crt" "$root/etc/colibri/tls/host.crt" || fail "host.crt not installed"
openssl verify -CAfile "$root/etc/colibri/tls/ca.crt" "$root/etc/colibri/tls/host.crt" > /dev/null \
  || fail "installed certificate does not verify against the installed CA"

# Upgrade: a re-run replaces binaries and units but keeps the edited config.
echo 'ram-budget = "2G"' >> "$root/etc/colibri/expert-node.toml"
sed -i '/^ram-budget = "8G"/d' "$root/etc/colibri/expert-node.toml"
bash "$src/deploy/install-host.sh" node node2.lab "$tmp/lab" --root "$root" --bin "$build" > /dev/null
grep -qx 'ram-budget = "2G"' "$root/etc/colibri/expert-node.toml" || fail "re-run replaced the config"

if bash "$src/deploy/install-host.sh" node node9.lab "$tmp/lab" --root "$root" --bin "$build" \
  > /dev/null 2>&1; then
  fail "installed a host without a certificate"
fi
[ "$status" = 0 ] && echo "install-host: all checks passed"
exit "$status"
