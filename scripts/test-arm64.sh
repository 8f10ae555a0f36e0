#!/usr/bin/env bash
# 64-bit ARM, on an x86-64 machine: Debian's aarch64-linux-gnu compilers and
# qemu-user. Cross-builds the project for arm64 (in BUILD) and, under qemu:
#
# 1. The engine's tests (tests/common, tests/model): the kernel tests twice,
#    on an emulated CPU with the dot-product instructions (QEMU_CPU=max: the
#    neon-dotprod set) and on a Cortex-A53 (the plain neon set), the rest
#    (tokenizers against the fixture vocabularies, GGUF parsing, decoding
#    against the golden logits, sampling, speculation, chat templates, the
#    thread pool) once, on the first. Left out for time: session_batch_test
#    and session_prefetch_test (200 s natively, whole fixture models many
#    times over; the kernels' batch invariance is in the kernel tests); for
#    qemu-user, which ignores madvise: huge_pages_test's PopulatePagesTest.
# 2. The ARM coordinator: every fixture model run on each emulated CPU must
#    give the logits of the prompt and of every generated token bitwise as
#    this machine's x86-64 coordinator does (COLIBRI_BUILD_DIR, default build;
#    skipped when it is not built), and the same text.
# 3. A mixed cluster: two ARM expert nodes, one on each emulated CPU, compute
#    every fixture model's experts for the x86-64 coordinator: again bitwise
#    its local run's logits.
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
          libcli11-dev nlohmann-json3-dev libpcre2-dev libicu-dev libsystemd-dev libedit-dev
          libtomlplusplus-dev libssl-dev)
toolchain_provides=" libc6 libc6-dev libgcc-s1 libstdc++6 gcc-12-base linux-libc-dev libc-dev-bin
  libcrypt1 libcrypt-dev "

if [ ! -f "$sysroot/.complete-v5" ]; then
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
  touch "$sysroot/.complete-v5"
fi

fixtures=()
if [ -n "${COLIBRI_FIXTURES_DIR:-}" ]; then
  fixtures=(-DCOLIBRI_FIXTURES_DIR="$COLIBRI_FIXTURES_DIR")
fi
# (KERNELS_ONLY=OFF: a folder of the kernels-only build this script once made
# keeps the option in its cache.)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLIBRI_KERNELS_ONLY=OFF \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" \
  -DCOLIBRI_ARM64_SYSROOT="$sysroot" "${fixtures[@]}" > "$build/configure.log" ||
  { cat "$build/configure.log"; exit 1; }
# (colibri_sampler_bench: a test of tests/model runs it.)
cmake --build "$build" --target tests/common/all tests/model/all colibri_sampler_bench \
  colibri-expert-node colibri-coordinator

# 1. The engine's tests.
heavy='^(session_batch_test|session_prefetch_test)\.'
# qemu-user takes madvise's advice as a hint it may ignore: it returns success
# and populates nothing (MADV_POPULATE_WRITE), which that test would report.
emulator_limits='^huge_pages_test\.PopulatePagesTest\.'
echo "test-arm64.sh: the engine's tests on an emulated max"
QEMU_CPU=max ctest --test-dir "$build/tests/common" --output-on-failure -j2 -E "$emulator_limits"
QEMU_CPU=max ctest --test-dir "$build/tests/model" --output-on-failure -j2 -E "$heavy"
echo "test-arm64.sh: the kernel tests on an emulated cortex-a53"
QEMU_CPU=cortex-a53 ctest --test-dir "$build/tests/model/ops" --output-on-failure -j2

coordinator="${COLIBRI_BUILD_DIR:-build}/coordinator/colibri-coordinator"
fixtures_dir="${COLIBRI_FIXTURES_DIR:-../shared/fixtures}"
if [ ! -x "$coordinator" ]; then
  echo "test-arm64.sh: SKIP the ARM coordinator and the mixed cluster: $coordinator is not built"
  exit 0
