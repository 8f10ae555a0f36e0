#!/usr/bin/env bash
# Installs Colibri on one PC of a home lab as a systemd service
# (deploy/HOMELAB.md):
#
#   deploy/install-host.sh node|coordinator HOST LAB_DIR [--root DIR] [--bin DIR]
#
# copies the three binaries to /usr/local/bin, the unit of the role to
# /etc/systemd/system, its example config to /etc/colibri (kept when one is
# there; a node's advertise address becomes HOST:7071), the token and HOST's
# certificate, key and the lab CA from LAB_DIR (made by deploy/make-certs.sh)
# to /etc/colibri, then enables and starts the service. --root DIR installs
# below DIR instead and does not start anything (for a look first, and for
# the tests). --bin DIR takes the binaries from DIR (default: build/ of this
# repository, or DIR/{coordinator,expert_node,client}/ of a CMake build).
set -euo pipefail

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ "$#" -ge 3 ] || usage
role="$1" host="$2" lab="$3"
shift 3
root=""
here="$(cd "$(dirname "$0")" && pwd)"
bin="$here/../build"
while [ "$#" -gt 0 ]; do
  case "$1" in
    --root) root="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    *) usage ;;
  esac
done
case "$role" in
  node) unit=colibri-expert-node config=expert-node.toml ;;
  coordinator) unit=colibri-coordinator config=coordinator.toml ;;
  *) usage ;;
esac
for f in "$lab/token" "$lab/ca.crt" "$lab/$host/host.crt" "$lab/$host/host.key"; do
  [ -f "$f" ] || { echo "install-host: $f missing (deploy/make-certs.sh $lab $host)" >&2; exit 1; }
done

install -d "$root/usr/local/bin" "$root/etc/systemd/system" "$root/etc/colibri/tls"
for b in coordinator/colibri-coordinator expert_node/colibri-expert-node client/colibri-client; do
  install -m 0755 "$bin/$b" "$root/usr/local/bin/"
done
install -m 0644 "$here/systemd/$unit.service" "$root/etc/systemd/system/"
if [ ! -f "$root/etc/colibri/$config" ]; then
  sed "s/^advertise = .*/advertise = \"$host:7071\"/" "$here/systemd/$config" \
    > "$root/etc/colibri/$config"
  chmod 0644 "$root/etc/colibri/$config"
fi
if [ "$role" = coordinator ] && [ ! -f "$root/etc/colibri/nodes" ]; then
  install -m 0644 "$here/systemd/nodes" "$root/etc/colibri/nodes"
fi
# Read by systemd (LoadCredential=) as root only; the service sees its copy.
install -m 0600 "$lab/token" "$root/etc/colibri/token"
install -m 0600 "$lab/$host/host.key" "$root/etc/colibri/tls/host.key"
install -m 0644 "$lab/$host/host.crt" "$root/etc/colibri/tls/host.crt"
install -m 0644 "$lab/ca.crt" "$root/etc/colibri/tls/ca.crt"
echo "install-host: $unit installed${root:+ below $root}"

if [ -z "$root" ]; then
  systemctl daemon-reload
  systemctl enable --now "$unit.service"
else
  echo "install-host: not started (--root); on the PC: systemctl enable --now $unit"
fi
