#!/usr/bin/env bash
# Side-by-side CPU speed of pagoda and llama.cpp on the same GGUF file, on this machine.
#
#   scripts/bench-vs-llamacpp.sh LLAMA_BIN_DIR [MODEL.gguf]
#     env: RUNS=5 THREADS="1 2" N=64 PAR=16 BUILD=build OUT=bench-vs-llamacpp
#          KB_OPTS="--cpu-time" (extra options of the kernel bench's ceilings line, on a busy host)
#
# LLAMA_BIN_DIR is a llama.cpp build you made yourself (this script builds nothing from it); it
# needs llama-bench. Without MODEL, a TinyLlama-1.1B-shaped Q8_0 file with random weights is
# written once by `pagoda make-model` (llama.cpp loads it as it is).
#
# For each thread count, RUNS rounds alternate one llama-bench run (prefill 128 and 512 tokens,
# decode N tokens: `-p 128,512 -n N -r 1 -mmp 0`) with the same three figures from
# `pagoda generate` (a 128-token prompt then N decoded tokens, and a 512-token prompt), so load
# from other processes hits both alike. Printed: the host's `lscpu` model line, the streaming-
# read bandwidth and int8 peak the kernel bench measures at that thread count, then the median
# tok/s of each figure and the pagoda / llama.cpp ratio of the medians. Raw runs: $OUT/runs.tsv.
#
# With PAR set (default 16; PAR= skips it) each round also runs PAR sequences at once: PAR
# 128-token prompts, N tokens decoded by each, through `pagoda generate --parallel PAR` (decode
# tok/s once every sequence has its first token) and `llama-batched-bench -npp 128 -ntg N -npl
# PAR` (its S_TG): the figure "tgN x PAR".
#
# Differences that remain: llama-bench decodes from an empty context, pagoda after its 128-token
# prompt (attention over 128-192 positions: well under 1% of a decode step's bytes at this
# size); pagoda's prefill time includes the first token's sampling.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n '2,21p' "$0" >&2; exit 2; }
LLAMA_BIN=$1
MODEL=${2:-}
RUNS=${RUNS:-5}
THREADS=${THREADS:-"1 2"}
N=${N:-64}
BUILD=${BUILD:-build}
OUT=${OUT:-bench-vs-llamacpp}
KB_OPTS=${KB_OPTS:-}
PAGODA="$BUILD/pagoda"
PAR=${PAR-16}
KBENCH="$BUILD/tests/pagoda_bench_kernels"
for f in "$LLAMA_BIN/llama-bench" "$PAGODA" "$KBENCH"; do
  [ -x "$f" ] || { echo "bench-vs-llamacpp: $f is missing (build pagoda and pagoda_bench_kernels first)" >&2; exit 2; }
done
if [ -z "$MODEL" ]; then
  MODEL=${TMPDIR:-/tmp}/pagoda-bench-tinyllama-1.1b-q8_0.gguf
  [ -f "$MODEL" ] || "$PAGODA" make-model --preset tinyllama-1.1b --type q8_0 --output "$MODEL" --quiet
fi
mkdir -p "$OUT"
RAW="$OUT/runs.tsv"
printf 'threads\trun\tengine\tfigure\ttok_s\n' >"$RAW"

# make-model's byte-level vocabulary: one token per byte plus BOS, so 127 and 511 bytes give
# 128- and 512-token prompts. (A model with a real tokenizer gives other counts: the prompt
# length pagoda reports is printed with the results.)
text=$(printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 1 12))
P128=${text:0:127}
P512=${text:0:511}

echo "host: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs"
echo "model: $MODEL"
for t in $THREADS; do
  echo "== $t thread(s)"
  # shellcheck disable=SC2086
  "$KBENCH" --threads "$t" --peaks-only $KB_OPTS | sed 's/^/  /'
  for r in $(seq 1 "$RUNS"); do
    "$LLAMA_BIN/llama-bench" -m "$MODEL" -t "$t" -p 128,512 -n "$N" -r 1 -mmp 0 -o csv 2>/dev/null |
      /usr/bin/python3 -c '
import csv, sys
t, r = sys.argv[1:3]
for row in csv.DictReader(sys.stdin):
    p, g = int(row["n_prompt"]), int(row["n_gen"])
    fig = f"pp{p}" if g == 0 else "tg"
    ts = float(row["avg_ts"])
    print(f"{t}\t{r}\tllama.cpp\t{fig}\t{ts:.3f}")' "$t" "$r" >>"$RAW"
    "$PAGODA" generate --model "$MODEL" --prompt "$P128" -n "$N" --threads "$t" --ignore-eos --device cpu 2>&1 >/dev/null |
      sed -nE "s/^prefill: ([0-9]+) tokens in .* \(([0-9.]+) tok\/s\)/$t\t$r\tpagoda\tpp\1\t\2/p;
               s/^decode: .* \(([0-9.]+) tok\/s\)/$t\t$r\tpagoda\ttg\t\1/p" >>"$RAW"
    "$PAGODA" generate --model "$MODEL" --prompt "$P512" -n 1 --threads "$t" --device cpu 2>&1 >/dev/null |
      sed -nE "s/^prefill: ([0-9]+) tokens in .* \(([0-9.]+) tok\/s\)/$t\t$r\tpagoda\tpp\1\t\2/p" >>"$RAW"
    if [ -n "$PAR" ]; then
      "$LLAMA_BIN/llama-batched-bench" -m "$MODEL" -t "$t" -npp 128 -ntg "$N" -npl "$PAR" -c $((PAR * (128 + N) + 256)) \
        2>/dev/null | awk -F'|' -v t="$t" -v r="$r" -v p="$PAR" \
          'NF > 9 && $4 + 0 == p { gsub(/ /, "", $9); printf "%s\t%s\tllama.cpp\tpar\t%s\n", t, r, $9 }' >>"$RAW"
      "$PAGODA" generate --model "$MODEL" --prompt "$P128" -n "$N" --parallel "$PAR" --threads "$t" --ignore-eos \
        --device cpu 2>&1 >/dev/null |
        sed -nE "s/^decode: .* \(([0-9.]+) tok\/s aggregate\)/$t\t$r\tpagoda\tpar\t\1/p" >>"$RAW"
    fi
    echo "  round $r/$RUNS done" >&2
  done
done

/usr/bin/python3 - "$RAW" "$N" "$PAR" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
n = sys.argv[2]
by = {}
for r in rows:
    by.setdefault((r["threads"], r["figure"], r["engine"]), []).append(float(r["tok_s"]))
threads = sorted({r["threads"] for r in rows}, key=int)
par = sys.argv[3]
figures = sorted({r["figure"] for r in rows}, key=lambda f: (f == "par", f == "tg", f))
print(f"\n{'threads':>7} {'figure':>9} {'runs':>5} {'pagoda tok/s':>13} {'llama.cpp tok/s':>16} {'ratio':>7}")
for t in threads:
    for f in figures:
        a, b = by.get((t, f, "pagoda"), []), by.get((t, f, "llama.cpp"), [])
        if not a and not b:
            continue
        ma = statistics.median(a) if a else float("nan")
        mb = statistics.median(b) if b else float("nan")
        label = f"tg{n}" if f == "tg" else f"tg{n}x{par}" if f == "par" else f
        ratio = f"{ma / mb:.2f}x" if a and b and mb else "-"
        print(f"{t:>7} {label:>9} {min(len(a), len(b)):>5} {ma:>13.2f} {mb:>16.2f} {ratio:>7}")
print("\n(medians of alternating runs; ratio = pagoda / llama.cpp, higher is better)")
PY
