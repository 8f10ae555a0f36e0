#!/usr/bin/env bash
# Cold expert reads of the disk tier at queue depth against the disk's own
# `dd iflag=direct bs=4M` figure on the same file, interleaved. Run from the
# repository root after building colibri_disk_tier_bench.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/bench-disk-tier.sh [options]

  -r ROUNDS       rounds; each runs dd, the store's reads and the raw reads (default 5)
  --dir DIR       the store (made on first use; must be a real file system, not tmpfs)
                  (default BUILD/bench-disk-tier)
  --experts N     experts in the store (default 512: 816 MiB of 1.59 MiB experts)
  --depths LIST   queue depths (default 1,4,16,64)
  --build DIR     build folder (default build)
  -h, --help      this text

Every read is O_DIRECT (cold: no page cache). Per round: dd over the extent
file, then colibri_disk_tier_bench through the store (each expert read,
verified and copied, as a RAM-tier miss is; depth = reader threads) and raw
(the records' blocks alone through the read queue), for io_uring and for the
pread-thread fallback. Prints per engine and depth the median GB/s, the
range, and the median against dd's median.
EOF
}

cd "$(dirname "$0")/.."
rounds=5
dir=""
experts=512
depths=1,4,16,64
build=build
while [ $# -gt 0 ]; do
  case "$1" in
    -r) rounds="${2:?}"; shift 2 ;;
    --dir) dir="${2:?}"; shift 2 ;;
    --experts) experts="${2:?}"; shift 2 ;;
    --depths) depths="${2:?}"; shift 2 ;;
    --build) build="${2:?}"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
bench="$build/expert_node/colibri_disk_tier_bench"
[ -x "$bench" ] || { echo "$bench is missing: ninja -C $build colibri_disk_tier_bench" >&2; exit 1; }
[ -n "$dir" ] || dir="$build/bench-disk-tier"
mkdir -p "$dir"
if [ "$(stat -f -c %T "$dir")" = tmpfs ]; then
  echo "$dir is on tmpfs: O_DIRECT needs a real file system (--dir)" >&2
  exit 1
fi

out="$dir/results.txt"
: >"$out"
"$bench" "$dir/store" --experts="$experts" --depths=1 --engines=threads --raw=1 >/dev/null
extent="$dir/store/extents/000000.ext"
echo "store: $dir/store, $experts experts, extent file $(du -h "$extent" | cut -f1); $(df -h "$dir" | tail -1 | awk '{print $1}')" >&2
for ((r = 1; r <= rounds; r++)); do
  echo "round $r/$rounds" >&2
  dd if="$extent" of=/dev/null iflag=direct bs=4M 2>&1 |
    awk '/copied/ { for (i = 1; i <= NF; i++) if ($i == "copied,") s = $(i + 1);
                    print "dd", $1 / s / 1e9 }' >>"$out"
  "$bench" "$dir/store" --experts="$experts" --depths="$depths" |
    awk '/^run / { split($2, e, "="); split($3, d, "="); split($7, g, "=");
                   print "store", e[2], d[2], g[2] }' >>"$out"
  "$bench" "$dir/store" --experts="$experts" --depths="$depths" --raw=1 |
    awk '/^run / { split($2, e, "="); split($3, d, "="); split($7, g, "=");
                   print "raw", e[2], d[2], g[2] }' >>"$out"
done

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2];
                                               else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
range() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.2f-%.2f", lo, hi }'; }
dd_median=$(awk '$1 == "dd" { print $2 }' "$out" | median)
echo
echo "dd iflag=direct bs=4M: median $(printf %.2f "$dd_median") GB/s, range $(awk '$1 == "dd" { print $2 }' "$out" | range) ($rounds runs)"
printf "%-6s %-9s %6s %12s %12s %8s\n" path engine depth "GB/s med" range "vs dd"
for path in store raw; do
  for engine in io_uring threads; do
    for depth in ${depths//,/ }; do
      values=$(awk -v p="$path" -v e="$engine" -v d="$depth" '$1 == p && $2 == e && $3 == d { print $4 }' "$out")
      [ -n "$values" ] || continue
      m=$(echo "$values" | median)
      printf "%-6s %-9s %6s %12.2f %12s %7.0f%%\n" "$path" "$engine" "$depth" "$m" \
        "$(echo "$values" | range)" "$(awk -v m="$m" -v d="$dd_median" 'BEGIN { print 100 * m / d }')"
    done
  done
done
