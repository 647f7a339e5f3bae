#!/usr/bin/env bash
# Speculative decoding benchmarks, two models:
# 1. a random-weight TinyLlama-shaped Q8_0 model: the cost of verifying a T-token draft chain vs
#    one decode token (T = 1..8), and single-stream greedy tok/s plain vs --speculative ngram
#    (and draft = the target with SELF_DRAFT=1) on a prompt that repeats a random passage, with
#    acceptance rates. Random weights decide what the model writes, so acceptance there is
#    whatever its output happens to repeat, and the tok/s shows the verify cost, not a gain;
# 2. the real trained stories260K (../shared/testdata; skipped without it) on real text: a short
#    story, then its first words again, so the model continues by copying: single-stream tok/s
#    and acceptance of plain vs ngram vs draft = the target itself vs an oracle drafter,
#    alternating, medians of STORIES_ROUNDS rounds, with the step-cost gate on and then off.
#    Skip either part with TINYLLAMA=0 / STORIES=0.
#
#   scripts/bench_speculative.sh [build-dir]
#   env: MODEL=path THREADS=2 CTX=256 REPS=7 TOKENS=64 SPEC_TOKENS=4 ROUNDS=2 SELF_DRAFT=0
#        STORIES_MODEL=path STORIES_ROUNDS=7 STORIES_TOKENS=96
set -euo pipefail
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")/.." && pwd)
THREADS=${THREADS:-2}
if [ "${TINYLLAMA:-1}" = 1 ]; then
  MODEL=${MODEL:-/tmp/pagoda-spec-tinyllama-q8_0.gguf}
  if [ ! -f "$MODEL" ]; then
    echo "writing $MODEL (random weights, tinyllama-1.1b shape, q8_0)" >&2
    "$BUILD/pagoda" make-model --preset tinyllama-1.1b --type q8_0 --output "$MODEL" --quiet
  fi
  extra=()
  [ "${SELF_DRAFT:-0}" = 1 ] && extra+=(--self-draft)
  echo "== random weights, TinyLlama shape, Q8_0 =="
  "$BUILD/tests/bench_speculative" --model "$MODEL" --threads "$THREADS" --ctx "${CTX:-256}" \
    --reps "${REPS:-7}" --tokens "${TOKENS:-64}" --spec-tokens "${SPEC_TOKENS:-4}" \
    --rounds "${ROUNDS:-2}" "${extra[@]}"
fi
STORIES_MODEL=${STORIES_MODEL:-$HERE/../shared/testdata/models/stories260K.gguf}
if [ "${STORIES:-1}" = 1 ]; then
  if [ ! -f "$STORIES_MODEL" ]; then
    echo "skipped stories260K: $STORIES_MODEL missing" >&2
    exit 0
  fi
  passage="Once upon a time, there was a little girl named Lily. She loved to play outside in the park with \
her dog, Max. One day, Lily saw a big red ball under a tree. She ran to get it, but Max got there first. \
Lily laughed and said, \"Max, you are so fast!\" They played with the ball all day, and then they went home \
to eat dinner with Mom."
  echo "== stories260K (trained), real text =="
  for gate in on off; do  # the step-cost gate (--spec-cost-gate) on, then off
    flags=()
    [ $gate = off ] && flags+=(--no-cost-gate)
    "$BUILD/tests/bench_speculative" --model "$STORIES_MODEL" --threads 1 --no-verify-cost --self-draft \
      --tokens "${STORIES_TOKENS:-96}" --spec-tokens "${SPEC_TOKENS:-4}" --rounds "${STORIES_ROUNDS:-7}" \
      --passage "$passage" "${flags[@]}" 2>&1 | grep -v '\[info\]'
  done
fi
