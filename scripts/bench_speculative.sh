#!/usr/bin/env bash
# Speculative decoding benchmarks (issue 17) on a random-weight TinyLlama-shaped Q8_0 model:
# the cost of verifying a T-token draft chain vs one decode token (T = 1..8), and single-stream
# greedy tok/s plain vs --speculative ngram (and draft = the target with SELF_DRAFT=1) on a
# prompt that repeats a passage, with acceptance rates. Random weights decide what the model
# writes, so acceptance here is whatever its output happens to repeat (see the README).
#
#   scripts/bench_speculative.sh [build-dir]
#   env: MODEL=path THREADS=2 CTX=256 REPS=7 TOKENS=64 SPEC_TOKENS=4 ROUNDS=2 SELF_DRAFT=0
set -euo pipefail
BUILD=${1:-build}
MODEL=${MODEL:-/tmp/pagoda-spec-tinyllama-q8_0.gguf}
THREADS=${THREADS:-2}
if [ ! -f "$MODEL" ]; then
  echo "writing $MODEL (random weights, tinyllama-1.1b shape, q8_0)" >&2
  "$BUILD/pagoda" make-model --preset tinyllama-1.1b --type q8_0 --output "$MODEL" --quiet
fi
extra=()
[ "${SELF_DRAFT:-0}" = 1 ] && extra+=(--self-draft)
"$BUILD/tests/bench_speculative" --model "$MODEL" --threads "$THREADS" --ctx "${CTX:-256}" \
  --reps "${REPS:-7}" --tokens "${TOKENS:-64}" --spec-tokens "${SPEC_TOKENS:-4}" \
  --rounds "${ROUNDS:-2}" "${extra[@]}"
