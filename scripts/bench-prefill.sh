#!/usr/bin/env bash
# Prefill speed against this host's int8 dot-product peak, per weight type and thread count.
#
#   scripts/bench-prefill.sh
#     env: TYPES="q8_0 q4_0 q4_k q6_k bf16 f16" (kernel bench)  MODEL_TYPES="q8_0 q4_k" (whole model)
#          THREADS="1 2" RUNS=3 BUILD=build KB_OPTS="--cpu-time" (kernel part, on a busy host)
#          PARTS="kernels model" (either or both)
#
# 1. Kernels: `pagoda_bench_kernels --prefill-only` on the TinyLlama-1.1B matmul shapes and the
#    whole 22-layer matmul stack at n = 128 and 512 rows. Inside the bench every run alternates
#    with the register-only int8 peak probe (vpdpbusd, or the AVX2 mix) and is divided by it, so
#    the % figures hold under load from other processes; medians of those runs. bf16 / f16 are
#    shown against the same int8 peak: vdpbf16ps does half the operations per instruction of
#    vpdpbusd (and an f32 FMA a quarter), so 50% (25%) is their ceiling.
# 2. Whole model: `pagoda generate` on a TinyLlama-1.1B-shaped model with random weights (one
#    `pagoda make-model` file per type, kept in $TMPDIR), 128- and 512-token prompts, RUNS rounds
#    alternating with `--peaks-only` (wall time, as generate's figures are: both see the same
#    load; KB_OPTS is not used here); prompt tok/s medians and the matmul GOP/s they imply
#    (1.94 GOP per prompt token: the 22 layers' matmuls; the output head runs for the last token
#    only) as % of that round's peak. Attention, norms and the rest are in the time, not the ops.
set -euo pipefail
cd "$(dirname "$0")/.."
TYPES=${TYPES:-"q8_0 q4_0 q4_k q6_k bf16 f16"}
MODEL_TYPES=${MODEL_TYPES:-"q8_0 q4_k"}
THREADS=${THREADS:-"1 2"}
RUNS=${RUNS:-3}
BUILD=${BUILD:-build}
KB_OPTS=${KB_OPTS:-}
PARTS=${PARTS:-"kernels model"}
PAGODA="$BUILD/pagoda"
KBENCH="$BUILD/tests/pagoda_bench_kernels"
for f in "$PAGODA" "$KBENCH"; do
  [ -x "$f" ] || { echo "bench-prefill: $f is missing (build pagoda and pagoda_bench_kernels first)" >&2; exit 2; }
done
echo "host: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs; load: $(uptime | sed 's/.*load average: //')"

if [[ " $PARTS " == *" kernels "* ]]; then
echo "== kernels (pagoda_bench_kernels --prefill-only $KB_OPTS)"
printf '%7s %6s %10s %10s %10s %10s\n' threads type "pp128 t/s" "pp128 %pk" "pp512 t/s" "pp512 %pk"
for t in $THREADS; do
  for ty in $TYPES; do
    # shellcheck disable=SC2086
    out=$("$KBENCH" --prefill-only --threads "$t" --type "$ty" $KB_OPTS)
    echo "$out" | sed -n 's/^/    /; /n=128/p' >&2
    echo "$out" | /usr/bin/python3 -c '
import re, sys
t, ty = sys.argv[1:3]
fig = {}
for line in sys.stdin:
    m = re.match(r"tinyllama matmuls prefill n=(\d+): ([\d.]+) tok/s \(([\d.]+) GOP/s, (\d+)% of the int8 peak\)", line)
    if m:
        fig[m.group(1)] = (float(m.group(2)), int(m.group(4)))
def cell(n):
    return "%10.1f %9d%%" % fig[n] if n in fig else "%10s %10s" % ("-", "-")
print("%7s %6s %s %s" % (t, ty, cell("128"), cell("512")))' "$t" "$ty"
  done
done
echo "(per-shape lines on stderr; % = GOP/s of the run / the int8 peak probe run just before it)"
fi
[[ " $PARTS " == *" model "* ]] || exit 0

echo "== whole model (pagoda generate, TinyLlama-1.1B shape, random weights)"
text=$(printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 1 12))
P128=${text:0:127}  # make-model's byte-level vocabulary: 127 bytes + BOS = 128 tokens
P512=${text:0:511}
RAW=$(mktemp)
trap 'rm -f "$RAW"' EXIT
for ty in $MODEL_TYPES; do
  MODEL=${TMPDIR:-/tmp}/pagoda-bench-tinyllama-1.1b-$ty.gguf
  [ -f "$MODEL" ] || "$PAGODA" make-model --preset tinyllama-1.1b --type "$ty" --output "$MODEL" --quiet
  for t in $THREADS; do
    for r in $(seq 1 "$RUNS"); do
      peak=$("$KBENCH" --peaks-only --threads "$t" | sed -nE 's/^int8 dot-product peak: ([0-9.]+) GOPS.*/\1/p')
      for p in "$P128" "$P512"; do
        "$PAGODA" generate --model "$MODEL" --prompt "$p" -n 1 --threads "$t" --device cpu 2>&1 >/dev/null |
          sed -nE "s/^prefill: ([0-9]+) tokens in .* \(([0-9.]+) tok\/s\)/$ty $t \1 \2 $peak/p" >>"$RAW"
      done
    done
  done
done
/usr/bin/python3 - "$RAW" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
print(f"{'type':>6} {'threads':>7} {'prompt':>6} {'runs':>4} {'tok/s':>8} {'GOP/s':>7} {'% of peak':>9}")
keys = []
for ty, t, n, *_ in rows:
    if (ty, t, n) not in keys:
        keys.append((ty, t, n))
for ty, t, n in keys:
    sel = [r for r in rows if r[:3] == [ty, t, n]]
    tps = statistics.median(float(r[3]) for r in sel)
    pct = statistics.median(100 * float(r[3]) * 1.938 / float(r[4]) for r in sel)
    print(f"{ty:>6} {t:>7} {n:>6} {len(sel):>4} {tps:>8.1f} {tps * 1.938:>7.1f} {pct:>8.0f}%")
PY
