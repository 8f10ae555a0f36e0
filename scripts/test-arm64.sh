#!/usr/bin/env bash
# 64-bit ARM, on an x86-64 machine: Debian's aarch64-linux-gnu compilers and
# qemu-user.
#
# 1. The kernels: cross-builds common/, model/ops/, model/gguf/ and their tests
#    (COLIBRI_KERNELS_ONLY, in BUILD) and runs the tests twice, on an emulated
#    CPU with the dot-product instructions (QEMU_CPU=max: the neon-dotprod
#    set) and on a Cortex-A53 (the plain neon set).
# 2. A mixed cluster: cross-builds colibri-expert-node (the whole project
#    configured, in BUILD/node), starts two ARM nodes under qemu, one on each
#    emulated CPU, and has this machine's x86-64 coordinator (COLIBRI_BUILD_DIR,
#    default build; skipped when it is not built) run every fixture model with
#    its experts on them: the logits of the prompt and of every generated
#    token must be bitwise those of the local x86-64 run, and so the text.
#
# scripts/test.sh calls it; the Debian packages come from
# scripts/install-deps.sh. The target's libraries (gRPC, RocksDB, OpenBLAS,
# abseil, GoogleTest, ...) are Debian's arm64 packages, resolved and fetched
# with a private apt state under the build folder and unpacked there: the
# machine's own dpkg architectures and package lists stay as they were.
#
# Environment:
#   COLIBRI_ARM64_BUILD_DIR  build folder (default: build-arm64)
#   COLIBRI_BUILD_DIR        the x86-64 build with the coordinator (default: build)
#   COLIBRI_FIXTURES_DIR     test fixtures (default: ../shared/fixtures)
set -euo pipefail
cd "$(dirname "$0")/.."

build="${COLIBRI_ARM64_BUILD_DIR:-build-arm64}"
mkdir -p "$build"
build="$(cd "$build" && pwd)"
sysroot="$build/sysroot"
# What the cross builds link, with everything these need in turn; the C
# library and the compiler's own come from the cross toolchain instead.
packages=(libabsl-dev libgtest-dev libgmock-dev libgrpc++-dev protobuf-compiler-grpc
          libprotobuf-dev librocksdb-dev libopenblas-dev libcpp-httplib-dev libxxhash-dev
          libcli11-dev nlohmann-json3-dev libpcre2-dev libicu-dev)
toolchain_provides=" libc6 libc6-dev libgcc-s1 libstdc++6 gcc-12-base linux-libc-dev libc-dev-bin
  libcrypt1 libcrypt-dev "

