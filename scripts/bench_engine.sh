#!/usr/bin/env bash
# The engine benchmark: aggregate decode tok/s through LlmEngine (continuous batching
# over the paged KV cache) at 1, 4 and 16 sequences, 128-token prompts, 64 new tokens each,
# on the TinyLlama-1.1B shape in Q8_0 with 2 CPU threads; plus the single-sequence figures of
# `pagoda generate` (also through the engine, n = 1: prefill, then decode per token).
#
#   scripts/bench_engine.sh [build-dir]      env: MODEL=path THREADS=2 SEQS="1 4 16" N=64
#
# "decode" is measured once every sequence has its first token (prefill excluded, like
# llama-batched-bench's S_TG); the end-to-end figure includes prefill.
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/pagoda"
MODEL=${MODEL:-/tmp/pagoda-tinyllama-1.1b-q8_0.gguf}
THREADS=${THREADS:-2}
SEQS=${SEQS:-"1 4 16"}
N=${N:-64}

if [ ! -f "$MODEL" ]; then
  echo "writing $MODEL (random weights, TinyLlama-1.1B shape, q8_0)" >&2
  "$BIN" make-model --preset tinyllama-1.1b --type q8_0 --output "$MODEL" --quiet
fi
# The built-in byte-level vocabulary has no merges: 127 bytes + BOS = 128 prompt tokens.
PROMPT=$(printf 'The quick brown fox jumps over the lazy dog. %.0s' 1 2 3 | head -c 127)

echo "== single sequence (generate, n = 1)"
"$BIN" generate --model "$MODEL" --prompt "$PROMPT" -n "$N" --threads "$THREADS" --ignore-eos 2>&1 >/dev/null |
  grep -E '^(prefill|decode):'
for s in $SEQS; do
  echo "== engine, $s sequence(s)"
  "$BIN" generate --model "$MODEL" --prompt "$PROMPT" -n "$N" --threads "$THREADS" --ignore-eos \
    --parallel "$s" 2>&1 >/dev/null | grep -E '^(parallel [0-9]+|decode|engine):'
done
