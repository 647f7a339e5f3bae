#!/usr/bin/env bash
# A/B of two builds of the kernel benchmark on this machine: alternating runs of
# `pagoda_bench_kernels --decode-only` (or the options given), medians per build of the
# TinyLlama matmul stack's decode tok/s and % of the streaming-read bandwidth each run measures
# (each matmul timed next to a stream read of its size).
#
#   scripts/bench-kernels-ab.sh OLD_BIN NEW_BIN      env: RUNS=5 TYPES="q8_0 q4_k" THREADS="1 2"
#                                                         OPTS="--quick --cpu-time --decode-only"
#
# (OLD_BIN / NEW_BIN: copies of build/tests/pagoda_bench_kernels from the two commits.)
set -euo pipefail
[ $# -eq 2 ] || { sed -n '2,9p' "$0" >&2; exit 2; }
RUNS=${RUNS:-5}
TYPES=${TYPES:-"q8_0 q4_0 q4_k q5_k q6_k iq4_xs"}
THREADS=${THREADS:-"1 2"}
OPTS=${OPTS:-"--quick --cpu-time --decode-only"}
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
for t in $THREADS; do
  for ty in $TYPES; do
    for r in $(seq 1 "$RUNS"); do
      for which in old new; do
        bin=$1; [ "$which" = new ] && bin=$2
        # shellcheck disable=SC2086
        "$bin" --threads "$t" --type "$ty" $OPTS | sed -nE \
          "s/^tinyllama matmuls .*decode ([0-9.]+) tok\/s \(([0-9.]+) GB\/s, ([0-9]+)% of stream[;)].*/$t $ty $which \1 \3/p" >>"$raw"
      done
    done
  done
done
/usr/bin/python3 - "$raw" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
keys = []
for t, ty, *_ in rows:
    if (t, ty) not in keys:
        keys.append((t, ty))
print(f"{'threads':>7} {'type':>7} {'runs':>4} {'old tok/s':>9} {'old %':>6} {'new tok/s':>9} {'new %':>6} {'new/old':>7}")
for t, ty in keys:
    def med(which, col):
        return statistics.median(float(r[col]) for r in rows if r[0] == t and r[1] == ty and r[2] == which)
    n = sum(1 for r in rows if r[0] == t and r[1] == ty and r[2] == "new")
    o, nw = med("old", 3), med("new", 3)
    print(f"{t:>7} {ty:>7} {n:>4} {o:>9.1f} {med('old', 4):>5.0f}% {nw:>9.1f} {med('new', 4):>5.0f}% {nw / o:>6.2f}x")
print("(medians of alternating runs; % = the stack's weight bytes per second / the stream read timed beside its matmuls)")
PY
