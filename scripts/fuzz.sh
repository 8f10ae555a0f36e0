#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz with clang, ASan and UBSan in
# their own build folder, writes their seed corpora from the fixtures, and runs
# each harness for a bounded time. Prints, per harness, the executions, the
# executions per second and the coverage libFuzzer reached; exits non-zero
# when a harness finds a crash, a leak or undefined behaviour (the reproducer
# is left in the build folder's fuzz-artifacts/).
#
#   scripts/fuzz.sh [--seconds N] [--jobs J] [--opt FLAG] [HARNESS ...]
#
#   --seconds N   time per harness (default 25; scripts/test.sh passes 20)
#   --jobs J      build parallelism (default 2)
#   --opt FLAG    optimization of the build (default -O1: it builds much
#                 faster than -O3 at a throughput close to it; the figures
#                 are in docs/benchmarks.md; for long runs, -O2 or -O3)
#   HARNESS       run only these (default: all of them)
#
# Environment: COLIBRI_FUZZ_BUILD_DIR (default build-fuzz),
# COLIBRI_FIXTURES_DIR (default ../shared/fixtures). Without the fixtures the
# harnesses that need them are skipped with a message.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=25
jobs=2
opt=-O1
harnesses=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --opt) opt="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) harnesses+=("$1"); shift ;;
  esac
done
all=(gguf_fuzz tokenizer_fuzz expert_record_fuzz expert_request_fuzz inference_request_fuzz
     chat_template_fuzz openai_request_fuzz config_file_fuzz assistant_output_fuzz)
if [ "${#harnesses[@]}" -eq 0 ]; then harnesses=("${all[@]}"); fi

build="${COLIBRI_FUZZ_BUILD_DIR:-build-fuzz}"
fixtures="$(realpath -m "${COLIBRI_FIXTURES_DIR:-../shared/fixtures}")"
if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found (scripts/install-deps.sh installs clang-14)" >&2
  exit 1
fi

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_FLAGS_RELEASE="$opt -DNDEBUG" -DCMAKE_CXX_FLAGS_RELEASE="$opt -DNDEBUG" \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCOLIBRI_SANITIZE=ON -DCOLIBRI_FUZZ=ON -DCOLIBRI_BUILD_TESTS=OFF \
  -DCOLIBRI_FIXTURES_DIR="$fixtures" >/dev/null
cmake --build "$build" -j "$jobs" --target "${harnesses[@]}" fuzz_seeds

corpus="$build/fuzz-corpus"
artifacts="$build/fuzz-artifacts"
mkdir -p "$corpus" "$artifacts"
have_fixtures=0
if [ -d "$fixtures/models" ] && [ -d "$fixtures/vocab" ]; then
  have_fixtures=1
  "$build/tests/fuzz/fuzz_seeds" "$fixtures" "$corpus/seeds"
else
  echo "fuzz: fixtures not found at $fixtures: running without seed corpora" >&2
fi

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
status=0
summary=()
for h in "${harnesses[@]}"; do
  name="${h%_fuzz}"
  if [ "$h" = tokenizer_fuzz ] && [ "$have_fixtures" = 0 ]; then
    echo "fuzz: skipping $h (it needs a vocabulary from the fixtures)" >&2
    continue
  fi
  # The working corpus grows across runs; the seeds are read, never written.
  mkdir -p "$corpus/$name"
  seeds=()
  if [ -d "$corpus/seeds/$name" ]; then seeds=("$corpus/seeds/$name"); fi
  # A dictionary beside the harness (tests/fuzz/<name>.dict) steers mutations.
  dict=()
  if [ -f "tests/fuzz/$name.dict" ]; then dict=(-dict="tests/fuzz/$name.dict"); fi
  log="$build/fuzz-$name.log"
  echo "fuzz: $h for ${seconds} s" >&2
  if ! COLIBRI_FUZZ_VOCAB="$fixtures/vocab/ggml-vocab-gpt-2.gguf" \
      "$build/tests/fuzz/$h" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 \
      -timeout=10 -print_final_stats=1 -artifact_prefix="$artifacts/$name-" "${dict[@]}" \
      "$corpus/$name" "${seeds[@]}" >"$log" 2>&1; then
    echo "fuzz: $h FAILED; last lines of $log:" >&2
    tail -n 40 "$log" >&2
    status=1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
  summary+=("$(printf '%-24s %12s runs %10s runs/s  cov %s' "$h" "${runs:-?}" "${rate:-?}" "${cov:-?}")")
done
printf '%s\n' "${summary[@]}"
exit "$status"