if [ ! -f "$sysroot/.complete-v2" ]; then
  apt_state="$build/apt"
  rm -rf "$sysroot" "$apt_state"
  mkdir -p "$apt_state/lists/partial" "$apt_state/cache/archives/partial" "$sysroot"
  : > "$apt_state/status"  # nothing installed: apt resolves every dependency
  apt_options=(-q -o APT::Architecture=arm64 -o APT::Architectures=arm64
               -o Dir::State::Lists="$apt_state/lists" -o Dir::Cache="$apt_state/cache"
               -o Dir::State::status="$apt_state/status" -o APT::Sandbox::User=root)
  apt-get "${apt_options[@]}" update > "$apt_state/update.log"
  apt-get "${apt_options[@]}" install -y --download-only --no-install-recommends \
    "${packages[@]}" > "$apt_state/download.log"
  for deb in "$apt_state/cache/archives"/*.deb; do
    name="$(basename "$deb")"
    case "$toolchain_provides" in *" ${name%%_*} "*) continue ;; esac
    dpkg-deb -x "$deb" "$sysroot"
  done
  rm -rf "$apt_state"
  # Absolute symbolic links (libz.so -> /lib/...) point into the sysroot.
  find "$sysroot" -type l -lname '/*' | while read -r link; do
    ln -sfn "$sysroot$(readlink "$link")" "$link"
  done
  # What update-alternatives would link for OpenBLAS.
  lib="$sysroot/usr/lib/aarch64-linux-gnu"
  ln -sfn openblas-pthread/libopenblas.so "$lib/libopenblas.so"
  ln -sfn openblas-pthread/libopenblas.so.0 "$lib/libopenblas.so.0"
  touch "$sysroot/.complete-v2"
fi

fixtures=()
if [ -n "${COLIBRI_FIXTURES_DIR:-}" ]; then
  fixtures=(-DCOLIBRI_FIXTURES_DIR="$COLIBRI_FIXTURES_DIR")
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLIBRI_KERNELS_ONLY=ON \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" \
  -DCOLIBRI_ARM64_SYSROOT="$sysroot" "${fixtures[@]}"
cmake --build "$build"
for cpu in max cortex-a53; do
  echo "test-arm64.sh: the kernel tests on an emulated $cpu"
  QEMU_CPU=$cpu ctest --test-dir "$build" --output-on-failure -j2
done

# 2. The expert node for ARM, and a cluster of this machine's coordinator and
# two emulated ARM nodes.
node_build="$build/node"
cmake -S . -B "$node_build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLIBRI_BUILD_TESTS=OFF \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" \
  -DCOLIBRI_ARM64_SYSROOT="$sysroot" > "$build/node-configure.log" ||
  { cat "$build/node-configure.log"; exit 1; }
cmake --build "$node_build" --target colibri-expert-node

coordinator="${COLIBRI_BUILD_DIR:-build}/coordinator/colibri-coordinator"
fixtures_dir="${COLIBRI_FIXTURES_DIR:-../shared/fixtures}"
if [ ! -x "$coordinator" ]; then
  echo "test-arm64.sh: SKIP the mixed cluster: $coordinator is not built"
  exit 0
fi
if ! ls "$fixtures_dir"/models/*.gguf > /dev/null 2>&1; then
  echo "test-arm64.sh: SKIP the mixed cluster: no fixture models in $fixtures_dir/models"
  exit 0
fi

work="$build/cluster"
rm -rf "$work"
mkdir -p "$work"
node_pids=()
trap 'kill "${node_pids[@]}" 2> /dev/null || true; wait 2> /dev/null || true' EXIT
for cpu in max cortex-a53; do
  QEMU_CPU=$cpu qemu-aarch64 -L /usr/aarch64-linux-gnu \
    -E LD_LIBRARY_PATH="$sysroot/usr/lib/aarch64-linux-gnu:$sysroot/lib/aarch64-linux-gnu" \
    "$node_build/expert_node/colibri-expert-node" --listen 127.0.0.1:0 \
    --data-dir "$work/node-$cpu" --node-id "arm-$cpu" > "$work/node-$cpu.out" 2> "$work/node-$cpu.err" &
  node_pids+=($!)
done
# shellcheck source=scripts/bench-common.sh
source scripts/bench-common.sh  # bench_wait_listening
node_addrs=()
cpus=(max cortex-a53)
for i in 0 1; do
  addr="$(bench_wait_listening "$work/node-${cpus[$i]}.out" "${node_pids[$i]}")" || {
    echo "FAIL: the ARM node (${cpus[$i]}) did not start:"
    cat "$work/node-${cpus[$i]}.err"
    exit 1
  }
  node_addrs+=("$addr")
done
nodes="$(IFS=,; echo "${node_addrs[*]}")"
echo "test-arm64.sh: ARM expert nodes on $nodes (emulated max and cortex-a53)"

failed=0
for model in "$fixtures_dir"/models/*.gguf; do
  name="$(basename "$model" .gguf)"
  run=("$coordinator" run -m "$model" -p "The quick brown fox jumps over" --temp 0 -n 12
       --ignore-eos --threads 2 --all-logits)
  "${run[@]}" --logits-out "$work/$name.local.f32" > "$work/$name.local.txt" 2> "$work/$name.local.err" ||
    { echo "FAIL: $name: the local run failed: $(tail -3 "$work/$name.local.err")"; failed=1; continue; }
  "${run[@]}" --logits-out "$work/$name.arm.f32" --nodes "$nodes" > "$work/$name.arm.txt" \
    2> "$work/$name.arm.err" ||
    { echo "FAIL: $name: the run on the ARM nodes failed: $(tail -3 "$work/$name.arm.err")"; failed=1; continue; }
  # Every routed expert ran on the nodes (none fell back to the coordinator)
  # and each node computed some.
  if ! grep -q '^experts: .* round_trips=[1-9][0-9]* .* failovers=0 fallback_routes=0$' "$work/$name.arm.err"; then
    echo "FAIL: $name: not every expert ran on the ARM nodes: $(grep '^experts: ' "$work/$name.arm.err")"
    failed=1
  fi
  for addr in "${node_addrs[@]}"; do
    if ! grep -q "^node $addr: requests=[1-9]" "$work/$name.arm.err"; then
      echo "FAIL: $name: node $addr computed nothing: $(grep "^node $addr" "$work/$name.arm.err")"
      failed=1
    fi
  done
  if [ ! -s "$work/$name.local.f32" ] || ! cmp -s "$work/$name.local.f32" "$work/$name.arm.f32"; then
    echo "FAIL: $name: the logits with experts on the ARM nodes differ from the local run's"
    cmp "$work/$name.local.f32" "$work/$name.arm.f32" || true
    failed=1
  elif ! cmp -s "$work/$name.local.txt" "$work/$name.arm.txt"; then
    echo "FAIL: $name: the text differs"
    failed=1
  else
    echo "test-arm64.sh: $name: logits bitwise the local run's ($(stat -c %s "$work/$name.local.f32") bytes)"
  fi
done
if [ "$failed" != 0 ]; then
  echo "test-arm64.sh: the mixed cluster FAILED (logs in $work)"
  exit 1
fi
echo "test-arm64.sh: the mixed cluster gave the local logits on every fixture model"
