#!/usr/bin/env bash
# deploy/systemd: `systemd-analyze verify` accepts both units without a single
# warning. verify exits 0 on unknown keys and only prints them, so any output
# fails the test; a deliberately misspelled copy proves the check can fail.
# The units' ExecStart paths (/usr/local/bin) are pointed at the build's
# binaries, since verify checks that they exist.
# Usage: systemd_verify_test.sh SOURCE_DIR BUILD_DIR. Exit 77: skipped.
set -euo pipefail
src="$1"
build="$2"
if ! command -v systemd-analyze > /dev/null; then
  echo "SKIP: systemd-analyze not found (Debian package systemd)"
  exit 77
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

for bin in coordinator/colibri-coordinator expert_node/colibri-expert-node; do
  [ -x "$build/$bin" ] || { echo "FAIL: $build/$bin not built"; exit 1; }
done
units=()
for unit in "$src"/deploy/systemd/*.service; do
  sed -e "s|/usr/local/bin/colibri-coordinator|$build/coordinator/colibri-coordinator|g" \
      -e "s|/usr/local/bin/colibri-expert-node|$build/expert_node/colibri-expert-node|g" \
      "$unit" > "$tmp/$(basename "$unit")"
  units+=("$tmp/$(basename "$unit")")
done
[ "${#units[@]}" -ge 2 ] || { echo "FAIL: expected the two units in deploy/systemd"; exit 1; }

verify() {  # prints verify's output; returns its exit code
  SYSTEMD_LOG_COLOR=0 systemd-analyze verify --man=no "$@" 2>&1
}

status=0
for unit in "${units[@]}"; do
  out="$(verify "$unit")" || { echo "FAIL: verify exited non-zero on $(basename "$unit")"; status=1; }
  if [ -n "$out" ]; then
    echo "FAIL: $(basename "$unit") has warnings:"
    echo "$out"
    status=1
  else
    echo "ok: $(basename "$unit")"
  fi
  grep -q '^ExecStart=.*--config /etc/colibri/' "$unit" \
    || { echo "FAIL: $(basename "$unit") does not pass --config"; status=1; }
  for key in DynamicUser=yes StateDirectory= LoadCredential=token: ProtectSystem=strict \
             NoNewPrivileges=yes PrivateTmp=yes ProtectHome=yes CapabilityBoundingSet= \
             Restart=on-failure Type=notify NotifyAccess=main TimeoutStartSec= 'MemoryMax=[0-9]'; do
    grep -q "^$key" "$unit" || { echo "FAIL: $(basename "$unit") lacks $key"; status=1; }
  done
  # The node's MemoryMax= is what `colibri-coordinator plan` recommends for
  # a node whose experts fill its RAM tier: ram-budget + 1G.
  if [[ "$(basename "$unit")" == *expert-node* ]]; then
    budget="$(sed -n 's/^ram-budget = "\([0-9]*\)G"$/\1/p' "$src/deploy/systemd/expert-node.toml")"
    max="$(sed -n 's/^MemoryMax=\([0-9]*\)G$/\1/p' "$unit")"
    if [ -z "$budget" ] || [ "$max" != "$((budget + 1))" ]; then
      echo "FAIL: MemoryMax=${max}G is not expert-node.toml's ram-budget ${budget}G + 1G"
      status=1
    fi
  fi
  if grep -E '^ExecStart=.*(--auth-token |token=|BEGIN )' "$unit"; then
    echo "FAIL: $(basename "$unit") has a secret on its command line"
    status=1
  fi
done

# The HTTP port HOMELAB.md opens is one the coordinator listens on.
grep -q '^http-listen = "0.0.0.0:8080"' "$src/deploy/systemd/coordinator.toml" \
  || { echo "FAIL: deploy/systemd/coordinator.toml has no http-listen on 8080"; status=1; }

# The check must be able to fail: a misspelled key has to produce output.
sed 's/^ProtectHome=/ProtectHom=/' "${units[0]}" > "$tmp/broken.service"
if [ -z "$(verify "$tmp/broken.service" || true)" ]; then
  echo "FAIL: verify printed nothing for a misspelled key: the check is blind"
  status=1
fi
exit "$status"