fi
if ! ls "$fixtures_dir"/models/*.gguf > /dev/null 2>&1; then
  echo "test-arm64.sh: SKIP the ARM coordinator and the mixed cluster: no fixture models in" \
    "$fixtures_dir/models"
  exit 0
fi

work="$build/cluster"
rm -rf "$work"
mkdir -p "$work"
cpus=(max cortex-a53)
# Runs an arm64 program of this build: QEMU_CPU=... "$arm64" PROGRAM ARGS (the
# toolchain file's emulator line, which the configure step wrote out).
arm64="$build/run-emulated.sh"
# fail NAME WHAT: reports a failed check of the fixture model NAME.
failed=0
fail() {
  echo "FAIL: $1: $2"
  failed=1
}
# same_run NAME A B: whether run B of NAME gave run A's logits and text.
same_run() {
  if [ ! -s "$work/$1.$2.f32" ] || ! cmp -s "$work/$1.$2.f32" "$work/$1.$3.f32"; then
    fail "$1" "the logits of the $3 run differ from the $2 run's: $(cmp "$work/$1.$2.f32" \
      "$work/$1.$3.f32" 2>&1)"
    return 1
  fi
  if ! cmp -s "$work/$1.$2.txt" "$work/$1.$3.txt"; then
    fail "$1" "the text of the $3 run differs from the $2 run's"
    return 1
  fi
}
run_args=(-p "The quick brown fox jumps over" --temp 0 -n 12 --ignore-eos --threads 2
          --all-logits)

# 2. The ARM coordinator against this machine's.
models=()
for model in "$fixtures_dir"/models/*.gguf; do
  name="$(basename "$model" .gguf)"
  if ! "$coordinator" run -m "$model" "${run_args[@]}" --logits-out "$work/$name.local.f32" \
      > "$work/$name.local.txt" 2> "$work/$name.local.err"; then
    fail "$name" "the local run failed: $(tail -3 "$work/$name.local.err")"
    continue
  fi
  models+=("$model")
  ok=1
  for cpu in "${cpus[@]}"; do
    if ! QEMU_CPU=$cpu "$arm64" "$build/coordinator/colibri-coordinator" run -m "$model" \
        "${run_args[@]}" --logits-out "$work/$name.arm-$cpu.f32" > "$work/$name.arm-$cpu.txt" \
        2> "$work/$name.arm-$cpu.err"; then
      fail "$name" "the ARM coordinator ($cpu) failed: $(tail -3 "$work/$name.arm-$cpu.err")"
      ok=0
    elif ! same_run "$name" local "arm-$cpu"; then
      ok=0
    fi
  done
  if [ "$ok" = 1 ]; then
    echo "test-arm64.sh: $name: the ARM coordinator's logits are bitwise x86-64's on" \
      "${cpus[*]} ($(stat -c %s "$work/$name.local.f32") bytes)"
  fi
done

# 3. Two ARM expert nodes and this machine's coordinator.
node_pids=()
trap 'kill "${node_pids[@]}" 2> /dev/null || true; wait 2> /dev/null || true' EXIT
for cpu in "${cpus[@]}"; do
  QEMU_CPU=$cpu "$arm64" "$build/expert_node/colibri-expert-node" --listen 127.0.0.1:0 \
    --data-dir "$work/node-$cpu" --node-id "arm-$cpu" > "$work/node-$cpu.out" \
    2> "$work/node-$cpu.err" &
  node_pids+=($!)
done
# shellcheck source=scripts/bench-common.sh
source scripts/bench-common.sh  # bench_wait_listening
node_addrs=()
for i in 0 1; do
  addr="$(bench_wait_listening "$work/node-${cpus[$i]}.out" "${node_pids[$i]}")" || {
    echo "FAIL: the ARM node (${cpus[$i]}) did not start:"
    cat "$work/node-${cpus[$i]}.err"
    exit 1
  }
  node_addrs+=("$addr")
done
nodes="$(IFS=,; echo "${node_addrs[*]}")"
echo "test-arm64.sh: ARM expert nodes on $nodes (emulated ${cpus[*]})"

for model in "${models[@]}"; do
  name="$(basename "$model" .gguf)"
  if ! "$coordinator" run -m "$model" "${run_args[@]}" --logits-out "$work/$name.nodes.f32" \
      --nodes "$nodes" > "$work/$name.nodes.txt" 2> "$work/$name.nodes.err"; then
    fail "$name" "the run on the ARM nodes failed: $(tail -3 "$work/$name.nodes.err")"
    continue
  fi
  ok=1
  # Every routed expert ran on the nodes (none fell back to the coordinator)
  # and each node computed some.
  if ! grep -q '^experts: .* round_trips=[1-9][0-9]* .* failovers=0 fallback_routes=0$' \
      "$work/$name.nodes.err"; then
    fail "$name" "not every expert ran on the ARM nodes: $(grep '^experts: ' "$work/$name.nodes.err")"
    ok=0
  fi
  for addr in "${node_addrs[@]}"; do
    if ! grep -q "^node $addr: requests=[1-9]" "$work/$name.nodes.err"; then
      fail "$name" "node $addr computed nothing: $(grep "^node $addr" "$work/$name.nodes.err")"
      ok=0
    fi
  done
  if same_run "$name" local nodes && [ "$ok" = 1 ]; then
    echo "test-arm64.sh: $name: with its experts on the ARM nodes, logits bitwise the local run's"
  fi
done
if [ "$failed" != 0 ]; then
  echo "test-arm64.sh: FAILED (logs in $work)"
  exit 1
fi
echo "test-arm64.sh: the ARM coordinator and the mixed cluster gave the x86-64 logits on every" \
  "fixture model"
