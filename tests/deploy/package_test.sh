#!/usr/bin/env bash
# The install() rules and the Debian package: `cpack -G DEB` in the build
# folder makes colibri_VERSION_ARCH.deb holding the three binaries in
# /usr/bin, the deployment examples under /usr/share/doc/colibri, and
# Depends on the libraries they link; the packaged binaries run (--version).
# Usage: package_test.sh SOURCE_DIR BUILD_DIR. Exit 77: skipped.
set -euo pipefail
src="$1"
build="$2"
for tool in cpack dpkg-deb dpkg-shlibdeps; do
  command -v "$tool" > /dev/null || { echo "SKIP: $tool not found"; exit 77; }
done
for bin in coordinator/colibri-coordinator expert_node/colibri-expert-node client/colibri-client; do
  [ -x "$build/$bin" ] || { echo "FAIL: $build/$bin not built"; exit 1; }
done
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
version="$(sed -n 's/^project(colibri VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")"

if ! (cd "$build" && cpack -G DEB -B "$tmp/out" > "$tmp/cpack.log" 2>&1); then
  echo "FAIL: cpack"
  cat "$tmp/cpack.log"
  exit 1
fi
deb="$(ls "$tmp"/out/colibri_"$version"_*.deb 2> /dev/null | head -1)"
[ -n "$deb" ] || { echo "FAIL: no colibri_${version}_*.deb in $(ls "$tmp/out")"; exit 1; }
status=0
contents="$(dpkg-deb -c "$deb")"
for path in ./usr/bin/colibri-coordinator ./usr/bin/colibri-expert-node ./usr/bin/colibri-client \
            ./usr/share/doc/colibri/examples/systemd/colibri-coordinator.service \
            ./usr/share/doc/colibri/examples/make-certs.sh \
            ./usr/share/doc/colibri/examples/k8s/base/kustomization.yaml; do
  grep -q " $path\$" <<< "$contents" || { echo "FAIL: $path not in the package"; status=1; }
done
if grep -q '/tests/\| ./usr/bin/.*_test$' <<< "$contents"; then
  echo "FAIL: tests in the package"
  status=1
fi
depends="$(dpkg-deb -f "$deb" Depends)"
for lib in libgrpc++ librocksdb libsystemd0 libcpp-httplib; do
  grep -q "$lib" <<< "$depends" || { echo "FAIL: Depends lacks $lib: $depends"; status=1; }
done
dpkg-deb -x "$deb" "$tmp/root"
for b in colibri-coordinator colibri-expert-node colibri-client; do
  out="$("$tmp/root/usr/bin/$b" --version)" || { echo "FAIL: packaged $b --version"; status=1; }
  [[ "$out" == "$b $version"* ]] || { echo "FAIL: packaged $b --version said '$out'"; status=1; }
done
[ "$status" = 0 ] && echo "ok: $(basename "$deb"), Depends: $depends"
exit "$status"
