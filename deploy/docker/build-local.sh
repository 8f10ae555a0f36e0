#!/usr/bin/env bash
# Builds and smoke-tests the image without a registry or a container daemon:
# the debian:bookworm-slim base is made from Debian packages by mmdebstrap
# and loaded into podman, then deploy/docker/Dockerfile is built on it and
# the image is run: the three binaries answer --help, and a node container
# with a token serves gRPC health (the image's HEALTHCHECK command).
#
#   deploy/docker/build-local.sh [--keep]
#
# Needs root, podman and mmdebstrap (Debian packages podman, buildah,
# mmdebstrap, uidmap) and a Debian mirror for the packages; takes as long as
# a full build. Not part of CI. The base image stays in podman's store and is
# reused; --keep also keeps localhost/colibri:local and tags it
# localhost/colibri:VERSION (the project's version in CMakeLists.txt, the tag
# k8s/base/kustomization.yaml names; k8s/README.md loads it into k3s or
# kind). Builds use chroot
# isolation and containers run without cgroups, which also works inside a
# container or on a host whose cgroups crun cannot use (hybrid v1/v2).
set -euo pipefail
cd "$(dirname "$0")/../.."
for tool in podman mmdebstrap; do
  command -v "$tool" > /dev/null || { echo "build-local: $tool not found" >&2; exit 1; }
done
keep=0
[ "${1:-}" = "--keep" ] && keep=1
work="$(mktemp -d)"
node=""
cleanup() {
  [ -n "$node" ] && podman rm -f "$node" > /dev/null 2>&1
  if [ "$keep" = 0 ]; then
    podman rmi -f localhost/colibri:local > /dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

if ! podman image exists localhost/debian:bookworm-slim; then
  echo "build-local: making debian:bookworm-slim with mmdebstrap"
  mmdebstrap --variant=minbase --format=tar bookworm "$work/base.tar"
  podman import "$work/base.tar" localhost/debian:bookworm-slim > /dev/null
fi
run() { podman run --cgroups=disabled "$@"; }

version="$(sed -n 's/^project(colibri VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)"
[ -n "$version" ] || { echo "build-local: no project version in CMakeLists.txt" >&2; exit 1; }

echo "build-local: building the image"
podman build --isolation=chroot --network=host --build-arg BASE_IMAGE=localhost/debian:bookworm-slim \
  --build-arg BUILD_JOBS="${BUILD_JOBS:-2}" \
  -f deploy/docker/Dockerfile -t localhost/colibri:local .

echo "build-local: running it"
for b in colibri-coordinator colibri-expert-node colibri-client; do
  run --rm localhost/colibri:local "$b" --help > /dev/null
done
[ "$(run --rm localhost/colibri:local id -u)" != 0 ] || { echo "runs as root" >&2; exit 1; }
openssl rand -hex 32 > "$work/token"
chmod 0644 "$work/token"
node="$(run -d -v "$work/token:/run/secrets/colibri_token:ro" \
  -v "$PWD/deploy/docker/expert-node.toml:/etc/colibri/expert-node.toml:ro" \
  localhost/colibri:local colibri-expert-node --config /etc/colibri/expert-node.toml \
  --node-id smoke --advertise smoke:7070)"
for _ in $(seq 60); do
  if podman exec "$node" colibri-client --coordinator 127.0.0.1:7070 health > /dev/null 2>&1; then
    echo "build-local: node container SERVING; image localhost/colibri:local works"
    if [ "$keep" = 1 ]; then
      podman tag localhost/colibri:local "localhost/colibri:$version"
      echo "build-local: kept as localhost/colibri:local and localhost/colibri:$version"
    fi
    podman image ls localhost/colibri
    exit 0
  fi
  sleep 1
done
podman logs "$node"
echo "build-local: the node container never became healthy" >&2
exit 1
