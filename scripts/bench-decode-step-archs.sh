#!/usr/bin/env bash
# Where a decode step goes on the newer architectures: pagoda_bench_decode_step (every backend op
# timed, tests/bench/bench_decode_step.cpp) on make-model files of one modest shape (LAYERS
# layers, dim DIM, ff FF, 16 heads / 4 KV heads, 32000-token vocabulary, TYPE weights): llama
# (the control), gemma2 (windowed attention, GeGLU, soft-caps) and a qwen3moe (8 experts of
# width FF/2, 2 used). Runs alternate the models, RUNS rounds; each run prints its step time and
# step / (matmul + expert) sum, then the medians per model.
#
#   scripts/bench-decode-step-archs.sh [build-dir]   env: THREADS=2 RUNS=3 TYPE=q8_0 LAYERS=8 DIM=1024 FF=2816 N=32
set -euo pipefail
BUILD=${1:-build}
BENCH="$BUILD/tests/pagoda_bench_decode_step"
THREADS=${THREADS:-2}
RUNS=${RUNS:-3}
TYPE=${TYPE:-q8_0}
LAYERS=${LAYERS:-8}
DIM=${DIM:-1024}
FF=${FF:-2816}
N=${N:-32}
WORK=${WORK:-/tmp}
[ -x "$BENCH" ] || { echo "no $BENCH (build the pagoda_bench_decode_step target)" >&2; exit 2; }
common=(--type "$TYPE" --layers "$LAYERS" --dim "$DIM" --heads 16 --kv-heads 4 --vocab-size 32000 --quiet)
declare -A file
for arch in llama gemma2 qwen3moe; do
  file[$arch]="$WORK/pagoda-step-$arch-$TYPE-$LAYERS-$DIM-$FF.gguf"
  extra=(--ff "$FF")
  [ "$arch" = gemma2 ] && extra+=(--sliding-window 64)
  [ "$arch" = qwen3moe ] && extra+=(--experts 8 --experts-used 2 --expert-ff $((FF / 2)))
  [ -f "${file[$arch]}" ] || "$BUILD/pagoda" make-model "${common[@]}" --arch "$arch" "${extra[@]}" --output "${file[$arch]}"
done
declare -A steps ratios shown
for _ in $(seq 1 "$RUNS"); do
  for arch in llama gemma2 qwen3moe; do
    out=$(nice "$BENCH" --model "${file[$arch]}" --threads "$THREADS" -n "$N" --prompt-len 128)
    step=$(sed -n 's/^decode: \([0-9.]*\) ms per token.*/\1/p' <<<"$out")
    ratio=$(sed -n 's/^step \/ (matmul + expert) sum: \([0-9.]*\).*/\1/p' <<<"$out")
    echo "$arch: step $step ms, step / (matmul + expert) sum $ratio"
    steps[$arch]+="$step "
    ratios[$arch]+="$ratio "
    [ -z "${shown[$arch]:-}" ] && { grep -v "\[info\]" <<<"$out" | sed 's/^/    /'; shown[$arch]=1; }
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "medians of $RUNS ($(uptime | sed 's/.*load/load/')):"
for arch in llama gemma2 qwen3moe; do
  echo "  $arch: step $(median <<<"${steps[$arch]}") ms, step / (matmul + expert) sum $(median <<<"${ratios[$arch]}")"
done
